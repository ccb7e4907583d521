"""Movement ops as index math: given the index of each output dim, the index into the source (and a validity mask).

Every movement op is a pure function from output indices to source indices, so a chain of them over a buffer
becomes one address expression instead of a copy.
"""
from __future__ import annotations
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp, conjuncts, prod
from tinycore.uop.symbolic_shapes import max_int

Index = tuple[UOp, ...]


def const_index(value: int) -> UOp: return UOp.const(dtypes.index, value)


def and_valid(a: UOp | None, b: UOp | None) -> UOp | None:
  if a is None: return b
  if b is None: return a
  return UOp(Ops.AND, dtypes.bool, (a, b))


def gate_within(valid: UOp | None, ranges: set[UOp]) -> UOp | None:
  """The conditions of a load gate that concern these loops (or no loop): what a value computed over them needs.
  A gate only keeps loads in bounds (values past a pad or a symbolic size are masked where they are read, by a WHERE),
  so a condition on another loop cannot change such a value's loads: dropped, the value does not depend on that loop
  (a reduce inside another loop's body is then the same node as outside it, and computed once)."""
  if valid is None: return None
  kept = None
  for condition in conjuncts(valid):
    loops = {n for n in condition.toposort() if n.op is Ops.RANGE}
    if not loops or loops & ranges: kept = and_valid(kept, condition)
  return kept


def index_size(size: int | UOp) -> int | UOp:
  """A shape entry for index math: an int stays an int; a symbolic size (an expression of the Variables, unbound in
  the schedule) is rebuilt in the index dtype, its Variables cast."""
  if not isinstance(size, UOp): return size
  if size.op is Ops.CONST: return const_index(size.arg)
  if size.op is Ops.DEFINE_VAR: return UOp(Ops.DEFINE_VAR, size.dtype, (), size.arg).cast(dtypes.index)  # a parameter
  if size.op is Ops.CAST: return index_size(size.src[0])
  if size.op is Ops.BIND: raise RuntimeError(f"Variable {size.expr!r} is still bound in a schedule")
  return UOp(size.op, dtypes.index, tuple(index_size(s) for s in size.src))


def _as_index(x: int | UOp) -> UOp: return x if isinstance(x, UOp) else const_index(x)


def index_shape(shape: tuple) -> tuple:
  return tuple(index_size(s) for s in shape)


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
  strides, acc = [], 1
  for s in reversed(index_shape(shape)):
    strides.append(acc if s != 1 else 0)
    acc *= s
  return tuple(reversed(strides))


def flat_index(idx: Index, shape: tuple[int, ...]) -> UOp:
  """The row-major element offset of idx in a buffer of `shape`."""
  out: UOp | None = None
  for i, stride in zip(idx, row_major_strides(shape)):
    if stride == 0: continue
    term = i if stride == 1 else i * stride
    out = term if out is None else out + term
  return out if out is not None else const_index(0)


def unflatten_index(flat: UOp, shape: tuple[int, ...]) -> Index:
  shape = index_shape(shape)
  return tuple(const_index(0) if s == 1 else (flat // stride) % s if stride else const_index(0)
               for s, stride in zip(shape, row_major_strides(shape)))


def reshape_index(idx: Index, out_shape: tuple[int, ...], src_shape: tuple[int, ...]) -> Index:
  if len(src_shape) == 1: return (flat_index(idx, out_shape),)  # to one dim: the row-major offset
  # fast path: the reshape only adds or removes size-1 dims
  if tuple(s for s in out_shape if s != 1) == tuple(s for s in src_shape if s != 1):
    kept = iter([i for i, s in zip(idx, out_shape) if s != 1])
    return tuple(next(kept) if s != 1 else const_index(0) for s in src_shape)
  return unflatten_index(flat_index(idx, out_shape), src_shape)


def source_index(u: UOp, idx: Index, memo: dict | None = None) -> tuple[Index, UOp | None]:
  """For movement op u and an index into u's shape: the index into u.src[0] and the in-bounds condition (PAD only).
  `memo` (one per schedule) keeps the answers: the same movement read at the same loops (each layer of a model, in
  kernels lowered alike) is worked out once."""
  if memo is None: return _source_index(u, idx)
  key = (u.op, u.arg, u.src[0].shape, idx)
  if (hit := memo.get(key)) is None: hit = memo[key] = _source_index(u, idx)
  return hit


def _source_index(u: UOp, idx: Index) -> tuple[Index, UOp | None]:
  src_shape = u.src[0].shape
  if u.op is Ops.RESHAPE: return reshape_index(idx, u.shape, src_shape), None
  src_shape = index_shape(src_shape)
  if u.op is Ops.PERMUTE:
    out = [const_index(0)] * len(idx)
    for i, axis in enumerate(u.arg): out[axis] = idx[i]
    return tuple(out), None
  if u.op is Ops.EXPAND:
    return tuple(const_index(0) if s == 1 else i for i, s in zip(idx, src_shape)), None
  if u.op is Ops.SHRINK:
    return tuple(i + index_size(b) if isinstance(b, UOp) or b else i for i, (b, _) in zip(idx, u.arg)), None
  if u.op is Ops.FLIP:
    return tuple((s - 1) - i if f else i for i, s, f in zip(idx, src_shape, u.arg)), None
  if u.op is Ops.PAD:
    valid: UOp | None = None
    out = []
    for i, s, (before, after) in zip(idx, src_shape, u.arg):
      before, after = index_size(before), index_size(after)
      if isinstance(before, UOp) or before:
        valid = and_valid(valid, UOp(Ops.CMPLT, dtypes.bool, (_as_index(before - 1), i)))
      if isinstance(after, UOp) or after:
        valid = and_valid(valid, UOp(Ops.CMPLT, dtypes.bool, (i, _as_index(before + s))))
      out.append(i - before if before else i)
    return tuple(out), valid
  raise AssertionError(f"{u.op} is not a movement op")


def is_contiguous_view(u: UOp) -> bool:
  """A movement chain that reads its base in order (only reshapes)."""
  node = u
  while node.op is Ops.RESHAPE: node = node.src[0]
  return node.op not in (Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP) and prod(u.shape) == prod(node.shape)


def ranges_in(idx: Index) -> set[UOp]:
  """The loops an index depends on."""
  return {r for i in idx for r in i.toposort() if r.op is Ops.RANGE}


class KernelLoops:
  """The loops of one kernel: its output loops, then a fresh range for each reduction it computes (numbered in the
  order they are made, so one kernel never reuses a loop)."""

  def __init__(self) -> None:
    self.output_ranges: list[UOp] = []
    self.range_count = 0

  def new_range(self, size: int, kind: str) -> UOp:
    if size == 1: return const_index(0)
    rng = UOp(Ops.RANGE, dtypes.index, (const_index(size),), (self.range_count, kind))
    self.range_count += 1
    return rng

  def sized_range(self, size: int | UOp, kind: str) -> tuple[UOp, UOp | None]:
    """A loop over a dim and the gate its iterations need: none for an int size; a symbolic size (a Variable the
    kernel takes as an argument) loops to its largest value, gated by `index < size`."""
    if not isinstance(size, UOp): return self.new_range(size, kind), None
    bound = index_size(size)
    rng = self.new_range(max_int(size), kind)
    # the bound rides along as the RANGE's second source: a renderer may end the loop there (the gate stays, so one
    # that loops to the largest size is right too)
    if rng.op is Ops.RANGE: rng = rng.replace(src=(*rng.src, bound))
    return rng, UOp(Ops.CMPLT, dtypes.bool, (rng, bound))

  def output_index(self, shape: tuple[int, ...]) -> tuple[Index, UOp | None]:
    """The output loops of a kernel over `shape`, and the gate of its symbolic dims (None when all are ints)."""
    ranges = [self.sized_range(s, "loop") for s in shape]
    idx = tuple(rng for rng, _ in ranges)
    self.output_ranges = [i for i in idx if i.op is Ops.RANGE]
    gate = None
    for _, g in ranges: gate = and_valid(gate, g)
    return idx, gate

  def reduce_index(self, reduce: UOp, idx: Index) -> tuple[Index, list[UOp], UOp | None]:
    """The index a REDUCE_AXIS reads its source at when it is read at `idx`: a fresh loop for each reduced axis.
    Returns (that index, the reduce loops, the gate of symbolic reduced sizes)."""
    src, axes = reduce.src[0], reduce.arg[1]
    new_idx = list(idx)
    reduce_ranges, gate = [], None
    for axis in axes:
      rng, dim_gate = self.sized_range(src.shape[axis], "reduce")
      new_idx[axis], gate = rng, and_valid(gate, dim_gate)
      if rng.op is Ops.RANGE: reduce_ranges.append(rng)
    return tuple(new_idx), reduce_ranges, gate


def kept_ranges(reduce: UOp, idx: Index) -> set[UOp]:
  """The loops a reduce's result depends on where it is read at `idx` (the ranges of its kept axes)."""
  axes = reduce.arg[1]
  return {r for axis, i in enumerate(idx) if axis not in axes for r in i.toposort() if r.op is Ops.RANGE}


def resized_bitcast_indices(u: UOp, idx: Index) -> list[Index]:
  """The source indices a bitcast to another item size reads for one element: one word of a wider source, or
  `ratio` consecutive words of a narrower one (little-endian)."""
  in_size, out_size = u.src[0].dtype.itemsize, u.dtype.itemsize
  last = idx[-1]
  if out_size < in_size: return [idx[:-1] + (last // (in_size // out_size),)]
  ratio = out_size // in_size
  return [idx[:-1] + (last * ratio + k,) for k in range(ratio)]
