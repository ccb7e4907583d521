"""PM4 type-3 packets for the gfx11 compute queue, as the Linux kernel's headers define them.

A packet is a header `PACKET3(op, n) = 3 << 30 | n << 16 | op << 8` (soc15d.h; n = body dwords - 1) and its body.
Register offsets for SET_SH_REG are relative to the SH register base 0x2C00 (gc_11_0_0_offset.h). A type-2 header
(0x80000000) is a one-dword filler, used to pad records to 16 bytes.
"""
from __future__ import annotations

NOP, DISPATCH_DIRECT, WAIT_REG_MEM, INDIRECT_BUFFER, EVENT_WRITE = 0x10, 0x15, 0x3C, 0x3F, 0x46
RELEASE_MEM, ACQUIRE_MEM, SET_SH_REG, WAIT_REG_MEM64 = 0x49, 0x58, 0x76, 0x93
FILLER = 0x80000000  # a type-2 packet: one dword that does nothing

# gfx11 compute registers, SET_SH_REG offsets (absolute dword offset - 0x2C00)
COMPUTE_START_X, COMPUTE_NUM_THREAD_X = 0x204, 0x207
COMPUTE_PGM_LO, COMPUTE_PGM_RSRC1, COMPUTE_PGM_RSRC2 = 0x20C, 0x212, 0x213
COMPUTE_DISPATCH_SCRATCH_BASE_LO = 0x210  # then _HI: the scratch buffer's address >> 8
COMPUTE_RESOURCE_LIMITS, COMPUTE_TMPRING_SIZE, COMPUTE_PGM_RSRC3, COMPUTE_USER_DATA_0 = 0x215, 0x218, 0x228, 0x240

# DISPATCH_INITIATOR: COMPUTE_SHADER_EN, FORCE_START_AT_000, CS_W32_EN (wave32)
DISPATCH_COMPUTE_SHADER_EN, DISPATCH_FORCE_START_AT_000, DISPATCH_CS_W32_EN = 1 << 0, 1 << 2, 1 << 15
# RELEASE_MEM: event CACHE_FLUSH_AND_INV_TS_EVENT (index 5), cache actions (GCR_CNTL, nvd.h), data_sel
CACHE_FLUSH_AND_INV_TS_EVENT, CS_PARTIAL_FLUSH = 0x14, 0x7
RELEASE_GCR = (1 << 12) | (1 << 13) | (1 << 14) | (1 << 15) | (1 << 20) | (1 << 21)  # GLM_WB/INV GLV GL1 GL2_INV/WB
DATA_SEL_VALUE_64, DATA_SEL_CLOCK_64 = 2, 3
# ACQUIRE_MEM GCR_CNTL: GLI_INV, GLM_WB/INV, GLK_WB/INV, GLV_INV, GL1_INV, GL2_INV/WB
ACQUIRE_GCR = 1 | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 14) | (1 << 15)
WAIT_MEMORY_SPACE, WAIT_GEQ = 1 << 4, 5
INDIRECT_BUFFER_VALID = 1 << 23
MAX_IB_DWORDS = (1 << 20) - 1


# COMPUTE_TMPRING_SIZE: WAVES in bits 11:0, WAVESIZE from bit 12 in units of SCRATCH_GRANULE bytes (gfx11: 15 bits
# of 256 bytes; gfx9: 13 bits of 1 KiB)
SCRATCH_GRANULE = {"gfx1100": 256, "gfx942": 1024}
WAVESIZE_BITS = {"gfx1100": 15, "gfx942": 13}
MAX_SCRATCH_WAVES = 0xFFF


def tmpring_size(arch: str, waves: int, wave_bytes: int) -> int:
  """The COMPUTE_TMPRING_SIZE value for `waves` scratch slots of `wave_bytes` each (a multiple of the granule)."""
  granule = SCRATCH_GRANULE[arch]
  units = wave_bytes // granule
  if wave_bytes % granule or not 0 < units < 1 << WAVESIZE_BITS[arch] or not 0 < waves <= MAX_SCRATCH_WAVES:
    raise ValueError(f"{arch}: no COMPUTE_TMPRING_SIZE for {waves} waves of {wave_bytes} scratch bytes")
  return waves | units << 12


def packet3(op: int, body: list[int]) -> list[int]:
  """One type-3 packet: header then body."""
  return [(3 << 30) | ((len(body) - 1) & 0x3FFF) << 16 | op << 8, *body]


def set_sh_reg(offset: int, values: list[int]) -> list[int]:
  """Write consecutive SH registers starting at `offset` (relative to the SH base)."""
  return packet3(SET_SH_REG, [offset, *values])


def dispatch_direct(groups: tuple[int, int, int], wave32: bool) -> list[int]:
  """Launch a grid of `groups` work-groups with the registers set before."""
  initiator = DISPATCH_COMPUTE_SHADER_EN | DISPATCH_FORCE_START_AT_000 | (DISPATCH_CS_W32_EN if wave32 else 0)
  return packet3(DISPATCH_DIRECT, [*groups, initiator])


def release_mem(address: int, value: int, data_sel: int = DATA_SEL_VALUE_64) -> list[int]:
  """At end of pipe (every earlier dispatch done), flush caches and write a 64-bit value (or the clock) to memory."""
  return packet3(RELEASE_MEM, [CACHE_FLUSH_AND_INV_TS_EVENT | 5 << 8 | RELEASE_GCR, data_sel << 29,
                               address & 0xFFFFFFFF, address >> 32, value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF, 0])


def wait_reg_mem64(address: int, reference: int) -> list[int]:
  """Wait until the 64-bit word at `address` is >= `reference` (WAIT_REG_MEM64, memory space, function GEQ)."""
  mask = 0xFFFFFFFFFFFFFFFF
  return packet3(WAIT_REG_MEM64, [WAIT_GEQ | WAIT_MEMORY_SPACE, address & 0xFFFFFFFF, address >> 32,
                                  reference & 0xFFFFFFFF, reference >> 32, mask & 0xFFFFFFFF, mask >> 32, 4])


def barrier() -> list[int]:
  """Wait for earlier dispatches (CS_PARTIAL_FLUSH), then invalidate and write back the caches (ACQUIRE_MEM)."""
  return (packet3(EVENT_WRITE, [CS_PARTIAL_FLUSH | 4 << 8]) +
          packet3(ACQUIRE_MEM, [0, 0xFFFFFFFF, 0xFFFFFF, 0, 0, 0x0A, ACQUIRE_GCR]))


def indirect_buffer(address: int, ndwords: int) -> list[int]:
  """Run `ndwords` dwords of packets at `address` (a command buffer in memory)."""
  if ndwords > MAX_IB_DWORDS: raise ValueError(f"an indirect buffer holds at most {MAX_IB_DWORDS} dwords")
  return packet3(INDIRECT_BUFFER, [address & 0xFFFFFFFC, address >> 32, ndwords | INDIRECT_BUFFER_VALID])


def packet_size(header: int) -> int:
  """The size in dwords of the packet whose header this is (type-2 fillers are one dword)."""
  if header >> 30 == 2: return 1
  if header >> 30 != 3: raise ValueError(f"not a PM4 type-2/3 header: 0x{header:08x}")
  return ((header >> 16) & 0x3FFF) + 2
