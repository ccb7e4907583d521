"""SDMA packets for the gfx11 copy engine (sdma v6, Linux sdma_v6_0_0_pkt_open.h).

The header dword is op [7:0] | sub_op [15:8] | op-specific bits; a zero dword is a one-dword NOP. Every packet here
is preceded by NOPs so its 64-bit address fields sit at 8-byte offsets of the command buffer: that is where the
core's CommandWriter patches run-time addresses.
"""
from __future__ import annotations

OP_NOP, OP_COPY, OP_FENCE, OP_TRAP, OP_POLL_REGMEM, OP_TIMESTAMP = 0, 1, 5, 6, 8, 13
SUB_COPY_LINEAR, SUB_TIMESTAMP_GET_GLOBAL = 0, 2
COPY_LINEAR_MAX_BYTES = 1 << 22     # COUNT holds bytes - 1 in 22 bits
POLL_MEMORY, POLL_GEQ = 1 << 31, 5
POLL_INTERVAL, POLL_RETRY_FOREVER = 10, 0xFFF


def copy_linear_header() -> tuple[int, int]:
  """(NOP, COPY_LINEAR header): the dword pair before the count; src/dst follow as 64-bit words."""
  return OP_NOP, OP_COPY | SUB_COPY_LINEAR << 8


def fence(address: int, value: int) -> list[int]:
  """Write the 32-bit `value` at `address` once earlier packets finished."""
  return [OP_FENCE, address & 0xFFFFFFFF, address >> 32, value & 0xFFFFFFFF]


def trap() -> list[int]:
  """Raise the engine's interrupt (wakes a host waiting on the queue's event)."""
  return [OP_TRAP, 0]


def poll_regmem(address: int, reference: int) -> list[int]:
  """Wait until the 32-bit word at `address` is >= `reference`."""
  return [OP_POLL_REGMEM | POLL_GEQ << 28 | POLL_MEMORY, address & 0xFFFFFFFF, address >> 32,
          reference & 0xFFFFFFFF, 0xFFFFFFFF, POLL_INTERVAL | POLL_RETRY_FOREVER << 16]


def timestamp(address: int) -> list[int]:
  """Write the 64-bit global timestamp counter at `address`."""
  return [OP_TIMESTAMP | SUB_TIMESTAMP_GET_GLOBAL << 8, address & 0xFFFFFFFF, address >> 32]
