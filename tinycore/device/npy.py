"""The built-in NPY device: numpy arrays used in place, so ``Tensor(np_array)`` starts without a copy.

NPY stores bytes and runs no kernels (host interop, not compute). It is a plugin like any other, registered by the
plugin manager through the same hooks; its handle is a 1-d uint8 numpy array viewing the array's bytes.
numpy is imported when the device is used, not when this plugin module is imported.
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from tinycore.device.allocator import Allocator, BufferSpec, BufferStorage
from tinycore.device.compiled import Compiled
from tinycore.plugin.hookspecs import API_VERSION, hookimpl
from tinycore.plugin.spec import DeviceSpec

if TYPE_CHECKING:
  import numpy as np
  from tinycore.device.buffer import Buffer

PREFIX = "NPY"


class NPYAllocator(Allocator["np.ndarray"]):
  """Host memory owned by numpy. Each handle is a 1-d uint8 array; views of it share the memory."""

  def _alloc(self, nbytes: int, spec: BufferSpec) -> np.ndarray:
    import numpy as np
    return np.zeros(nbytes, np.uint8) if spec.zero else np.empty(nbytes, np.uint8)

  def _free(self, handle: np.ndarray, spec: BufferSpec) -> None:
    pass  # numpy frees the array when the last reference goes

  def _as_buffer(self, handle: np.ndarray) -> memoryview: return memoryview(handle)

  def _copyin(self, dst: np.ndarray, src: memoryview) -> None:
    import numpy as np
    dst[:src.nbytes] = np.frombuffer(src, np.uint8)

  def _copyout(self, dst: memoryview, src: np.ndarray) -> None:
    dst[:] = memoryview(src)[:dst.nbytes]

  def _offset(self, handle: np.ndarray, nbytes: int, offset: int) -> np.ndarray: return handle[offset:offset + nbytes]

  def _map(self, buf: Buffer) -> BufferStorage:
    """Another device's host-visible memory as a numpy array over it, in place (the array is also what keeps the
    mapping alive, so it is both buf and meta)."""
    import numpy as np
    if (host := buf.host) is None: raise RuntimeError(f"{buf.device} memory has no host view: NPY cannot map it")
    array = np.frombuffer(host, np.uint8)
    return BufferStorage(array, array, host)


class NPYDevice(Compiled):
  """The NPY device: an allocator and nothing to compile or run."""

  def __init__(self, name: str = PREFIX):
    super().__init__(name, NPYAllocator())


def npy_buffer(array: Any) -> Buffer:
  """A Buffer on NPY that uses ``array``'s memory (zero-copy when it is C-contiguous, else a contiguous copy)."""
  import numpy as np
  from tinycore.device.buffer import Buffer
  from tinycore.dtype import from_np_dtype
  contiguous = np.ascontiguousarray(array)
  raw_bytes = contiguous.reshape(-1).view(np.uint8)
  return Buffer(PREFIX, contiguous.size, from_np_dtype(contiguous.dtype), opaque=raw_bytes)


@hookimpl
def tinycore_api_version() -> str:
  return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  return [DeviceSpec(prefix=PREFIX, description="numpy arrays used in place (host interop; runs no kernels)",
                     priority=-100, compute=False)]


@hookimpl
def tinycore_open_device(name: str) -> Compiled | None:
  prefix, _, index = name.partition(":")
  if prefix != PREFIX: return None
  if index not in ("", "0"): raise ValueError(f"{PREFIX} has a single instance, named {PREFIX!r}; got {name!r}")
  return NPYDevice(PREFIX)
