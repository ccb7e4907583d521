"""Basic indexing (`t[...]`): ints, slices with steps, None and Ellipsis, all as movement ops (no copies)."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
  from tinycore.tensor import Tensor


def _expand_ellipsis(indices: tuple, ndim: int) -> tuple:
  consumed = sum(1 for i in indices if i is not None and i is not Ellipsis)
  if consumed > ndim: raise IndexError(f"too many indices ({consumed}) for a tensor with {ndim} dims")
  ellipses = [k for k, i in enumerate(indices) if i is Ellipsis]
  if len(ellipses) > 1: raise IndexError("an index can only have one Ellipsis")
  fill = (slice(None),) * (ndim - consumed)
  if ellipses: return indices[:ellipses[0]] + fill + indices[ellipses[0] + 1:]
  return indices + fill


def _take_every(t: Tensor, dim: int, step: int) -> Tensor:
  """Every `step`-th element along dim, starting with the first (step > 0)."""
  if step == 1: return t
  size = t.shape[dim]
  count = -(-size // step)
  padding = [(0, 0)] * t.ndim
  padding[dim] = (0, count * step - size)
  t = t.pad(padding)
  t = t.reshape(t.shape[:dim] + (count, step) + t.shape[dim + 1:])
  bounds = [None] * t.ndim
  bounds[dim + 1] = (0, 1)
  t = t.shrink(bounds)
  return t.reshape(t.shape[:dim] + (count,) + t.shape[dim + 2:])


def getitem(t: Tensor, indices: Any) -> Tensor:
  from tinycore.tensor import Tensor
  if not isinstance(indices, tuple): indices = (indices,)
  for i in indices:
    if isinstance(i, Tensor) or isinstance(i, (list,)):
      raise NotImplementedError("indexing with tensors or lists (advanced indexing) is not supported yet")
    if not (i is None or i is Ellipsis or isinstance(i, (int, slice))) or isinstance(i, bool):
      raise TypeError(f"invalid index {i!r} of type {type(i).__name__}")
  indices = _expand_ellipsis(indices, t.ndim)
  out, dim, final_shape = t, 0, []
  drop_dims = []
  for index in indices:
    if index is None:
      out = out.reshape(out.shape[:dim] + (1,) + out.shape[dim:])
      final_shape.append(1)
      dim += 1
      continue
    size = out.shape[dim]
    if isinstance(index, int):
      if not -size <= index < size:
        raise IndexError(f"index {index} is out of bounds for dimension {len(final_shape) + len(drop_dims)} "
                         f"with size {size}")
      index %= size
      bounds = [None] * out.ndim
      bounds[dim] = (index, index + 1)
      out = out.shrink(bounds)
      drop_dims.append(dim)
      dim += 1
      continue
    start, stop, step = index.indices(size)
    if step > 0:
      lo, hi = start, max(start, stop)
    else:
      lo, hi = max(stop + 1, 0), start + 1
      if hi <= lo: lo = hi = 0
    bounds = [None] * out.ndim
    bounds[dim] = (lo, hi)
    out = out.shrink(bounds)
    if step < 0: out = out.flip(dim)
    out = _take_every(out, dim, abs(step))
    final_shape.append(out.shape[dim])
    dim += 1
  if drop_dims: out = out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in drop_dims))
  return out
