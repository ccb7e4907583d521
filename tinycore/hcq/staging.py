"""Staging: copies between a queue device and host memory it cannot address in place go through a pinned ring.

The ring is one buffer of the core's host memory (the PYTHON device's memory, `HOST_DEVICE`: page-aligned, at a
stable address, addressed in place by every queue device) of STAGING_SIZE bytes split into STAGING_SLOTS slots.
A copy is cut into chunks of one slot; chunk i uses slot i mod STAGING_SLOTS and the last chunk is short. An
upload chunk is a host memcpy (source -> slot) then a queue copy (slot -> destination); a download runs the other
way. A slot is reused only after its previous queue copy completed: the host memcpy that refills it is a host call,
and host calls wait for the queues first.
"""
from __future__ import annotations
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp
from tinycore.device.python import HOST_DEVICE

STAGING_SIZE = 128 << 20
STAGING_SLOTS = 2
_staging_buffer = None
_staging_uops: dict[int, UOp] = {}


def _staging():
  """The preallocated staging buffer in the core's host memory (created on first use)."""
  global _staging_buffer
  if _staging_buffer is None or _staging_buffer.nbytes != STAGING_SIZE:
    from tinycore.device.buffer import Buffer
    _staging_buffer = Buffer(HOST_DEVICE, STAGING_SIZE, dtypes.uint8, preallocate=True)
  return _staging_buffer


def staging_uop() -> UOp:
  """A BUFFER uop naming the current staging buffer (one per buffer object, so patching `_staging` works)."""
  from tinycore.device.buffers import attach_buffer
  buf = _staging()
  if (uop := _staging_uops.get(id(buf))) is None:
    uop = _staging_uops[id(buf)] = UOp.new_buffer(buf.device, buf.size, buf.dtype)
    attach_buffer(uop, buf)
  return uop


def byte_view(buf: UOp, offset: int, nbytes: int) -> UOp:
  """`nbytes` bytes at `offset` of a BUFFER or BUFFER_VIEW uop, as a uint8 BUFFER_VIEW of the base buffer."""
  if buf.op is Ops.BUFFER_VIEW:
    offset += buf.arg[1]
    buf = buf.src[0]
  if offset == 0 and nbytes == buf.arg * buf.dtype.itemsize and buf.dtype is dtypes.uint8: return buf
  return UOp(Ops.BUFFER_VIEW, dtypes.uint8, (buf,), (nbytes, offset))


def nbytes_of(buf: UOp) -> int:
  return buf.arg[0] * buf.dtype.itemsize if buf.op is Ops.BUFFER_VIEW else buf.arg * buf.dtype.itemsize


def staged_copy_calls(call: UOp, upload: bool) -> list[UOp]:
  """The chunked host + queue copies that replace one COPY call through the staging ring."""
  dst, src = call.src[1], call.src[2]
  total = nbytes_of(dst)
  slot_bytes = STAGING_SIZE // STAGING_SLOTS
  itemsize = dst.dtype.itemsize
  chunk = max(itemsize, slot_bytes // itemsize * itemsize)
  ring = staging_uop()
  out: list[UOp] = []
  for i, start in enumerate(range(0, total, chunk)):
    size = min(chunk, total - start)
    slot = byte_view(ring, (i % STAGING_SLOTS) * slot_bytes, size)
    if upload:
      out.append(_copy_call(slot, byte_view(src, start, size)))       # host memcpy into the slot
      out.append(_copy_call(byte_view(dst, start, size), slot))       # queue copy to the device
    else:
      out.append(_copy_call(slot, byte_view(src, start, size)))       # queue copy from the device
      out.append(_copy_call(byte_view(dst, start, size), slot))       # host memcpy out of the slot
  return out


def _copy_call(dst: UOp, src: UOp) -> UOp:
  callee = UOp(Ops.COPY, dst.dtype, (UOp(Ops.PARAM, src.dtype, (), 1),), dst.device)
  return UOp(Ops.CALL, None, (callee, dst, src))
