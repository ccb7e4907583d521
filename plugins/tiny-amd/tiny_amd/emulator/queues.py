"""A hardware queue of the emulated GPU: a ring in emulated memory, read/write pointers (64-bit byte offsets in
host-visible memory: the writer advances wptr, the processor advances rptr), a doorbell, and one thread that decodes
the packets between rptr and the doorbell's wptr, in order, as the GPU's command processor / SDMA engine would."""
from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import Counter

from tiny_amd.emulator.memory import MemoryRegistry

POLL_TIMEOUT_S = 60.0   # a wait packet whose condition never comes true fails the queue after this long
POLL_SLEEP_S = 0.0002


class PacketError(Exception):
  """A queue met bytes it cannot execute (unknown packet, bad field, failed wait); names the queue and opcode."""


WAIT_FUNCTIONS = {0: lambda v, ref: True, 1: lambda v, ref: v < ref, 2: lambda v, ref: v <= ref,
                  3: lambda v, ref: v == ref, 4: lambda v, ref: v != ref, 5: lambda v, ref: v >= ref,
                  6: lambda v, ref: v > ref}


def clock_ticks() -> int:
  """The 64-bit GPU timestamp counter: the emulator ticks at 100 MHz (10 ns), like gfx11's SOC reference clock."""
  return time.perf_counter_ns() // 10


class Queue:
  """Base of the PM4 and SDMA processors: ring access, pointers, the thread, polling waits, error capture."""
  kind = "queue"

  def __init__(self, memory: MemoryRegistry, ring_va: int, ring_bytes: int, rptr_addr: int, wptr_addr: int,
               counts: Counter, name: str):
    if ring_bytes & (ring_bytes - 1): raise ValueError(f"{name}: ring size {ring_bytes} is not a power of two")
    self.memory, self.ring_va, self.ring_bytes = memory, ring_va, ring_bytes
    self.rptr_addr, self.wptr_addr, self.counts, self.name = rptr_addr, wptr_addr, counts, name
    self.rptr = memory.read_u64(rptr_addr)
    self.wptr = self.rptr
    self.error: BaseException | None = None
    self._cond = threading.Condition()
    self._stop = False
    self._thread = threading.Thread(target=self._run, name=f"emulated-{name}", daemon=True)
    self._thread.start()

  # ---- host side
  def doorbell(self, wptr_bytes: int) -> None:
    with self._cond:
      self.wptr = wptr_bytes
      self._cond.notify()

  def stop(self) -> None:
    with self._cond:
      self._stop = True
      self._cond.notify()
    self._thread.join(timeout=5)

  def idle(self) -> bool:
    return self.rptr >= self.wptr

  # ---- processor side
  def _run(self) -> None:
    while True:
      with self._cond:
        while not self._stop and self.rptr >= self.wptr: self._cond.wait()
        if self._stop: return
        wptr = self.wptr
      try:
        while self.rptr < wptr and not self._stop:
          self.rptr += 4 * self.execute_at_ring()
          self.memory.write_u64(self.rptr_addr, self.rptr)
      except BaseException as e:  # noqa: BLE001 - any failure stops the queue, like a hung GPU ring
        self.error = e if isinstance(e, PacketError) else PacketError(f"{self.name}: {type(e).__name__}: {e}")
        self.error.__cause__ = e
        print(f"tiny_amd emulator: {self.name} stopped: {self.error}", file=sys.stderr)
        traceback.print_exception(e, file=sys.stderr)
        return

  def ring_dword(self, index: int) -> int:
    """Dword `index` (counted from the read pointer) of the ring, wrapping at its end."""
    return self.memory.read_u32(self.ring_va + (self.rptr + 4 * index) % self.ring_bytes)

  def execute_at_ring(self) -> int:
    """Executes the packet at rptr; returns its size in dwords."""
    raise NotImplementedError

  def wait_memory(self, addr: int, reference: int, mask: int, function: int, nbytes: int, what: str) -> None:
    """Polls memory until (value & mask) <function> reference holds, or fails the queue after POLL_TIMEOUT_S."""
    check = WAIT_FUNCTIONS.get(function)
    if check is None: raise PacketError(f"{self.name}: {what} with unknown compare function {function}")
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while True:
      value = (self.memory.read_u64(addr) if nbytes == 8 else self.memory.read_u32(addr)) & mask
      if check(value, reference): return
      if self._stop: return
      if time.monotonic() > deadline:
        raise PacketError(f"{self.name}: {what} at 0x{addr:x} timed out after {POLL_TIMEOUT_S}s "
                          f"(value {value}, function {function}, reference {reference})")
      time.sleep(POLL_SLEEP_S)
