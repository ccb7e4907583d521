"""MockKFD: the emulated GPU behind the driver seam. Same methods as tiny_amd.driver.KFDDriver, so nothing above it
knows whether a real /dev/kfd or this emulator runs its packets: memory is mmap'd host memory whose GPU VA is its
host address, each queue is a packet-processor thread over its ring, a doorbell hands it the new write pointer."""
from __future__ import annotations

from collections import Counter

import attrs

from tiny_amd.emulator.memory import ExternalAllocation, HostAllocation, MemoryRegistry
from tiny_amd.emulator.pm4 import ComputeQueue
from tiny_amd.emulator.queues import PacketError, Queue
from tiny_amd.emulator.sdma import SDMAQueue


@attrs.define(eq=False)
class EmulatedMemory:
  """A GPU allocation: `va` (GPU VA == host address), `nbytes`, `view` (writable memoryview if host_visible)."""
  va: int
  nbytes: int
  view: memoryview | None
  allocation: HostAllocation | ExternalAllocation = attrs.field(repr=False)
  executable: bool = False


# One address space for every emulated GPU of the process, as KFD gives a process one virtual address space across
# its GPUs: an SDMA engine of AMD:0 can copy into memory allocated on AMD:1 (peer-to-peer copies).
PROCESS_MEMORY = MemoryRegistry()


class MockKFD:
  """The emulated gfx1100 driver object."""
  gfx_target = "gfx1100"

  def __init__(self, compute_units: int = 48, memory: MemoryRegistry | None = None):
    self.memory = PROCESS_MEMORY if memory is None else memory
    self.properties = {"wave_size": 32, "lds_bytes": 65536, "compute_units": compute_units,
                       "shader_engines": 1, "name": "AMD gfx1100 (emulated)"}
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
    self._live[id(mem)] = mem
    return mem

  def map_host(self, address: int, nbytes: int) -> EmulatedMemory:
    """Host memory addressed in place by the emulated GPU at VA == its address (the real driver pins it as a userptr
    allocation): the plugin's signals, the core's staging ring, CPU and PYTHON buffers."""
    self.raise_queue_errors()
    mem = EmulatedMemory(address, nbytes, None, self.memory.register_external(address, nbytes))
    self._live[id(mem)] = mem  # by identity: the same host range may be mapped more than once
    return mem

  def unmap_host(self, mem: EmulatedMemory) -> None:
    self.free(mem)

  def free(self, mem: EmulatedMemory) -> None:
    if self._live.get(id(mem)) is not mem:
      if self.closed: return  # close() already released everything
      raise ValueError(f"free of memory at 0x{mem.va:x} that this device did not allocate (or already freed)")
    del self._live[id(mem)]
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
    """Stops the queues and frees what this device still holds."""
    if self.closed: return
    self.closed = True
    for q in list(self.queues): q.stop()
    self.queues.clear()
    for mem in list(self._live.values()): self.free(mem)

  @property
  def dispatch_stats(self) -> list:
    """Per-dispatch interpreter statistics of every compute queue (wave instructions, waves, seconds)."""
    return [s for q in self.queues if isinstance(q, ComputeQueue) for s in q.dispatch_stats]


__all__ = ["MockKFD", "EmulatedMemory", "PacketError"]
