"""RDNA3 (gfx1100, wave32) interpreter: runs the machine code of a dispatch, straight from emulated memory.

Everything comes from what the packet processor saw in the registers: the code at COMPUTE_PGM_LO/HI << 8, the VGPR
count from COMPUTE_PGM_RSRC1, the user SGPR count and workgroup-id enables from COMPUTE_PGM_RSRC2 (the ids follow
the user SGPRs), LDS size from RSRC2.LDS_SIZE, and the user SGPR values from COMPUTE_USER_DATA_n. Work-item ids go
to v0 packed as gfx11 does (x | y << 10 | z << 20).

Scratch (private memory, gfx11 architected flat scratch): when RSRC2.SCRATCH_EN is set, each wave in flight holds
one of COMPUTE_TMPRING_SIZE.WAVES slots of WAVESIZE * 256 bytes in the buffer at COMPUTE_DISPATCH_SCRATCH_BASE << 8;
the wave's FLAT_SCRATCH is its slot's address (no SGPR carries it: scratch_* instructions add it implicitly). So a
batch never holds more waves than there are slots, as the hardware never runs more.

Workgroups run in batches; all waves of a batch execute together, vectorized with numpy. Waves whose scalar
branches diverge keep separate program counters: each step runs the instruction at the lowest pending PC for just
the waves there (RDNA3 has no reconvergence stack: control flow is scalar branches plus EXEC). Running the lowest PC
first also makes s_barrier correct for structured code: no wave passes a barrier before the waves behind reach it.
"""
from __future__ import annotations

import math
import os
import sys
import time

import attrs
import numpy as np

from tiny_amd.emulator import decoder, memory_ops, packed, salu, vector
from tiny_amd.emulator.memory import MemoryRegistry
from tiny_amd.emulator.wave_state import EXEC, LANES, VCC, EmulationError, WaveBatch

MAX_LANES_PER_BATCH = 8192   # bounds VGPR memory (regs x lanes x 4 bytes) while keeping numpy calls wide
LDS_GRANULE = 512            # gfx11 RSRC2.LDS_SIZE unit, bytes
SCRATCH_GRANULE = 256        # gfx11 COMPUTE_TMPRING_SIZE.WAVESIZE unit, bytes
MAX_CODE_BYTES = 1 << 20
TRACE = os.environ.get("TINYCORE_AMD_EMU_TRACE", "") not in ("", "0")  # print every executed instruction
SOPP_NOPS = {"s_nop", "s_clause", "s_delay_alu", "s_waitcnt", "s_waitcnt_depctr", "s_set_inst_prefetch_distance",
             "s_sleep", "s_setprio", "s_round_mode", "s_denorm_mode", "s_sendmsg", "s_ttracedata_imm",
             "s_incperflevel", "s_decperflevel", "s_wait_event"}


@attrs.define
class DispatchRegisters:
  """What a DISPATCH_DIRECT launches: the compute registers and the grid/workgroup shape."""
  code_address: int
  rsrc1: int
  rsrc2: int
  rsrc3: int = 0
  user_data: tuple = (0,) * 16
  workgroup: tuple = (1, 1, 1)   # COMPUTE_NUM_THREAD_X/Y/Z
  grid: tuple = (1, 1, 1)        # DISPATCH_DIRECT dims, in workgroups
  tmpring_size: int = 0          # COMPUTE_TMPRING_SIZE: WAVES (11:0), WAVESIZE (26:12, 256-byte units)
  scratch_base: int = 0          # COMPUTE_DISPATCH_SCRATCH_BASE_LO/HI << 8

  @property
  def scratch_enabled(self) -> bool: return bool(self.rsrc2 & 1)
  @property
  def scratch_waves(self) -> int: return self.tmpring_size & 0xFFF
  @property
  def scratch_wave_bytes(self) -> int: return ((self.tmpring_size >> 12) & 0x7FFF) * SCRATCH_GRANULE

  @property
  def vgpr_count(self) -> int: return ((self.rsrc1 & 0x3F) + 1) * 8     # wave32 granule: 8 VGPRs
  @property
  def user_sgpr_count(self) -> int: return (self.rsrc2 >> 1) & 0x1F
  @property
  def workgroup_id_enables(self) -> tuple: return tuple(bool((self.rsrc2 >> b) & 1) for b in (7, 8, 9))
  @property
  def lds_bytes(self) -> int: return ((self.rsrc2 >> 15) & 0x1FF) * LDS_GRANULE
  @property
  def tid_components(self) -> int: return (self.rsrc2 >> 11) & 3


@attrs.define
class DispatchStats:
  wave_instructions: int = 0
  waves: int = 0
  seconds: float = 0.0


def handler_for(ins):
  if ins.fmt in ("VOP1", "VOP2", "VOPC", "VOP3"): return vector.exec_vop
  if ins.fmt == "VOPD": return vector.exec_vopd
  return {"SOP1": salu.exec_sop1, "SOP2": salu.exec_sop2, "SOPC": salu.exec_sopc, "SOPK": salu.exec_sopk,
          "SOPP": exec_sopp, "SMEM": memory_ops.exec_smem, "DS": memory_ops.exec_ds, "GLOBAL": memory_ops.exec_global,
          "FLAT": memory_ops.exec_global, "SCRATCH": memory_ops.exec_global, "VOP3P": packed.exec_vop3p,
          "MUBUF": exec_cache_invalidate,
          "INVALID": exec_unsupported}[ins.fmt]


def exec_unsupported(st: WaveBatch, ins) -> None:
  reason = ins.f.get("error", "not implemented")
  raise EmulationError(f"cannot execute {ins.name} ({ins.fmt}) at 0x{ins.pc:x}: {reason}")


def exec_cache_invalidate(st: WaveBatch, ins) -> None:
  """buffer_gl0_inv / buffer_gl1_inv: the emulator has no caches, memory is always coherent."""


def exec_sopp(st: WaveBatch, ins) -> None:
  name = ins.name
  if name in SOPP_NOPS or name == "s_barrier": return None  # barrier: see the module docstring
  if name == "s_endpgm":
    st.done |= st.active
    return None
  simm = ins.f["simm16"]
  target = ins.pc + 4 + 4 * (simm - 0x10000 if simm & 0x8000 else simm)
  cond = {"s_branch": lambda: np.ones(st.nwaves, bool), "s_cbranch_scc0": lambda: st.scc == 0,
          "s_cbranch_scc1": lambda: st.scc != 0, "s_cbranch_vccz": lambda: st.sgpr[:, VCC] == 0,
          "s_cbranch_vccnz": lambda: st.sgpr[:, VCC] != 0, "s_cbranch_execz": lambda: st.sgpr[:, EXEC] == 0,
          "s_cbranch_execnz": lambda: st.sgpr[:, EXEC] != 0}.get(name)
  if cond is None: raise EmulationError(f"unsupported {name} at 0x{ins.pc:x}")
  st.branch_cond, st.branch_target = cond(), target


class Program:
  """The decoded code at one address, fetched lazily from memory and cached by (address, bytes)."""
  _cache: dict = {}

  def __init__(self, memory: MemoryRegistry, address: int):
    alloc, off = memory.find(address)
    code = alloc.bytes[off:off + min(alloc.nbytes - off, MAX_CODE_BYTES)].tobytes()
    # the cache key stops at s_code_end (the padding after the kernels), decoding may read on (a literal can look
    # like s_code_end)
    end = code.find(b"\x00\x00\x9f\xbf")
    while end != -1 and end % 4: end = code.find(b"\x00\x00\x9f\xbf", end + 1)
    key = (address, code if end == -1 else code[:end])
    cached = Program._cache.get(key)
    self.instructions = cached if cached is not None else {}
    if cached is None: Program._cache[key] = self.instructions
    self.code, self.address = code, address

  def at(self, pc: int):
    ins = self.instructions.get(pc)
    if ins is None:
      off = pc - self.address
      if not 0 <= off < len(self.code): raise EmulationError(f"execution left the code object (pc 0x{pc:x})")
      padded = self.code[off:off + 16].ljust(16, b"\0")
      try:
        ins = decoder.decode_one(padded, 0, pc)
      except decoder.DecodeError as e:
        ins = decoder.Instr(pc, 4, "INVALID", "invalid", {"error": str(e)})
      ins.handler = handler_for(ins)
      self.instructions[pc] = ins
    return ins


def run_batch(st: WaveBatch, program: Program, entry: int, step_limit: int = 50_000_000) -> None:
  """Runs every wave of the batch from entry to s_endpgm."""
  uniform, upc, steps = True, entry, 0
  with np.errstate(all="ignore"):
    while True:
      if not uniform:
        live = ~st.done
        if not live.any(): return
        pc = int(st.pc[live].min())
        st.active = live & (st.pc == pc)
        st.all_active = bool(st.active.all())
        if int(st.active.sum()) == int(live.sum()): uniform, upc = True, pc
      else:
        pc = upc
      ins = program.at(pc)
      if TRACE: print(f"[rdna3] +0x{pc - entry:04x} {ins.name} waves={int(st.active.sum())}", file=sys.stderr)
      st.literal = ins.lit or 0
      st.branch_cond = None
      ins.handler(st, ins)
      st.instructions += int(st.active.sum()) if not st.all_active else st.nwaves
      steps += 1
      if steps > step_limit: raise EmulationError(f"kernel ran over {step_limit} steps (an endless loop?)")
      nxt = pc + ins.size
      if uniform:
        if st.active[st.active].size and st.done[st.active].all(): return
        if st.branch_cond is None: upc = nxt; continue
        taken = st.branch_cond[st.active]
        if taken.all(): upc = st.branch_target; continue
        if not taken.any(): upc = nxt; continue
        uniform = False
        st.pc[st.active] = upc
      if st.branch_cond is None: st.pc[st.active] = nxt
      else: st.pc[st.active] = np.where(st.branch_cond[st.active], st.branch_target, nxt)


def setup_batch(regs: DispatchRegisters, memory: MemoryRegistry, groups: np.ndarray) -> WaveBatch:
  """Register state of the waves of the given workgroups (rows of (gx, gy, gz) ids) at kernel entry."""
  nx, ny, nz = regs.workgroup
  threads = nx * ny * nz
  waves_per_group = math.ceil(threads / LANES)
  nwaves = waves_per_group * len(groups)
  st = WaveBatch(nwaves, max(regs.vgpr_count, 8), waves_per_group, regs.lds_bytes, memory)
  nuser = regs.user_sgpr_count
  st.sgpr[:, :nuser] = np.array(regs.user_data[:nuser], np.uint32)
  sgpr = nuser
  group_rows = np.repeat(groups, waves_per_group, axis=0)
  for axis, enabled in enumerate(regs.workgroup_id_enables):
    if enabled:
      st.sgpr[:, sgpr] = group_rows[:, axis]
      sgpr += 1
  tid = np.arange(waves_per_group * LANES)
  x, y, z = tid % nx, (tid // nx) % ny, tid // (nx * ny)
  packed = (x | (y << 10 if regs.tid_components >= 1 else 0) | (z << 20 if regs.tid_components >= 2 else 0))
  st.vgpr[0] = np.tile(packed.reshape(waves_per_group, LANES), (len(groups), 1)).astype(np.uint32)
  valid = (tid < threads).reshape(waves_per_group, LANES)
  exec_bits = (valid.astype(np.uint64) << np.arange(LANES, dtype=np.uint64)).sum(1).astype(np.uint32)
  st.sgpr[:, EXEC] = np.tile(exec_bits, len(groups))
  if regs.scratch_enabled:  # wave i of the batch holds scratch slot i
    slots = np.arange(nwaves, dtype=np.uint64)
    st.flat_scratch = np.uint64(regs.scratch_base) + slots * np.uint64(regs.scratch_wave_bytes)
    st.scratch_lane_bytes = regs.scratch_wave_bytes // LANES
  return st


def scratch_waves_per_batch(regs: DispatchRegisters, memory: MemoryRegistry, waves_per_group: int) -> int:
  """How many waves may run at once given the scratch slots (checked against the registers and the memory)."""
  if not regs.scratch_enabled: return MAX_LANES_PER_BATCH // LANES
  if regs.scratch_waves < waves_per_group or regs.scratch_wave_bytes == 0:
    raise EmulationError(f"the kernel enables scratch (RSRC2.SCRATCH_EN) but COMPUTE_TMPRING_SIZE 0x"
                         f"{regs.tmpring_size:x} gives {regs.scratch_waves} slots of {regs.scratch_wave_bytes} bytes "
                         f"for workgroups of {waves_per_group} waves")
  memory.find(regs.scratch_base, regs.scratch_waves * regs.scratch_wave_bytes)  # MemoryFault if not mapped
  return regs.scratch_waves


def run_dispatch(regs: DispatchRegisters, memory: MemoryRegistry) -> DispatchStats:
  """Executes a whole dispatch; returns instruction counts and time."""
  start = time.perf_counter()
  if any(d <= 0 for d in regs.grid) or any(d <= 0 for d in regs.workgroup):
    return DispatchStats(seconds=time.perf_counter() - start)
  program = Program(memory, regs.code_address)
  gx, gy, gz = regs.grid
  ids = np.stack(np.meshgrid(np.arange(gx), np.arange(gy), np.arange(gz), indexing="ij"), -1).reshape(-1, 3)
  ids = ids[np.lexsort((ids[:, 0], ids[:, 1], ids[:, 2]))]
  threads = regs.workgroup[0] * regs.workgroup[1] * regs.workgroup[2]
  waves_per_group = math.ceil(threads / LANES)
  max_waves = min(MAX_LANES_PER_BATCH // LANES, scratch_waves_per_batch(regs, memory, waves_per_group))
  per_batch = max(1, max_waves // waves_per_group)
  stats = DispatchStats()
  for first in range(0, len(ids), per_batch):
    st = setup_batch(regs, memory, ids[first:first + per_batch])
    run_batch(st, program, regs.code_address)
    stats.wave_instructions += st.instructions
    stats.waves += st.nwaves
  stats.seconds = time.perf_counter() - start
  return stats
