"""Allocators: how a device gets, frees and copies raw memory. Plugins subclass `Allocator` (or `LRUAllocator`)."""
from __future__ import annotations
import os
import threading
from collections import defaultdict
from typing import Any, Generic, TypeVar
import attrs

Handle = TypeVar("Handle")


@attrs.frozen
class BufferSpec:
  """How a buffer's memory must behave; part of the allocator's cache key.

  uncached: coherent memory (signals, rings); cpu_access: host-mappable; host: system memory;
  nolru / zero: never cached for reuse (zero also means zero-filled); external_ptr: adopt that address, never free it.
  """
  uncached: bool = False
  cpu_access: bool = False
  host: bool = False
  nolru: bool = False
  zero: bool = False
  external_ptr: int | None = None


DEFAULT_SPEC = BufferSpec()  # (frozen: one shared instance saves building one per allocation)


@attrs.define(eq=False)
class BufferStorage:
  """A buffer's memory as one device addresses it.

  buf: the handle that device's kernels and queues use; meta: what keeps a mapping alive or lets the mapping device
  release it (a base's mapping usually holds its buf; a view's mapping has None, its base's mapping owns the memory);
  host: a zero-copy host view of the bytes, or None.
  """
  buf: Any
  meta: Any = None
  host: memoryview | None = None


class MemoryCounters:
  """Bytes of device memory that buffers hold, over every device's allocator in this process: `used` now, `peak` the
  most since the last `reset_peak` (memory an LRU allocator keeps for reuse is not counted; DISK is not memory)."""
  used = 0
  peak = 0

  @staticmethod
  def reset_peak() -> None: MemoryCounters.peak = MemoryCounters.used


class Allocator(Generic[Handle]):
  """Base allocator. A device implements the underscored hooks:

  required: `_alloc(nbytes, spec) -> handle`, `_free(handle, spec)`, `_copyin(dst_handle, src: memoryview)`,
  `_copyout(dst: memoryview, src_handle)` (synchronize first on an asynchronous device);
  optional: `_offset(handle, nbytes, offset) -> handle` (sub-buffer views), `_as_buffer(handle) -> memoryview`
  (a zero-copy host view), `_transfer(dst, src, nbytes, src_dev, dst_dev)` (same-kind peer copy),
  `_map(buffer) -> BufferStorage` (another device's memory, addressed in place by this device) and
  `_unmap(mapping)` (release such a mapping; nothing by default).
  """

  # whether `_copyin` has finished with its source when it returns (a copy then needs no synchronize after it)
  synchronous_copyin: bool = False
  # a lock the host's copies (`_copyin`, `_copyout`) hold, or None: every queue device (HCQDevice) sets the runtime
  # lock, since its host copies go through the queues (and often one bounce buffer) that other threads submit to
  host_copy_lock: Any = None

  def __init__(self, device: Any = None):
    self.device = device  # the Compiled that owns this allocator (may be None in tests)
    self.allocated_bytes = 0

  def alloc(self, nbytes: int, spec: BufferSpec | None = None) -> Handle:
    if not isinstance(nbytes, int) or nbytes <= 0:
      raise ValueError(f"allocation size must be a positive int, got {nbytes!r}")
    spec = spec or DEFAULT_SPEC
    try:
      handle = self._alloc(nbytes, spec)
    except MemoryError as e:
      raise MemoryError(f"cannot allocate {nbytes} bytes on {self._name()} "
                        f"({self.allocated_bytes} bytes in use): {e}") from e
    if spec.external_ptr is None: self.count(nbytes)
    return handle

  def free(self, handle: Handle, nbytes: int, spec: BufferSpec | None = None) -> None:
    spec = spec or DEFAULT_SPEC
    if spec.external_ptr is None: self.count(-nbytes)
    self._free(handle, spec)

  def count(self, nbytes: int) -> None:
    """Account for `nbytes` more (or, negative, fewer) bytes held by buffers, here and in MemoryCounters."""
    self.allocated_bytes += nbytes
    MemoryCounters.used += nbytes
    if MemoryCounters.used > MemoryCounters.peak: MemoryCounters.peak = MemoryCounters.used

  def _name(self) -> str: return getattr(self.device, "device", type(self).__name__)

  # hooks a device implements
  def _alloc(self, nbytes: int, spec: BufferSpec) -> Handle:
    raise NotImplementedError(f"{type(self).__name__} cannot allocate")
  def _free(self, handle: Handle, spec: BufferSpec) -> None: pass
  def _copyin(self, dst: Handle, src: memoryview) -> None:
    raise NotImplementedError(f"{type(self).__name__} has no _copyin")
  def _copyout(self, dst: memoryview, src: Handle) -> None:
    raise NotImplementedError(f"{type(self).__name__} has no _copyout")

  supports_offset = property(lambda self: type(self)._offset is not Allocator._offset)
  supports_as_buffer = property(lambda self: type(self)._as_buffer is not Allocator._as_buffer)
  supports_transfer = property(lambda self: type(self)._transfer is not Allocator._transfer)
  supports_map = property(lambda self: type(self)._map is not Allocator._map)

  def map(self, buf: Any) -> BufferStorage:
    """`buf`, a base Buffer of another device, as this device addresses it in place. Buffer.get_storage calls it
    once per (buffer, device) and caches the result; a device that cannot address that memory raises."""
    if not self.supports_map:
      raise RuntimeError(f"{self._name()} cannot address {buf.device} memory in place (its allocator has no _map)")
    mapping = self._map(buf)
    if not isinstance(mapping, BufferStorage):
      raise TypeError(f"{type(self).__name__}._map returned {type(mapping).__name__}, expected a BufferStorage")
    return mapping

  def unmap(self, mapping: BufferStorage) -> None:
    """Release a mapping made by `map` (the mapped buffer is being freed)."""
    self._unmap(mapping)

  def _offset(self, handle: Handle, nbytes: int, offset: int) -> Handle:
    raise NotImplementedError(f"{type(self).__name__} does not support sub-buffers")
  def _as_buffer(self, handle: Handle) -> memoryview:
    raise NotImplementedError(f"{type(self).__name__} has no zero-copy host view")
  def _transfer(self, dst: Handle, src: Handle, nbytes: int, src_dev: Any, dst_dev: Any) -> None:
    raise NotImplementedError(f"{type(self).__name__} has no direct transfer")
  def _map(self, buf: Any) -> BufferStorage:
    raise NotImplementedError(f"{type(self).__name__} cannot map other devices' memory")
  def _unmap(self, mapping: BufferStorage) -> None: pass


class LRUAllocator(Allocator[Handle]):
  """Keeps freed handles keyed by (nbytes, spec) and hands them out again; on an allocation failure it empties the
  cache and retries once. Set TINYCORE_LRU=0 to turn the cache off."""

  def __init__(self, device: Any = None):
    super().__init__(device)
    self.cache: dict[tuple[int, BufferSpec], list[Handle]] = defaultdict(list)
    # re-entrant: the garbage collector may free a buffer (into this cache) in the middle of an alloc, in any thread
    self.lock = threading.RLock()

  def alloc(self, nbytes: int, spec: BufferSpec | None = None) -> Handle:
    spec = spec or DEFAULT_SPEC
    with self.lock:
      if (cached := self.cache.get((nbytes, spec))):
        self.count(nbytes)
        return cached.pop()
    try:
      return super().alloc(nbytes, spec)
    except MemoryError:
      self.free_cache()
      return super().alloc(nbytes, spec)

  def free(self, handle: Handle, nbytes: int, spec: BufferSpec | None = None) -> None:
    spec = spec or DEFAULT_SPEC
    if os.environ.get("TINYCORE_LRU", "1") != "0" and not (spec.nolru or spec.zero or spec.external_ptr is not None):
      with self.lock:
        self.count(-nbytes)
        self.cache[(nbytes, spec)].append(handle)
    else:
      super().free(handle, nbytes, spec)

  def free_cache(self) -> None:
    with self.lock:
      cached, self.cache = self.cache, defaultdict(list)
    for (_, spec), handles in cached.items():
      for handle in handles: self._free(handle, spec)
