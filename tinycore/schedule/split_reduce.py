"""Split reductions: a big reduction to few outputs runs as per-core partial reductions plus a small second one.

A kernel shares its outermost output loop across the device's cores, so a reduction to one value (or to fewer
outputs than cores) would run on one core, and a column sum would read each row in short strided runs. Both become
two reductions: the reduced rows split into `parts` contiguous slices, each reduced into a realized partial (one
slice per core, read front to back), and then the partials reduced. How many parts comes from the device: its
`cores` capability (the device layer installs the lookup); a device without one (a GPU launching a grid, the
interpreter) gets SPLIT_PARTS_GRID parts for a big reduction to one value, which its work-items share.
Floats: the split reassociates a sum (as numpy's pairwise sum does); a max or min is exact in any order.
"""
from __future__ import annotations
from typing import Callable
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp, identity_element, prod
from tinycore.uop.pattern import PatternMatcher, UPat, graph_rewrite_map

SPLIT_MIN_ELEMENTS = 1 << 18    # reducing fewer elements (in all) to few outputs is not worth a second kernel
SPLIT_MIN_GRID = 1 << 20        # ... to one value on a device without `cores`
SPLIT_PARTS_GRID = 256          # partials of a reduction to one value on a device without `cores`
MIN_PART_ROWS = 64              # a column sum splits only if every part still reduces this many rows
MAX_PARTIAL_OUTPUTS = 1 << 16   # ... and only while its partials (parts x outputs) stay small

# the device layer installs the lookup (device name -> cores a kernel's outer loop is shared across; 0: none)
_cores_of: list[Callable[[str], int]] = []


def install_core_count(lookup: Callable[[str], int]) -> None:
  """Called once by the device registry: how the scheduler learns a device's core count from its name."""
  _cores_of[:] = [lookup]


def device_cores(device: object) -> int:
  """The cores one kernel of `device` runs on (its `cores` capability); 0 for a device without one."""
  if not isinstance(device, str) or not _cores_of: return 0
  return _cores_of[0](device)


def reduce_axis(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
  return UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (op, axes))


def pad_with_identity(flat: UOp, extra: int, op: Ops, device: str) -> UOp:
  """A 1-d value padded at the end by `extra` copies of the reduction's identity (PAD itself fills with +0)."""
  identity = identity_element(op, flat.dtype)
  padded = flat.pad(((0, extra),))
  if op is Ops.ADD: return padded
  size = flat.shape[0] + extra
  inside = UOp.const(dtypes.bool, True, device).reshape((1,)).expand(flat.shape).pad(((0, extra),))
  return inside.where(padded, UOp.const(flat.dtype, identity, device).reshape((1,)).expand((size,)))


def split_everything(r: UOp, parts: int) -> UOp:
  """A reduction to one value over `parts` contiguous slices of the flattened input (the tail padded)."""
  x, op = r.src[0], r.arg[0]
  n = prod(x.shape)
  rows = -(-n // parts)
  flat = x.reshape((n,))
  if rows * parts != n: flat = pad_with_identity(flat, rows * parts - n, op, x.device)
  partial = reduce_axis(flat.reshape((parts, rows)), op, (1,))
  return reduce_axis(partial, op, (0,)).reshape(r.shape)


def split_outer_axis(r: UOp, parts: int) -> UOp:
  """The outermost reduced axis split into (parts, rows): the partials keep the parts axis, then lose it. Rows left
  over (a count that is no multiple of `parts`) are reduced on their own and combined with the result."""
  x, (op, axes) = r.src[0], r.arg
  first, size = min(axes), x.shape[min(axes)]
  rows = size // parts
  def along_first(start: int, end: int) -> UOp:
    return x.shrink(tuple((start, end) if axis == first else (0, s) for axis, s in enumerate(x.shape)))
  evenly = x if rows * parts == size else along_first(0, rows * parts)
  shape = x.shape[:first] + (parts, rows) + x.shape[first + 1:]
  partial = reduce_axis(evenly.reshape(shape), op, tuple(a + 1 for a in axes))
  out = reduce_axis(partial, op, (first,)).reshape(r.shape)
  if rows * parts == size: return out
  return out.alu(op, reduce_axis(along_first(rows * parts, size), op, axes).reshape(r.shape))


def split_plan(r: UOp) -> tuple[str, int] | None:
  """How to split REDUCE_AXIS r: ("everything" | "outer", parts), or None to keep it one kernel."""
  x, (_, axes) = r.src[0], r.arg
  if not all(isinstance(s, int) for s in x.shape) or not isinstance(x.device, str) or not axes: return None
  outputs = prod(r.shape)
  reduced = prod(x.shape) // max(outputs, 1)
  cores = device_cores(x.device)
  if cores < 2:
    return ("everything", SPLIT_PARTS_GRID) if outputs == 1 and reduced >= SPLIT_MIN_GRID else None
  if outputs < cores and outputs * reduced >= SPLIT_MIN_ELEMENTS:
    if outputs == 1: return ("everything", cores)
    return ("outer", cores) if x.shape[min(axes)] % cores == 0 else None
  # a column sum (a kept axis after the reduced ones): each core streams whole rows of its slice (the rows an odd
  # count leaves over, fewer than `cores`, are a small reduction of their own)
  column = max(axes) < len(x.shape) - 1
  outer_rows = x.shape[min(axes)]
  if (column and outputs * cores <= MAX_PARTIAL_OUTPUTS and reduced >= cores * MIN_PART_ROWS and
      (outer_rows % cores == 0 or outer_rows >= cores * MIN_PART_ROWS)):
    return ("outer", cores)
  return None


def _split(ctx: set[UOp], r: UOp) -> UOp | None:
  if r in ctx or (plan := split_plan(r)) is None: return None
  how, parts = plan
  out = split_everything(r, parts) if how == "everything" else split_outer_axis(r, parts)
  # the new reductions (all above r's source: not walked into) are not split again
  ctx.update(u for u in out.toposort(gate=lambda u: u is not r.src[0]) if u.op is Ops.REDUCE_AXIS)
  return out


split_rules = PatternMatcher([
  # a big reduction to few outputs (or down the rows of a column sum) is partials per core, then their reduction
  (UPat(Ops.REDUCE_AXIS, name="r"), lambda ctx, r: _split(ctx, r)),
])


def split_reductions(sink: UOp) -> dict[UOp, UOp]:
  """What every node under sink became with its big reductions split (a graph with none to split: itself)."""
  nodes = sink.toposort()
  if not any(n.op is Ops.REDUCE_AXIS and split_plan(n) is not None for n in nodes): return {n: n for n in nodes}
  return graph_rewrite_map(sink, split_rules, ctx=set())

