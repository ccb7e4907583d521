"""Executing a COPY call: move a buffer's bytes to a buffer on another device."""
from __future__ import annotations
from tinycore.device.buffer import Buffer


def run_copy(dst: Buffer, src: Buffer) -> None:
  """Copy src's bytes into dst (equal sizes). The first path that applies wins:
  1. same device kind with a direct transfer (`Allocator._transfer`);
  2. a destination with a zero-copy host view: the source copies out straight into it;
  3. otherwise through host memory: copy out, then copy in."""
  if dst.nbytes != src.nbytes: raise ValueError(f"copy between buffers of different sizes: {src.nbytes} -> {dst.nbytes} bytes")
  if dst.nbytes == 0: return
  dst.ensure_allocated()
  src_alloc, dst_alloc = src.allocator, dst.allocator
  if src.device.split(":")[0] == dst.device.split(":")[0] and dst_alloc.supports_transfer:
    from tinycore.device.registry import Device
    dst_alloc._transfer(dst._buf, src._buf, dst.nbytes, Device[src.device], Device[dst.device])
    return
  if dst_alloc.supports_as_buffer:
    src.copyout(dst_alloc._as_buffer(dst._buf))
    return
  dst.copyin(src.as_memoryview())
