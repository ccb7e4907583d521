"""The OpenCL device: cl.Buffer memory, an in-order profiling queue, programs built from cached binaries.

Everything here runs on pyopencl, imported when a "CL" device is opened (tiny_cl.plugin imports none of it).
"""
from __future__ import annotations
import functools
from typing import Any, Sequence
import numpy as np
import pyopencl as cl
from tinycore.plugin import BufferSpec, Compiled, LRUAllocator
from tiny_cl.compiler import CLCompiler
from tiny_cl.platforms import devices
from tiny_cl.renderer import CLRenderer

PENDING_PRUNE_AT = 64  # how many in-flight copy-ins to collect before the finished ones are dropped


class CLView:
  """A byte range of a cl.Buffer (a tinycore buffer view). Copies address the range through the base buffer at any
  offset; a kernel needs a sub-buffer, which OpenCL allows only at offsets aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN
  (made when a kernel first takes the view)."""
  __slots__ = ("base", "offset", "nbytes", "alignment", "_sub")

  def __init__(self, base: cl.Buffer, offset: int, nbytes: int, alignment: int):
    self.base, self.offset, self.nbytes, self.alignment = base, offset, nbytes, alignment
    self._sub: cl.Buffer | None = None

  def kernel_arg(self) -> cl.Buffer:
    if self._sub is None:
      if self.offset % self.alignment:
        raise NotImplementedError(f"a kernel cannot take a view at byte offset {self.offset} of an OpenCL buffer: "
                                  f"sub-buffers must start at a multiple of the device's base address alignment "
                                  f"({self.alignment} bytes, CL_DEVICE_MEM_BASE_ADDR_ALIGN); pass the base buffer "
                                  "and index into it, or copy the view into a buffer of its own")
      # an empty view still needs a valid argument: OpenCL has no empty sub-buffers
      self._sub = self.base.get_sub_region(self.offset, self.nbytes) if self.nbytes else self.base
    return self._sub

  def __repr__(self) -> str: return f"<CLView {self.nbytes} bytes at +{self.offset}>"


def _region(handle: cl.Buffer | CLView) -> tuple[cl.Buffer, int]:
  """The base buffer and byte offset of a handle."""
  return (handle.base, handle.offset) if isinstance(handle, CLView) else (handle, 0)


class CLAllocator(LRUAllocator[Any]):
  """Device memory as cl.Buffer objects, on one device's in-order queue.

  Copy-ins are asynchronous: the host memory they read is kept alive (a reference held with the copy's event) until
  the queue has finished with it, which `synchronize` or any copy-out (blocking, and the queue is in order) makes
  sure of; the caller must not change that memory meanwhile. Copy-outs wait for every queued command first.
  """

  def __init__(self, device: CLDevice):
    super().__init__(device)
    self.context, self.queue = device.context, device.queue
    self.alignment = max(1, device.cl_device.mem_base_addr_align // 8)  # the device reports bits
    self.max_alloc = device.cl_device.max_mem_alloc_size
    self.pending: list[tuple[Any, Any]] = []  # (event, host memory) of copy-ins that may still be running

  def _alloc(self, nbytes: int, spec: BufferSpec) -> cl.Buffer:
    if spec.external_ptr is not None:
      raise NotImplementedError("the OpenCL device cannot adopt external host memory (BufferSpec.external_ptr)")
    if nbytes > self.max_alloc:
      raise MemoryError(f"{nbytes} bytes exceed the device's largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE = "
                        f"{self.max_alloc} bytes)")
    flags = cl.mem_flags.READ_WRITE | (cl.mem_flags.ALLOC_HOST_PTR if spec.host or spec.cpu_access else 0)
    try:
      buffer = cl.Buffer(self.context, flags, nbytes)
      if spec.zero: cl.enqueue_fill_buffer(self.queue, buffer, np.uint8(0), 0, nbytes)
    except cl.MemoryError as error:
      raise MemoryError(str(error)) from error
    return buffer

  def _free(self, handle: cl.Buffer, spec: BufferSpec) -> None:
    # OpenCL deletes the memory once the commands queued on it have finished
    handle.release()

  def _copyin(self, dst: cl.Buffer | CLView, src: memoryview) -> None:
    buffer, offset = _region(dst)
    event = cl.enqueue_copy(self.queue, buffer, src, dst_offset=offset, is_blocking=False)
    self.pending.append((event, src))
    if len(self.pending) >= PENDING_PRUNE_AT: self._prune()

  def _copyout(self, dst: memoryview, src: cl.Buffer | CLView) -> None:
    buffer, offset = _region(src)
    cl.enqueue_copy(self.queue, dst, buffer, src_offset=offset, is_blocking=True)
    self.pending.clear()  # in order: every copy-in queued before this read has finished

  def _offset(self, handle: cl.Buffer | CLView, nbytes: int, offset: int) -> CLView:
    base, base_offset = _region(handle)
    return CLView(base, base_offset + offset, nbytes, self.alignment)

  def _transfer(self, dst: cl.Buffer | CLView, src: cl.Buffer | CLView, nbytes: int, src_dev: Any,
                dst_dev: Any) -> None:
    dst_buffer, dst_offset = _region(dst)
    src_buffer, src_offset = _region(src)
    if src_dev is dst_dev:  # the same queue: ordered after whatever wrote the source
      cl.enqueue_copy(self.queue, dst_buffer, src_buffer, byte_count=nbytes, src_offset=src_offset,
                      dst_offset=dst_offset)
      return
    # another device (each has its own context): through host memory
    staging = memoryview(bytearray(nbytes))
    src_dev.allocator._copyout(staging, src)
    self._copyin(dst, staging)

  def _prune(self) -> None:
    """Drop the references of copy-ins that have finished (the oldest first: the queue runs them in order)."""
    done = 0
    for event, _ in self.pending:
      if event.command_execution_status != cl.command_execution_status.COMPLETE: break
      done += 1
    del self.pending[:done]

  def synchronize(self) -> None:
    self.queue.finish()
    self.pending.clear()


class CLProgram:
  """One kernel: ``CLProgram(name, lib, device=...)`` loads the program binary `lib` (from CLCompiler) on the device.

  Called as ``program(*handles, global_size=..., local_size=..., vals=(), wait=False)``: the buffers are the kernel's
  arguments in order, then each value as a 64-bit integer. The launch is queued and returns at once; with
  ``wait=True`` it waits and returns the kernel's own run time in seconds from the queue's profiling events.
  """

  def __init__(self, name: str, lib: bytes, *, device: CLDevice):
    self.name, self.device, self.queue = name, device, device.queue
    try:
      self.program = cl.Program(device.context, [device.cl_device], [lib]).build()
      self.kernel = cl.Kernel(self.program, name)
    except cl.Error as error:
      raise RuntimeError(f"cannot load the OpenCL program binary of kernel {name!r} on {device.device}: "
                         f"{error}") from error
    self.max_work_group = self.kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device.cl_device)
    self.num_args = self.kernel.num_args
    self._local_sizes: dict[tuple[int, ...], tuple[int, ...]] = {}

  def fit_local_size(self, local_size: Sequence[int]) -> tuple[int, ...]:
    """The local size, halved in its widest dimension until the kernel's work-group limit allows it (a kernel may
    allow fewer work-items than the device does). The renderer's local sizes are powers of two, so the padded global
    size stays a multiple."""
    key = tuple(local_size)
    if (fitted := self._local_sizes.get(key)) is None:
      local = list(key)
      while int(np.prod(local)) > self.max_work_group:
        widest = local.index(max(local))
        local[widest] //= 2
      fitted = self._local_sizes[key] = tuple(local)
    return fitted

  def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    args = [buf if type(buf) is cl.Buffer else buf.kernel_arg() for buf in bufs]
    args.extend(np.int64(value) for value in vals)
    if len(args) != self.num_args:
      raise RuntimeError(f"kernel {self.name!r} takes {self.num_args} arguments, but the call passed "
                         f"{len(bufs)} buffers and {len(vals)} values: the call's buffers and the kernel's "
                         "parameters do not match")
    self.kernel.set_args(*args)
    if 0 in tuple(global_size): return 0.0 if wait else None  # nothing to run (OpenCL refuses an empty range)
    event = cl.enqueue_nd_range_kernel(self.queue, self.kernel, tuple(global_size), self.fit_local_size(local_size))
    if not wait: return None
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-9


def _device_type(bits: int) -> str:
  """"gpu", "cpu", "accelerator" or "custom" (a device may also carry the DEFAULT bit)."""
  for name in ("GPU", "CPU", "ACCELERATOR", "CUSTOM"):
    if bits & getattr(cl.device_type, name, 0): return name.lower()
  return "unknown"


class CLDevice(Compiled):
  """The OpenCL device "CL:index": the index-th device of all platforms, with its own context and in-order queue."""

  def __init__(self, name: str, index: int):
    found = devices()
    if index >= len(found):
      present = ", ".join(f"{'CL' if i == 0 else f'CL:{i}'} ({d.name.strip()})" for i, d in enumerate(found)) or "none"
      raise RuntimeError(f"there is no OpenCL device {name}: the devices present are {present}")
    self.cl_device = found[index]
    self.extensions = frozenset(self.cl_device.extensions.split())
    if self.cl_device.profile.strip() == "EMBEDDED_PROFILE" and "cles_khr_int64" not in self.extensions:
      raise RuntimeError(f"the OpenCL device {self.cl_device.name.strip()} has no 64-bit integers (embedded profile "
                         "without cles_khr_int64); tinycore's kernels index with them")
    self.context = cl.Context([self.cl_device])
    self.queue = cl.CommandQueue(self.context, self.cl_device,
                                 properties=cl.command_queue_properties.PROFILING_ENABLE)  # in order
    renderer = CLRenderer(fp64="cl_khr_fp64" in self.extensions, fp16="cl_khr_fp16" in self.extensions,
                          max_local_size=self.cl_device.max_work_group_size,
                          max_work_item_sizes=self.cl_device.max_work_item_sizes)
    compiler = CLCompiler(self.context, self.cl_device)
    compiler.check_builds()  # a driver that builds no kernel is an unavailable device, never a default
    super().__init__(name, CLAllocator(self), renderer, compiler, functools.partial(CLProgram, device=self))
    # every kernel argument (a buffer pointer or a 64-bit scalar) takes 8 bytes of the device's parameter room
    self.max_kernel_args = max(2, self.cl_device.max_parameter_size // 8)

  def synchronize(self) -> None:
    self.allocator.synchronize()

  def finalize(self) -> None:
    try: self.synchronize()
    except cl.Error: pass  # at exit, a device that cannot finish its queue must not stop the others

  def capabilities(self) -> dict[str, Any]:
    caps = super().capabilities()
    dev = self.cl_device
    caps.update({"platform": dev.platform.name.strip(), "device": dev.name.strip(),
                 "type": _device_type(dev.type), "driver": dev.driver_version.strip(),
                 "opencl": " ".join(dev.version.split()[:2]), "fp16": "cl_khr_fp16" in self.extensions,
                 "fp64": "cl_khr_fp64" in self.extensions, "compute_units": dev.max_compute_units,
                 "max_work_group": dev.max_work_group_size, "memory_mib": dev.global_mem_size // (1 << 20)})
    return caps
