"""The mock GPU's memory: every allocation is an anonymous host mmap, so a device address is a host address."""
from __future__ import annotations
import bisect
import ctypes
import mmap
import threading
import numpy as np
from tiny_nv.mock.ptx import MemoryFault

PAGE = mmap.PAGESIZE

class DeviceMemory:
  """An allocation table: `allocate`/`free` by address, and `region` to reach the bytes a kernel touches."""
  def __init__(self):
    self._lock = threading.Lock()
    self._starts: list[int] = []
    self._regions: dict[int, tuple[mmap.mmap, np.ndarray]] = {}
    self.allocated_bytes = 0

  def allocate(self, nbytes: int) -> int:
    """A new zeroed, page-aligned allocation of at least `nbytes`; returns its address."""
    if nbytes <= 0: raise ValueError(f"cannot allocate {nbytes} bytes")
    size = -(-nbytes // PAGE) * PAGE
    mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    array = np.frombuffer(mapping, np.uint8)
    address = array.ctypes.data
    with self._lock:
      bisect.insort(self._starts, address)
      self._regions[address] = (mapping, array)
      self.allocated_bytes += size
    return address

  def register(self, address: int, nbytes: int) -> None:
    """Make existing host memory [address, address + nbytes) addressable by the device (cuMemHostRegister)."""
    array = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
    with self._lock:
      if self.contains_unlocked(address, nbytes): raise ValueError(f"{address:#x} is already registered or allocated")
      bisect.insort(self._starts, address)
      self._regions[address] = (None, array)

  def contains_unlocked(self, address: int, nbytes: int) -> bool:
    index = bisect.bisect_right(self._starts, address + nbytes - 1) - 1
    return index >= 0 and self._starts[index] + len(self._regions[self._starts[index]][1]) > address

  def free(self, address: int) -> None:
    """Release the allocation that starts at `address`."""
    with self._lock:
      if address not in self._regions: raise ValueError(f"free of {address:#x}: not an allocation's start")
      self._starts.remove(address)
      mapping, array = self._regions.pop(address)
      self.allocated_bytes -= len(array)
    del array   # the mapping closes when the last view of it is gone (a running kernel may still hold one)

  def region(self, low: int, high: int, who: str = "access") -> tuple[np.ndarray, int]:
    """(the allocation's bytes, its address) for the allocation holding all of [low, high); MemoryFault otherwise."""
    with self._lock:
      index = bisect.bisect_right(self._starts, low) - 1
      if index >= 0:
        start = self._starts[index]
        array = self._regions[start][1]
        if high <= start + len(array): return array, start
    raise MemoryFault(f"{who}: device address range [{low:#x}, {high:#x}) is outside every allocation")

  def contains(self, address: int) -> bool:
    """Whether `address` lies inside some allocation."""
    try: self.region(address, address + 1)
    except MemoryFault: return False
    return True

  def view(self, address: int, nbytes: int) -> np.ndarray:
    """The bytes at [address, address + nbytes), which must lie in one allocation."""
    array, start = self.region(address, address + nbytes)
    return array[address - start:address - start + nbytes]

  def copy(self, destination: int, source: int, nbytes: int) -> None:
    """memmove between any two addresses (device or host memory: with unified addressing both are host memory)."""
    ctypes.memmove(destination, source, nbytes)
