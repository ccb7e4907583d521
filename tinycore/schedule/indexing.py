"""Movement ops as index math: given the index of each output dim, the index into the source (and a validity mask).

Every movement op is a pure function from output indices to source indices, so a chain of them over a buffer
becomes one address expression instead of a copy.
"""
from __future__ import annotations
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp, prod

Index = tuple[UOp, ...]


def const_index(value: int) -> UOp: return UOp.const(dtypes.index, value)


def and_valid(a: UOp | None, b: UOp | None) -> UOp | None:
  if a is None: return b
  if b is None: return a
  return UOp(Ops.AND, dtypes.bool, (a, b))


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
  strides, acc = [], 1
  for s in reversed(shape):
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
  return tuple(const_index(0) if s == 1 else (flat // stride) % s if stride else const_index(0)
               for s, stride in zip(shape, row_major_strides(shape)))


def reshape_index(idx: Index, out_shape: tuple[int, ...], src_shape: tuple[int, ...]) -> Index:
  # fast path: the reshape only adds or removes size-1 dims
  if tuple(s for s in out_shape if s != 1) == tuple(s for s in src_shape if s != 1):
    kept = iter([i for i, s in zip(idx, out_shape) if s != 1])
    return tuple(next(kept) if s != 1 else const_index(0) for s in src_shape)
  return unflatten_index(flat_index(idx, out_shape), src_shape)


def source_index(u: UOp, idx: Index) -> tuple[Index, UOp | None]:
  """For movement op u and an index into u's shape: the index into u.src[0] and the in-bounds condition (PAD only)."""
  src_shape = u.src[0].shape
  if u.op is Ops.RESHAPE: return reshape_index(idx, u.shape, src_shape), None
  if u.op is Ops.PERMUTE:
    out = [const_index(0)] * len(idx)
    for i, axis in enumerate(u.arg): out[axis] = idx[i]
    return tuple(out), None
  if u.op is Ops.EXPAND:
    return tuple(const_index(0) if s == 1 else i for i, s in zip(idx, src_shape)), None
  if u.op is Ops.SHRINK:
    return tuple(i + b if b else i for i, (b, _) in zip(idx, u.arg)), None
  if u.op is Ops.FLIP:
    return tuple((s - 1) - i if f else i for i, s, f in zip(idx, src_shape, u.arg)), None
  if u.op is Ops.PAD:
    valid: UOp | None = None
    out = []
    for i, s, (before, after) in zip(idx, src_shape, u.arg):
      if before: valid = and_valid(valid, UOp(Ops.CMPLT, dtypes.bool, (const_index(before - 1), i)))
      if after: valid = and_valid(valid, UOp(Ops.CMPLT, dtypes.bool, (i, const_index(before + s))))
      out.append(i - before if before else i)
    return tuple(out), valid
  raise AssertionError(f"{u.op} is not a movement op")


def is_contiguous_view(u: UOp) -> bool:
  """A movement chain that reads its base in order (only reshapes)."""
  node = u
  while node.op is Ops.RESHAPE: node = node.src[0]
  return node.op not in (Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP) and prod(u.shape) == prod(node.shape)
