"""Executing a COPY call: move a buffer's bytes to a buffer on another device."""
from __future__ import annotations
from typing import Any, Callable
from tinycore.device.buffer import Buffer

_direct_paths: dict[tuple[str, str], Callable[[Any, Any, int], None] | None] = {}


def direct_transfer(src_device: str, dst_device: str) -> Callable[[Any, Any, int], None] | None:
  """The `tinycore_transfer` hook's answer for this pair of devices (asked once per pair)."""
  key = (src_device, dst_device)
  if key not in _direct_paths:
    from tinycore.device.registry import Device
    from tinycore.plugin.manager import get_plugin_manager, plugin_error_reason
    try:
      _direct_paths[key] = get_plugin_manager().hook.tinycore_transfer(src=Device[src_device], dst=Device[dst_device])
    except KeyboardInterrupt:
      raise
    except BaseException as error:  # a plugin calling sys.exit() must not end the process
      raise RuntimeError(f"the tinycore_transfer hook for {src_device} -> {dst_device} raised "
                         f"{plugin_error_reason(error)}") from error
  return _direct_paths[key]


def run_copy(dst: Buffer, src: Buffer) -> None:
  """Copy src's bytes into dst (equal byte sizes). The first path that applies wins:
  1. a direct transfer a plugin offers for this pair of devices (the `tinycore_transfer` hook);
  2. same device kind with an allocator transfer (`Allocator._transfer`);
  3. both sides host-visible: one memcpy between their zero-copy views;
  4. a host-visible destination: the source copies out straight into it;
  5. a host-visible source: the destination copies in straight from it;
  6. otherwise through host memory: copy out, then copy in."""
  if dst.nbytes != src.nbytes:
    raise ValueError(f"copy between buffers of different sizes: {src.nbytes} -> {dst.nbytes} bytes")
  if dst.nbytes == 0: return
  dst.ensure_allocated()
  src.ensure_allocated()
  if (transfer := direct_transfer(src.device, dst.device)) is not None:
    transfer(dst._buf, src._buf, dst.nbytes)
    return
  src_alloc, dst_alloc = src.allocator, dst.allocator
  if src.device.split(":")[0] == dst.device.split(":")[0] and dst_alloc.supports_transfer:
    from tinycore.device.registry import Device
    dst_alloc._transfer(dst._buf, src._buf, dst.nbytes, Device[src.device], Device[dst.device])
    return
  if dst_alloc.supports_as_buffer:
    # the destination is about to be overwritten: no need to sync it (that would flush a DISK file per copy)
    src.copyout(dst.as_memoryview(force_zero_copy=True, no_sync=True))
    return
  if src_alloc.supports_as_buffer:
    dst.copyin(src.as_memoryview(force_zero_copy=True))
    if not dst_alloc.synchronous_copyin:
      # the destination may read the live source view asynchronously: finish before the source can change
      from tinycore.device.registry import Device
      Device[dst.device].synchronize()
    return
  dst.copyin(src.as_memoryview())
