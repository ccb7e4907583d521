"""Emulated GPU memory: every allocation is anonymous mmap'd host memory and its GPU virtual address IS its host
address (as the contract says), so packets and kernels name memory by plain addresses. The registry maps an address
(or a vector of per-lane addresses) back to the allocation's bytes and rejects anything outside every allocation
with a MemoryFault naming the address, instead of letting a bad pointer crash the process."""
from __future__ import annotations

import bisect
import ctypes
import mmap
import threading

import numpy as np


class MemoryFault(Exception):
  """An emulated access touched an address that no live allocation covers."""


class HostAllocation:
  """One mmap'd block: `.va` (== host address), `.nbytes`, `.bytes` (a numpy uint8 view of all of it)."""

  def __init__(self, nbytes: int):
    self.nbytes = nbytes
    self._map = mmap.mmap(-1, max(nbytes, 1), prot=mmap.PROT_READ | mmap.PROT_WRITE)
    self.bytes = np.frombuffer(self._map, dtype=np.uint8, count=nbytes)
    self.va = ctypes.addressof(ctypes.c_char.from_buffer(self._map))

  def release(self) -> None:
    self.bytes = None  # drop the exported buffer before closing the map
    try:
      self._map.close()
    except BufferError:  # a view handed out is still alive: leave the mapping to the garbage collector
      pass


class ExternalAllocation:
  """Host memory the emulated GPU addresses in place (`MockKFD.map_host`): the same bytes, not a copy."""
  def __init__(self, va: int, nbytes: int):
    self.va, self.nbytes = va, nbytes
    self.bytes = np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(va))[:nbytes]

  def release(self) -> None:
    self.bytes = None


class MemoryRegistry:
  """All live allocations, sorted by address; resolves addresses for the packet processors and the interpreter."""

  def __init__(self):
    self._lock = threading.Lock()
    self._starts: list[int] = []
    self._allocs: list[HostAllocation] = []

  def allocate(self, nbytes: int) -> HostAllocation:
    if nbytes <= 0: raise ValueError(f"allocation size must be positive, got {nbytes}")
    alloc = HostAllocation(nbytes)
    with self._lock:
      at = bisect.bisect(self._starts, alloc.va)
      self._starts.insert(at, alloc.va)
      self._allocs.insert(at, alloc)
    return alloc

  def register(self, alloc: ExternalAllocation) -> None:
    """Make existing host memory addressable (the driver's map_host)."""
    with self._lock:
      at = bisect.bisect(self._starts, alloc.va)
      self._starts.insert(at, alloc.va)
      self._allocs.insert(at, alloc)

  def register_external(self, addr: int, nbytes: int) -> ExternalAllocation:
    """Makes nbytes of live host memory at addr addressable until release (overlapping ranges are fine)."""
    alloc = ExternalAllocation(addr, nbytes)
    self.register(alloc)
    return alloc

  def release(self, alloc: HostAllocation) -> None:
    with self._lock:
      at = next((i for i in range(bisect.bisect_left(self._starts, alloc.va), len(self._starts))
                 if self._allocs[i] is alloc or self._starts[i] != alloc.va), len(self._starts))
      if at == len(self._starts) or self._allocs[at] is not alloc:
        raise ValueError(f"free of memory at 0x{alloc.va:x} that this device did not allocate (or already freed)")
      del self._starts[at], self._allocs[at]
    alloc.release()

  def find(self, addr: int, nbytes: int = 1) -> tuple[HostAllocation, int]:
    """The allocation holding [addr, addr+nbytes) and the offset of addr in it."""
    nearest = bisect.bisect(self._starts, addr) - 1
    for at in range(nearest, max(nearest - 64, -1), -1):  # overlapping external ranges: an earlier one may hold it
      alloc = self._allocs[at]
      if addr + nbytes <= alloc.va + alloc.nbytes: return alloc, addr - alloc.va
    raise MemoryFault(f"access of {nbytes} bytes at 0x{addr:x} is outside every allocation")

  # scalar (packet processor / SMEM) access
  def read(self, addr: int, nbytes: int) -> bytes:
    alloc, off = self.find(addr, nbytes)
    return alloc.bytes[off:off + nbytes].tobytes()

  def write(self, addr: int, data: bytes) -> None:
    alloc, off = self.find(addr, len(data))
    alloc.bytes[off:off + len(data)] = np.frombuffer(data, dtype=np.uint8)

  def read_u32(self, addr: int) -> int: return int.from_bytes(self.read(addr, 4), "little")
  def read_u64(self, addr: int) -> int: return int.from_bytes(self.read(addr, 8), "little")
  def write_u32(self, addr: int, value: int) -> None: self.write(addr, (value & 0xFFFFFFFF).to_bytes(4, "little"))
  def write_u64(self, addr: int, value: int) -> None: self.write(addr, (value & (2**64 - 1)).to_bytes(8, "little"))

  # vector (per-lane) access
  def _lane_offsets(self, addrs: np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """(byte array, offsets) when all lanes fall in one allocation (the usual case), else a per-lane resolution
    into a joined view is not possible: fall back to the slow path by raising KeyError for the caller."""
    lo, hi = int(addrs.min()), int(addrs.max())
    alloc, off = self.find(lo, nbytes)
    if hi + nbytes > alloc.va + alloc.nbytes: raise KeyError
    return alloc.bytes, (addrs - np.uint64(alloc.va)).astype(np.int64)

  def gather(self, addrs: np.ndarray, nbytes: int) -> np.ndarray:
    """Bytes at each address: returns uint8 [len(addrs), nbytes]."""
    if addrs.size == 0: return np.zeros((0, nbytes), np.uint8)
    try:
      buf, offs = self._lane_offsets(addrs, nbytes)
      return buf[offs[:, None] + np.arange(nbytes)]
    except KeyError:
      out = np.empty((addrs.size, nbytes), np.uint8)
      for i, a in enumerate(addrs.tolist()):
        out[i] = np.frombuffer(self.read(a, nbytes), np.uint8)
      return out

  def scatter(self, addrs: np.ndarray, data: np.ndarray) -> None:
    """Writes data (uint8 [len(addrs), nbytes]) at each address, lanes in order (the last lane wins on overlap)."""
    if addrs.size == 0: return
    nbytes = data.shape[1]
    try:
      buf, offs = self._lane_offsets(addrs, nbytes)
      buf[offs[:, None] + np.arange(nbytes)] = data
    except KeyError:
      for a, row in zip(addrs.tolist(), data):
        self.write(a, row.tobytes())
