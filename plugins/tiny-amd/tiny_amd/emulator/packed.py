"""RDNA3 VOP3P instructions: packed 16-bit math (v_pk_*: each 16-bit half computed separately, sources picked by
OPSEL for the low result and OPSEL_HI for the high one, NEG/NEG_HI per half) and the mixed-precision v_fma_mix*
(OPSEL_HI marks f16 sources, OPSEL picks their half, NEG negates, NEG_HI takes the absolute value) and v_dot2."""
from __future__ import annotations

import numpy as np

from tiny_amd.emulator.valu_ops import fma_narrow
from tiny_amd.emulator.wave_state import EmulationError, WaveBatch, inline_constant

H, U, I = np.float16, np.uint16, np.int16
PACKED = {
  "v_pk_add_f16": (H, lambda a, b, c: a + b), "v_pk_mul_f16": (H, lambda a, b, c: a * b),
  "v_pk_fma_f16": (H, lambda a, b, c: fma_narrow(a, b, c, H)),
  "v_pk_max_f16": (H, lambda a, b, c: np.fmax(a, b)), "v_pk_min_f16": (H, lambda a, b, c: np.fmin(a, b)),
  "v_pk_add_u16": (U, lambda a, b, c: a + b), "v_pk_sub_u16": (U, lambda a, b, c: a - b),
  "v_pk_add_i16": (I, lambda a, b, c: a + b), "v_pk_sub_i16": (I, lambda a, b, c: a - b),
  "v_pk_mul_lo_u16": (U, lambda a, b, c: a * b), "v_pk_mad_u16": (U, lambda a, b, c: a * b + c),
  "v_pk_mad_i16": (I, lambda a, b, c: a * b + c),
  "v_pk_lshlrev_b16": (U, lambda a, b, c: b << (a & U(15))), "v_pk_lshrrev_b16": (U, lambda a, b, c: b >> (a & U(15))),
  "v_pk_ashrrev_i16": (I, lambda a, b, c: b >> (a.view(U) & U(15)).astype(I)),
  "v_pk_max_u16": (U, lambda a, b, c: np.maximum(a, b)), "v_pk_min_u16": (U, lambda a, b, c: np.minimum(a, b)),
  "v_pk_max_i16": (I, lambda a, b, c: np.maximum(a, b)), "v_pk_min_i16": (I, lambda a, b, c: np.minimum(a, b)),
}


def raw32(st: WaveBatch, code: int, is_float: bool) -> np.ndarray:
  """A VOP3P source as 32 raw bits; an inline constant fills both halves (f16 value for float ops)."""
  const = inline_constant(code, 16, is_float)
  if const is not None: return np.array([[const | const << 16]], np.uint32)
  return st.vread(code)


def half(raw: np.ndarray, hi: bool) -> np.ndarray:
  return ((raw >> np.uint32(16)) if hi else raw).astype(np.uint16)


def exec_vop3p(st: WaveBatch, ins) -> None:
  f, name, mask = ins.f, ins.name, st.lane_mask()
  if name.startswith("v_fma_mix"): return fma_mix(st, ins, mask)
  if name == "v_dot2_f32_f16": return dot2(st, ins, mask)
  if name not in PACKED: raise EmulationError(f"unsupported {name} (VOP3P) at 0x{ins.pc:x}")
  dtype, fn = PACKED[name]
  is_float = dtype == H
  raws = [raw32(st, f[k], is_float) for k in ("src0", "src1", "src2")]
  result = []
  for part, (sel, neg) in enumerate(((f["opsel"], f["neg"]), (f["opsel_hi"], f["neg_hi"]))):
    args = []
    for i, raw in enumerate(raws):
      x = half(raw, bool((sel >> i) & 1)).view(dtype)
      if is_float and (neg >> i) & 1: x = -x
      args.append(x)
    value = np.asarray(fn(*args)).astype(dtype)
    if is_float and f["clamp"]: value = np.clip(value, 0, 1).astype(dtype)
    result.append(value.view(np.uint16).astype(np.uint32))
  st.vwrite(f["vdst"], np.broadcast_to(result[0] | result[1] << np.uint32(16), mask.shape), mask)


def mix_source(st: WaveBatch, f: dict, i: int) -> np.ndarray:
  code = f[("src0", "src1", "src2")[i]]
  as_f16 = bool((f["opsel_hi"] >> i) & 1)
  if as_f16:
    x = half(raw32(st, code, True), bool((f["opsel"] >> i) & 1)).view(np.float16).astype(np.float32)
  else:
    const = inline_constant(code, 32, True)
    x = (np.array([[const]], np.uint32) if const is not None else st.vread(code)).view(np.float32)
  if (f["neg_hi"] >> i) & 1: x = np.abs(x)
  if (f["neg"] >> i) & 1: x = -x
  return x


def fma_mix(st: WaveBatch, ins, mask: np.ndarray) -> None:
  f = ins.f
  a, b, c = (mix_source(st, f, i) for i in range(3))
  if ins.name == "v_fma_mix_f32":
    out = fma_narrow(a, b, c, np.float32)
    if f["clamp"]: out = np.clip(out, 0, 1)
    return st.vwrite(f["vdst"], np.broadcast_to(out.view(np.uint32), mask.shape), mask)
  h = fma_narrow(a, b, c, np.float16)
  if f["clamp"]: h = np.clip(h, 0, 1).astype(np.float16)
  bits = h.view(np.uint16).astype(np.uint32)
  old = st.vgpr[f["vdst"]]
  merged = (old & np.uint32(0xFFFF)) | (bits << np.uint32(16)) if ins.name == "v_fma_mixhi_f16" else \
      (old & np.uint32(0xFFFF0000)) | bits
  st.vwrite(f["vdst"], np.broadcast_to(merged, mask.shape), mask)


def dot2(st: WaveBatch, ins, mask: np.ndarray) -> None:
  f = ins.f
  a, b = raw32(st, f["src0"], True), raw32(st, f["src1"], True)
  c = (np.array([[inline_constant(f["src2"], 32, True)]], np.uint32) if inline_constant(f["src2"], 32, True)
       is not None else st.vread(f["src2"])).view(np.float32)
  lo = half(a, False).view(np.float16).astype(np.float64) * half(b, False).view(np.float16)
  hi = half(a, True).view(np.float16).astype(np.float64) * half(b, True).view(np.float16)
  st.vwrite(f["vdst"], np.broadcast_to((lo + hi + c).astype(np.float32).view(np.uint32), mask.shape), mask)
