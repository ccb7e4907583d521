"""CudaDriver: the CUDA driver API through ctypes on libcuda.so.1, behind one small object (the plugin's one seam).

The device (tiny_nv.device) calls only this object's methods; the mock driver (tiny_nv.mock.MockCudaDriver, test
equipment) has the same methods, so with TINYCORE_NV_EMULATE=1 the same device code runs on it. Addresses are ints,
handles are opaque. Every failing call raises CudaError naming the CUDA function and the driver's error name and
text (cuGetErrorName / cuGetErrorString).

The symbols are the ones the CUDA 13 headers' macros resolve to (cuMemAlloc -> cuMemAlloc_v2, cuStreamWaitValue64
-> cuStreamWaitValue64_v2, ...), looked up by name, so no CUDA toolkit is needed; only the driver. Contexts: the
device's primary context (cuCtxCreate is _v4 in CUDA 13 and not needed), made current on every thread that calls
(`set_current`). Importing this module never loads libcuda: that happens in `init()`.
"""
from __future__ import annotations
import ctypes
import struct
from typing import Any, Sequence

LIBCUDA = "libcuda.so.1"
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122
CU_STREAM_NON_BLOCKING = 0x1
CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP = 0x1, 0x2
CU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_DEVICEMAP = 0x1, 0x2
CU_STREAM_WAIT_VALUE_GEQ = 0x0  # (int64_t)(*addr - value) >= 0; 0x1 would be CU_STREAM_WAIT_VALUE_EQ
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0
CU_EVENT_DISABLE_TIMING = 0x2
# cuLaunchKernel's `extra`: the arguments as one packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END)
CU_LAUNCH_PARAM_END, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2

_p, _u32, _u64, _int, _size = ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_size_t
_pp, _int_p, _size_p, _u64_p = ctypes.POINTER(_p), ctypes.POINTER(_int), ctypes.POINTER(_size), ctypes.POINTER(_u64)
# CUDA call -> (symbol in libcuda, argument types); every one returns a CUresult (0 = CUDA_SUCCESS). Checked against
# cuda.h's prototypes and #defines (CUDA 13) by tests/test_driver.py
SIGNATURES: dict[str, tuple[str, list[Any]]] = {
  "cuInit": ("cuInit", [_u32]),
  "cuDriverGetVersion": ("cuDriverGetVersion", [_int_p]),
  "cuDeviceGetCount": ("cuDeviceGetCount", [_int_p]),
  "cuDeviceGet": ("cuDeviceGet", [_int_p, _int]),
  "cuDeviceGetName": ("cuDeviceGetName", [ctypes.c_char_p, _int, _int]),
  "cuDeviceGetAttribute": ("cuDeviceGetAttribute", [_int_p, _int, _int]),
  "cuDeviceTotalMem": ("cuDeviceTotalMem_v2", [_size_p, _int]),
  "cuDevicePrimaryCtxRetain": ("cuDevicePrimaryCtxRetain", [_pp, _int]),
  "cuDevicePrimaryCtxRelease": ("cuDevicePrimaryCtxRelease_v2", [_int]),
  "cuCtxSetCurrent": ("cuCtxSetCurrent", [_p]),
  "cuCtxSynchronize": ("cuCtxSynchronize", []),
  "cuMemAlloc": ("cuMemAlloc_v2", [_u64_p, _size]),
  "cuMemFree": ("cuMemFree_v2", [_u64]),
  "cuMemHostAlloc": ("cuMemHostAlloc", [_pp, _size, _u32]),
  "cuMemHostGetDevicePointer": ("cuMemHostGetDevicePointer_v2", [_u64_p, _p, _u32]),
  "cuMemFreeHost": ("cuMemFreeHost", [_p]),
  "cuMemHostRegister": ("cuMemHostRegister_v2", [_p, _size, _u32]),
  "cuMemHostUnregister": ("cuMemHostUnregister", [_p]),
  "cuStreamCreate": ("cuStreamCreate", [_pp, _u32]),
  "cuStreamDestroy": ("cuStreamDestroy_v2", [_p]),
  "cuStreamSynchronize": ("cuStreamSynchronize", [_p]),
  "cuMemcpyAsync": ("cuMemcpyAsync", [_u64, _u64, _size, _p]),
  "cuStreamWaitValue64": ("cuStreamWaitValue64_v2", [_p, _u64, _u64, _u32]),
  "cuStreamWriteValue64": ("cuStreamWriteValue64_v2", [_p, _u64, _u64, _u32]),
  "cuEventCreate": ("cuEventCreate", [_pp, _u32]),
  "cuEventRecord": ("cuEventRecord", [_p, _p]),
  "cuEventDestroy": ("cuEventDestroy_v2", [_p]),
  "cuStreamWaitEvent": ("cuStreamWaitEvent", [_p, _p, _u32]),
  "cuModuleLoadData": ("cuModuleLoadData", [_pp, _p]),
  "cuModuleUnload": ("cuModuleUnload", [_p]),
  "cuModuleGetFunction": ("cuModuleGetFunction", [_pp, _p, ctypes.c_char_p]),
  "cuLaunchKernel": ("cuLaunchKernel", [_p, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _p, _pp, _pp]),
  "cuGetErrorName": ("cuGetErrorName", [_int, ctypes.POINTER(ctypes.c_char_p)]),
  "cuGetErrorString": ("cuGetErrorString", [_int, ctypes.POINTER(ctypes.c_char_p)]),
}


class CudaError(RuntimeError):
  """A CUDA driver call failed; the message names the call, the error name and the driver's description."""


class CudaDriverMissing(RuntimeError):
  """libcuda.so.1 could not be loaded (no NVIDIA driver on this machine)."""


def load_libcuda() -> ctypes.CDLL:
  """libcuda.so.1, or CudaDriverMissing saying that no NVIDIA driver is installed."""
  try: return ctypes.CDLL(LIBCUDA)
  except OSError as error: raise CudaDriverMissing(f"no NVIDIA driver ({LIBCUDA} not found)") from error


class CudaDriver:
  """The CUDA driver API calls tiny-nv needs, as methods on ints and opaque handles (see tiny_nv.mock for the same
  interface executing PTX). `init()` loads libcuda and must come first."""

  def __init__(self) -> None:
    self.lib: ctypes.CDLL | None = None
    self.calls: dict[str, Any] = {}

  # ------------------------------------------------------------------ loading and errors
  def init(self) -> None:
    if self.lib is not None: return
    lib = load_libcuda()
    for call, (symbol, argtypes) in SIGNATURES.items():
      try: function = getattr(lib, symbol)
      except AttributeError as error:
        raise CudaError(f"{LIBCUDA} has no {symbol} (for {call}): the NVIDIA driver is too old for CUDA 13") from error
      function.argtypes, function.restype = argtypes, ctypes.c_int
      self.calls[call] = function
    self.lib = lib
    self._call("cuInit", 0)

  def error_text(self, status: int) -> str:
    """'CUDA_ERROR_X: description' for a CUresult."""
    assert self.lib is not None
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    self.calls["cuGetErrorName"](status, ctypes.byref(name))
    self.calls["cuGetErrorString"](status, ctypes.byref(text))
    return f"{(name.value or b'CUDA error').decode()} ({status}): {(text.value or b'unknown error').decode()}"

  def _call(self, call: str, *args: Any) -> None:
    if self.lib is None: raise CudaError(f"{call}: the CUDA driver is not initialized (call init() first)")
    if (status := self.calls[call](*args)) != 0:
      raise CudaError(f"{call} ({SIGNATURES[call][0]}) failed: {self.error_text(status)}")

  def _out(self, call: str, ctype: Any, *args: Any) -> Any:
    """Call with a leading output argument of `ctype`; returns its value."""
    out = ctype()
    self._call(call, ctypes.byref(out), *args)
    return out.value

  # ------------------------------------------------------------------ devices and contexts
  def driver_version(self) -> int: return self._out("cuDriverGetVersion", _int)
  def device_count(self) -> int: return self._out("cuDeviceGetCount", _int)

  def _device(self, ordinal: int) -> int: return self._out("cuDeviceGet", _int, ordinal)

  def name(self, ordinal: int) -> str:
    buffer = ctypes.create_string_buffer(256)
    self._call("cuDeviceGetName", buffer, len(buffer), self._device(ordinal))
    return buffer.value.decode(errors="replace")

  def attribute(self, ordinal: int, attr: int) -> int:
    return self._out("cuDeviceGetAttribute", _int, attr, self._device(ordinal))

  def compute_capability(self, ordinal: int) -> tuple[int, int]:
    return (self.attribute(ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            self.attribute(ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))

  def total_memory(self, ordinal: int) -> int: return self._out("cuDeviceTotalMem", _size, self._device(ordinal))

  def open_context(self, ordinal: int) -> Any:
    """The device's primary context, retained and made current on this thread."""
    context = _p()
    self._call("cuDevicePrimaryCtxRetain", ctypes.byref(context), self._device(ordinal))
    self.set_current(context)
    return context

  def close_context(self, ordinal: int) -> None: self._call("cuDevicePrimaryCtxRelease", self._device(ordinal))
  def set_current(self, ctx: Any) -> None: self._call("cuCtxSetCurrent", ctx)
  def synchronize(self) -> None: self._call("cuCtxSynchronize")

  # ------------------------------------------------------------------ memory
  def mem_alloc(self, nbytes: int) -> int: return self._out("cuMemAlloc", _u64, nbytes)
  def mem_free(self, dptr: int) -> None: self._call("cuMemFree", dptr)

  def host_alloc(self, nbytes: int) -> tuple[int, int]:
    """Pinned host memory the device addresses (PORTABLE | DEVICEMAP): (host address, device address)."""
    host = _p()
    self._call("cuMemHostAlloc", ctypes.byref(host), nbytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)
    return host.value, self._out("cuMemHostGetDevicePointer", _u64, host, 0)

  def host_free(self, host_addr: int) -> None: self._call("cuMemFreeHost", host_addr)

  def host_register(self, host_addr: int, nbytes: int) -> int:
    """Pin existing page-aligned host memory and map it for the device (PORTABLE | DEVICEMAP): its device address."""
    self._call("cuMemHostRegister", host_addr, nbytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)
    return self._out("cuMemHostGetDevicePointer", _u64, host_addr, 0)

  def host_unregister(self, host_addr: int) -> None: self._call("cuMemHostUnregister", host_addr)

  # ------------------------------------------------------------------ streams, copies, memory operations, events
  def stream_create(self) -> Any:
    stream = _p()
    self._call("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
    return stream

  def stream_destroy(self, stream: Any) -> None: self._call("cuStreamDestroy", stream)
  def stream_synchronize(self, stream: Any) -> None: self._call("cuStreamSynchronize", stream)

  def memcpy_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
    """Copy with unified addressing (host <-> device, device <-> device); from pinned memory on the copy engine."""
    self._call("cuMemcpyAsync", dst, src, nbytes, stream)

  def stream_wait_value64(self, stream: Any, addr: int, value: int) -> None:
    """Later work on `stream` waits until the 64-bit word at device address `addr` is >= value."""
    self._call("cuStreamWaitValue64", stream, addr, value, CU_STREAM_WAIT_VALUE_GEQ)

  def stream_write_value64(self, stream: Any, addr: int, value: int) -> None:
    """The 64-bit word at device address `addr` := value once the work before it on `stream` finished."""
    self._call("cuStreamWriteValue64", stream, addr, value, CU_STREAM_WRITE_VALUE_DEFAULT)

  def event_create(self) -> Any:
    event = _p()
    self._call("cuEventCreate", ctypes.byref(event), CU_EVENT_DISABLE_TIMING)
    return event

  def event_record(self, event: Any, stream: Any) -> None: self._call("cuEventRecord", event, stream)
  def event_destroy(self, event: Any) -> None: self._call("cuEventDestroy", event)
  def stream_wait_event(self, stream: Any, event: Any) -> None: self._call("cuStreamWaitEvent", stream, event, 0)

  # ------------------------------------------------------------------ modules and launches
  def module_load(self, image: bytes) -> Any:
    """Load a cubin (or PTX, NUL-terminated) image; the image is copied by the driver."""
    module, buffer = _p(), ctypes.create_string_buffer(bytes(image), len(image))
    self._call("cuModuleLoadData", ctypes.byref(module), buffer)
    return module

  def module_unload(self, module: Any) -> None: self._call("cuModuleUnload", module)

  def get_function(self, module: Any, name: str) -> Any:
    function = _p()
    self._call("cuModuleGetFunction", ctypes.byref(function), module, name.encode())
    return function

  def launch(self, function: Any, grid: Sequence[int], block: Sequence[int], shared_bytes: int, stream: Any,
             params: bytes) -> None:
    """Launch with the kernel's arguments packed in `params` (8-byte aligned words in declaration order)."""
    buffer = ctypes.create_string_buffer(bytes(params), max(len(params), 8))
    size = _size(len(params))
    extra = (_p * 5)(CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buffer), CU_LAUNCH_PARAM_BUFFER_SIZE,
                     ctypes.addressof(size), CU_LAUNCH_PARAM_END)
    self._call("cuLaunchKernel", function, *grid, *block, shared_bytes, stream, None, extra)


def pack_params(words: Sequence[int]) -> bytes:
  """Kernel arguments (pointers and 64-bit scalars) as cuLaunchKernel's packed parameter buffer."""
  return struct.pack(f"<{len(words)}Q", *(word & 0xFFFFFFFFFFFFFFFF for word in words))
