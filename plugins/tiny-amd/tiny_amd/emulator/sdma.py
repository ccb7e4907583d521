"""The emulated SDMA (copy) engine, sdma v6 / gfx11 packet formats (Linux sdma_v6_0_0_pkt_open.h): header dword =
op [7:0] | sub_op [15:8] | op-specific bits. A zero dword is a one-dword NOP, which is what the zero-filled tail
before a ring wrap decodes to."""
from __future__ import annotations

from tiny_amd.emulator.queues import PacketError, Queue, clock_ticks

OP_NOP, OP_COPY, OP_FENCE, OP_TRAP, OP_POLL_REGMEM, OP_TIMESTAMP, OP_GCR = 0, 1, 5, 6, 8, 13, 17
SUB_COPY_LINEAR, SUB_TIMESTAMP_GET_GLOBAL = 0, 2
COPY_LINEAR_MAX_BYTES = 1 << 22   # COUNT is 22 bits of (bytes - 1)
PACKET_DWORDS = {OP_COPY: 7, OP_FENCE: 4, OP_TRAP: 2, OP_POLL_REGMEM: 6, OP_TIMESTAMP: 3, OP_GCR: 5}
NAMES = {OP_NOP: "NOP", OP_COPY: "COPY", OP_FENCE: "FENCE", OP_TRAP: "TRAP", OP_POLL_REGMEM: "POLL_REGMEM",
         OP_TIMESTAMP: "TIMESTAMP", OP_GCR: "GCR_REQ"}


class SDMAQueue(Queue):
  """SDMA packet processor of one copy queue."""
  kind = "sdma"

  def execute_at_ring(self) -> int:
    header = self.ring_dword(0)
    op, sub_op = header & 0xFF, (header >> 8) & 0xFF
    if op not in NAMES: raise PacketError(f"{self.name}: unknown SDMA opcode {op} (header 0x{header:08x})")
    self.counts[f"sdma.{NAMES[op]}"] += 1
    if op == OP_NOP: return 1 + ((header >> 16) & 0x3FFF)
    size = PACKET_DWORDS[op]
    body = [self.ring_dword(1 + i) for i in range(size - 1)]
    if op == OP_COPY: self.copy(sub_op, body)
    elif op == OP_FENCE: self.memory.write_u32(body[0] | body[1] << 32, body[2])
    elif op == OP_POLL_REGMEM: self.poll(header, body)
    elif op == OP_TIMESTAMP:
      if sub_op != SUB_TIMESTAMP_GET_GLOBAL: raise PacketError(f"{self.name}: TIMESTAMP sub-op {sub_op} not emulated")
      self.memory.write_u64(body[0] | body[1] << 32, clock_ticks())
    # TRAP raises an interrupt for the driver's event: nothing waits on it in the emulator; GCR: caches are coherent
    return size

  def copy(self, sub_op: int, body: list[int]) -> None:
    if sub_op != SUB_COPY_LINEAR: raise PacketError(f"{self.name}: COPY sub-op {sub_op} is not emulated")
    nbytes = (body[0] & (COPY_LINEAR_MAX_BYTES - 1)) + 1
    src, dst = body[2] | body[3] << 32, body[4] | body[5] << 32
    self.memory.write(dst, self.memory.read(src, nbytes))

  def poll(self, header: int, body: list[int]) -> None:
    if not header >> 31: raise PacketError(f"{self.name}: POLL_REGMEM on a register is not emulated")
    self.wait_memory(body[0] | body[1] << 32, body[2], body[3], (header >> 28) & 7, 4, "POLL_REGMEM")
