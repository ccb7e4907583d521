"""A third-party storage-only device for the tests: VAULT keeps bytes in private memory the host reaches only by
copying (no zero-copy view), and runs no kernels. Nothing in the core names it: it must behave like DISK in copies
because of what its DeviceSpec declares (compute=False), not because of its name.

Also HOLLOW: a kind that declares compute=True but opens a device without renderer, compiler or runtime (an error).
"""
from __future__ import annotations
from tinycore.device.allocator import Allocator, BufferSpec
from tinycore.device.compiled import Compiled
from tinycore.plugin import API_VERSION, DeviceSpec, hookimpl


class VaultMemory:
  """``nbytes`` at ``offset`` of a private bytearray."""
  def __init__(self, store: bytearray, offset: int, nbytes: int):
    self.store, self.offset, self.nbytes = store, offset, nbytes


class VaultAllocator(Allocator[VaultMemory]):
  def _alloc(self, nbytes: int, spec: BufferSpec) -> VaultMemory: return VaultMemory(bytearray(nbytes), 0, nbytes)
  def _offset(self, handle: VaultMemory, nbytes: int, offset: int) -> VaultMemory:
    return VaultMemory(handle.store, handle.offset + offset, nbytes)
  def _copyin(self, dst: VaultMemory, src: memoryview) -> None:
    dst.store[dst.offset:dst.offset + src.nbytes] = bytes(src)
  def _copyout(self, dst: memoryview, src: VaultMemory) -> None:
    dst[:] = src.store[src.offset:src.offset + dst.nbytes]


@hookimpl
def tinycore_api_version() -> str: return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  return [DeviceSpec("VAULT", "private storage, runs no kernels", priority=-100, compute=False),
          DeviceSpec("HOLLOW", "declares compute but has nothing to compute with", priority=-100, compute=True)]


@hookimpl
def tinycore_open_device(name: str) -> Compiled | None:
  prefix = name.partition(":")[0]
  if prefix not in ("VAULT", "HOLLOW"): return None
  return Compiled(name, VaultAllocator())
