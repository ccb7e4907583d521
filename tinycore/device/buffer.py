"""Buffer: a lazily allocated region of device memory, with views that share a base."""
from __future__ import annotations
import contextlib
import weakref
from typing import Any
import tinycore.profiler as profiler
from tinycore.dtype import FP8S, DType, dtypes, fp8_decode, to_np_dtype
from tinycore.device.allocator import BufferSpec, BufferStorage
from tinycore.device.fence import host_fence


class Buffer:
  """`size` elements of `dtype` on `device`. A view (`base` given) shares its base's memory at `offset` bytes.

  Allocation is lazy: the memory exists once `allocate()` (or `ensure_allocated()`) ran. `opaque` adopts an existing
  handle (never returned to the allocator's cache); `initial_value` allocates and copies those bytes in.
  """

  def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None, options: BufferSpec | None = None,
               initial_value: bytes | memoryview | None = None, base: Buffer | None = None, offset: int = 0,
               preallocate: bool = False):
    from tinycore.device.registry import Device
    if size < 0: raise ValueError(f"buffer size must be >= 0, got {size}")
    self.device, self.size, self.dtype = Device.canonicalize(device), size, dtype
    self.options, self.offset = options, offset
    self._handle: Any = None
    self._owned = False
    self._finalizer: weakref.finalize | None = None
    # storage on the own device, and mappings on other devices (by canonical name), both for the current memory
    self._storage: BufferStorage | None = None
    self._maps: dict[str, BufferStorage] = {}
    self._generation = 0  # a base counts its allocations; a view remembers the one its handle was derived from
    if base is not None:
      if base._base is not None: raise AssertionError("a view's base must itself be a base buffer")
      if offset + self.nbytes > base.nbytes:
        raise ValueError(f"view of {self.nbytes} bytes at offset {offset} exceeds its base of {base.nbytes} bytes")
      self._base: Buffer | None = base
    else:
      self._base = None
      if opaque is not None:
        self.options = BufferSpec(nolru=True) if options is None else options
        self._handle = opaque
        self._owned = False
      if initial_value is not None:
        self.allocate()
        self.copyin(memoryview(initial_value))
      elif preallocate: self.allocate()

  # --- identity
  @property
  def base(self) -> Buffer: return self._base if self._base is not None else self
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def allocator(self):
    from tinycore.device.registry import Device
    return Device[self.device].allocator
  def __repr__(self) -> str:
    view = f" view of {self._base!r} at +{self.offset}" if self._base is not None else ""
    return f"<buf {self.device} size={self.size} {self.dtype}{view}{'' if self.is_allocated() else ' (unallocated)'}>"

  # --- allocation
  def is_allocated(self) -> bool: return self.base._handle is not None
  def ensure_allocated(self) -> Buffer:
    if self._base is None: return self if self._handle is not None else self.allocate()
    # a view's handle is stale once its base was freed (and maybe allocated again)
    current = self._handle is not None and self._generation == self._base._generation
    return self if current and self._base._handle is not None else self.allocate()

  def allocate(self, opaque: Any = None) -> Buffer:
    if self._base is not None:
      self._storage, self._maps = None, {}  # derived from the base's memory before, maybe freed since
      self._base.ensure_allocated()
      if self.offset == 0 and self.nbytes == self._base.nbytes: self._handle = self._base._handle
      else: self._handle = self.allocator._offset(self._base._handle, self.nbytes, self.offset)
      self._generation = self._base._generation
      return self
    if self._handle is not None: raise RuntimeError(f"{self!r} is already allocated")
    self._generation += 1
    self._storage, self._maps = None, {}
    if opaque is not None:
      self._handle, self._owned = opaque, False
      return self
    # zero-sized buffers get one byte so every buffer has an address
    self._handle = self.allocator.alloc(max(self.nbytes, 1), self.options)
    self._owned = True
    # not at exit: a queue device may still run work on this memory then; its finalize decides what is safe to free
    self._finalizer = weakref.finalize(self, _free_handle, self.allocator, self._handle, max(self.nbytes, 1),
                                       self.options)
    self._finalizer.atexit = False
    return self

  def deallocate(self) -> None:
    """Free this buffer's memory. A base first releases its mappings on other devices, then returns its memory to
    the allocator (its views allocate again on next use); a view only drops its own handle and mappings."""
    from tinycore.device.registry import Device
    if self._base is None and self._handle is not None:
      host_fence()  # queued work may still use the memory
      for device, mapping in self._maps.items(): Device[device].allocator.unmap(mapping)
      if self._finalizer is not None: self._finalizer()  # frees once, through the (LRU) allocator
    self._handle, self._finalizer, self._storage, self._maps = None, None, None, {}

  @property
  def _buf(self) -> Any:
    """The device handle (allocating on first use)."""
    return self.ensure_allocated()._handle

  # --- storage: this memory as each device addresses it
  @property
  def host(self) -> memoryview | None:
    """A zero-copy host view of this buffer's bytes (allocating it if needed), or None if its device has none. It
    does not wait for queued work: a caller that reads results synchronizes first (as_memoryview does)."""
    return self.get_storage().host

  def get_storage(self, device: str | None = None) -> BufferStorage:
    """This buffer's memory as `device` addresses it (default: its own device), allocating first if needed.

    On its own device: its handle and host view. On another device: that device's allocator maps the base once
    (`Allocator.map`); a view's mapping is the base's mapping at the view's offset, with the view's host view and no
    meta. Both are cached until the memory is freed, so a freed and reallocated buffer gets fresh mappings."""
    self.ensure_allocated()
    if device is None or device == self.device: return self._own_storage()
    from tinycore.device.registry import Device
    target = Device.canonicalize(device)
    if target == self.device: return self._own_storage()
    if (mapping := self._maps.get(target)) is not None: return mapping
    mapper = Device[target].allocator
    if self._base is None: mapping = mapper.map(self)
    else:
      base_mapping = self._base.get_storage(target)
      mapping = BufferStorage(mapper._offset(base_mapping.buf, self.nbytes, self.offset), None, self.host)
    self._maps[target] = mapping
    return mapping

  def get_buf(self, device: str | None = None) -> Any:
    """The handle `device` uses for this buffer (default: its own device): `get_storage(device).buf`."""
    if device is None or device == self.device: return self.ensure_allocated()._handle  # no host view needed
    return self.get_storage(device).buf

  def _own_storage(self) -> BufferStorage:
    if self._storage is None:
      host = None
      if self.allocator.supports_as_buffer:
        view = self.allocator._as_buffer(self._handle) if self.nbytes else memoryview(bytearray(0))
        view = view if view.format == "B" else view.cast("B")
        host = view if view.nbytes == self.nbytes else view[:self.nbytes]
      self._storage = BufferStorage(self._handle, None, host)
    return self._storage

  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    """A view of `size` elements of `dtype` at byte `offset` of this buffer (views of views flatten)."""
    if offset < 0 or offset > self.nbytes:
      raise ValueError(f"view offset {offset} outside a buffer of {self.nbytes} bytes")
    return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset, options=self.options)

  # --- data movement between host and this buffer
  def copyin(self, mv: memoryview) -> Buffer:
    host_fence()
    mv = memoryview(mv).cast("B") if memoryview(mv).nbytes else memoryview(b"")
    if mv.nbytes != self.nbytes: raise ValueError(f"copyin of {mv.nbytes} bytes into {self!r} of {self.nbytes} bytes")
    start = profiler.clock_ns() if profiler.enabled else 0
    if self.nbytes:
      with self.host_copy_lock(): self.allocator._copyin(self._buf, mv)
    if start: self.record_host_copy("copyin", start)
    return self

  def copyout(self, mv: memoryview) -> memoryview:
    host_fence()
    mv = memoryview(mv).cast("B") if memoryview(mv).nbytes else memoryview(bytearray(0))
    if mv.nbytes != self.nbytes: raise ValueError(f"copyout of {self!r} ({self.nbytes} bytes) into {mv.nbytes} bytes")
    start = profiler.clock_ns() if profiler.enabled else 0
    if self.nbytes:
      with self.host_copy_lock(): self.allocator._copyout(mv, self._buf)
    if start: self.record_host_copy("copyout", start)
    return mv

  def host_copy_lock(self) -> Any:
    """What a host copy of this buffer holds: its allocator's `host_copy_lock` (a queue device's runtime lock)."""
    return self.allocator.host_copy_lock or contextlib.nullcontext()

  def record_host_copy(self, direction: str, start_ns: int) -> None:
    """Profiling: a copyin or copyout the host waited for, on this device's copy track. Only for memory the host
    cannot see (a device transfer); a copy between host-visible memories is already the copy call that made it."""
    if self.nbytes and not self.allocator.supports_as_buffer:
      profiler.record(direction, "copy", self.device, "copy", start_ns, profiler.clock_ns(), bytes=self.nbytes)

  def as_memoryview(self, allow_zero_copy: bool = False, force_zero_copy: bool = False,
                    no_sync: bool = False) -> memoryview:
    """The bytes of this buffer. Zero-copy (a live view of device memory) only when asked for and possible, since
    the view outlives nothing: keep the Buffer alive while you use it. `no_sync` skips waiting for the devices
    (for a caller that already did, such as a copy about to write into the view)."""
    if allow_zero_copy or force_zero_copy:
      if self.allocator.supports_as_buffer:
        from tinycore.device.registry import Device
        if not no_sync:
          host_fence()
          Device[self.device].synchronize()
        return self.allocator._as_buffer(self._buf) if self.nbytes else memoryview(bytearray(0))
      if force_zero_copy: raise AssertionError(f"{self.device} has no zero-copy host view")
    return self.copyout(memoryview(bytearray(self.nbytes)))

  def copy_from(self, src: Buffer) -> Buffer:
    """Copy src's bytes into this buffer (equal sizes, both allocated) through the copy paths
    (`tinycore.device.copy.run_copy`), after queued work finished; a device that is not a queue device is then
    synchronized (a write to DISK is durable when this returns)."""
    from tinycore.device.copy import run_copy  # the copy paths live beside Buffer, in the same layer
    from tinycore.device.registry import Device
    if src.nbytes != self.nbytes: raise ValueError(f"copy_from needs equal sizes: {src.nbytes} -> {self.nbytes} bytes")
    if not (self.is_allocated() and src.is_allocated()): raise RuntimeError("copy_from needs both buffers allocated")
    host_fence()
    run_copy(self, src)
    Device[self.device].synchronize()
    return self

  def numpy(self):
    import numpy as np
    if self.dtype is dtypes.bfloat16:
      raw = np.frombuffer(self.as_memoryview(), dtype=np.uint16).astype(np.uint32) << 16
      return raw.view(np.float32)
    if self.dtype in FP8S: return fp8_decode(np.frombuffer(self.as_memoryview(), dtype=np.uint8), self.dtype)
    return np.frombuffer(self.as_memoryview(), dtype=to_np_dtype(self.dtype))


def _free_handle(allocator, handle, nbytes, options):
  try: allocator.free(handle, nbytes, options)
  except Exception: pass  # interpreter shutdown: the process frees everything anyway
