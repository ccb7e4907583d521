"""The register state of a batch of wave32 wavefronts, stored so numpy runs every wave at once: SGPRs [waves, 128]
(indexed by the operand encoding: s0-s105, vcc 106/107, m0 125, exec 126/127), VGPRs [regs, waves, 32 lanes], SCC
per wave, a program counter per wave, the LDS of each workgroup in the batch and each wave's scratch address."""
from __future__ import annotations

import numpy as np

from tiny_amd.emulator.memory import MemoryRegistry

LANES = 32
LANE_IDS = np.arange(LANES, dtype=np.uint32)
VCC, NULL, M0, EXEC = 106, 124, 125, 126
VCCZ, EXECZ, SCC_SRC, LITERAL = 251, 252, 253, 255
F32_INLINE = {240: 0x3F000000, 241: 0xBF000000, 242: 0x3F800000, 243: 0xBF800000, 244: 0x40000000,
              245: 0xC0000000, 246: 0x40800000, 247: 0xC0800000, 248: 0x3E22F983}
F16_INLINE = {240: 0x3800, 241: 0xB800, 242: 0x3C00, 243: 0xBC00, 244: 0x4000, 245: 0xC000, 246: 0x4400,
              247: 0xC400, 248: 0x3118}
F64_INLINE = {240: 0x3FE0000000000000, 241: 0xBFE0000000000000, 242: 0x3FF0000000000000, 243: 0xBFF0000000000000,
              244: 0x4000000000000000, 245: 0xC000000000000000, 246: 0x4010000000000000, 247: 0xC010000000000000,
              248: 0x3FC45F306DC9C882}


class EmulationError(Exception):
  """The kernel did something the emulator cannot execute (named instruction, address, reason)."""


def inline_constant(code: int, width: int, is_float: bool) -> int | None:
  """The value of an inline-constant operand code as raw bits of the operand width, or None if not a constant."""
  mask = (1 << width) - 1
  if 128 <= code <= 192: return code - 128
  if 193 <= code <= 208: return (-(code - 192)) & mask
  if 240 <= code <= 248:
    if width == 64: return F64_INLINE[code]
    if width == 16: return F16_INLINE[code] if is_float else F32_INLINE[code] & 0xFFFF
    return F32_INLINE[code]
  return None


class WaveBatch:
  """State of `nwaves` waves (`waves_per_group` consecutive waves form one workgroup)."""

  def __init__(self, nwaves: int, nvgprs: int, waves_per_group: int, lds_bytes: int, memory: MemoryRegistry):
    self.nwaves, self.memory = nwaves, memory
    self.sgpr = np.zeros((nwaves, 128), np.uint32)
    self.vgpr = np.zeros((nvgprs, nwaves, LANES), np.uint32)
    self.scc = np.zeros(nwaves, np.uint32)
    self.done = np.zeros(nwaves, bool)
    self.pc = np.zeros(nwaves, np.int64)
    self.active = np.ones(nwaves, bool)
    self.all_active = True
    self.group_of_wave = np.arange(nwaves) // waves_per_group
    self.lds_bytes = lds_bytes
    self.lds = np.zeros(((nwaves + waves_per_group - 1) // waves_per_group) * max(lds_bytes, 4), np.uint8)
    self.branch_cond: np.ndarray | None = None
    self.branch_target = 0
    self.literal = 0
    self.instructions = 0  # wave-instructions executed
    self.flat_scratch = np.zeros(nwaves, np.uint64)  # each wave's scratch slot address (architected FLAT_SCRATCH)
    self.scratch_lane_bytes = 0                      # private bytes per lane (0: the dispatch has no scratch)

  # ---- scalar side: arrays of shape [waves]
  def sread(self, code: int, width: int = 32, is_float: bool = False) -> np.ndarray:
    if code < 128:
      if code == NULL: return np.zeros(self.nwaves, np.uint64 if width == 64 else np.uint32)
      if width == 64:
        return self.sgpr[:, code].astype(np.uint64) | (self.sgpr[:, code + 1].astype(np.uint64) << np.uint64(32))
      return self.sgpr[:, code]
    const = inline_constant(code, width, is_float)
    if const is None:
      if code == LITERAL:
        const = (self.literal << 32) if (width == 64 and is_float) else self.literal
      elif code == SCC_SRC: return self.scc.astype(np.uint64 if width == 64 else np.uint32)
      elif code == VCCZ: return (self.sgpr[:, VCC] == 0).astype(np.uint32)
      elif code == EXECZ: return (self.sgpr[:, EXEC] == 0).astype(np.uint32)
      else: raise EmulationError(f"unsupported scalar operand code {code}")
    return np.full(self.nwaves, const, np.uint64 if width == 64 else np.uint32)

  def swrite(self, code: int, value: np.ndarray, width: int = 32) -> None:
    if code == NULL or code >= 128: return
    value = np.asarray(value)
    parts = [value.astype(np.uint32)] if width == 32 else [(value & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                                                          (value >> np.uint64(32)).astype(np.uint32)]
    for i, part in enumerate(parts):
      if self.all_active: self.sgpr[:, code + i] = part
      else: self.sgpr[:, code + i] = np.where(self.active, part, self.sgpr[:, code + i])

  def set_scc(self, value: np.ndarray) -> None:
    value = np.asarray(value).astype(np.uint32)
    self.scc = value if self.all_active else np.where(self.active, value, self.scc)

  def branch_to(self, targets: np.ndarray) -> None:
    """s_setpc/s_swappc/s_call: an absolute target per wave (uniform in practice; divergent targets are refused)."""
    live = targets[self.active]
    if len(set(live.tolist())) != 1: raise EmulationError("divergent indirect branch targets are not supported")
    self.branch_cond, self.branch_target = np.ones(self.nwaves, bool), int(live[0])

  # ---- vector side: arrays broadcastable to [waves, 32]
  def lane_mask(self) -> np.ndarray:
    """Lanes that execute: the EXEC bit of each lane, in active waves only."""
    m = ((self.sgpr[:, EXEC, None] >> LANE_IDS) & np.uint32(1)).astype(bool)
    return m if self.all_active else m & self.active[:, None]

  def mask_bits(self, lanes: np.ndarray) -> np.ndarray:
    """Per-lane bools [waves, 32] -> one uint32 bit mask per wave."""
    return (lanes.astype(np.uint32) << LANE_IDS).sum(axis=1, dtype=np.uint64).astype(np.uint32)

  def lanes_of(self, bits: np.ndarray) -> np.ndarray:
    return ((bits[:, None] >> LANE_IDS) & np.uint32(1)).astype(bool)

  def vread(self, code: int, width: int = 32, is_float: bool = False) -> np.ndarray:
    if code >= 256:
      r = code - 256
      if width == 64:
        return self.vgpr[r].astype(np.uint64) | (self.vgpr[r + 1].astype(np.uint64) << np.uint64(32))
      return self.vgpr[r]
    return self.sread(code, width, is_float)[:, None]

  def vwrite(self, reg: int, value: np.ndarray, mask: np.ndarray, width: int = 32) -> None:
    value = np.asarray(value)
    if width == 64:
      self.vwrite(reg, (value & np.uint64(0xFFFFFFFF)).astype(np.uint32), mask)
      self.vwrite(reg + 1, (value >> np.uint64(32)).astype(np.uint32), mask)
      return
    if reg >= self.vgpr.shape[0]: raise EmulationError(f"write of v{reg} beyond the {self.vgpr.shape[0]} allocated")
    np.copyto(self.vgpr[reg], value.astype(np.uint32), where=mask)
