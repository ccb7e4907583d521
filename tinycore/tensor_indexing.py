"""Indexing (`t[...]`): ints, slices with steps, None and Ellipsis as movement ops (no copies); integer tensors and
lists (advanced indexing, numpy's rules except where tinygrad and torch differ: an int index is applied first, and
a list of lists is a tuple) as a one-hot select-and-sum that fuses into one kernel."""
from __future__ import annotations
import weakref
from typing import TYPE_CHECKING, Any
from tinycore.dtype import dtypes
from tinycore.errors import DTypeError, IndexTypeError, MaskIndexError
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.symbolic_shapes import evaluate
from tinycore.tensor_assign import uop_changed

if TYPE_CHECKING:
  from tinycore.tensor import Tensor


def _expand_ellipsis(indices: tuple, ndim: int) -> tuple:
  consumed = sum(1 for i in indices if i is not None and i is not Ellipsis)
  if consumed > ndim: raise IndexError(f"too many indices ({consumed}) for a tensor with {ndim} dims")
  ellipses = [k for k, i in enumerate(indices) if i is Ellipsis]
  if len(ellipses) > 1: raise IndexError("an index can only have a single ellipsis (...)")
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


def from_numpy_indices(indices: Any) -> Any:
  """numpy index values as their Python/Tensor equivalents (an np.int64 is an int, an int array an index tensor), so
  indices computed with numpy work as they do in numpy. A list holding anything but ints (`t[[[0, 1], [2, 0]]]`,
  `t[[0, slice(None)]]`) is a tuple of indices, one per dim, as in tinygrad and torch; a list of ints is one index,
  and a nested list of bools stays a mask."""
  import numpy as np
  from tinycore.tensor import Tensor
  def convert(index: Any) -> Any:
    if isinstance(index, np.generic): return index.item()
    if isinstance(index, np.ndarray): return Tensor(index) if index.dtype != np.bool_ else index.tolist()
    return index
  if isinstance(indices, list) and not all(isinstance(i, (int, np.integer)) for i in indices) and \
     not (indices and all(isinstance(v, bool) for v in _leaves(indices))):
    indices = tuple(indices)
  return tuple(convert(i) for i in indices) if isinstance(indices, tuple) else convert(indices)


def boolean_mask(indices: Any) -> Tensor | None:
  """The mask when the whole index is one boolean tensor (or a nested list of bools), else None."""
  from tinycore.dtype import dtypes
  from tinycore.tensor import Tensor
  if isinstance(indices, list) and indices and all(isinstance(v, bool) for v in _leaves(indices)):
    return Tensor(indices)
  return indices if isinstance(indices, Tensor) and indices.dtype is dtypes.bool else None


def _leaves(nested: list) -> list:
  return [leaf for item in nested for leaf in (_leaves(item) if isinstance(item, list) else [item])]


def scalar_value(t: Tensor, value: Any) -> Any:
  """A value for `t[...] = value`: a 0-d tensor made from a Python number (`Tensor(1.0)`) as that number when the
  number takes t's dtype, as tinygrad's weak 0-d tensors do (`half[0] = Tensor(1.0)` works; a float into an int
  tensor is still a dtype mismatch); anything else as it is."""
  from tinycore.tensor import Tensor
  from tinycore.dtype import dtypes
  # (tinygrad's Tensor(True) is a plain bool, not weak)
  if not isinstance(value, Tensor) or value.uop.op is not Ops.CONST or value.dtype in (t.dtype, dtypes.bool):
    return value
  number = value.uop.arg
  return number if t._scalar_dtype(number) is t.dtype else value


def check_value_dtype(t: Tensor, value: Tensor) -> None:
  """A tensor stored into t through an index has t's dtype: as assign, and tinygrad's setitem (a Python number is
  converted instead)."""
  if value.dtype is not t.dtype:
    raise DTypeError(f"setitem dtype mismatch: cannot store {value.dtype.name} into {t.dtype.name} (cast it first)")


def masked_setitem(t: Tensor, mask: Tensor, value: Any) -> None:
  """`t[mask] = value` for a boolean mask over t's leading dims and one value (a scalar or a one-element tensor):
  where the mask holds, t becomes value (torch's `x[x < 0] = 0`). The selection's size depends on the data, so a
  value per selected element is not supported."""
  from tinycore.tensor import Tensor
  if mask.shape != t.shape[:mask.ndim]:
    raise IndexError(f"boolean mask of shape {mask.shape} does not match the tensor's shape {t.shape}")
  if isinstance(value, Tensor):
    check_value_dtype(t, value)
    if value.numel() != 1: raise NotImplementedError(
      f"t[mask] = value needs one value (a scalar), got shape {value.shape}: use t.assign(mask.where(value, t))")
    value = value.reshape(()).cast(t.dtype)
  else: value = Tensor(value, device=t.device, dtype=t.dtype)
  spread = mask.reshape(mask.shape + (1,) * (t.ndim - mask.ndim))
  t.assign(spread.where(value, t))


def getitem(t: Tensor, indices: Any) -> Tensor:
  indices = from_numpy_indices(indices)
  if not isinstance(indices, tuple): indices = (indices,)
  if any(is_advanced_index(i) for i in indices): return _advanced_getitem(t, indices)
  for i in indices:
    if not (i is None or i is Ellipsis or isinstance(i, (int, slice))) or isinstance(i, bool):
      raise IndexTypeError(f"invalid index {i!r} of type {type(i).__name__}")
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
      if isinstance(size, UOp) and index < 0:
        raise IndexError(f"a negative index {index} into a dim of symbolic size {size} is not supported")
      if not -evaluate(size) <= index < evaluate(size):
        raise IndexError(f"index {index} is out of bounds for dimension {len(final_shape) + len(drop_dims)} "
                         f"with size {size}")
      index %= evaluate(size)
      bounds = [None] * out.ndim
      bounds[dim] = (index, index + 1)
      out = out.shrink(bounds)
      drop_dims.append(dim)
      dim += 1
      continue
    if isinstance(size, UOp) or any(isinstance(x, UOp) for x in (index.start, index.stop, index.step)):
      out = out.shrink([None] * dim + [_symbolic_slice_bounds(index, size)] + [None] * (out.ndim - dim - 1))
      final_shape.append(out.shape[dim])
      dim += 1
      continue
    start, stop, step = index.indices(size)
    if step > 0:
      lo, hi = start, max(start, stop)
    else:
      lo, hi = max(stop + 1, 0), start + 1
      if hi <= lo: lo = hi = 0
    if (lo, hi) != (0, size):  # (a whole dim, `:` or `...`, needs no shrink)
      bounds = [None] * out.ndim
      bounds[dim] = (lo, hi)
      out = out.shrink(bounds)
    if step < 0: out = out.flip(dim)
    out = _take_every(out, dim, abs(step))
    final_shape.append(out.shape[dim])
    dim += 1
  if drop_dims: out = out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in drop_dims))
  return out if out is not t else t.reshape(t.shape)  # `t[:]` is still a view of t (a new Tensor), as before


def _symbolic_slice_bounds(index: slice, size: int | UOp) -> tuple[int | UOp, int | UOp]:
  """The shrink bounds of a step-1 slice with a bound Variable in it (or of a dim of symbolic size): `t[:, :v]`.
  A negative int counts from the end of an int-sized dim only."""
  if index.step not in (None, 1):
    raise IndexError(f"a slice with Variables (or of a symbolic dim) needs step 1: {index}")

  def bound(x: int | UOp | None, default: int | UOp) -> int | UOp:
    if x is None: return default
    if isinstance(x, int) and x < 0:
      if isinstance(size, UOp): raise IndexError(f"a negative slice bound {x} into a symbolic dim is not supported")
      return max(0, x + size)
    return min(x, size) if isinstance(x, int) and isinstance(size, int) else x
  return bound(index.start, 0), bound(index.stop, size)


def is_advanced_index(index: Any) -> bool:
  """Whether an entry of an index is advanced: an integer tensor, a list or a nested tuple of ints."""
  from tinycore.tensor import Tensor
  return isinstance(index, (Tensor, list, tuple))


def _index_tensor(index: Any, device: str) -> Tensor:
  from tinycore.dtype import dtypes
  from tinycore.tensor import Tensor
  if not isinstance(index, Tensor):
    try: index = Tensor(list(index) if isinstance(index, tuple) else index, device=device)
    except (TypeError, ValueError) as e: raise IndexError(f"invalid index list {index!r}: {e}") from e
    # a list of ints is an int32 index (an empty one too); a list of bools is a mask, as in numpy, and rejected below
    if index.dtype is not dtypes.bool and (index.numel() == 0 or not dtypes.is_float(index.dtype)):
      index = index.cast(dtypes.int32)
  if index.dtype is dtypes.bool:
    raise MaskIndexError("boolean mask indexing has a data-dependent shape; use where(), masked_fill() or "
                              "masked_select() (setting, t[mask] = scalar, works)")
  if dtypes.is_float(index.dtype): raise IndexError(f"tensors used as indices must be integers, got {index.dtype}")
  # an index into a tensor on a device tuple is replicated onto those devices
  if isinstance(device, tuple) and index.device != device: index = index.to(device)
  return index


def _broadcast_index_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
  from tinycore.tensor import broadcast_shape
  try: return broadcast_shape(*shapes)
  except ValueError as e: raise IndexError(f"index tensors of shapes {shapes} do not broadcast together") from e


class _AdvancedIndex:
  """An index with tensors split into a basic view and a one-hot mask. `view` is t indexed by the index with every
  tensor replaced by a full slice; `others`/`indexed` are its dims without/with an index tensor; `mask` (shape
  batch + the indexed sizes) is True where the index tensors, broadcast to `batch`, name an element; `placement`
  permutes (others dims + batch dims) into numpy's result order."""

  def __init__(self, t: Tensor, indices: tuple):
    from tinycore.tensor import Tensor
    entries = _expand_ellipsis(indices, t.ndim)
    tensors = [_index_tensor(i, t.device) if is_advanced_index(i) else None for i in entries]
    self.view = getitem(t, tuple(slice(None) if tensor is not None else i for i, tensor in zip(entries, tensors)))
    # the view's dims, and the index tensor (if any) each came from
    dim_tensors = [tensor for i, tensor in zip(entries, tensors) if not isinstance(i, int) or tensor is not None]
    self.indexed = [d for d, tensor in enumerate(dim_tensors) if tensor is not None]
    self.others = [d for d, tensor in enumerate(dim_tensors) if tensor is None]
    self.batch = _broadcast_index_shapes([tensor.shape for tensor in tensors if tensor is not None])
    k, nb = len(self.indexed), len(self.batch)
    self.mask = None
    for j, d in enumerate(self.indexed):
      index, n = dim_tensors[d], self.view.shape[d]
      index = (index < 0).where(index + n, index)
      index = index.reshape((1,) * (nb - index.ndim) + index.shape).expand(self.batch).reshape(self.batch + (1,) * k)
      positions = Tensor.arange(n, device=t.device, dtype=index.dtype).reshape((1,) * (nb + j) + (n,) + (1,) * (k-j-1))
      hit = index == positions
      self.mask = hit if self.mask is None else self.mask & hit
    # the batch dims go in place of the indexed ones when those are adjacent dims of the view, else first; an int
    # has already removed its dim, so it does not count (as in tinygrad and torch: t[1, :, idx] keeps idx's dims last,
    # where numpy would put them first)
    adjacent = self.indexed == list(range(self.indexed[0], self.indexed[-1] + 1))
    front = sum(1 for d in self.others if d < self.indexed[0]) if adjacent else 0
    no = len(self.others)
    self.placement = list(range(front)) + list(range(no, no + nb)) + list(range(front, no))

  def batch_axes(self) -> tuple[int, ...]:
    """The batch axes of (others + batch + indexed sizes)."""
    return tuple(range(len(self.others), len(self.others) + len(self.batch)))


# id of each live result of an advanced index -> (a weak ref to it, the indexed tensor, the indices), so
# result.assign(v) writes through (`t[idx].assign(v)` as `t[idx] = v`). Keyed by id, not by the tensor: a weak dict
# would compare tensors with ==, which is elementwise; a result that dies removes its entry.
advanced_results: dict[int, tuple[weakref.ref, Tensor, tuple]] = {}


def _remember_advanced(result: Tensor, t: Tensor, indices: tuple) -> None:
  key = id(result)
  advanced_results[key] = (weakref.ref(result, lambda _ref: advanced_results.pop(key, None)), t, indices)


def _advanced_getitem(t: Tensor, indices: tuple) -> Tensor:
  """numpy's advanced indexing: the index tensors broadcast to one shape B; each result element reads the element
  they name (negative indices count from the end; out-of-range ones read 0, unchecked as in tinygrad)."""
  ix = _AdvancedIndex(t, indices)
  values = ix.view.permute(ix.others + ix.indexed)
  no, nb = len(ix.others), len(ix.batch)
  values = values.reshape(values.shape[:no] + (1,) * nb + values.shape[no:])
  # one term of each sum is not zero, so it is exact in the tensor's own dtype; a widened sum (uint8's in uint32)
  # would hide the select-and-sum behind casts from the codegen, which reads it as one load at the picked address
  own = None if t.dtype is dtypes.bool else t.dtype
  picked = ix.mask.where(values, 0).sum(tuple(range(no + nb, values.ndim)), dtype=own).cast(t.dtype)
  result = picked.permute(ix.placement)
  _remember_advanced(result, t, indices)
  return result


def assign_through_index(result: Tensor, value: Tensor) -> bool:
  """If result came from an advanced index t[idx], write value into t there (as t[idx] = value), make result read
  what t now holds there, and say True; else False (a plain tensor or view: the caller assigns)."""
  entry = advanced_results.get(id(result))
  if entry is None or entry[0]() is not result: return False
  _, t, indices = entry
  advanced_setitem(t, indices, value)
  result.uop = _advanced_getitem(t, indices).uop
  uop_changed(result)
  return True


def advanced_setitem(t: Tensor, indices: tuple, value: Tensor) -> None:
  """`t[indices] = value` with index tensors: every element an index names gets its value (of several writes to
  one element the last wins), as a where over the basic view, assigned into it."""
  from tinycore.tensor import Tensor
  check_value_dtype(t, value)
  ix = _AdvancedIndex(t, indices)
  no, nb, k = len(ix.others), len(ix.batch), len(ix.indexed)
  result_shape = tuple([ix.view.shape[d] for d in ix.others] + list(ix.batch))
  result_shape = tuple(result_shape[p] for p in ix.placement)
  if value.ndim > len(result_shape): raise ValueError(f"cannot assign shape {value.shape} to an index of shape "
                                                      f"{result_shape}")
  value = value.reshape((1,) * (len(result_shape) - value.ndim) + value.shape).expand(result_shape)
  inverse = sorted(range(len(ix.placement)), key=lambda i: ix.placement[i])
  value = value.permute(inverse)  # others + batch
  value = value.reshape(value.shape + (1,) * k)
  # the last write wins: of the batch positions naming one element, the highest
  count = 1
  for s in ix.batch: count *= s
  if count == 0: return  # an empty index writes nothing
  order = Tensor.arange(count, device=t.device).reshape(ix.batch + (1,) * k)
  last = ix.mask.where(order, -1).max(tuple(range(nb)), keepdim=True) if nb else order
  winner = ix.mask & (order == last)
  written = winner.where(value, 0).sum(ix.batch_axes()).cast(t.dtype)  # others + indexed sizes
  hit = ix.mask.any(tuple(range(nb))).reshape((1,) * no + written.shape[no:]) if nb else ix.mask
  current = ix.view.permute(ix.others + ix.indexed)
  merged = hit.where(written, current)
  back = sorted(range(no + k), key=lambda i: (ix.others + ix.indexed)[i])
  ix.view.assign(merged.permute(back).contiguous())
