"""MockKFD: the emulated GPU behind the driver seam. Same methods as tiny_amd.driver.KFDDriver, so nothing above it
knows whether a real /dev/kfd or this emulator runs its packets: memory is mmap'd host memory whose GPU VA is its
host address, each queue is a packet-processor thread over its ring, a doorbell hands it the new write pointer."""
from __future__ import annotations

from collections import Counter

import attrs

from tiny_amd.emulator.memory import HostAllocation, MemoryRegistry
from tiny_amd.emulator.pm4 import ComputeQueue
from tiny_amd.emulator.queues import PacketError, Queue
from tiny_amd.emulator.sdma import SDMAQueue


@attrs.define(eq=False)
class EmulatedMemory:
  """A GPU allocation: `va` (GPU VA == host address), `nbytes`, `view` (writable memoryview if host_visible)."""
  va: int
  nbytes: int
  view: memoryview | None
  allocation: HostAllocation = attrs.field(repr=False)
  executable: bool = False


class MockKFD:
  """The emulated gfx1100 driver object."""
  gfx_target = "gfx1100"

  def __init__(self, compute_units: int = 48):
    self.memory = MemoryRegistry()
    self.properties = {"wave_size": 32, "lds_bytes": 65536, "compute_units": compute_units,
                       "name": "AMD gfx1100 (emulated)"}
    self.packet_counts: Counter = Counter()
    self.queues: list[Queue] = []
    self._live: dict[int, EmulatedMemory] = {}
    self.closed = False

  def raise_queue_errors(self) -> None:
    """Re-raises (in the caller's thread) the first failure of any queue's packet processor."""
    for q in self.queues:
      if q.error is not None: raise q.error

  def alloc(self, nbytes: int, *, host_visible: bool = True, executable: bool = False) -> EmulatedMemory:
    self.raise_queue_errors()
    alloc = self.memory.allocate(nbytes)
    mem = EmulatedMemory(alloc.va, nbytes, memoryview(alloc.bytes) if host_visible else None, alloc, executable)
    self._live[mem.va] = mem
    return mem

  def map_host(self, address: int, nbytes: int) -> EmulatedMemory:
    """Host memory addressed in place by the emulated GPU at VA == its address (the real driver pins it as a userptr
    allocation): the plugin's signals, the core's staging ring, CPU and PYTHON buffers."""
    from tiny_amd.emulator.memory import ExternalAllocation
    alloc = ExternalAllocation(address, nbytes)
    self.memory.register(alloc)
    mem = EmulatedMemory(address, nbytes, None, alloc)
    self._live[mem.va] = mem
    return mem

  def unmap_host(self, mem: EmulatedMemory) -> None:
    self.free(mem)

  def free(self, mem: EmulatedMemory) -> None:
    if self._live.pop(mem.va, None) is not mem: raise ValueError(f"free of unknown memory at 0x{mem.va:x}")
    mem.view = None
    self.memory.release(mem.allocation)

  def create_queue(self, kind: str, ring: EmulatedMemory, rptr_addr: int, wptr_addr: int) -> Queue:
    self.raise_queue_errors()
    cls = {"compute": ComputeQueue, "sdma": SDMAQueue}.get(kind)
    if cls is None: raise ValueError(f"unknown queue kind {kind!r}: expected 'compute' or 'sdma'")
    name = f"{kind} queue {sum(q.kind == kind for q in self.queues)}"
    queue = cls(self.memory, ring.va, ring.nbytes, rptr_addr, wptr_addr, self.packet_counts, name)
    self.queues.append(queue)
    return queue

  def ring_doorbell(self, queue: Queue, wptr_bytes: int) -> None:
    self.raise_queue_errors()
    queue.doorbell(wptr_bytes)

  def destroy_queue(self, queue: Queue) -> None:
    queue.stop()
    self.queues.remove(queue)
    if queue.error is not None: raise queue.error

  def close(self) -> None:
    if self.closed: return
    self.closed = True
    for q in list(self.queues): q.stop()
    self.queues.clear()

  @property
  def dispatch_stats(self) -> list:
    """Per-dispatch interpreter statistics of every compute queue (wave instructions, waves, seconds)."""
    return [s for q in self.queues if isinstance(q, ComputeQueue) for s in q.dispatch_stats]


__all__ = ["MockKFD", "EmulatedMemory", "PacketError"]
