"""RDNA3 scalar ALU (SOP1/SOP2/SOPK/SOPC) semantics, vectorized over the waves of a batch: each function takes the
batch state and the decoded instruction and writes SGPRs/SCC of the active waves."""
from __future__ import annotations

import numpy as np

from tiny_amd.emulator.wave_state import EXEC, WaveBatch

U64 = np.uint64
M32 = U64(0xFFFFFFFF)


def s64(x): return x.astype(np.int64)
def i32(x): return x.astype(np.uint32).view(np.int32)
def ne0(x): return (x != 0).astype(np.uint32)


def popcount(x: np.ndarray) -> np.ndarray:
  return np.unpackbits(x.astype(np.uint64)[:, None].view(np.uint8), axis=1).sum(1).astype(np.uint32)


def bitlen(x: np.ndarray) -> np.ndarray:
  return np.where(x == 0, 0, np.floor(np.log2(np.maximum(x, 1).astype(np.float64))).astype(np.int64) + 1)


# SOP2 building blocks: each returns fn(a, b, scc) -> (result, new SCC or None)
def logic(fn):
  return lambda a, b, c: (fn(a, b), ne0(fn(a, b)))


def shift(fn):
  return lambda a, b, c: (fn(a, b), ne0(fn(a, b)))


def carry_add(a, b, c):
  s = a.astype(U64) + b + c
  return s & M32, (s >> U64(32)).astype(np.uint32)


def borrow_sub(a, b, c):
  s = s64(a) - s64(b) - s64(c)
  return s.astype(np.uint32), (s < 0).astype(np.uint32)


def signed_overflow(s: np.ndarray) -> np.ndarray:
  return ((s > 2**31 - 1) | (s < -2**31)).astype(np.uint32)


def signed_add(a, b, c):
  s = s64(i32(a)) + s64(i32(b))
  return s.astype(np.uint32), signed_overflow(s)


def signed_sub(a, b, c):
  s = s64(i32(a)) - s64(i32(b))
  return s.astype(np.uint32), signed_overflow(s)


def shl_add(n):
  def fn(a, b, c):
    s = ((a.astype(U64) << U64(n)) & M32) + b
    return s & M32, (s >> U64(32) != 0).astype(np.uint32)
  return fn


def bfe(signed, width):
  """s_bfe: offset in b[5:0] (b[4:0] for 32-bit), width in b[22:16]."""
  def fn(a, b, c):
    off, w = b.astype(U64) & U64(width - 1), (b.astype(U64) >> U64(16)) & U64(0x7F)
    field = (a.astype(U64) >> off) & np.where(w >= 64, ~U64(0), (U64(1) << np.minimum(w, 63)) - U64(1))
    if signed:
      sign = np.where(w > 0, (field >> np.maximum(w, 1) - U64(1)) & U64(1), 0).astype(bool)
      field = np.where(sign, field | ~((U64(1) << np.minimum(w, 63)) - U64(1)), field)
    field = field & (M32 if width == 32 else ~U64(0))
    return field, ne0(field)
  return fn


# SOP2: name -> (width of sources/result, fn(a, b, scc) -> (result, scc or None))
def _sop2_table() -> dict:
  t = {
    "s_add_u32": (32, lambda a, b, c: carry_add(a, b, 0)), "s_addc_u32": (32, carry_add),
    "s_sub_u32": (32, lambda a, b, c: borrow_sub(a, b, 0)), "s_subb_u32": (32, borrow_sub),
    "s_add_i32": (32, signed_add), "s_sub_i32": (32, signed_sub),
    "s_absdiff_i32": (32, lambda a, b, c: (np.abs(s64(i32(a)) - s64(i32(b))).astype(np.uint32),) * 2),
    "s_lshl_b32": (32, shift(lambda a, b: (a.astype(U64) << (b.astype(U64) & U64(31))) & M32)),
    "s_lshr_b32": (32, shift(lambda a, b: a >> (b & np.uint32(31)))),
    "s_ashr_i32": (32, shift(lambda a, b: (i32(a) >> i32(b & np.uint32(31))).view(np.uint32))),
    "s_lshl_b64": (64, shift(lambda a, b: a << (b & U64(63)))),
    "s_lshr_b64": (64, shift(lambda a, b: a >> (b & U64(63)))),
    "s_ashr_i64": (64, shift(lambda a, b: (a.view(np.int64) >> (b & U64(63)).astype(np.int64)).view(U64))),
    "s_lshl1_add_u32": (32, shl_add(1)), "s_lshl2_add_u32": (32, shl_add(2)),
    "s_lshl3_add_u32": (32, shl_add(3)), "s_lshl4_add_u32": (32, shl_add(4)),
    "s_min_i32": (32, lambda a, b, c: (np.where(i32(a) < i32(b), a, b), (i32(a) < i32(b)).astype(np.uint32))),
    "s_max_i32": (32, lambda a, b, c: (np.where(i32(a) > i32(b), a, b), (i32(a) > i32(b)).astype(np.uint32))),
    "s_min_u32": (32, lambda a, b, c: (np.minimum(a, b), (a < b).astype(np.uint32))),
    "s_max_u32": (32, lambda a, b, c: (np.maximum(a, b), (a > b).astype(np.uint32))),
    "s_bfe_u32": (32, bfe(False, 32)), "s_bfe_i32": (32, bfe(True, 32)),
    "s_bfe_u64": (64, bfe(False, 64)), "s_bfe_i64": (64, bfe(True, 64)),
    "s_bfm_b32": (32, lambda a, b, c: ((((U64(1) << (a.astype(U64) & U64(31))) - U64(1)) << (b.astype(U64) & U64(31)))
                                       & M32, None)),
    "s_bfm_b64": (64, lambda a, b, c: (((U64(1) << (a & U64(63))) - U64(1)) << (b & U64(63)), None)),
    "s_mul_i32": (32, lambda a, b, c: ((a.astype(U64) * b) & M32, None)),
    "s_mul_hi_u32": (32, lambda a, b, c: ((a.astype(U64) * b) >> U64(32), None)),
    "s_mul_hi_i32": (32, lambda a, b, c: ((s64(i32(a)) * s64(i32(b))) >> 32, None)),
    "s_cselect_b32": (32, lambda a, b, c: (np.where(c != 0, a, b), None)),
    "s_cselect_b64": (64, lambda a, b, c: (np.where(c != 0, a, b), None)),
    "s_pack_ll_b32_b16": (32, lambda a, b, c: ((a & np.uint32(0xFFFF)) | (b << np.uint32(16)), None)),
    "s_pack_lh_b32_b16": (32, lambda a, b, c: ((a & np.uint32(0xFFFF)) | (b & np.uint32(0xFFFF0000)), None)),
    "s_pack_hh_b32_b16": (32, lambda a, b, c: ((a >> np.uint32(16)) | (b & np.uint32(0xFFFF0000)), None)),
    "s_pack_hl_b32_b16": (32, lambda a, b, c: ((a >> np.uint32(16)) | (b << np.uint32(16)), None)),
  }
  ops = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "nand": lambda a, b: ~(a & b),
         "nor": lambda a, b: ~(a | b), "xnor": lambda a, b: ~(a ^ b), "and_not1": lambda a, b: a & ~b,
         "or_not1": lambda a, b: a | ~b}
  for name, fn in ops.items():
    t[f"s_{name}_b32"] = (32, logic(fn))
    t[f"s_{name}_b64"] = (64, logic(fn))
  return t


SOP2 = _sop2_table()


def exec_sop2(st: WaveBatch, ins) -> None:
  width, fn = SOP2[ins.name]
  a, b = st.sread(ins.f["ssrc0"], width), st.sread(ins.f["ssrc1"], width)
  result, scc = fn(a, b, st.scc)
  st.swrite(ins.f["sdst"], np.asarray(result).astype(np.uint64 if width == 64 else np.uint32), width)
  if scc is not None: st.set_scc(scc)


def saveexec(st: WaveBatch, ins, combine, write_new: bool = False) -> None:
  old = st.sgpr[:, EXEC].copy()
  new = combine(st.sread(ins.f["ssrc0"]), old).astype(np.uint32)
  st.swrite(EXEC, new)
  st.swrite(ins.f["sdst"], new if write_new else old)
  st.set_scc(ne0(new))


SAVEEXEC = {"and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
            "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e),
            "and_not0": lambda s, e: ~s & e, "or_not0": lambda s, e: ~s | e, "and_not1": lambda s, e: s & ~e,
            "or_not1": lambda s, e: s | ~e}


def exec_sop1(st: WaveBatch, ins) -> None:
  name, f = ins.name, ins.f
  if name.endswith("saveexec_b32") or name.endswith("wrexec_b32"):
    kind = name[2:].rsplit("_saveexec", 1)[0] if "saveexec" in name else name[2:].rsplit("_wrexec", 1)[0]
    return saveexec(st, ins, SAVEEXEC[kind], write_new="wrexec" in name)
  width = 64 if name.endswith("b64") and name not in ("s_bcnt1_i32_b64", "s_bcnt0_i32_b64") else 32
  if name in ("s_mov_b32", "s_mov_b64"): return st.swrite(f["sdst"], st.sread(f["ssrc0"], width), width)
  if name in ("s_cmov_b32", "s_cmov_b64"):
    a, old = st.sread(f["ssrc0"], width), st.sread(f["sdst"], width)
    return st.swrite(f["sdst"], np.where(st.scc != 0, a, old), width)
  if name == "s_getpc_b64":
    return st.swrite(f["sdst"], np.full(st.nwaves, ins.pc + ins.size, np.uint64), 64)
  if name in ("s_setpc_b64", "s_swappc_b64"):
    target = st.sread(f["ssrc0"], 64)
    if name == "s_swappc_b64": st.swrite(f["sdst"], np.full(st.nwaves, ins.pc + ins.size, np.uint64), 64)
    return st.branch_to(target.astype(np.int64))
  if name.startswith("s_bitset"):  # set/clear bit ssrc0[5:0] of sdst, other bits kept
    old = st.sread(f["sdst"], width)
    bit = old.dtype.type(1) << (st.sread(f["ssrc0"]).astype(old.dtype) & old.dtype.type(width - 1))
    return st.swrite(f["sdst"], old | bit if name.startswith("s_bitset1") else old & ~bit, width)
  a = st.sread(f["ssrc0"], width)
  result, scc = sop1_value(name, a, width)
  st.swrite(f["sdst"], result, 64 if name.endswith("b64") and not name.startswith("s_bcnt") else 32)
  if scc is not None: st.set_scc(scc)


def sop1_value(name: str, a: np.ndarray, width: int):
  full = ~U64(0) if width == 64 else np.uint32(0xFFFFFFFF)
  if name.startswith("s_not_"): r = ~a; return r, ne0(r)
  if name == "s_abs_i32": r = np.abs(s64(i32(a))).astype(np.uint32); return r, ne0(r)
  if name.startswith("s_bcnt1_i32"): r = popcount(a); return r, ne0(r)
  if name.startswith("s_bcnt0_i32"): r = popcount(~a & full); return r, ne0(r)
  if name == "s_sext_i32_i8": return a.astype(np.uint8).view(np.int8).astype(np.int32).view(np.uint32), None
  if name == "s_sext_i32_i16": return a.astype(np.uint16).view(np.int16).astype(np.int32).view(np.uint32), None
  if name.startswith("s_ctz_i32"):
    low = a & (~a + a.dtype.type(1))
    return np.where(a == 0, 0xFFFFFFFF, bitlen(low) - 1).astype(np.uint32), None
  if name.startswith("s_clz_i32"):
    return np.where(a == 0, 0xFFFFFFFF, width - bitlen(a)).astype(np.uint32), None
  if name in ("s_brev_b32", "s_brev_b64"):
    return np.array([int(f"{int(x):0{width}b}"[::-1], 2) for x in a], a.dtype), None
  if name == "s_cls_i32":
    u = a.astype(np.uint32)
    flipped = np.where(u >> np.uint32(31) == 1, ~u, u)
    return np.where((u == 0) | (u == 0xFFFFFFFF), 0xFFFFFFFF, 31 - bitlen(flipped)).astype(np.uint32), None
  raise NotImplementedError(f"the RDNA3 emulator does not execute the SOP1 instruction {name}")


def exec_sopc(st: WaveBatch, ins) -> None:
  name = ins.name
  width = 64 if name.endswith("64") else 32
  a, b = st.sread(ins.f["ssrc0"], width), st.sread(ins.f["ssrc1"], width)
  if name.startswith("s_bitcmp"):
    bit = (a >> (b & a.dtype.type(width - 1))) & a.dtype.type(1)
    return st.set_scc(bit == (0 if name.startswith("s_bitcmp0") else 1))
  op, kind = name.split("_")[2], name.split("_")[3]
  if kind == "i32": a, b = i32(a), i32(b)
  st.set_scc(COMPARE[op](a, b))


COMPARE = {"eq": np.equal, "lg": np.not_equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less,
           "le": np.less_equal}


def exec_sopk(st: WaveBatch, ins) -> None:
  name, f = ins.name, ins.f
  simm = f["simm16"]
  sext = simm - 0x10000 if simm & 0x8000 else simm
  if name == "s_movk_i32": return st.swrite(f["sdst"], np.full(st.nwaves, sext & 0xFFFFFFFF, np.uint32))
  if name == "s_cmovk_i32":
    return st.swrite(f["sdst"], np.where(st.scc != 0, np.uint32(sext & 0xFFFFFFFF), st.sread(f["sdst"])))
  if name.startswith("s_cmpk_"):
    op, kind = name.split("_")[2], name.split("_")[3]
    a = st.sread(f["sdst"])
    if kind == "i32": return st.set_scc(COMPARE[op](i32(a), np.int32(sext)))
    return st.set_scc(COMPARE[op](a, np.uint32(simm)))
  if name == "s_addk_i32":
    a = s64(i32(st.sread(f["sdst"])))
    s = a + sext
    st.swrite(f["sdst"], s.astype(np.uint32))
    return st.set_scc((s > 2**31 - 1) | (s < -2**31))
  if name == "s_mulk_i32": return st.swrite(f["sdst"], (s64(i32(st.sread(f["sdst"]))) * sext).astype(np.uint32))
  if name == "s_getreg_b32": return st.swrite(f["sdst"], np.zeros(st.nwaves, np.uint32))  # mode/status read as 0
  if name in ("s_setreg_b32", "s_setreg_imm32_b32", "s_version") or name.startswith("s_waitcnt"): return None
  if name == "s_call_b64":
    st.swrite(f["sdst"], np.full(st.nwaves, ins.pc + 4, np.uint64), 64)
    return st.branch_to(np.full(st.nwaves, ins.pc + 4 + sext * 4, np.int64))
  raise NotImplementedError(f"the RDNA3 emulator does not execute the SOPK instruction {name}")
