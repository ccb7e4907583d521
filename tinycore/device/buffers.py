"""Which Buffer backs which BUFFER UOp. The UOp graph names memory; this table holds the memory itself."""
from __future__ import annotations
from tinycore.device.buffer import Buffer
from tinycore.uop.ops import BUFFER_ATTRIBUTE, Ops, UOp
from tinycore.uop.scalars import call_buffers

# The Buffer lives in the BUFFER UOp's instance dict under BUFFER_ATTRIBUTE, so it lives exactly as long as some graph
# (a tensor) still names the UOp; a weak-keyed table did the same at several microseconds more per eager op


def attach_buffer(buf_uop: UOp, buf: Buffer) -> None:
  assert buf_uop.op is Ops.BUFFER, f"can only attach memory to a BUFFER, not {buf_uop.op}"
  buf_uop.__dict__[BUFFER_ATTRIBUTE] = buf


def buffer_of(buf_uop: UOp) -> Buffer:
  """The Buffer for a BUFFER UOp (created, unallocated, on first use), or a view for a BUFFER_VIEW."""
  if buf_uop.op is Ops.BUFFER_VIEW:
    size, byte_offset = buf_uop.arg
    return buffer_of(buf_uop.src[0]).view(size, buf_uop.dtype, byte_offset)
  buf = buf_uop.__dict__.get(BUFFER_ATTRIBUTE)
  if buf is None:
    buf = buf_uop.__dict__[BUFFER_ATTRIBUTE] = Buffer(buf_uop.device, buf_uop.arg, buf_uop.dtype)
  return buf


def linear_buffers(linear: UOp) -> list[UOp]:
  """The distinct BUFFERs a LINEAR's calls use (a BUFFER_VIEW counts as its buffer), in order of first use."""
  seen: dict[UOp, None] = {}
  for call in linear.src:
    for b in call_buffers(call): seen[b.src[0] if b.op is Ops.BUFFER_VIEW else b] = None
  return list(seen)

