"""Semantics of the RDNA3 vector ALU operations, by mnemonic: each entry names the result type, the source types
and a numpy function over whole [waves, 32] lane arrays. Types are 'f32' 'f64' 'f16' 'i32' 'u32' 'i64' 'u64'
'i16' 'u16' (the bits of the register reinterpreted) and 'mask' (a per-lane bool read from an SGPR/VCC bit mask).
Results flagged CARRY return (value, per-lane carry bool) and write the carry to VCC or the VOP3 sdst."""
from __future__ import annotations

import numpy as np



def as_unsigned(x: np.ndarray) -> np.ndarray:
  return x.astype(np.uint32) if x.dtype.itemsize <= 4 else x.astype(np.uint64)


def f32_to_int(x: np.ndarray, lo: float, hi: float, dtype) -> np.ndarray:
  """Float -> int with the hardware's saturation (NaN -> 0)."""
  x = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
  return np.clip(x, lo, hi).astype(dtype)


def round_to_f16_toward_zero(x: np.ndarray) -> np.ndarray:
  h = x.astype(np.float16)
  too_big = np.abs(h.astype(np.float32)) > np.abs(x)
  return np.where(too_big & np.isfinite(x), np.nextafter(h, np.float16(0)), h)


def clz32(x: np.ndarray) -> np.ndarray:
  """Leading zero count, -1 (0xffffffff) for 0, as v_clz_i32_u32 returns."""
  x = x.astype(np.uint32)
  bitlen = np.where(x == 0, 0, np.floor(np.log2(np.maximum(x, 1).astype(np.float64))).astype(np.int32) + 1)
  return np.where(x == 0, -1, 32 - bitlen).astype(np.int32)


def ctz32(x: np.ndarray) -> np.ndarray:
  x = x.astype(np.uint32)
  low = x & (~x + np.uint32(1))
  bitlen = np.floor(np.log2(np.maximum(low, 1).astype(np.float64))).astype(np.int32)
  return np.where(x == 0, -1, bitlen).astype(np.int32)


def cls32(x: np.ndarray) -> np.ndarray:
  """Leading bits equal to the sign bit, not counting it: -1 for 0 and -1 (v_cls_i32)."""
  u = x.astype(np.uint32)
  flipped = np.where(u >> np.uint32(31) == 1, ~u, u)
  return np.where((u == 0) | (u == 0xFFFFFFFF), -1, clz32(flipped) - 1).astype(np.int32)


def popcount32(x: np.ndarray) -> np.ndarray:
  x = x.astype(np.uint32)
  return np.unpackbits(x[..., None].view(np.uint8), axis=-1).sum(-1).astype(np.uint32)


def bfe(x: np.ndarray, offset: np.ndarray, width: np.ndarray, signed: bool) -> np.ndarray:
  offset, width = offset.astype(np.uint64) & 31, width.astype(np.uint64) & 31
  field = (x.astype(np.uint64) >> offset) & ((np.uint64(1) << width) - np.uint64(1))
  if not signed: return field.astype(np.uint32)
  sign = np.where(width > 0, (field >> np.maximum(width, 1) - np.uint64(1)) & np.uint64(1), 0).astype(bool)
  ext = np.where(sign, field | ~((np.uint64(1) << width) - np.uint64(1)), field)
  return ext.astype(np.uint32)


def permute_bytes(a: np.ndarray, b: np.ndarray, sel: np.ndarray) -> np.ndarray:
  """v_perm_b32: each selector byte picks a byte of {a:b} (0-7), a sign fill (8-11), 0 (12) or 0xff (13+)."""
  pool = (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)
  out = np.zeros(np.broadcast(a, b, sel).shape, np.uint32)
  for i in range(4):
    s = (sel.astype(np.uint32) >> np.uint32(8 * i)) & np.uint32(0xFF)
    byte = (pool >> (np.minimum(s, 7).astype(np.uint64) * np.uint64(8))) & np.uint64(0xFF)
    sign_src = (pool >> np.uint64(8) * (np.uint64(1) + np.uint64(2) * (s.astype(np.uint64) & np.uint64(3)))
                ) & np.uint64(0x80)
    sign = np.where(sign_src != 0, 0xFF, 0)
    value = np.where(s < 8, byte, np.where(s < 12, sign, np.where(s == 12, 0, 0xFF))).astype(np.uint32)
    out |= value << np.uint32(8 * i)
  return out


def class_mask(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """v_cmp_class: is x in any of the IEEE classes set in mask (0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denormal,
  5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf)."""
  bits_dtype = {2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]
  raw = x.view(bits_dtype)
  mant_bits = {2: 10, 4: 23, 8: 52}[x.dtype.itemsize]
  quiet = ((raw >> bits_dtype(mant_bits - 1)) & bits_dtype(1)) == 1
  neg, finite, tiny = np.signbit(x), np.isfinite(x), np.finfo(x.dtype).tiny
  classes = [np.isnan(x) & ~quiet, np.isnan(x) & quiet, np.isinf(x) & neg, finite & neg & (np.abs(x) >= tiny),
             finite & neg & (np.abs(x) < tiny) & (x != 0), (x == 0) & neg, (x == 0) & ~neg,
             finite & ~neg & (np.abs(x) < tiny) & (x != 0), finite & ~neg & (np.abs(x) >= tiny), np.isinf(x) & ~neg]
  m = mask.astype(np.uint32)
  hit = np.zeros(np.broadcast(x, m).shape, bool)
  for i, c in enumerate(classes): hit |= c & (((m >> np.uint32(i)) & np.uint32(1)) == 1)
  return hit


def div_fixup(q: np.ndarray, den: np.ndarray, num: np.ndarray) -> np.ndarray:
  """v_div_fixup: the IEEE special cases of num/den (NaN, 0/0, inf/inf, x/0, x/inf), else the computed quotient q.
  The emulator's v_div_scale never rescales (VCC stays 0), so where hardware would have scaled to keep the Newton
  steps in range (quotients that overflow, underflow or come out denormal) q is not finite/normal: those lanes take
  the correctly rounded quotient (computed in float64, which rounds f32/f16 correctly: 53 >= 2*24+2 bits)."""
  wide = np.float64
  with np.errstate(all="ignore"):
    exact = (num.astype(wide) / den.astype(wide)).astype(q.dtype)
    special = np.isnan(num) | np.isnan(den) | (den == 0) | np.isinf(den) | np.isinf(num)
    out_of_range = ~np.isfinite(q) | (np.abs(q) < np.finfo(q.dtype).tiny)
    return np.where(special | out_of_range, exact, q).astype(q.dtype)


def fract(x: np.ndarray) -> np.ndarray:
  f = x - np.floor(x)
  below_one = np.nextafter(x.dtype.type(1), x.dtype.type(0))
  return np.where(np.isinf(x), np.nan, np.minimum(f, below_one)).astype(x.dtype)


def mul_u24(a, b): return (a.astype(np.uint64) & 0xFFFFFF) * (b.astype(np.uint64) & 0xFFFFFF)
def sext24(a): return ((a.astype(np.int64) & 0xFFFFFF) ^ 0x800000) - 0x800000
def mul_i24(a, b): return sext24(a) * sext24(b)
def turns_fraction(x):
  """v_sin/v_cos take turns and are periodic in them: keep the exact fraction (beyond the documented +-256 turns
  the hardware's answer is unspecified; the fraction is what its periodic evaluation sees)."""
  x = x.astype(np.float64)
  return np.where(np.abs(x) <= 256, x, x - np.floor(x))  # in the valid domain: the turns as given (keeps -0.0)


def sin_turns(x): return np.where(np.isfinite(x), np.sin(turns_fraction(x) * 2 * np.pi), np.nan).astype(x.dtype)
def cos_turns(x): return np.where(np.isfinite(x), np.cos(turns_fraction(x) * 2 * np.pi), np.nan).astype(x.dtype)
def med3(a, b, c): return np.fmax(np.fmin(a, b), np.fmin(np.fmax(a, b), c))
def imed3(a, b, c): return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))
def shift64(x): return x.astype(np.uint64) & np.uint64(63)
def shift32(x): return x.astype(np.uint32) & np.uint32(31)
def shift16(x): return x.astype(np.uint16) & np.uint16(15)


def add_carry(a, b, c=0):
  s = a.astype(np.uint64) + b.astype(np.uint64) + np.asarray(c, np.uint64)
  return s.astype(np.uint32), s > 0xFFFFFFFF


def sub_borrow(a, b, c=0):
  s = a.astype(np.int64) - b.astype(np.int64) - np.asarray(c, np.int64)
  return s.astype(np.uint32), s < 0


def mad_u64_u32(a, b, c):
  prod = a.astype(np.uint64) * b.astype(np.uint64)
  s = prod + c.astype(np.uint64)
  return s, s < prod


def mad_i64_i32(a, b, c):
  prod = a.astype(np.int64) * b.astype(np.int64)
  s = prod + c.astype(np.int64)
  return s, np.zeros(s.shape, bool)


F, U, I = "f32", "u32", "i32"
CARRY = "carry"  # marker: fn returns (value, carry)

# name: (result type, source types, fn) ; optional 4th element CARRY
VOP: dict[str, tuple] = {
  # f32 arithmetic
  "v_add_f32": (F, (F, F), lambda a, b: a + b), "v_sub_f32": (F, (F, F), lambda a, b: a - b),
  "v_subrev_f32": (F, (F, F), lambda a, b: b - a), "v_mul_f32": (F, (F, F), lambda a, b: a * b),
  "v_fma_f32": (F, (F, F, F), lambda a, b, c: fma_narrow(a, b, c, np.float32)),
  "v_fmac_f32": (F, (F, F, F), lambda a, b, d: fma_narrow(a, b, d, np.float32)),
  "v_fmamk_f32": (F, (F, F, F), lambda a, b, k: fma_narrow(a, k, b, np.float32)),
  "v_fmaak_f32": (F, (F, F, F), lambda a, b, k: fma_narrow(a, b, k, np.float32)),
  "v_min_f32": (F, (F, F), np.fmin), "v_max_f32": (F, (F, F), np.fmax),
  "v_min3_f32": (F, (F, F, F), lambda a, b, c: np.fmin(np.fmin(a, b), c)),
  "v_max3_f32": (F, (F, F, F), lambda a, b, c: np.fmax(np.fmax(a, b), c)),
  "v_med3_f32": (F, (F, F, F), med3),
  "v_maxmin_f32": (F, (F, F, F), lambda a, b, c: np.fmin(np.fmax(a, b), c)),
  "v_minmax_f32": (F, (F, F, F), lambda a, b, c: np.fmax(np.fmin(a, b), c)),
  "v_ldexp_f32": (F, (F, I), lambda a, b: np.ldexp(a, np.clip(b, -1000, 1000)).astype(np.float32)),
  "v_exp_f32": (F, (F,), np.exp2), "v_log_f32": (F, (F,), np.log2),
  "v_rcp_f32": (F, (F,), lambda a: np.float32(1) / a), "v_rcp_iflag_f32": (F, (F,), lambda a: np.float32(1) / a),
  "v_rsq_f32": (F, (F,), lambda a: (1 / np.sqrt(a.astype(np.float64))).astype(np.float32)),
  "v_sqrt_f32": (F, (F,), np.sqrt), "v_sin_f32": (F, (F,), sin_turns), "v_cos_f32": (F, (F,), cos_turns),
  "v_fract_f32": (F, (F,), fract), "v_trunc_f32": (F, (F,), np.trunc), "v_ceil_f32": (F, (F,), np.ceil),
  "v_floor_f32": (F, (F,), np.floor), "v_rndne_f32": (F, (F,), np.rint),
  "v_frexp_mant_f32": (F, (F,), lambda a: np.where(np.isfinite(a), np.frexp(a)[0], a).astype(np.float32)),
  "v_frexp_exp_i32_f32": (I, (F,), lambda a: np.where(np.isfinite(a), np.frexp(a)[1], 0).astype(np.int32)),
  "v_div_fixup_f32": (F, (F, F, F), div_fixup),
  "v_div_fmas_f32": (F, (F, F, F), lambda a, b, c: fma_narrow(a, b, c, np.float32)),
  "v_div_scale_f32": (F, (F, F, F), lambda a, b, c: (a, np.zeros(np.broadcast(a, b, c).shape, bool)), CARRY),
  # f64
  "v_add_f64": ("f64", ("f64", "f64"), lambda a, b: a + b), "v_mul_f64": ("f64", ("f64", "f64"), lambda a, b: a * b),
  "v_fma_f64": ("f64", ("f64",) * 3, lambda a, b, c: fma64(a, b, c)),
  "v_min_f64": ("f64", ("f64", "f64"), np.fmin), "v_max_f64": ("f64", ("f64", "f64"), np.fmax),
  "v_ldexp_f64": ("f64", ("f64", I), lambda a, b: np.ldexp(a, np.clip(b, -3000, 3000))),
  "v_rcp_f64": ("f64", ("f64",), lambda a: 1 / a), "v_rsq_f64": ("f64", ("f64",), lambda a: 1 / np.sqrt(a)),
  "v_sqrt_f64": ("f64", ("f64",), np.sqrt), "v_fract_f64": ("f64", ("f64",), fract),
  "v_trunc_f64": ("f64", ("f64",), np.trunc), "v_ceil_f64": ("f64", ("f64",), np.ceil),
  "v_floor_f64": ("f64", ("f64",), np.floor), "v_rndne_f64": ("f64", ("f64",), np.rint),
  "v_frexp_mant_f64": ("f64", ("f64",), lambda a: np.where(np.isfinite(a), np.frexp(a)[0], a)),
  "v_frexp_exp_i32_f64": (I, ("f64",), lambda a: np.where(np.isfinite(a), np.frexp(a)[1], 0).astype(np.int32)),
  "v_div_fixup_f64": ("f64", ("f64",) * 3, div_fixup),
  "v_div_fmas_f64": ("f64", ("f64",) * 3, lambda a, b, c: fma64(a, b, c)),
  "v_div_scale_f64": ("f64", ("f64",) * 3, lambda a, b, c: (a, np.zeros(np.broadcast(a, b, c).shape, bool)), CARRY),
  # f16 (true16 halves)
  "v_add_f16": ("f16", ("f16", "f16"), lambda a, b: a + b), "v_sub_f16": ("f16", ("f16", "f16"), lambda a, b: a - b),
  "v_subrev_f16": ("f16", ("f16", "f16"), lambda a, b: b - a),
  "v_mul_f16": ("f16", ("f16", "f16"), lambda a, b: a * b),
  "v_fma_f16": ("f16", ("f16",) * 3, lambda a, b, c: fma_narrow(a, b, c, np.float16)),
  "v_fmac_f16": ("f16", ("f16",) * 3, lambda a, b, c: fma_narrow(a, b, c, np.float16)),
  "v_fmamk_f16": ("f16", ("f16",) * 3, lambda a, b, k: fma_narrow(a, k, b, np.float16)),
  "v_fmaak_f16": ("f16", ("f16",) * 3, lambda a, b, k: fma_narrow(a, b, k, np.float16)),
  "v_max_f16": ("f16", ("f16", "f16"), np.fmax), "v_min_f16": ("f16", ("f16", "f16"), np.fmin),
  "v_exp_f16": ("f16", ("f16",), np.exp2), "v_log_f16": ("f16", ("f16",), np.log2),
  "v_rcp_f16": ("f16", ("f16",), lambda a: np.float16(1) / a), "v_sqrt_f16": ("f16", ("f16",), np.sqrt),
  "v_rsq_f16": ("f16", ("f16",), lambda a: (1 / np.sqrt(a.astype(np.float32))).astype(np.float16)),
  "v_sin_f16": ("f16", ("f16",), sin_turns), "v_cos_f16": ("f16", ("f16",), cos_turns),
  "v_floor_f16": ("f16", ("f16",), np.floor), "v_ceil_f16": ("f16", ("f16",), np.ceil),
  "v_trunc_f16": ("f16", ("f16",), np.trunc), "v_rndne_f16": ("f16", ("f16",), np.rint),
  "v_fract_f16": ("f16", ("f16",), fract),
  "v_ldexp_f16": ("f16", ("f16", "i16"), lambda a, b: np.ldexp(a.astype(np.float32), b).astype(np.float16)),
  "v_div_fixup_f16": ("f16", ("f16",) * 3, div_fixup),
  "v_max3_f16": ("f16", ("f16",) * 3, lambda a, b, c: np.fmax(np.fmax(a, b), c)),
  "v_min3_f16": ("f16", ("f16",) * 3, lambda a, b, c: np.fmin(np.fmin(a, b), c)),
  "v_med3_f16": ("f16", ("f16",) * 3, med3),
  # conversions
  "v_cvt_f32_f16": (F, ("f16",), lambda a: a.astype(np.float32)),
  "v_cvt_f16_f32": ("f16", (F,), lambda a: a.astype(np.float16)),
  "v_cvt_f32_f64": (F, ("f64",), lambda a: a.astype(np.float32)),
  "v_cvt_f64_f32": ("f64", (F,), lambda a: a.astype(np.float64)),
  "v_cvt_f32_i32": (F, (I,), lambda a: a.astype(np.float32)),
  "v_cvt_f32_u32": (F, (U,), lambda a: a.astype(np.float32)),
  "v_cvt_f64_i32": ("f64", (I,), lambda a: a.astype(np.float64)),
  "v_cvt_f64_u32": ("f64", (U,), lambda a: a.astype(np.float64)),
  "v_cvt_i32_f32": (I, (F,), lambda a: f32_to_int(a, -2**31, 2**31 - 1, np.int32)),
  "v_cvt_u32_f32": (U, (F,), lambda a: f32_to_int(a, 0, 2**32 - 1, np.uint32)),
  "v_cvt_i32_f64": (I, ("f64",), lambda a: f32_to_int(a, -2**31, 2**31 - 1, np.int32)),
  "v_cvt_u32_f64": (U, ("f64",), lambda a: f32_to_int(a, 0, 2**32 - 1, np.uint32)),
  "v_cvt_floor_i32_f32": (I, (F,), lambda a: f32_to_int(np.floor(a), -2**31, 2**31 - 1, np.int32)),
  "v_cvt_nearest_i32_f32": (I, (F,), lambda a: f32_to_int(np.floor(a + np.float32(0.5)), -2**31, 2**31 - 1, np.int32)),
  "v_cvt_f16_u16": ("f16", ("u16",), lambda a: a.astype(np.float16)),
  "v_cvt_f16_i16": ("f16", ("i16",), lambda a: a.astype(np.float16)),
  "v_cvt_u16_f16": ("u16", ("f16",), lambda a: f32_to_int(a, 0, 65535, np.uint16)),
  "v_cvt_i16_f16": ("i16", ("f16",), lambda a: f32_to_int(a, -32768, 32767, np.int16)),
  "v_cvt_i32_i16": (I, ("i16",), lambda a: a.astype(np.int32)),
  "v_cvt_u32_u16": (U, ("u16",), lambda a: a.astype(np.uint32)),
  "v_cvt_pk_rtz_f16_f32": (U, (F, F), lambda a, b: round_to_f16_toward_zero(a).view(np.uint16).astype(np.uint32)
                           | round_to_f16_toward_zero(b).view(np.uint16).astype(np.uint32) << np.uint32(16)),
  "v_pack_b32_f16": (U, ("u16", "u16"), lambda a, b: a.astype(np.uint32) | b.astype(np.uint32) << np.uint32(16)),
  "v_cvt_f32_ubyte0": (F, (U,), lambda a: (a & 0xFF).astype(np.float32)),
  "v_cvt_f32_ubyte1": (F, (U,), lambda a: ((a >> 8) & 0xFF).astype(np.float32)),
  "v_cvt_f32_ubyte2": (F, (U,), lambda a: ((a >> 16) & 0xFF).astype(np.float32)),
  "v_cvt_f32_ubyte3": (F, (U,), lambda a: (a >> 24).astype(np.float32)),
  # 32-bit integer
  "v_mov_b32": (U, (U,), lambda a: a), "v_mov_b16": ("u16", ("u16",), lambda a: a),
  "v_add_nc_u32": (U, (U, U), lambda a, b: a + b), "v_sub_nc_u32": (U, (U, U), lambda a, b: a - b),
  "v_subrev_nc_u32": (U, (U, U), lambda a, b: b - a),
  "v_add_nc_i32": (I, (I, I), lambda a, b: a + b), "v_sub_nc_i32": (I, (I, I), lambda a, b: a - b),
  "v_add3_u32": (U, (U, U, U), lambda a, b, c: a + b + c),
  "v_mul_lo_u32": (U, (U, U), lambda a, b: (a.astype(np.uint64) * b).astype(np.uint32)),
  "v_mul_hi_u32": (U, (U, U), lambda a, b: ((a.astype(np.uint64) * b) >> np.uint64(32)).astype(np.uint32)),
  "v_mul_hi_i32": (I, (I, I), lambda a, b: ((a.astype(np.int64) * b) >> 32).astype(np.int32)),
  "v_mul_u32_u24": (U, (U, U), lambda a, b: mul_u24(a, b).astype(np.uint32)),
  "v_mul_hi_u32_u24": (U, (U, U), lambda a, b: (mul_u24(a, b) >> np.uint64(32)).astype(np.uint32)),
  "v_mul_i32_i24": (I, (U, U), lambda a, b: mul_i24(a, b).astype(np.int32)),
  "v_mul_hi_i32_i24": (I, (U, U), lambda a, b: (mul_i24(a, b) >> 32).astype(np.int32)),
  "v_mad_u32_u24": (U, (U, U, U), lambda a, b, c: (mul_u24(a, b) + c).astype(np.uint32)),
  "v_mad_i32_i24": (I, (U, U, I), lambda a, b, c: (mul_i24(a, b) + c).astype(np.int32)),
  "v_mad_u32_u16": (U, ("u16", "u16", U), lambda a, b, c: a.astype(np.uint32) * b + c),
  "v_min_i32": (I, (I, I), np.minimum), "v_max_i32": (I, (I, I), np.maximum),
  "v_min_u32": (U, (U, U), np.minimum), "v_max_u32": (U, (U, U), np.maximum),
  "v_min3_i32": (I, (I, I, I), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
  "v_max3_i32": (I, (I, I, I), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
  "v_min3_u32": (U, (U, U, U), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
  "v_max3_u32": (U, (U, U, U), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
  "v_med3_i32": (I, (I, I, I), imed3), "v_med3_u32": (U, (U, U, U), imed3),
  "v_maxmin_i32": (I, (I, I, I), lambda a, b, c: np.minimum(np.maximum(a, b), c)),
  "v_minmax_i32": (I, (I, I, I), lambda a, b, c: np.maximum(np.minimum(a, b), c)),
  "v_maxmin_u32": (U, (U, U, U), lambda a, b, c: np.minimum(np.maximum(a, b), c)),
  "v_minmax_u32": (U, (U, U, U), lambda a, b, c: np.maximum(np.minimum(a, b), c)),
  "v_and_b32": (U, (U, U), lambda a, b: a & b), "v_or_b32": (U, (U, U), lambda a, b: a | b),
  "v_xor_b32": (U, (U, U), lambda a, b: a ^ b), "v_xnor_b32": (U, (U, U), lambda a, b: ~(a ^ b)),
  "v_not_b32": (U, (U,), lambda a: ~a), "v_bfrev_b32": (U, (U,), lambda a: bit_reverse32(a)),
  "v_xor3_b32": (U, (U, U, U), lambda a, b, c: a ^ b ^ c), "v_or3_b32": (U, (U, U, U), lambda a, b, c: a | b | c),
  "v_and_or_b32": (U, (U, U, U), lambda a, b, c: (a & b) | c),
  "v_lshlrev_b32": (U, (U, U), lambda a, b: b << shift32(a)),
  "v_lshrrev_b32": (U, (U, U), lambda a, b: b >> shift32(a)),
  "v_ashrrev_i32": (I, (U, I), lambda a, b: b >> shift32(a).astype(np.int32)),
  "v_lshl_or_b32": (U, (U, U, U), lambda a, b, c: (a << shift32(b)) | c),
  "v_lshl_add_u32": (U, (U, U, U), lambda a, b, c: (a << shift32(b)) + c),
  "v_add_lshl_u32": (U, (U, U, U), lambda a, b, c: (a + b) << shift32(c)),
  "v_xad_u32": (U, (U, U, U), lambda a, b, c: (a ^ b) + c),
  "v_bfe_u32": (U, (U, U, U), lambda a, b, c: bfe(a, b, c, False)),
  "v_bfe_i32": (U, (U, U, U), lambda a, b, c: bfe(a, b, c, True)),
  "v_bfi_b32": (U, (U, U, U), lambda a, b, c: (a & b) | (~a & c)),
  "v_bfm_b32": (U, (U, U), lambda a, b: ((np.uint32(1) << shift32(a)) - np.uint32(1)) << shift32(b)),
  "v_alignbit_b32": (U, (U, U, U), lambda a, b, c: ((a.astype(np.uint64) << np.uint64(32) | b) >>
                                                    (c.astype(np.uint64) & np.uint64(31))).astype(np.uint32)),
  "v_alignbyte_b32": (U, (U, U, U), lambda a, b, c: ((a.astype(np.uint64) << np.uint64(32) | b) >> (
    (c.astype(np.uint64) & np.uint64(3)) * np.uint64(8))).astype(np.uint32)),
  "v_perm_b32": (U, (U, U, U), permute_bytes),
  "v_bcnt_u32_b32": (U, (U, U), lambda a, b: popcount32(a) + b),
  "v_clz_i32_u32": (I, (U,), clz32), "v_ctz_i32_b32": (I, (U,), ctz32), "v_cls_i32": (I, (U,), cls32),
  "v_cndmask_b32": (U, (U, U, "mask"), lambda a, b, m: np.where(m, b, a)),
  "v_cndmask_b16": ("u16", ("u16", "u16", "mask"), lambda a, b, m: np.where(m, b, a)),
  "v_add_co_u32": (U, (U, U), add_carry, CARRY), "v_sub_co_u32": (U, (U, U), sub_borrow, CARRY),
  "v_subrev_co_u32": (U, (U, U), lambda a, b: sub_borrow(b, a), CARRY),
  "v_add_co_ci_u32": (U, (U, U, "mask"), add_carry, CARRY),
  "v_sub_co_ci_u32": (U, (U, U, "mask"), sub_borrow, CARRY),
  "v_subrev_co_ci_u32": (U, (U, U, "mask"), lambda a, b, c: sub_borrow(b, a, c), CARRY),
  "v_mad_u64_u32": ("u64", (U, U, "u64"), mad_u64_u32, CARRY),
  "v_mad_i64_i32": ("i64", (I, I, "i64"), mad_i64_i32, CARRY),
  # 64-bit shifts
  "v_lshlrev_b64": ("u64", (U, "u64"), lambda a, b: b << shift64(a)),
  "v_lshrrev_b64": ("u64", (U, "u64"), lambda a, b: b >> shift64(a)),
  "v_ashrrev_i64": ("i64", (U, "i64"), lambda a, b: b >> shift64(a).astype(np.int64)),
  # 16-bit integer
  "v_add_nc_u16": ("u16", ("u16", "u16"), lambda a, b: a + b),
  "v_sub_nc_u16": ("u16", ("u16", "u16"), lambda a, b: a - b),
  "v_add_nc_i16": ("i16", ("i16", "i16"), lambda a, b: a + b),
  "v_sub_nc_i16": ("i16", ("i16", "i16"), lambda a, b: a - b),
  "v_mul_lo_u16": ("u16", ("u16", "u16"), lambda a, b: a * b),
  "v_mad_u16": ("u16", ("u16",) * 3, lambda a, b, c: a * b + c),
  "v_mad_i16": ("i16", ("i16",) * 3, lambda a, b, c: a * b + c),
  "v_max_u16": ("u16", ("u16", "u16"), np.maximum), "v_min_u16": ("u16", ("u16", "u16"), np.minimum),
  "v_max_i16": ("i16", ("i16", "i16"), np.maximum), "v_min_i16": ("i16", ("i16", "i16"), np.minimum),
  "v_lshlrev_b16": ("u16", ("u16", "u16"), lambda a, b: b << shift16(a)),
  "v_lshrrev_b16": ("u16", ("u16", "u16"), lambda a, b: b >> shift16(a)),
  "v_ashrrev_i16": ("i16", ("u16", "i16"), lambda a, b: b >> shift16(a).astype(np.int16)),
  "v_max3_i16": ("i16", ("i16",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
  "v_min3_i16": ("i16", ("i16",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
  "v_max3_u16": ("u16", ("u16",) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c)),
  "v_min3_u16": ("u16", ("u16",) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c)),
  "v_med3_i16": ("i16", ("i16",) * 3, imed3), "v_med3_u16": ("u16", ("u16",) * 3, imed3),
  "v_maxmin_f16": ("f16", ("f16",) * 3, lambda a, b, c: np.fmin(np.fmax(a, b), c)),
  "v_minmax_f16": ("f16", ("f16",) * 3, lambda a, b, c: np.fmax(np.fmin(a, b), c)),
  "v_mad_i32_i16": (I, ("i16", "i16", I), lambda a, b, c: a.astype(np.int32) * b + c),
  "v_cvt_pk_i16_i32": (U, (I, I), lambda a, b: pack16(np.clip(a, -32768, 32767), np.clip(b, -32768, 32767))),
  "v_cvt_pk_u16_u32": (U, (U, U), lambda a, b: pack16(np.minimum(a, 65535), np.minimum(b, 65535))),
  "v_cvt_pk_i16_f32": (U, (F, F), lambda a, b: pack16(f32_to_int(a, -32768, 32767, np.int32),
                                                      f32_to_int(b, -32768, 32767, np.int32))),
  "v_cvt_pk_u16_f32": (U, (F, F), lambda a, b: pack16(f32_to_int(a, 0, 65535, np.int32),
                                                      f32_to_int(b, 0, 65535, np.int32))),
  "v_dot2acc_f32_f16": (F, (U, U, F), lambda a, b, d: (halves(a, 0) * halves(b, 0) + halves(a, 1) * halves(b, 1) + d)
                        .astype(np.float32)),
  "v_frexp_mant_f16": ("f16", ("f16",), lambda a: np.where(np.isfinite(a), np.frexp(a)[0], a).astype(np.float16)),
  "v_frexp_exp_i16_f16": ("i16", ("f16",), lambda a: np.where(np.isfinite(a), np.frexp(a)[1], 0).astype(np.int16)),
  "v_and_b16": ("u16", ("u16", "u16"), lambda a, b: a & b), "v_or_b16": ("u16", ("u16", "u16"), lambda a, b: a | b),
  "v_xor_b16": ("u16", ("u16", "u16"), lambda a, b: a ^ b), "v_not_b16": ("u16", ("u16",), lambda a: ~a),
}


def pack16(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  return (lo.astype(np.uint32) & np.uint32(0xFFFF)) | ((hi.astype(np.uint32) & np.uint32(0xFFFF)) << np.uint32(16))


def halves(x: np.ndarray, which: int) -> np.ndarray:
  """The low (0) or high (1) f16 of packed 32-bit words, as float64."""
  return ((x.astype(np.uint32) >> np.uint32(16 * which)) & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16) \
      .astype(np.float64)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """s + e == a + b exactly (Knuth)."""
  s = a + b
  bb = s - a
  return s, (a - (s - bb)) + (b - bb)


def two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """p + e == a * b exactly (Dekker, Veltkamp splitting), barring overflow/underflow."""
  def split(x):
    t = 134217729.0 * x  # 2**27 + 1
    hi = t - (t - x)
    return hi, x - hi
  p = a * b
  ah, al = split(a)
  bh, bl = split(b)
  return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def add_round_to_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """a + b rounded to odd: if inexact, the neighbour of the truncated value whose last mantissa bit is 1."""
  s, e = two_sum(a, b)
  even = (s.view(np.uint64) & np.uint64(1)) == 0
  inexact = np.isfinite(e) & (e != 0)  # non-finite sums have no rounding error to encode
  return np.where(inexact & even, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)


@np.errstate(all="ignore")
def fma_narrow(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype) -> np.ndarray:
  """f32/f16 fused multiply-add, correctly rounded: a*b is exact in f64, the sum is rounded to odd in f64 and then
  once to the target (53 >= 2 + 24 bits, so that single rounding is exact)."""
  prod = a.astype(np.float64) * b.astype(np.float64)
  return add_round_to_odd(prod, np.asarray(c).astype(np.float64)).astype(dtype)


@np.errstate(all="ignore")
def fma64(a, b, c):
  """f64 fused multiply-add, correctly rounded: Boldo & Melquiond's emulation RN(th + RO(tl + ul)) with
  (uh, ul) = a*b exactly and (th, tl) = c + uh exactly; lanes near overflow/underflow or non-finite go through
  exact rational arithmetic."""
  a, b, c = (np.asarray(x, np.float64) for x in np.broadcast_arrays(a, b, c))
  uh, ul = two_product(a, b)
  th, tl = two_sum(c, uh)
  out = th + add_round_to_odd(tl, ul)
  mags = np.maximum(np.maximum(np.abs(a), np.abs(b)), np.abs(c))
  tiny = (np.abs(uh) < 2.0**-900) & (uh != 0) | ((np.abs(out) < 2.0**-900) & (a * b != 0))
  risky = ~np.isfinite(out) | ~np.isfinite(mags) | (mags > 2.0**500) | (np.abs(uh) > 2.0**900) | tiny
  if risky.any():
    from fractions import Fraction
    flat = out.reshape(-1)
    for i in np.flatnonzero(risky.reshape(-1)):
      x, y, z = float(a.flat[i]), float(b.flat[i]), float(c.flat[i])
      if all(np.isfinite(v) for v in (x, y, z)):
        try: flat[i] = float(Fraction(x) * Fraction(y) + Fraction(z))
        except OverflowError: flat[i] = np.inf if Fraction(x) * Fraction(y) + Fraction(z) > 0 else -np.inf
      else:
        flat[i] = x * y + z
    out = flat.reshape(out.shape)
  return out


def bit_reverse32(a: np.ndarray) -> np.ndarray:
  bytes_ = a.astype(np.uint32)[..., None].view(np.uint8)
  return np.packbits(np.unpackbits(bytes_, axis=-1, bitorder="little")[..., ::-1], axis=-1,
                     bitorder="little").view(np.uint32)[..., 0]


def compare_ops() -> dict[str, tuple]:
  """v_cmp_{op}_{type} (and v_cmpx_): a per-lane bool result."""
  float_ops = {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal,
               "le": np.less_equal, "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
               "o": lambda a, b: ~np.isnan(a) & ~np.isnan(b), "u": lambda a, b: np.isnan(a) | np.isnan(b),
               "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
               "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
               "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool)}
  int_ops = {"f": float_ops["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
             "ne": np.not_equal, "ge": np.greater_equal, "t": float_ops["t"]}
  table = {}
  for prefix in ("v_cmp_", "v_cmpx_"):
    for t in ("f16", "f32", "f64"):
      for op, fn in float_ops.items(): table[f"{prefix}{op}_{t}"] = ("bool", (t, t), fn)
      table[f"{prefix}class_{t}"] = ("bool", (t, U), class_mask)
    for t in ("i16", "u16", "i32", "u32", "i64", "u64"):
      for op, fn in int_ops.items(): table[f"{prefix}{op}_{t}"] = ("bool", (t, t), fn)
  return table


VOP.update(compare_ops())
