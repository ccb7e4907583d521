"""RDNA3 memory instructions over a WaveBatch: SMEM scalar loads, GLOBAL/FLAT vector loads/stores/atomics and DS
(LDS) operations, including ds_bpermute, and SCRATCH private memory (see `scratch_addresses`). Addresses are
emulated GPU VAs (== host addresses)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from tiny_amd.emulator.wave_state import LANES, NULL, EmulationError, WaveBatch

LOAD_WIDTH = {"u8": 1, "i8": 1, "u16": 2, "i16": 2, "b32": 4, "b64": 8, "b96": 12, "b128": 16}
STORE_WIDTH = {"b8": 1, "b16": 2, "b32": 4, "b64": 8, "b96": 12, "b128": 16}


def exec_smem(st: WaveBatch, ins) -> None:
  f, name = ins.f, ins.name
  if not name.startswith("s_load_"):
    if name in ("s_dcache_inv", "s_gl1_inv"): return None
    raise EmulationError(f"unsupported scalar memory instruction {name} at 0x{ins.pc:x}")
  ndwords = int(name.split("_b")[-1]) // 32
  base = st.sread(f["sbase"], 64)
  soffset = st.sread(f["soffset"]).astype(np.uint64) if f["soffset"] != NULL else np.uint64(0)
  addr = (base + np.uint64(f["offset"] & 0xFFFFFFFFFFFFFFFF) + soffset) & ~np.uint64(3)
  waves = np.flatnonzero(st.active)
  data = st.memory.gather(addr[waves], 4 * ndwords).view(np.uint32)
  for i in range(ndwords):
    st.sgpr[waves, f["sdata"] + i] = data[:, i]


def lane_addresses(st: WaveBatch, ins) -> np.ndarray:
  """[waves, 32] uint64 addresses of a GLOBAL/FLAT instruction."""
  f = ins.f
  if ins.fmt == "GLOBAL" and f["saddr"] != NULL and f["saddr"] != 0x7F:
    base = st.sread(f["saddr"], 64)[:, None] + st.vgpr[f["addr"]].astype(np.uint64)
  else:
    base = st.vread(256 + f["addr"], 64)
  return base + np.uint64(f["offset"] & 0xFFFFFFFFFFFFFFFF)


def exec_global(st: WaveBatch, ins) -> None:
  """GLOBAL, FLAT and SCRATCH loads and stores (the lanes' bytes read and written through `read`/`write`), GLOBAL
  and FLAT atomics."""
  f, name = ins.f, ins.name
  mask = st.lane_mask()
  if not mask.any(): return None
  op = name.split("_", 1)[1]
  if ins.fmt == "SCRATCH":
    def read(nbytes: int) -> np.ndarray:
      return st.memory.gather(scratch_addresses(st, ins, mask, nbytes).reshape(-1), 1).reshape(-1, nbytes)
    def write(data: np.ndarray) -> None:
      st.memory.scatter(scratch_addresses(st, ins, mask, data.shape[1]).reshape(-1), data.reshape(-1, 1))
    addrs = None
  else:
    addrs = lane_addresses(st, ins)[mask]
    def read(nbytes: int) -> np.ndarray: return st.memory.gather(addrs, nbytes)
    def write(data: np.ndarray) -> None: st.memory.scatter(addrs, data)
  if op.startswith("load_"): return global_load(st, f, op[5:], read, mask)
  if op.startswith("store_"): return global_store(st, f, op[6:], write, mask)
  if op.startswith("atomic_") and addrs is not None: return global_atomic(st, ins, op[7:], addrs, mask)
  raise EmulationError(f"unsupported memory instruction {name} at 0x{ins.pc:x}")


def global_load(st: WaveBatch, f: dict, kind: str, read: Callable[[int], np.ndarray], mask: np.ndarray) -> None:
  d16 = kind.startswith("d16_")
  if d16: return load_d16(st, f, kind[4:], read, mask)
  nbytes = LOAD_WIDTH[kind]
  data = np.ascontiguousarray(read(nbytes))
  if nbytes >= 4:
    words = data.view(np.uint32)
    for i in range(nbytes // 4): st.vgpr[f["vdst"] + i][mask] = words[:, i]
    return None
  dtype = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16}[kind]
  values = data.view(dtype)[:, 0].astype(np.int32).view(np.uint32)
  st.vgpr[f["vdst"]][mask] = values


def load_d16(st: WaveBatch, f: dict, kind: str, read: Callable[[int], np.ndarray], mask: np.ndarray) -> None:
  """d16 loads write one 16-bit half and keep the other: d16_b16 / d16_u8 / d16_i8 (low), d16_hi_* (high)."""
  hi = kind.startswith("hi_")
  kind = kind[3:] if hi else kind
  if kind == "b16": kind = "u16"
  dtype = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16}[kind]
  data = np.ascontiguousarray(read(np.dtype(dtype).itemsize))
  half = data.view(dtype)[:, 0].astype(np.int32).view(np.uint32) & np.uint32(0xFFFF)
  old = st.vgpr[f["vdst"]][mask]
  st.vgpr[f["vdst"]][mask] = (old & np.uint32(0xFFFF)) | (half << np.uint32(16)) if hi else \
      (old & np.uint32(0xFFFF0000)) | half


def global_store(st: WaveBatch, f: dict, kind: str, write: Callable[[np.ndarray], None], mask: np.ndarray) -> None:
  if kind in ("d16_hi_b16", "d16_hi_b8"):
    words = (st.vgpr[f["data"]][mask] >> np.uint32(16))[:, None]
    nbytes = STORE_WIDTH[kind[7:]]
  else:
    nbytes = STORE_WIDTH[kind]
    words = np.stack([st.vgpr[f["data"] + i][mask] for i in range(max(1, nbytes // 4))], axis=1)
  write(np.ascontiguousarray(as_bytes(words, nbytes)))


ATOMIC_FN = {
  "add_u32": lambda old, v: old + v, "sub_u32": lambda old, v: old - v,
  "max_i32": lambda old, v: np.maximum(old.view(np.int32), v.view(np.int32)).view(np.uint32),
  "min_i32": lambda old, v: np.minimum(old.view(np.int32), v.view(np.int32)).view(np.uint32),
  "max_u32": np.maximum, "min_u32": np.minimum, "and_b32": lambda old, v: old & v, "or_b32": lambda old, v: old | v,
  "xor_b32": lambda old, v: old ^ v, "swap_b32": lambda old, v: v,
  "add_f32": lambda old, v: (old.view(np.float32) + v.view(np.float32)).view(np.uint32),
}


def global_atomic(st: WaveBatch, ins, op: str, addrs: np.ndarray, mask: np.ndarray) -> None:
  """Atomics run lane by lane in lane order (the result a serial order of the hardware could produce)."""
  f = ins.f
  returns = op.endswith("_rtn") or bool(f["glc"])
  op = op.removesuffix("_rtn")
  data = st.vgpr[f["data"]][mask]
  cmp = st.vgpr[f["data"] + 1][mask] if op == "cmpswap_b32" else None
  olds = np.empty(len(addrs), np.uint32)
  for i, addr in enumerate(addrs.tolist()):
    old = np.uint32(st.memory.read_u32(addr))
    olds[i] = old
    if op == "cmpswap_b32": new = data[i] if old == cmp[i] else old  # data = new value, data+1 = compare value
    elif op in ATOMIC_FN: new = ATOMIC_FN[op](np.array([old]), np.array([data[i]]))[0]
    else: raise EmulationError(f"unsupported atomic {ins.name} at 0x{ins.pc:x}")
    st.memory.write_u32(addr, int(new))
  if returns: st.vgpr[f["vdst"]][mask] = olds


# ---- LDS
def lds_index(st: WaveBatch, addr: np.ndarray, mask: np.ndarray, nbytes: int, ins) -> np.ndarray:
  """Flat byte index into the batch's LDS for each enabled lane's address (its workgroup's LDS)."""
  addr = addr.astype(np.int64)
  if (addr < 0).any() or (addr + nbytes > st.lds_bytes).any():
    bad = int(addr[(addr < 0) | (addr + nbytes > st.lds_bytes)][0])
    raise EmulationError(f"{ins.name} at 0x{ins.pc:x}: LDS address {bad} outside the {st.lds_bytes} bytes of LDS the "
                         f"dispatch allocated (COMPUTE_PGM_RSRC2.LDS_SIZE)")
  group = np.broadcast_to(st.group_of_wave[:, None], mask.shape)[mask]
  return group * st.lds_bytes + addr


def lds_read(st: WaveBatch, index: np.ndarray, nbytes: int) -> np.ndarray:
  return st.lds[index[:, None] + np.arange(nbytes)]


def lds_write(st: WaveBatch, index: np.ndarray, data: np.ndarray) -> None:
  st.lds[index[:, None] + np.arange(data.shape[1])] = data


def as_bytes(words: np.ndarray, nbytes: int) -> np.ndarray:
  return np.ascontiguousarray(words.astype(np.uint32)).view(np.uint8).reshape(words.shape[0], -1)[:, :nbytes]


def exec_ds(st: WaveBatch, ins) -> None:
  f, name = ins.f, ins.name
  mask = st.lane_mask()
  if name == "ds_nop" or not mask.any(): return None
  if name in ("ds_bpermute_b32", "ds_permute_b32"): return ds_permute(st, ins, mask)
  base = st.vgpr[f["addr"]][mask]
  if "2addr" in name: return ds_two_address(st, ins, base, mask)
  addr = base + np.uint32(f["offset0"] | f["offset1"] << 8)
  op = name[3:]
  if op.startswith("load_"):
    kind = op[5:]
    if kind.startswith("u8_d16") or kind.startswith("i8_d16") or kind.startswith("u16_d16"):
      raise EmulationError(f"unsupported {name} at 0x{ins.pc:x}")
    nbytes = LOAD_WIDTH[kind]
    data = lds_read(st, lds_index(st, addr, mask, nbytes, ins), nbytes)
    if nbytes >= 4:
      words = data.view(np.uint32)
      for i in range(nbytes // 4): st.vgpr[f["vdst"] + i][mask] = words[:, i]
    else:
      dtype = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16}[kind]
      st.vgpr[f["vdst"]][mask] = data.view(dtype)[:, 0].astype(np.int32).view(np.uint32)
    return None
  if op.startswith("store_"):
    kind = op[6:]
    if kind in ("b8_d16_hi", "b16_d16_hi"):
      nbytes = 1 if kind.startswith("b8") else 2
      words = (st.vgpr[f["data0"]][mask] >> np.uint32(16))[:, None]
    else:
      nbytes = STORE_WIDTH[kind]
      words = np.stack([st.vgpr[f["data0"] + i][mask] for i in range(max(1, nbytes // 4))], axis=1)
    return lds_write(st, lds_index(st, addr, mask, nbytes, ins), as_bytes(words, nbytes))
  return ds_atomic(st, ins, op, addr, mask)


def ds_two_address(st: WaveBatch, ins, base: np.ndarray, mask: np.ndarray) -> None:
  f, name = ins.f, ins.name
  size = 8 if name.endswith("b64") else 4
  stride = size * (64 if "stride64" in name else 1)
  addrs = [base + np.uint32(f["offset0"] * stride), base + np.uint32(f["offset1"] * stride)]
  words = size // 4
  if name.startswith("ds_load_2addr"):
    for k, addr in enumerate(addrs):
      data = lds_read(st, lds_index(st, addr, mask, size, ins), size).view(np.uint32)
      for i in range(words): st.vgpr[f["vdst"] + k * words + i][mask] = data[:, i]
    return None
  if name.startswith("ds_store_2addr"):
    for k, (addr, src) in enumerate(zip(addrs, (f["data0"], f["data1"]))):
      data = np.stack([st.vgpr[src + i][mask] for i in range(words)], axis=1)
      lds_write(st, lds_index(st, addr, mask, size, ins), as_bytes(data, size))
    return None
  raise EmulationError(f"unsupported {name} at 0x{ins.pc:x}")


DS_ATOMIC = {"add_u32": lambda o, v: o + v, "sub_u32": lambda o, v: o - v, "and_b32": lambda o, v: o & v,
             "or_b32": lambda o, v: o | v, "xor_b32": lambda o, v: o ^ v, "max_u32": np.maximum, "min_u32": np.minimum,
             "max_i32": lambda o, v: np.maximum(o.view(np.int32), v.view(np.int32)).view(np.uint32),
             "min_i32": lambda o, v: np.minimum(o.view(np.int32), v.view(np.int32)).view(np.uint32),
             "add_f32": lambda o, v: (o.view(np.float32) + v.view(np.float32)).view(np.uint32),
             "max_f32": lambda o, v: np.fmax(o.view(np.float32), v.view(np.float32)).view(np.uint32),
             "min_f32": lambda o, v: np.fmin(o.view(np.float32), v.view(np.float32)).view(np.uint32),
             "storexchg_b32": lambda o, v: v}


def ds_atomic(st: WaveBatch, ins, op: str, addr: np.ndarray, mask: np.ndarray) -> None:
  """LDS read-modify-write, lane by lane in order (so colliding lanes all take effect)."""
  f = ins.f
  returns = "_rtn_" in op
  key = op.replace("_rtn", "")
  if key not in DS_ATOMIC: raise EmulationError(f"unsupported {ins.name} at 0x{ins.pc:x}")
  index = lds_index(st, addr, mask, 4, ins)
  data = st.vgpr[f["data0"]][mask]
  view = st.lds.view(np.uint32)
  olds = np.empty(len(index), np.uint32)
  for i, at in enumerate((index // 4).tolist()):
    olds[i] = view[at]
    view[at] = DS_ATOMIC[key](np.array([view[at]], np.uint32), np.array([data[i]], np.uint32))[0]
  if returns: st.vgpr[f["vdst"]][mask] = olds


def ds_permute(st: WaveBatch, ins, mask: np.ndarray) -> None:
  """ds_bpermute: each lane reads lane (addr/4)%32 of data0; ds_permute: each lane writes to that lane."""
  f = ins.f
  addr = st.vgpr[f["addr"]] + np.uint32(f["offset0"] | f["offset1"] << 8)
  lane = ((addr >> np.uint32(2)) & np.uint32(31)).astype(np.int64)
  data = st.vgpr[f["data0"]]
  waves = np.arange(st.nwaves)[:, None]
  if ins.name == "ds_bpermute_b32":  # reading a lane EXEC disables still gives its register value
    return st.vwrite(f["vdst"], data[waves, lane], mask)
  result = np.zeros_like(data)
  for w, l in zip(*np.nonzero(mask)): result[w, lane[w, l]] = data[w, l]
  st.vwrite(f["vdst"], result, np.ones_like(mask) & st.active[:, None])


# ---- scratch (private per-lane memory, gfx11 architected flat scratch)
def scratch_offsets(st: WaveBatch, ins, mask: np.ndarray) -> np.ndarray:
  """Per-lane byte offsets into the lane's private segment: saddr (if not off) + vaddr (if SVE) + offset."""
  f = ins.f
  off = np.full(mask.shape, f["offset"], np.int64)
  if f["saddr"] != NULL: off = off + st.sgpr[:, f["saddr"]].astype(np.int64)[:, None]
  if f["sve"]: off = off + st.vgpr[f["addr"]].astype(np.int64)
  return off[mask]


def scratch_addresses(st: WaveBatch, ins, mask: np.ndarray, nbytes: int) -> np.ndarray:
  """[lanes, nbytes] memory addresses of each byte a scratch access touches. A wave's slot (FLAT_SCRATCH) is
  swizzled by dwords: byte o of lane l lives at slot + (o // 4) * 4 * 32 + 4 * l + o % 4, so the lanes' same
  dword is contiguous, as the hardware lays private memory out."""
  offs = scratch_offsets(st, ins, mask)
  if st.scratch_lane_bytes == 0:
    raise EmulationError(f"{ins.name} at 0x{ins.pc:x}: the dispatch has no scratch (RSRC2.SCRATCH_EN is clear)")
  if int(offs.min()) < 0 or int(offs.max()) + nbytes > st.scratch_lane_bytes:
    raise EmulationError(f"{ins.name} at 0x{ins.pc:x}: private offsets {int(offs.min())}..{int(offs.max())} + "
                         f"{nbytes} outside the {st.scratch_lane_bytes}-byte private segment of a lane")
  waves, lanes = np.nonzero(mask)
  o = offs[:, None] + np.arange(nbytes)
  swizzled = (o >> 2) * (4 * LANES) + lanes[:, None] * 4 + (o & 3)
  return st.flat_scratch[waves][:, None] + swizzled.astype(np.uint64)
