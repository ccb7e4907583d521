"""PTX arithmetic that numpy does not do the PTX way: integer division, shifts past the width, high multiplies,
saturating float->int conversion, directed rounding, bfloat16, bit tricks. All functions take and return numpy values
(arrays or scalars) of the PTX operand's numpy type; the translator calls them from generated code."""
from __future__ import annotations
import numpy as np

def where(mask, new, old):
  """Per-thread select that keeps the register's type (np.where of 0-d values gives a 0-d array, which is fine)."""
  return np.where(mask, new, old)

def int_div(a, b):
  """C division (toward zero); x/0 gives all ones as PTX's unsigned division does (signed: -1)."""
  zero = b == 0
  safe = np.where(zero, 1, b).astype(a.dtype if hasattr(a, "dtype") else np.asarray(b).dtype)
  quotient = (a - np.fmod(a, safe)) // safe
  return np.where(zero, np.array(-1).astype(quotient.dtype), quotient).astype(quotient.dtype)

def int_rem(a, b):
  """C remainder (sign of the dividend); x%0 gives x."""
  zero = b == 0
  safe = np.where(zero, 1, b).astype(np.asarray(a).dtype)
  return np.where(zero, a, np.fmod(a, safe)).astype(np.asarray(a).dtype)

def shift_left(a, amount):
  """shl: shift amounts >= the width give 0."""
  dtype, bits = np.asarray(a).dtype, np.asarray(a).dtype.itemsize * 8
  amount = np.asarray(amount).astype(np.uint32)
  return np.where(amount >= bits, 0, a << np.minimum(amount, bits - 1).astype(dtype)).astype(dtype)

def shift_right(a, amount):
  """shr: unsigned shifts past the width give 0, signed ones fill with the sign bit."""
  dtype, bits = np.asarray(a).dtype, np.asarray(a).dtype.itemsize * 8
  amount = np.asarray(amount).astype(np.uint32)
  shifted = (a >> np.minimum(amount, bits - 1).astype(dtype)).astype(dtype)
  if dtype.kind == "i": return shifted
  return np.where(amount >= bits, 0, shifted).astype(dtype)

def mul_hi(a, b):
  """The high half of the full product (mul.hi) for 16/32/64-bit integers."""
  dtype = np.asarray(a).dtype
  bits = dtype.itemsize * 8
  if bits < 64:
    wide = np.int64 if dtype.kind == "i" else np.uint64
    return ((np.asarray(a).astype(wide) * np.asarray(b).astype(wide)) >> bits).astype(dtype)
  # 64x64 -> 128 from 32-bit limbs, unsigned; fix the sign afterwards for signed operands
  ua, ub = np.asarray(a).view(np.uint64), np.asarray(b).view(np.uint64)
  mask32 = np.uint64(0xFFFFFFFF)
  a_lo, a_hi, b_lo, b_hi = ua & mask32, ua >> np.uint64(32), ub & mask32, ub >> np.uint64(32)
  lo_lo, hi_lo, lo_hi, hi_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi, a_hi * b_hi
  cross = (lo_lo >> np.uint64(32)) + (hi_lo & mask32) + (lo_hi & mask32)
  high = hi_hi + (hi_lo >> np.uint64(32)) + (lo_hi >> np.uint64(32)) + (cross >> np.uint64(32))
  if dtype.kind == "i":
    high = high - np.where(np.asarray(a) < 0, ub, np.uint64(0)) - np.where(np.asarray(b) < 0, ua, np.uint64(0))
  return high.astype(np.uint64).view(dtype) if np.ndim(high) else np.uint64(high).view(dtype)

def flush_subnormal(x):
  """.ftz: subnormal inputs and results become zero of the same sign."""
  tiny = np.finfo(np.asarray(x).dtype).tiny
  return np.where(np.abs(x) < tiny, np.copysign(np.zeros((), np.asarray(x).dtype), x), x).astype(np.asarray(x).dtype)

def saturate(x):
  """.sat on floats: clamp to [0, 1], NaN becomes 0."""
  dtype = np.asarray(x).dtype
  return np.where(np.isnan(x), 0, np.clip(x, 0, 1)).astype(dtype)

def fma(a, b, c, dtype, mode: str = "rn"):
  """Fused multiply-add: computed wider, rounded once to `dtype` (float64 operands round twice, rarely off by 1 ulp)."""
  wide = np.longdouble if np.dtype(dtype) == np.float64 else np.float64
  return round_float(np.asarray(a).astype(wide) * b + np.asarray(c).astype(wide), dtype, mode)

def round_float(x, dtype, mode: str):
  """Round a float value to the float `dtype` with mode rn/rz/rm/rp (numpy's cast is rn; the others step by 1 ulp)."""
  x = np.asarray(x)
  rounded = x.astype(dtype)
  if mode == "rn": return rounded
  back = rounded.astype(x.dtype)
  toward = {"rz": np.where(np.abs(back) > np.abs(x), 0, np.nan), "rm": np.where(back > x, -np.inf, np.nan),
            "rp": np.where(back < x, np.inf, np.nan)}[mode]
  stepped = np.nextafter(rounded, toward.astype(dtype))
  return np.where(np.isnan(toward), rounded, stepped).astype(dtype)

_ROUND_TO_INT = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil, "rn": np.rint, "rz": np.trunc,
                 "rm": np.floor, "rp": np.ceil}

def round_integral(x, mode: str):
  """cvt.rni/rzi/rmi/rpi between floats: round to an integral value in the same type."""
  return _ROUND_TO_INT[mode](x)

def float_to_int(x, dtype, mode: str):
  """cvt float->int: round by `mode`, saturate to the integer range, NaN -> 0 (PTX's conversions saturate)."""
  info = np.iinfo(dtype)
  rounded = _ROUND_TO_INT[mode](np.asarray(x).astype(np.float64))
  rounded = np.where(np.isnan(rounded), 0, rounded)
  low, high = float(info.min), float(info.max)
  result = np.clip(rounded, low, high).astype(dtype)   # clip in float64, then exact-range fixes for 64-bit ends
  if info.bits == 64: result = np.where(rounded >= high, info.max, result).astype(dtype)
  return result

def saturate_int(x, dtype):
  """cvt.sat between integers: clamp to the destination range."""
  info = np.iinfo(dtype)
  x = np.asarray(x)
  if x.dtype.kind == "u": return np.minimum(x, np.array(info.max).astype(x.dtype) if info.max < np.iinfo(x.dtype).max
                                            else x).astype(dtype)
  wide = x.astype(np.int64) if x.dtype.itemsize < 8 else x
  return np.clip(wide, max(info.min, np.iinfo(wide.dtype).min), min(info.max, np.iinfo(wide.dtype).max)).astype(dtype)

def bf16_to_f32(bits):
  """bfloat16 bits (uint16) -> float32: the bits are the top half of a float32."""
  return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)

def f32_to_bf16(x, mode: str = "rn"):
  """float32 -> bfloat16 bits (uint16), rounding rn (ties to even), rz, rm or rp; NaN stays a quiet NaN."""
  x = np.asarray(x, dtype=np.float32)
  bits = x.view(np.uint32).astype(np.uint64)
  low = bits & np.uint64(0xFFFF)
  negative = (bits >> np.uint64(31)) == 1
  if mode == "rn": up = (low > 0x8000) | ((low == 0x8000) & (((bits >> np.uint64(16)) & np.uint64(1)) == 1))
  elif mode == "rz": up = np.zeros_like(negative)
  elif mode == "rp": up = (low != 0) & ~negative
  elif mode == "rm": up = (low != 0) & negative
  else: raise ValueError(f"unknown rounding mode {mode}")
  out = ((bits >> np.uint64(16)) + up.astype(np.uint64)).astype(np.uint16)
  return np.where(np.isnan(x), ((bits >> np.uint64(16)) | np.uint64(0x40)).astype(np.uint16), out).astype(np.uint16)

def popcount(x):
  """popc: set bits, as uint32."""
  return np.bitwise_count(x).astype(np.uint32)

def count_leading_zeros(x):
  """clz: leading zero bits of a 32/64-bit value, as uint32."""
  x = np.asarray(x)
  bits = x.dtype.itemsize * 8
  unsigned = x.view(np.uint64 if bits == 64 else np.uint32)
  count = np.zeros(x.shape, np.uint32)
  width = bits // 2
  while width:   # binary search: wherever the top `width` bits are zero, count them and shift them out
    top_zero = (unsigned >> np.array(bits - width).astype(unsigned.dtype)) == 0
    count = count + np.where(top_zero, width, 0).astype(np.uint32)
    unsigned = np.where(top_zero, unsigned << np.array(width).astype(unsigned.dtype), unsigned).astype(unsigned.dtype)
    width //= 2
  return (count + np.where(unsigned == 0, 1, 0).astype(np.uint32)).astype(np.uint32)

def bit_reverse(x):
  """brev: reverse the bits of a 32/64-bit value."""
  x = np.asarray(x)
  as_bytes = np.atleast_1d(x).view(np.uint8).reshape(-1, x.dtype.itemsize)
  reversed_bytes = np.unpackbits(as_bytes, axis=1, bitorder="little")[:, ::-1]
  out = np.packbits(reversed_bytes, axis=1, bitorder="little").view(x.dtype).reshape(np.atleast_1d(x).shape)
  return out if x.ndim else out[0]

def bit_field_extract(a, start, length):
  """bfe: `length` bits of `a` from `start`, sign-extended for signed types (PTX clamps start/length to 0..255)."""
  a = np.asarray(a)
  bits = a.dtype.itemsize * 8
  unsigned_dtype = np.uint64 if bits == 64 else np.uint32
  start = np.minimum(np.asarray(start).astype(np.int64) & 0xFF, bits)
  length = np.minimum(np.asarray(length).astype(np.int64) & 0xFF, bits)
  field = (a.view(unsigned_dtype).astype(np.uint64) >> np.minimum(start, 63).astype(np.uint64))
  field = np.where(start >= bits, 0, field).astype(np.uint64)
  keep = np.where(length >= 64, np.uint64(2**64 - 1),
                  (np.uint64(1) << np.minimum(length, 63).astype(np.uint64)) - np.uint64(1)).astype(np.uint64)
  value = field & keep
  if a.dtype.kind == "i":
    top = np.minimum(start + length, bits) - 1
    sign = np.where(length == 0, 0, (a.view(unsigned_dtype).astype(np.uint64) >> top.astype(np.uint64)) & 1)
    value = np.where((sign == 1) & (length < 64), value | ~keep, value).astype(np.uint64)
  return value.astype(unsigned_dtype).view(a.dtype) if np.ndim(value) else unsigned_dtype(value).view(a.dtype)

def bit_field_insert(a, b, start, length):
  """bfi: insert the low `length` bits of `a` into `b` at `start`."""
  b = np.asarray(b)
  bits = b.dtype.itemsize * 8
  start = np.minimum(np.asarray(start).astype(np.uint64) & np.uint64(0xFF), np.uint64(bits))
  length = np.minimum(np.asarray(length).astype(np.uint64) & np.uint64(0xFF), np.uint64(bits) - start)
  keep = np.where(length >= 64, np.uint64(2**64 - 1), (np.uint64(1) << np.minimum(length, 63)) - np.uint64(1))
  keep = (keep << np.minimum(start, 63)).astype(np.uint64)
  unsigned = np.uint64
  mixed = ((np.asarray(a).astype(unsigned) << np.minimum(start, 63)) & keep) | (b.astype(unsigned) & ~keep)
  return np.asarray(mixed).astype(b.dtype)

def permute_bytes(a, b, selector):
  """prmt.b32 (default mode): pick each result byte from the 8 bytes of {b, a} by a nibble of `selector`;
  bit 3 of a nibble replicates the chosen byte's sign."""
  source = (np.asarray(b).astype(np.uint64) << np.uint64(32)) | np.asarray(a).astype(np.uint64)
  selector = np.asarray(selector).astype(np.uint64)
  out = np.zeros(np.broadcast(source, selector).shape, np.uint64)
  for i in range(4):
    nibble = (selector >> np.uint64(4 * i)) & np.uint64(0xF)
    byte = (source >> ((nibble & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
    byte = np.where((nibble & np.uint64(8)) != 0, np.where(byte & np.uint64(0x80), 0xFF, 0), byte).astype(np.uint64)
    out = out | (byte << np.uint64(8 * i))
  return out.astype(np.uint32) if out.ndim else np.uint32(out)
