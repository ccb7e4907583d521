"""RDNA3 vector instruction execution (VOP1/VOP2/VOPC/VOP3/VOP3SD/VOPD and the lane ops) over a WaveBatch: reads
the typed sources (true16 halves, inline constants, literals, abs/neg modifiers), applies valu_ops' semantics to
all lanes at once and writes the lanes EXEC enables."""
from __future__ import annotations

import numpy as np

from tiny_amd.emulator.valu_ops import CARRY, VOP, fma_narrow
from tiny_amd.emulator.wave_state import EXEC, LANE_IDS, LITERAL, VCC, EmulationError, WaveBatch, inline_constant

NP_TYPE = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32, "u32": np.uint32,
           "i64": np.int64, "u64": np.uint64, "i16": np.int16, "u16": np.uint16}
WIDTH = {"f32": 32, "i32": 32, "u32": 32, "f64": 64, "i64": 64, "u64": 64, "f16": 16, "i16": 16, "u16": 16,
         "mask": 32}
RAW = {16: np.uint16, 32: np.uint32, 64: np.uint64}
ACCUMULATE = {"v_fmac_f32", "v_fmac_f16", "v_dot2acc_f32_f16"}  # the destination is also the third source
FLOAT = ("f16", "f32", "f64")


def read_source(st: WaveBatch, code: int, typ: str, hi_half: bool) -> np.ndarray:
  """Source operand code as a typed array broadcastable to [waves, 32]."""
  width = WIDTH[typ]
  if typ == "mask": return st.lanes_of(st.sread(code))
  if width == 16:
    const = inline_constant(code, 16, typ == "f16")
    if const is not None: return np.array([[const]], np.uint16).view(NP_TYPE[typ])
    raw = st.vread(code, 32)
    return ((raw >> np.uint32(16)) if hi_half else raw).astype(np.uint16).view(NP_TYPE[typ])
  raw = st.vread(code, width, typ in FLOAT)
  return raw.astype(RAW[width], copy=False).view(NP_TYPE[typ])


def true16_register(code: int, is_vgpr_field: bool) -> tuple[int, bool]:
  """In VOP1/VOP2/VOPC a 16-bit VGPR operand's top register bit selects the high half (v0.h = v128 encoding)."""
  if is_vgpr_field and code >= 256: return 256 + ((code - 256) & 0x7F), bool((code - 256) & 0x80)
  return code, False


SIGN_BIT_MODIFIERS = {"v_cndmask_b32", "v_cndmask_b16", "v_mov_b32", "v_mov_b16"}  # untyped moves: abs/neg act on bits


def sign_bit_modifiers(x: np.ndarray, absolute: bool, negate: bool) -> np.ndarray:
  """abs/neg on a move's raw bits: clear / flip the (f32 or f16) sign bit."""
  sign = x.dtype.type(1 << (8 * x.dtype.itemsize - 1))
  if absolute: x = x & ~sign
  if negate: x = x ^ sign
  return x


def apply_float_modifiers(x: np.ndarray, typ: str, absolute: bool, negate: bool) -> np.ndarray:
  if typ not in FLOAT: return x
  if absolute: x = np.abs(x)
  if negate: x = -x
  return x


def to_raw(value: np.ndarray, typ: str) -> np.ndarray:
  width = WIDTH[typ]
  value = np.asarray(value)
  if value.dtype != NP_TYPE[typ]: value = value.astype(NP_TYPE[typ])
  return value.view(RAW[width]) if width != 16 else value.view(np.uint16)


def write_result(st: WaveBatch, reg: int, value: np.ndarray, typ: str, mask: np.ndarray, hi_half: bool) -> None:
  raw = to_raw(value, typ)
  if WIDTH[typ] == 16:
    old = st.vgpr[reg]
    raw = raw.astype(np.uint32)
    merged = (old & np.uint32(0xFFFF)) | (raw << np.uint32(16)) if hi_half else (old & np.uint32(0xFFFF0000)) | raw
    return st.vwrite(reg, merged, mask)
  st.vwrite(reg, raw, mask, WIDTH[typ])


def source_codes(ins, n: int) -> list[int]:
  f = ins.f
  if ins.fmt == "VOP1": return [f["src0"]][:n]
  if ins.fmt in ("VOP2", "VOPC"):
    codes = [f["src0"], f["vsrc1"]]
    if n == 3:
      if ins.name in ("v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16"): codes.append(LITERAL)
      elif ins.name in ACCUMULATE: codes.append(256 + f["vdst"])
      else: codes.append(VCC)  # carry-in / select mask
    return codes
  codes = [f["src0"], f["src1"], f["src2"]][:n]
  if ins.name in ACCUMULATE: codes[2] = 256 + f["vdst"]
  return codes


def exec_vop(st: WaveBatch, ins) -> None:
  """Any VOP1/VOP2/VOPC/VOP3 instruction with an entry in valu_ops.VOP."""
  spec = VOP.get(ins.name)
  if spec is None: return exec_lane_op(st, ins)
  out_t, in_ts, fn = spec[:3]
  is_carry = len(spec) > 3 and spec[3] == CARRY
  f = ins.f
  vop3 = ins.fmt == "VOP3"
  sd_form = vop3 and is_carry  # VOP3SD: bits 14:8 are an SGPR destination, no abs/opsel
  args = []
  for i, (code, typ) in enumerate(zip(source_codes(ins, len(in_ts)), in_ts)):
    hi = False
    if WIDTH[typ] == 16:
      if vop3: hi = bool((f["opsel"] >> i) & 1)
      else: code, hi = true16_register(code, True)
    x = read_source(st, code, typ, hi)
    if vop3 and not sd_form and ins.name in SIGN_BIT_MODIFIERS and typ != "mask":
      x = sign_bit_modifiers(x, bool((f["abs"] >> i) & 1), bool((f["neg"] >> i) & 1))
    elif vop3 and not sd_form:
      x = apply_float_modifiers(x, typ, bool((f["abs"] >> i) & 1), bool((f["neg"] >> i) & 1))
    elif vop3 and typ in FLOAT and (f["neg"] >> i) & 1: x = -x
    args.append(x)
  result = fn(*args)
  mask = st.lane_mask()
  if out_t == "bool": return write_compare(st, ins, np.broadcast_to(result, mask.shape) & mask)
  if is_carry:
    result, carry = result
    carry_dst = f["sdst"] if sd_form else VCC
    st.swrite(carry_dst, st.mask_bits(np.broadcast_to(carry, mask.shape) & mask))
  if vop3 and out_t in FLOAT:
    result = output_modifiers(np.asarray(result).astype(NP_TYPE[out_t]), f["clamp"], 0 if sd_form else f["omod"])
  dst, hi = f["vdst"], False
  if WIDTH[out_t] == 16:
    if vop3: hi = bool((f["opsel"] >> 3) & 1)
    else: dst, hi = dst & 0x7F, bool(dst & 0x80)
  write_result(st, dst, np.broadcast_to(result, mask.shape), out_t, mask, hi)


def output_modifiers(x: np.ndarray, clamp: int, omod: int) -> np.ndarray:
  if omod: x = x * x.dtype.type({1: 2.0, 2: 4.0, 3: 0.5}[omod])
  if clamp: x = np.clip(x, 0, 1)
  return x


def write_compare(st: WaveBatch, ins, lanes: np.ndarray) -> None:
  bits = st.mask_bits(lanes)
  if ins.name.startswith("v_cmpx_"):
    return st.swrite(EXEC, bits)
  st.swrite(ins.f["vdst"] if ins.fmt == "VOP3" else VCC, bits)


def exec_lane_op(st: WaveBatch, ins) -> None:
  """Cross-lane and scalar-destination VALU ops."""
  f, name, mask = ins.f, ins.name, st.lane_mask()
  if name == "v_nop" or name == "v_pipeflush": return None
  if name == "v_readfirstlane_b32":
    src = np.broadcast_to(st.vread(f["src0"]), mask.shape)
    exec_lanes = st.lanes_of(st.sgpr[:, EXEC])
    first = np.where(exec_lanes.any(1), exec_lanes.argmax(1), 0)
    return st.swrite(f["vdst"], src[np.arange(st.nwaves), first])
  if name == "v_readlane_b32":
    src = np.broadcast_to(st.vread(f["src0"]), mask.shape)
    lane = (st.sread(f["src1"]) & np.uint32(31)).astype(np.int64)
    return st.swrite(f["vdst"], src[np.arange(st.nwaves), lane])
  if name == "v_writelane_b32":
    value, lane = st.sread(f["src0"]), (st.sread(f["src1"]) & np.uint32(31)).astype(np.int64)
    only = (LANE_IDS[None, :] == lane[:, None]) & st.active[:, None]
    return st.vwrite(f["vdst"], value[:, None], only)
  if name in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
    src, acc = st.vread(f["src0"]), st.vread(f["src1"])
    if name.endswith("lo_u32_b32"):
      below = (np.uint64(1) << LANE_IDS.astype(np.uint64)) - np.uint64(1)
      bits = np.broadcast_to(src, mask.shape).astype(np.uint64) & below
      count = np.unpackbits(bits[..., None].view(np.uint8), axis=-1).sum(-1).astype(np.uint32)
    else:
      count = np.zeros(mask.shape, np.uint32)  # wave32: no lane is at or above 32
    return st.vwrite(f["vdst"], count + acc, mask)
  if name == "v_swap_b32":
    a, b = st.vgpr[f["vdst"]].copy(), st.vread(f["src0"]).copy()
    st.vwrite(f["vdst"], b, mask)
    return st.vwrite(f["src0"] - 256, a, mask)
  raise EmulationError(f"unsupported vector instruction {name} ({ins.fmt}) at 0x{ins.pc:x}")


VOPD_OPS = {
  "v_fmac_f32": lambda a, b, d, k: fma_narrow(a, b, d, np.float32),
  "v_fmaak_f32": lambda a, b, d, k: fma_narrow(a, b, k, np.float32),
  "v_fmamk_f32": lambda a, b, d, k: fma_narrow(a, k, b, np.float32),
  "v_mul_f32": lambda a, b, d, k: a * b, "v_add_f32": lambda a, b, d, k: a + b, "v_sub_f32": lambda a, b, d, k: a - b,
  "v_subrev_f32": lambda a, b, d, k: b - a, "v_max_f32": lambda a, b, d, k: np.fmax(a, b),
  "v_min_f32": lambda a, b, d, k: np.fmin(a, b),
  "v_mul_dx9_zero_f32": lambda a, b, d, k: np.where((a == 0) | (b == 0), np.float32(0), a * b),
}
VOPD_INT_OPS = {
  "v_mov_b32": lambda a, b, m: a, "v_add_nc_u32": lambda a, b, m: a + b,
  "v_lshlrev_b32": lambda a, b, m: b << (a & np.uint32(31)), "v_and_b32": lambda a, b, m: a & b,
  "v_cndmask_b32": lambda a, b, m: np.where(m, b, a),
}


def vopd_half(st: WaveBatch, ins, op: str, src0: int, vsrc1: int, vdst: int) -> np.ndarray:
  """The 32-bit result of one half of a VOPD pair (computed before either half writes)."""
  a = st.vread(src0)
  b = st.vread(vsrc1)
  if op in VOPD_OPS:
    k = np.float32(np.uint32(st.literal).view(np.float32))
    d = st.vgpr[vdst]
    result = VOPD_OPS[op](a.view(np.float32), b.view(np.float32), d.view(np.float32), k)
    return result.astype(np.float32).view(np.uint32)
  if op in VOPD_INT_OPS: return VOPD_INT_OPS[op](a, b, st.lanes_of(st.sgpr[:, VCC])).astype(np.uint32)
  raise EmulationError(f"unsupported VOPD operation {op} at 0x{ins.pc:x}")


def exec_vopd(st: WaveBatch, ins) -> None:
  f, mask = ins.f, st.lane_mask()
  x = vopd_half(st, ins, f["opx"], f["srcx0"], f["vsrcx1"], f["vdstx"])
  y = vopd_half(st, ins, f["opy"], f["srcy0"], f["vsrcy1"], f["vdsty"])
  st.vwrite(f["vdstx"], np.broadcast_to(x, mask.shape), mask)
  st.vwrite(f["vdsty"], np.broadcast_to(y, mask.shape), mask)
