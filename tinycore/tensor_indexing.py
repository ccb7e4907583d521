"""Indexing (`t[...]`): ints, slices with steps, None and Ellipsis as movement ops (no copies); integer tensors and
lists (advanced indexing, numpy's rules) as a one-hot select-and-sum that fuses into one kernel."""
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
  if any(is_advanced_index(i) for i in indices): return _advanced_getitem(t, indices)
  for i in indices:
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


def is_advanced_index(index: Any) -> bool:
  """Whether an entry of an index is advanced: an integer tensor, a list or a nested tuple of ints."""
  from tinycore.tensor import Tensor
  return isinstance(index, (Tensor, list, tuple))


def _index_tensor(index: Any, device: str) -> Tensor:
  from tinycore.dtype import dtypes
  from tinycore.tensor import Tensor
  if not isinstance(index, Tensor):
    try: index = Tensor(list(index) if isinstance(index, tuple) else index, device=device, dtype=dtypes.int32)
    except (TypeError, ValueError) as e: raise IndexError(f"invalid index list {index!r}: {e}") from e
  if index.dtype is dtypes.bool:
    raise NotImplementedError("boolean mask indexing has a data-dependent shape; use where() or masked_fill()")
  if dtypes.is_float(index.dtype): raise IndexError(f"tensors used as indices must be integers, got {index.dtype}")
  return index


def _broadcast_index_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
  ndim = max(len(s) for s in shapes)
  padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
  out = []
  for sizes in zip(*padded):
    non_one = {s for s in sizes if s != 1}
    if len(non_one) > 1: raise IndexError(f"index tensors of shapes {shapes} do not broadcast together")
    out.append(non_one.pop() if non_one else 1)
  return tuple(out)


def _advanced_getitem(t: Tensor, indices: tuple) -> Tensor:
  """numpy's advanced indexing: the index tensors broadcast to one shape B; each result element reads the element
  they name (negative indices count from the end; out-of-range ones read 0, unchecked as in tinygrad). B takes
  the place of the indexed dims when those (with any ints) are adjacent in the index, else it comes first."""
  from tinycore.tensor import Tensor
  entries = _expand_ellipsis(indices, t.ndim)
  tensors = [_index_tensor(i, t.device) if is_advanced_index(i) else None for i in entries]
  basic = tuple(slice(None) if tensor is not None else i for i, tensor in zip(entries, tensors))
  out = getitem(t, basic)
  # the result dims of the basic indexing, and which index tensor (if any) each came from
  dim_tensors = [tensor for i, tensor in zip(entries, tensors) if not isinstance(i, int) or tensor is not None]
  indexed = [d for d, tensor in enumerate(dim_tensors) if tensor is not None]
  others = [d for d, tensor in enumerate(dim_tensors) if tensor is None]
  batch = _broadcast_index_shapes([tensor.shape for tensor in tensors if tensor is not None])
  sizes = tuple(out.shape[d] for d in indexed)
  k, nb = len(indexed), len(batch)
  mask = None
  for j, d in enumerate(indexed):
    index, n = dim_tensors[d], out.shape[d]
    index = (index < 0).where(index + n, index)
    index = index.reshape((1,) * (nb - index.ndim) + index.shape).expand(batch).reshape(batch + (1,) * k)
    positions = Tensor.arange(n, device=t.device, dtype=index.dtype).reshape((1,) * (nb + j) + (n,) + (1,) * (k-j-1))
    hit = index == positions
    mask = hit if mask is None else mask & hit
  values = out.permute(others + indexed)
  values = values.reshape(values.shape[:len(others)] + (1,) * nb + sizes)
  picked = mask.where(values, 0).sum(tuple(range(len(others) + nb, len(others) + nb + k))).cast(t.dtype)
  # where the broadcast dims go: in place of the indexed ones when those (and any ints) are adjacent, else first
  advanced_at = [p for p, (i, tensor) in enumerate(zip(entries, tensors)) if tensor is not None or isinstance(i, int)]
  adjacent = advanced_at == list(range(advanced_at[0], advanced_at[-1] + 1))
  front = sum(1 for d in others if d < indexed[0]) if adjacent else 0
  order = list(range(len(others), len(others) + nb))
  return picked.permute(list(range(front)) + order + list(range(front, len(others))))
