"""The schedule cache: a realize whose graph has the same shape as an earlier one reuses that schedule.

The key is the graph with its input buffers replaced by numbered placeholders (the graph's shape); the value is
the schedule built for that key. A hit binds the placeholders to this call's buffers and gives every buffer the
schedule creates fresh storage, so scheduling work is done once per graph shape.
"""
from __future__ import annotations
from tinycore.caches import BoundedCache
from tinycore.uop.ops import Ops, UOp
from tinycore.schedule import create_schedule

MAX_ENTRIES = 4096
schedules: BoundedCache[tuple[UOp, tuple[UOp, ...]]] = BoundedCache("schedule templates by graph shape", MAX_ENTRIES)


class ScheduleCacheStats:
  hits = 0
  misses = 0


def buffer_placeholder(i: int, buf: UOp) -> UOp:
  """Slot i standing in for `buf` in a cache key: same device, size and dtype; negative UNIQUE (never a real one)."""
  return UOp(Ops.BUFFER, buf.dtype, (UOp(Ops.UNIQUE, None, (), -(i + 1)), buf.src[1]), buf.arg)


def schedule_template(roots: list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  """The cached schedule for these roots' graph shape, as SINK(linear, SINK(*realized), SINK(*their buffers)) over
  placeholder buffers, and the mapping that binds it to this call: placeholders to the graph's buffers, and every
  buffer the schedule creates to fresh storage."""
  sink = UOp(Ops.SINK, None, tuple(roots))
  inputs = [n for n in sink.toposort() if n.op is Ops.BUFFER]
  placeholders = [buffer_placeholder(i, b) for i, b in enumerate(inputs)]
  key = sink.substitute(dict(zip(inputs, placeholders)))
  entry = schedules.get(key)
  if entry is None:
    ScheduleCacheStats.misses += 1
    linear, becomes = create_schedule(list(key.src))
    keys, values = tuple(becomes.keys()), tuple(becomes.values())
    template = UOp(Ops.SINK, None, (linear, UOp(Ops.SINK, None, keys), UOp(Ops.SINK, None, values)))
    fresh = tuple(n for n in template.toposort() if n.op is Ops.BUFFER and n.src[0].arg > 0)
    entry = schedules.put(key, (template, fresh))
  else: ScheduleCacheStats.hits += 1
  template, fresh = entry
  return template, dict(zip(placeholders, inputs)) | {f: UOp.new_buffer(f.device, f.arg, f.dtype) for f in fresh}


def cached_schedule(roots: list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  """(LINEAR, becomes) for these roots, from the schedule cache, bound to their buffers."""
  template, mapping = schedule_template(roots)
  linear, keys, values = template.substitute(mapping).src
  return linear, dict(zip(keys.src, values.src))
