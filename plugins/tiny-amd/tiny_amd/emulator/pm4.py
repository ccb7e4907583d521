"""The emulated compute queue's command processor: decodes PM4 type-3 packets from the ring (and from indirect
buffers) exactly as the plugin wrote them. Header: PACKET3(op, n) = 3 << 30 | n << 16 | op << 8 (| shader-type bit
1), followed by n + 1 body dwords (Linux soc15d.h / nvd.h). SET_SH_REG fills a register file (offsets relative to the
SH base 0x2C00, gfx11 values from gc_11_0_0_offset.h); DISPATCH_DIRECT launches the RDNA3 interpreter on those
registers."""
from __future__ import annotations

from tiny_amd.emulator.queues import PacketError, Queue, clock_ticks
from tiny_amd.emulator.rdna3 import DispatchRegisters, DispatchStats, run_dispatch

NOP, DISPATCH_DIRECT, WAIT_REG_MEM, INDIRECT_BUFFER, EVENT_WRITE = 0x10, 0x15, 0x3C, 0x3F, 0x46
RELEASE_MEM, ACQUIRE_MEM, SET_SH_REG, WAIT_REG_MEM64 = 0x49, 0x58, 0x76, 0x93
PACKET_NAMES = {NOP: "NOP", DISPATCH_DIRECT: "DISPATCH_DIRECT", WAIT_REG_MEM: "WAIT_REG_MEM",
                INDIRECT_BUFFER: "INDIRECT_BUFFER", EVENT_WRITE: "EVENT_WRITE", RELEASE_MEM: "RELEASE_MEM",
                ACQUIRE_MEM: "ACQUIRE_MEM", SET_SH_REG: "SET_SH_REG", WAIT_REG_MEM64: "WAIT_REG_MEM64"}

# gfx11 compute registers as SET_SH_REG offsets (absolute dword offset - 0x2C00)
COMPUTE_DIM_X = 0x201
COMPUTE_START_X, COMPUTE_NUM_THREAD_X = 0x204, 0x207
COMPUTE_PGM_LO, COMPUTE_PGM_HI, COMPUTE_DISPATCH_SCRATCH_BASE_LO = 0x20C, 0x20D, 0x210
COMPUTE_PGM_RSRC1, COMPUTE_PGM_RSRC2, COMPUTE_RESOURCE_LIMITS = 0x212, 0x213, 0x215
COMPUTE_TMPRING_SIZE, COMPUTE_PGM_RSRC3, COMPUTE_USER_DATA_0 = 0x218, 0x228, 0x240
MAX_IB_DEPTH = 4


class ComputeQueue(Queue):
  """PM4 packet processor of one compute queue."""
  kind = "compute"

  def __init__(self, *args, **kwargs):
    self.sh_registers: dict[int, int] = {}
    self.dispatch_stats: list[DispatchStats] = []
    super().__init__(*args, **kwargs)

  def execute_at_ring(self) -> int:
    header = self.ring_dword(0)
    op, size = self.header_fields(header)
    body = [self.ring_dword(1 + i) for i in range(size - 1)]
    self.execute(op, body, depth=0)
    return size

  def header_fields(self, header: int) -> tuple[int, int]:
    """(opcode, packet size in dwords) of a type-3 header; a type-2 header is a one-dword filler (op None)."""
    kind = header >> 30
    if kind == 2: return NOP, 1
    if kind != 3: raise PacketError(f"{self.name}: PM4 type-{kind} header 0x{header:08x} is not supported")
    count = (header >> 16) & 0x3FFF
    return (header >> 8) & 0xFF, 1 if count == 0x3FFF else count + 2

  def execute(self, op: int, body: list[int], depth: int) -> None:
    name = PACKET_NAMES.get(op)
    if name is None: raise PacketError(f"{self.name}: unknown PM4 opcode 0x{op:02x} (body {len(body)} dwords)")
    self.counts[f"pm4.{name}"] += 1
    if op == SET_SH_REG:
      for i, value in enumerate(body[1:]): self.sh_registers[body[0] + i] = value
    elif op == DISPATCH_DIRECT: self.dispatch(body)
    elif op == RELEASE_MEM: self.release_mem(body)
    elif op == WAIT_REG_MEM:
      if (body[0] >> 4) & 3 != 1: raise PacketError(f"{self.name}: WAIT_REG_MEM on a register is not emulated")
      self.wait_memory(body[1] | body[2] << 32, body[3], body[4], body[0] & 7, 4, "WAIT_REG_MEM")
    elif op == WAIT_REG_MEM64:
      if (body[0] >> 4) & 3 != 1: raise PacketError(f"{self.name}: WAIT_REG_MEM64 on a register is not emulated")
      self.wait_memory(body[1] | body[2] << 32, body[3] | body[4] << 32, body[5] | body[6] << 32, body[0] & 7, 8,
                       "WAIT_REG_MEM64")
    elif op == INDIRECT_BUFFER: self.indirect_buffer(body, depth)
    # NOP, ACQUIRE_MEM and EVENT_WRITE (cache maintenance): the emulator's memory is always coherent

  def release_mem(self, body: list[int]) -> None:
    """RELEASE_MEM (gfx10+ layout): event_cntl, data_cntl (data_sel 31:29), addr lo/hi, data lo/hi, ctxid. Runs at
    end of pipe: every earlier dispatch has finished because this processor runs them synchronously."""
    if len(body) < 6: raise PacketError(f"{self.name}: RELEASE_MEM body has {len(body)} dwords, expected 7")
    data_sel, addr = body[1] >> 29, body[2] | body[3] << 32
    if data_sel == 1: self.memory.write_u32(addr, body[4])
    elif data_sel == 2: self.memory.write_u64(addr, body[4] | body[5] << 32)
    elif data_sel == 3: self.memory.write_u64(addr, clock_ticks())
    elif data_sel != 0: raise PacketError(f"{self.name}: RELEASE_MEM data_sel {data_sel} is not emulated")

  def indirect_buffer(self, body: list[int], depth: int) -> None:
    if depth >= MAX_IB_DEPTH: raise PacketError(f"{self.name}: INDIRECT_BUFFER nested deeper than {MAX_IB_DEPTH}")
    base, ndwords = (body[0] & ~3) | body[1] << 32, body[2] & 0xFFFFF
    words = memoryview(self.memory.read(base, 4 * ndwords)).cast("I")
    at = 0
    while at < ndwords:
      op, size = self.header_fields(words[at])
      if at + size > ndwords: raise PacketError(f"{self.name}: packet 0x{op:02x} runs past the end of its IB")
      self.execute(op, list(words[at + 1:at + size]), depth + 1)
      at += size

  def register(self, offset: int) -> int:
    return self.sh_registers.get(offset, 0)

  def dispatch(self, body: list[int]) -> None:
    """DISPATCH_DIRECT: grid in workgroups (dims x/y/z) then DISPATCH_INITIATOR; everything else from registers."""
    reg = self.register
    if any(reg(COMPUTE_START_X + i) for i in range(3)):
      raise PacketError(f"{self.name}: COMPUTE_START_X/Y/Z other than 0 is not emulated")
    regs = DispatchRegisters(
      code_address=(reg(COMPUTE_PGM_LO) | reg(COMPUTE_PGM_HI) << 32) << 8, rsrc1=reg(COMPUTE_PGM_RSRC1),
      rsrc2=reg(COMPUTE_PGM_RSRC2), rsrc3=reg(COMPUTE_PGM_RSRC3),
      user_data=tuple(reg(COMPUTE_USER_DATA_0 + i) for i in range(16)),
      workgroup=tuple(max(reg(COMPUTE_NUM_THREAD_X + i), 0) for i in range(3)), grid=tuple(body[:3]),
      tmpring_size=reg(COMPUTE_TMPRING_SIZE),
      scratch_base=(reg(COMPUTE_DISPATCH_SCRATCH_BASE_LO) | reg(COMPUTE_DISPATCH_SCRATCH_BASE_LO + 1) << 32) << 8)
    self.dispatch_stats.append(run_dispatch(regs, self.memory))
