"""More of tinygrad's Tensor API, mixed into Tensor: cumulative ops, triangles, roll, meshgrid, repeat_interleave,
einsum, gather/scatter and masked_fill. Every op composes existing lazy ops (no host compute), so the autograd over
the UOp graph differentiates them."""
from __future__ import annotations
import math
import operator
from typing import TYPE_CHECKING, Any, Sequence
from tinycore.dtype import NARROW_FLOATS, DType, dtypes
from tinycore.errors import ArgumentError, DTypeError, FormulaError, ShapeError
from tinycore.uop.ops import Ops, identity_element
from tinycore.tensor_math import TensorMath
from tinycore.tensor_nn import TensorNN
from tinycore.tensor_sort import selected_rows, sorted_rows, value_keys

if TYPE_CHECKING:
  from tinycore.tensor import Tensor


def _axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim, 1):
    raise IndexError(f"dimension {axis} out of range for a tensor with {ndim} dims")
  return axis % max(ndim, 1)


# a scan's op: an Ops (ADD, MUL, MAX) or LOGADDEXP, log(exp(a) + exp(b)), the scan of logcumsumexp
LOGADDEXP = "logaddexp"


def _identity(op: Ops | str, dtype: DType) -> Any:
  return -math.inf if op == LOGADDEXP else identity_element(op, dtype)


def _combine(op: Ops | str, a: Tensor, b: Tensor) -> Tensor:
  if op is Ops.ADD: return a + b
  if op is Ops.MUL: return a * b
  if op is Ops.MAX: return a.maximum(b)
  return a.logaddexp(b)


def _reduce_last(x: Tensor, op: Ops | str) -> Tensor:
  """op over the last axis (LOGADDEXP: a logsumexp shifted by the row max, which may be -inf)."""
  if op != LOGADDEXP: return x._reduce(op, -1)
  peak = x.max(-1, keepdim=True)
  safe = peak.isinf().where(0, peak)
  return ((x - safe).exp().sum(-1, keepdim=True).log() + safe).squeeze(-1)


class TensorOps(TensorMath, TensorNN):
  """Methods of Tensor defined here to keep tensor.py small (Tensor inherits them)."""
  __slots__ = ()
  # a scan runs inside blocks of this many elements (a triangular reduce, block**2 work per block), then scans the
  # block totals the same way: O(n * block) work in about 2 * log_block(n) kernels. A sum's block adds in one vector
  # instruction per lane and is long (few kernels); a max (NaN wins: about four per lane) and a logaddexp (an exp and
  # a log) are short (cummax of (1024, 1024): 5.8 -> 1.2 ms of kernels with 8 instead of 32)
  SCAN_BLOCKS: dict[Ops | str, int] = {Ops.ADD: 32, Ops.MUL: 32, Ops.MAX: 8, LOGADDEXP: 8}

  # ------------------------------------------------------------------ random
  def randn_like(self: Tensor, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """Standard normal values of self's shape (and device and dtype, unless given)."""
    return type(self).randn(*self.shape, **{"device": self.device, "dtype": dtype or self.dtype} | kwargs)

  def empty_like(self: Tensor, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    """Uninitialized storage of self's shape (and device and dtype, unless given)."""
    return type(self).empty(*self.shape, device=device or self.device, dtype=dtype or self.dtype)

  @staticmethod
  def normal(*shape: int, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Tensor:
    """Normal values with the given mean and standard deviation."""
    from tinycore.tensor import Tensor
    dtype = kwargs.pop("dtype", None)
    return (Tensor.randn(*shape, **kwargs) * std + mean).cast(dtype or dtypes.default_float)

  @staticmethod
  def scaled_uniform(*shape: int, **kwargs: Any) -> Tensor:
    """Uniform in [-1, 1) scaled by 1/sqrt(number of elements) (tinygrad's initializer)."""
    from tinycore.tensor import Tensor
    count = math.prod(Tensor._shape_arg(shape))
    return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs) * (count ** -0.5 if count else 1.0)

  @staticmethod
  def kaiming_normal(*shape: int, a: float = 0.01, **kwargs: Any) -> Tensor:
    """He initialization, normal: std sqrt(2 / (1 + a^2)) / sqrt(fan_in), fan_in the product of shape[1:]."""
    from tinycore.tensor import Tensor
    dims = Tensor._shape_arg(shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(math.prod(dims[1:]))
    return Tensor.normal(*dims, mean=0.0, std=std, **kwargs)

  @staticmethod
  def randperm(n: int, device: str | None = None, dtype: DType | str = dtypes.int32, **kwargs: Any) -> Tensor:
    """A random permutation of 0..n-1 (the order that sorts n uniform draws)."""
    from tinycore.tensor import Tensor
    return Tensor.rand(n, device=device).argsort().cast(dtype).requires_grad_(kwargs.get("requires_grad"))

  def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """num_samples class indices drawn with probabilities proportional to self's (1-d, or one row each of 2-d)
    non-negative weights: with replacement by the inverse of the running sum, without by the largest keys
    log(u) / w (Efraimidis and Spirakis)."""
    from tinycore.tensor import Tensor
    if self.ndim not in (1, 2) or num_samples <= 0:
      raise ShapeError(f"multinomial needs 1-d or 2-d weights and num_samples > 0, got {self.shape}, {num_samples}")
    weights = (self.unsqueeze(0) if self.ndim == 1 else self).float()
    if not replacement and num_samples > weights.shape[1]:
      raise ArgumentError(f"multinomial without replacement of {num_samples} from {weights.shape[1]} classes")
    if replacement or num_samples == 1:
      running = weights.cumsum(1)
      cdf = running / running[:, -1:]
      draws = Tensor.rand(weights.shape[0], num_samples, 1, device=self.device)
      indices = (draws >= cdf.unsqueeze(1)).sum(2).minimum(weights.shape[1] - 1)
    else:
      keys = Tensor.rand(*weights.shape, device=self.device).log() / weights
      indices = keys.topk(num_samples, dim=1)[1]
    return (indices.squeeze(0) if self.ndim == 1 else indices).cast(dtypes.int32)

  # ------------------------------------------------------------------ cumulative ops
  def _scan_small(self: Tensor, op: Ops | str) -> Tensor:
    """The inclusive scan of the last axis by a reduce over a triangle: out[i] = op over x[j] for j <= i."""
    from tinycore.tensor import Tensor
    n = self.shape[-1]
    rows = Tensor.arange(n, device=self.device).reshape(n, 1)
    keep = Tensor.arange(n, device=self.device).reshape(1, n) <= rows
    spread = self.unsqueeze(-2).expand(*self.shape[:-1], n, n)
    return _reduce_last(keep.where(spread, _identity(op, self.dtype)), op)

  def _scan(self: Tensor, op: Ops | str) -> Tensor:
    """The inclusive scan of the last axis: blocks scanned by _scan_small, then the exclusive scan of the block
    totals (recursively) combined into each block."""
    n, block = self.shape[-1], TensorOps.SCAN_BLOCKS[op]
    if not isinstance(n, int) or n <= block: return self._scan_small(op)  # (a symbolic length: one triangle)
    count, lead = -(-n // block), self.shape[:-1]
    identity = _identity(op, self.dtype)
    unpadded, whole = ((0, 0),) * len(lead), (None,) * len(lead)
    x = self.pad(unpadded + ((0, count * block - n),), value=identity) if count * block != n else self
    inner = x.reshape(*lead, count, block)._scan_small(op).contiguous()
    totals = inner.shrink(whole + (None, (block - 1, block))).reshape(*lead, count)._scan(op)
    # realized: fused into the output, each block's carry (a scan of the totals) would be computed once per element
    carry = totals.pad(unpadded + ((1, 0),), value=identity).shrink(whole + ((0, count),)).contiguous()
    out = _combine(op, inner, carry.unsqueeze(-1)).reshape(*lead, count * block)
    return out.shrink(whole + ((0, n),)) if count * block != n else out

  def _cumulative(self: Tensor, op: Ops | str, axis: int) -> Tensor:
    axis = _axis(axis, self.ndim)
    if self.ndim == 0 or self.shape[axis] == 0: return self
    return self.transpose(axis, -1)._scan(op).transpose(axis, -1)

  def cumsum(self: Tensor, axis: int = 0) -> Tensor:
    """The running sum along axis (ints accumulate as sum does; half floats come back in their dtype)."""
    acc = type(self)._sum_dtype(self.dtype)
    out = self.cast(acc)._cumulative(Ops.ADD, axis)
    return out.cast(self.dtype) if self.dtype in NARROW_FLOATS else out

  def cumprod(self: Tensor, axis: int = 0) -> Tensor:
    """The running product along axis, in self's dtype as prod (ints wrap; bools: the running logical and)."""
    if self.dtype is dtypes.bool: return self.logical_not().cumsum(axis).cast(dtypes.bool).logical_not()
    return self._cumulative(Ops.MUL, axis)

  def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """The running maximum along axis and, as tinygrad, where it is: (values, int32 indices of the first element
    equal to each running maximum; NaN propagates)."""
    values = self._cumulative(Ops.MAX, axis)
    return values, self._running_index(values, axis, least=False)

  def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """The running minimum along axis and where it is: (values, int32 indices, as cummax)."""
    if dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype): values = ~((~self)._cumulative(Ops.MAX, axis))
    else: values = self._inverse()._cumulative(Ops.MAX, axis)._inverse()
    return values, self._running_index(values, axis, least=True)

  def _running_index(self: Tensor, values: Tensor, axis: int, least: bool) -> Tensor:
    """For each place i along axis, the first j <= i whose element equals values[i], the running maximum (least:
    minimum; NaN wins): a running maximum of order keys, the value's key above and the countdown n - 1 - j below (the
    first of equal values has the largest), read back from the winner's low word. 64-bit dtypes, whose key fills a
    word, and a symbolic length compare every pair instead."""
    from tinycore.tensor import Tensor
    if self.ndim == 0 or self.shape[_axis(axis, self.ndim)] == 0:
      return Tensor.zeros(*self.shape, dtype=dtypes.int32, device=self.device)
    axis, n = _axis(axis, self.ndim), self.shape[_axis(axis, self.ndim)]
    if self.dtype.itemsize == 8 or not isinstance(n, int): return self._running_index_pairwise(values, axis, n)
    rows = self.transpose(axis, -1)
    key = value_keys(rows, descending=least)
    if least and dtypes.is_float(self.dtype): key = (rows != rows).where(dtypes.max(dtypes.int32), key)
    countdown = n - 1 - Tensor.arange(n, device=self.device, dtype=dtypes.int64)
    running = (key.cast(dtypes.int64) * (1 << 32) + countdown)._scan(Ops.MAX)
    return (n - 1 - (running & 0xffffffff)).cast(dtypes.int32).transpose(-1, axis)

  def _running_index_pairwise(self: Tensor, values: Tensor, axis: int, n: Any) -> Tensor:
    """_running_index by a compare of every pair (j, i): n**2 per row."""
    from tinycore.tensor import Tensor
    source, running = self.transpose(axis, -1).unsqueeze(-1), values.transpose(axis, -1).unsqueeze(-2)
    same = source == running
    if dtypes.is_float(self.dtype): same = same | ((source != source) & (running != running))
    j = Tensor.arange(n, device=self.device, dtype=dtypes.int32).reshape(n, 1)
    hit = same & (j <= Tensor.arange(n, device=self.device, dtype=dtypes.int32).reshape(1, n))
    # the first hit has the largest countdown n - j
    first = n - hit.where(n - j, 0).max(-2)
    return first.cast(dtypes.int32).transpose(-1, axis)

  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along axis, as a scan of logaddexp (every partial sum shifted by its own max, so
    neither large nor widely spread inputs overflow or underflow)."""
    x = self if dtypes.is_float(self.dtype) else self.float()
    return x._cumulative(LOGADDEXP, axis)

  # ------------------------------------------------------------------ shapes
  def _triangle(self: Tensor, diagonal: int, upper: bool) -> Tensor:
    from tinycore.tensor import Tensor
    if self.ndim < 2: raise ValueError(f"tril/triu need at least 2 dims, got shape {self.shape}")
    r, c = self.shape[-2:]
    rows = Tensor.arange(r, device=self.device).reshape(r, 1) + diagonal
    cols = Tensor.arange(c, device=self.device).reshape(1, c)
    keep = rows <= cols if upper else cols <= rows
    return keep.where(self, type(self)(False, device=self.device, dtype=self.dtype) if self.dtype is dtypes.bool
                      else 0)

  def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims: elements with col - row >= diagonal, the rest 0."""
    return self._triangle(diagonal, True)

  def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims: elements with col - row <= diagonal, the rest 0."""
    return self._triangle(diagonal, False)

  def size(self: Tensor, dim: int | None = None) -> int | tuple[int, ...]:
    """The shape, or the size of one dim."""
    return self.shape if dim is None else self.shape[_axis(dim, self.ndim)]

  def pad_to(self: Tensor, shape: Sequence[int | None], *args: int | None, value: Any = 0) -> Tensor:
    """Pad the end of each dim up to shape (None keeps a dim)."""
    target = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,) + args
    if len(target) != self.ndim: raise ShapeError(f"pad_to {target} for a {self.ndim}-d tensor")
    if any(t is not None and t < s for t, s in zip(target, self.shape)):
      raise ShapeError(f"pad_to {target} is smaller than the shape {self.shape}")
    return self.pad([(0, 0 if t is None else t - s) for t, s in zip(target, self.shape)], value=value)

  def shrink_to(self: Tensor, shape: Sequence[int | None], *args: int | None) -> Tensor:
    """Keep the start of each dim up to shape (None keeps a dim)."""
    target = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,) + args
    if len(target) != self.ndim: raise ShapeError(f"shrink_to {target} for a {self.ndim}-d tensor")
    return self.shrink([None if t is None else (0, t) for t in target])

  def diag(self: Tensor) -> Tensor:
    """The (n, n) matrix with the 1-d self on its diagonal."""
    from tinycore.tensor import Tensor
    if self.ndim != 1: raise ShapeError(f"diag needs a 1-d tensor, got shape {self.shape}")
    n = self.shape[0]
    return Tensor.eye(n, device=self.device, dtype=dtypes.bool).where(self.reshape(1, n).expand(n, n), 0)

  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of dims dim1 and dim2 (offset > 0 above it, < 0 below) as a new last dim, the other dims first
    (a view: movement ops only)."""
    a, b = _axis(dim1, self.ndim), _axis(dim2, self.ndim)
    if a == b: raise ShapeError(f"diagonal needs two different dims, got {dim1} and {dim2}")
    x = self.permute(*[d for d in range(self.ndim) if d not in (a, b)], a, b)
    rows, cols = x.shape[-2:]
    first_row, first_col = max(-offset, 0), max(offset, 0)
    m = max(min(rows - first_row, cols - first_col), 0)
    lead = x.shape[:-2]
    x = x[..., first_row:first_row + m, first_col:first_col + m].reshape(*lead, m * m)
    # the diagonal of an m x m block sits every m + 1 elements of its rows laid end to end
    return x.pad(((0, 0),) * len(lead) + ((0, m),)).reshape(*lead, m, m + 1)[..., 0]

  def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
    """Windows of `size` elements every `step` along dim: dim becomes the window count, a new last dim of size
    `size` holds each window (torch's Tensor.unfold)."""
    dim = _axis(dim, self.ndim)
    if size < 0 or step <= 0: raise ArgumentError(f"unfold needs size >= 0 and step > 0, got {size} and {step}")
    if size > self.shape[dim]: raise ShapeError(f"unfold size {size} is larger than dim {dim} ({self.shape[dim]})")
    if size == 0:
      count = self.shape[dim] // step + 1
      return self.shrink_to([1 if d == dim else None for d in range(self.ndim)]).expand(
        *[count if d == dim else s for d, s in enumerate(self.shape)]).unsqueeze(-1).shrink_to(
        [None] * self.ndim + [0])
    return self._windows(dim, size, step, 1)

  def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Rotate elements along dims by shifts (without dims: of the flattened tensor, shape kept)."""
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims): raise RuntimeError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = self
    for shift, dim in zip(shifts, dims):
      dim = _axis(dim, self.ndim)
      n = out.shape[dim]
      if n == 0 or shift % n == 0: continue
      shift %= n
      # the last `shift` elements come first
      head, tail = out.split([n - shift, shift], dim)
      out = tail.cat(head, dim=dim)
    return out

  def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-d tensors: with "ij" output dim i follows tensor i; "xy" swaps the first two."""
    if indexing not in ("ij", "xy"): raise ArgumentError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
    tensors = [t.flatten() for t in (self, *args)]
    sizes = [t.shape[0] for t in tensors]
    places = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) > 1: places[0], places[1] = 1, 0
    shape = [0] * len(tensors)
    for size, place in zip(sizes, places): shape[place] = size
    out = []
    for t, place in zip(tensors, places):
      view = [1] * len(tensors)
      view[place] = t.shape[0]
      out.append(t.reshape(view).expand(shape))
    return tuple(out)

  def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Each element repeated `repeats` times along dim (without dim: of the flattened tensor)."""
    if not isinstance(repeats, int) or repeats < 0: raise ValueError(f"repeats must be an int >= 0, got {repeats}")
    x, dim = (self.flatten(), 0) if dim is None else (self, _axis(dim, self.ndim))
    if x.ndim == 0: x = x.reshape(1)
    shape = x.shape
    spread = x.unsqueeze(dim + 1).expand(*shape[:dim + 1], repeats, *shape[dim + 1:])
    return spread.reshape(*shape[:dim], shape[dim] * repeats, *shape[dim + 1:])

  def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
    """einops' rearrange: "b c (h p) w -> b (h w) (c p)" names each dim (a group in parentheses is a reshape, split
    on the left with the sizes given as keywords, at most one size per group inferred; merged on the right), the
    right side orders them (a permute); "..." stands for the dims not named."""
    if formula.count("->") != 1: raise FormulaError(f"rearrange needs one '->' in {formula!r}")
    left, right = (_rearrange_groups(side) for side in formula.split("->"))
    left_names, right_names = [n for g in left for n in g], [n for g in right for n in g]
    if sorted(left_names) != sorted(right_names) or len(set(left_names)) != len(left_names):
      raise FormulaError(f"rearrange {formula!r}: each name must appear once on each side")
    if any(n not in left_names for n in sizes): raise FormulaError(f"rearrange sizes {sizes} name unused axes")
    if len(left) - ("..." in left_names) > self.ndim or ("..." not in left_names and len(left) != self.ndim):
      raise ShapeError(f"rearrange {formula!r}: the left side names {len(left)} dims of a {self.ndim}-d tensor")
    extent, dims = {}, list(self.shape)
    for group in left:
      if group == ["..."]:
        extent["..."] = tuple(dims[:self.ndim - len(left) + 1])
        del dims[:len(extent["..."])]
        continue
      if "..." in group: raise FormulaError(f"rearrange {formula!r}: '...' cannot be inside a group on the left")
      extent.update(_split_group(group, dims.pop(0), sizes))

    def spread(names: list[str]) -> list[int]:  # the dims' sizes, "..." as its several dims
      return [s for n in names for s in (extent[n] if n == "..." else (extent[n],))]
    x = self.reshape(spread(left_names)).permute(_rearrange_order(left_names, right_names, extent))
    out_shape: list[int] = []
    for group in right: out_shape.extend(extent["..."] if group == ["..."] else [math.prod(spread(group))])
    return x.reshape(out_shape)

  # ------------------------------------------------------------------ einsum
  @staticmethod
  def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: DType | str | None = None) -> Tensor:
    """Sums of products named by subscripts ("ij,jk->ik"; without "->", the letters used once, sorted).
    A letter repeated in one operand takes its diagonal; "..." stands for the same leading broadcast dims."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)): operands = tuple(operands[0])
    formula = formula.replace(" ", "")
    inputs_text, arrow, output = formula.partition("->")
    inputs = inputs_text.split(",")
    if len(inputs) != len(operands):
      raise ArgumentError(f"einsum {formula!r} names {len(inputs)} operands, got {len(operands)}")
    inputs, output = _expand_einsum_ellipsis(inputs, output if arrow else None, operands)
    sizes: dict[str, int] = {}
    aligned = []
    for letters, t in zip(inputs, operands):
      if len(letters) != t.ndim: raise ShapeError(f"einsum operand {letters!r} has {t.ndim} dims, shape {t.shape}")
      t, letters = _einsum_diagonals(t, letters)
      for letter, size in zip(letters, t.shape):
        if sizes.setdefault(letter, size) != size and size != 1 and sizes[letter] != 1:
          raise ShapeError(f"einsum letter {letter!r} has sizes {sizes[letter]} and {size}")
        sizes[letter] = max(sizes[letter], size) if size != 0 and sizes[letter] != 0 else 0
      aligned.append((t, letters))
    for letter in output:
      if letter not in sizes: raise ArgumentError(f"einsum output letter {letter!r} is in no input")
    every = list(output) + sorted(set(sizes) - set(output))
    product = None
    for t, letters in aligned:
      order = [letters.index(c) for c in every if c in letters]
      view = [t.shape[letters.index(c)] if c in letters else 1 for c in every]
      term = t.permute(order).reshape(view)
      product = term if product is None else product * term
    # the sum decides the dtype, as tinygrad's einsum: bools and small ints widen, halves stay
    summed = product.sum(tuple(range(len(output), len(every))), dtype=dtype)
    return summed.expand([sizes[c] for c in output])

  # ------------------------------------------------------------------ sorting (tinycore/tensor_sort.py)
  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) of self sorted along dim (stable: equal values keep their order; NaN is the largest value,
    as torch)."""
    if self.ndim == 0: return self, type(self)(0, device=self.device, dtype=dtypes.int32)
    dim = _axis(dim, self.ndim)
    if self.shape[dim] == 0: return self, self.cast(dtypes.int32)
    values, indices = sorted_rows(self.transpose(dim, -1), descending)
    return values.transpose(dim, -1), indices.transpose(dim, -1)

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The indices that sort self along dim (stable)."""
    return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (largest=False: smallest) elements along dim, in sorted order (equal values
    by position, NaN the largest)."""
    dim = _axis(dim, self.ndim)
    size = self.shape[dim] if self.ndim else 1
    if not 0 <= k <= size: raise ValueError(f"topk k={k} out of range for a dim of size {size}")
    picked = selected_rows(self.transpose(dim, -1), k, largest) if self.ndim else None
    if picked is not None: return picked[0].transpose(dim, -1), picked[1].transpose(dim, -1)
    values, indices = self.sort(dim, descending=largest)
    if self.ndim == 0: return values, indices
    bounds = [None] * self.ndim
    bounds[dim] = (0, k)
    return values.shrink(bounds), indices.shrink(bounds)

  # ------------------------------------------------------------------ gather / scatter
  def _index_hits(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """(index.shape + (self.shape[dim],)) bools: index[..] == n, negative indices counted from the end."""
    from tinycore.tensor import Tensor
    if dtypes.is_float(index.dtype) or index.dtype is dtypes.bool:
      raise TypeError(f"index must be an integer tensor, got {index.dtype}")
    if index.ndim != self.ndim:
      raise RuntimeError(f"index has {index.ndim} dims, the tensor {self.ndim}: they must match")
    n = self.shape[dim]
    index = (index < 0).where(index + n, index)
    return index.unsqueeze(-1) == Tensor.arange(n, device=self.device, dtype=index.dtype)

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[i][j][k] = self[index[i][j][k]][j][k] for dim 0 (and alike for the others); index may be smaller than
    self in the other dims."""
    dim = _axis(dim, self.ndim)
    if any(i > s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):
      raise RuntimeError(f"gather index of shape {index.shape} is larger than the tensor {self.shape} off dim {dim}")
    hits = self._index_hits(dim, index)
    x = self.shrink([None if d == dim else (0, i) for d, i in enumerate(index.shape)])
    values = x.unsqueeze(-1).transpose(dim, -1)  # the gathered dim last, a 1 where it was
    picked = hits.where(values, 0)
    return picked.sum(-1).cast(self.dtype)

  def _scatter_parts(self: Tensor, dim: int, index: Tensor, src: Tensor | Any) -> tuple[Tensor, Tensor]:
    """(hits, values): hits (index.shape + (n,)) says whether index[..k..] names n; values (index.shape + (1,)) is
    src's value at [..k..], src trimmed to the index's shape (a scalar src fills it)."""
    from tinycore.tensor import Tensor
    if any(i > s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):
      raise RuntimeError(f"scatter index of shape {index.shape} is larger than the tensor {self.shape} off dim {dim}")
    if isinstance(src, Tensor):
      if src.dtype is not self.dtype:  # as tinygrad and torch: no silent cast of the values written
        raise DTypeError(f"scatter src dtype {src.dtype.name} must match the tensor's {self.dtype.name} "
                         "(cast it first)")
      if any(i > s for i, s in zip(index.shape, src.shape)) or src.ndim != index.ndim:
        raise RuntimeError(f"scatter src of shape {src.shape} is smaller than the index {index.shape}")
      src = src.shrink([(0, i) for i in index.shape])
    else: src = Tensor.full(index.shape, src, device=self.device, dtype=self.dtype)
    hits = self._index_hits(dim, index)
    return hits, src.unsqueeze(-1)

  def _scatter_to_self(self: Tensor, dim: int, reduced: Tensor) -> Tensor:
    """(index.shape with 1 at dim, + (n,)) -> self.shape: the n axis back at dim, zero-padded off-dim to self's."""
    moved = reduced.transpose(dim, -1).squeeze(-1)
    return moved.pad([(0, 0) if d == dim else (0, s - m) for d, (m, s) in enumerate(zip(moved.shape, self.shape))])

  def scatter(self: Tensor, dim: int, index: Tensor, src: Tensor | Any, reduce: str | None = None) -> Tensor:
    """self with self[index[i][j]][j] = src[i][j] (dim 0; alike for the others); of several writes to one place the
    last wins. reduce="add"/"multiply" combine them with self instead (as scatter_reduce sum/prod)."""
    if reduce is not None:
      names = {"add": "sum", "multiply": "prod"}
      if reduce not in names: raise TypeError(f"scatter reduce must be 'add' or 'multiply', got {reduce!r}")
      return self.scatter_reduce(dim, index, src, names[reduce])
    from tinycore.tensor import Tensor
    dim = _axis(dim, self.ndim)
    hits, values = self._scatter_parts(dim, index, src)
    k = hits.shape[dim]
    position = Tensor.arange(k, device=self.device, dtype=dtypes.int32).reshape((k,) + (1,) * (hits.ndim - dim - 1))
    # one pass over the index: the last position naming each place (-1: none), then its value picked directly (a
    # gather, which a device that reads computed addresses does as one load)
    last = hits.where(position, -1).max(dim, keepdim=True).transpose(dim, -1).squeeze(-1).contiguous()
    written = values.squeeze(-1).gather(dim, last.maximum(0))
    off_dim = [(0, 0) if d == dim else (0, s - i) for d, (i, s) in enumerate(zip(index.shape, self.shape))]
    return (last >= 0).pad(off_dim).where(written.pad(off_dim), self)

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str,
                     include_self: bool = True) -> Tensor:
    """self with src's values reduced into the places index names along dim: reduce is "sum", "prod", "mean",
    "amax" or "amin"; include_self=False leaves self's value out of places that get at least one write."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise RuntimeError(f"scatter_reduce reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
    dim = _axis(dim, self.ndim)
    hits, values = self._scatter_parts(dim, index, src)
    spread = values.expand(hits.shape)
    if reduce in ("sum", "mean"): reduced = hits.where(spread, 0).sum(dim, keepdim=True).cast(self.dtype)
    elif reduce == "prod": reduced = hits.where(spread, 1).prod(dim, keepdim=True).cast(self.dtype)
    elif reduce == "amax": reduced = hits.where(spread, dtypes.min(self.dtype)).max(dim, keepdim=True)
    else: reduced = hits.where(spread, dtypes.max(self.dtype)).min(dim, keepdim=True)
    reduced = self._scatter_to_self(dim, reduced)
    if include_self:
      if reduce in ("sum", "mean"): reduced = reduced + self
      elif reduce == "prod": reduced = reduced * self
      elif reduce == "amax": reduced = reduced.maximum(self)
      else: reduced = reduced.minimum(self)
      # a sum adds 0 where no write lands (also off the index's shape, zero-padded): self already, no second pass
      # over the index to count the writes
      if reduce == "sum": return reduced.cast(self.dtype)
    count = self._scatter_to_self(dim, hits.sum(dim, keepdim=True))
    if reduce == "mean":
      total = (count + int(include_self)).maximum(1).cast(self.dtype)
      reduced = reduced / total if dtypes.is_float(self.dtype) else reduced.div(total, rounding_mode="floor")
    return (count > 0).where(reduced, self).cast(self.dtype)

  def masked_fill(self: Tensor, mask: Tensor, value: Tensor | Any) -> Tensor:
    """self with value where mask is True (mask broadcasts)."""
    return mask.where(value, self)

  # ------------------------------------------------------------------ selection by a mask
  def _compact(self: Tensor, mask: Tensor, size: int | None, fill_value: Any) -> Tensor:
    """The elements of the 1-d self where the 1-d bool mask holds, in order, as `size` rows (None: as many as there
    are, which reads the count back); rows past the count hold fill_value. Output row r takes the element whose
    exclusive running count of hits is r: a compare of every element with every row, one fused kernel."""
    from tinycore.tensor import Tensor
    slot = mask.cumsum() - mask.cast(dtypes.int32)  # where each hit goes
    size = (int(mask.sum().item()) if mask.numel() else 0) if size is None else operator.index(size)
    if size < 0: raise ValueError(f"size must be >= 0, got {size}")
    rows = Tensor.arange(size, device=self.device, dtype=dtypes.int32).reshape(size, 1)
    chosen = mask & (slot == rows)  # (size, n)
    filled = rows.squeeze(1) < mask.sum().cast(dtypes.int32)
    picked = chosen.where(self, 0).sum(1, dtype=self.dtype if dtypes.is_float(self.dtype) else None).cast(self.dtype)
    return filled.where(picked, fill_value).cast(self.dtype)

  def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The elements where mask (bools, broadcast to self) is True, flattened in order; size=N gives N of them
    (padded with fill_value), size=None as many as there are (reads the count back, as tinygrad)."""
    if mask.dtype is not dtypes.bool: raise DTypeError(f"masked_select needs a bool mask, got {mask.dtype}")
    return self.flatten()._compact(mask._broadcast_to(self.shape).flatten(), size, fill_value)

  def nonzero(self: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The (count, ndim) int32 indices of the non-zero elements in row-major order; size=N gives N rows (padded
    with fill_value), size=None as many as there are (reads the count back, as tinygrad)."""
    from tinycore.tensor import Tensor
    if self.ndim == 0:
      count = operator.index(size) if size is not None else int((self != 0).item())
      return Tensor.zeros(count, 0, device=self.device, dtype=dtypes.int32)
    flat = Tensor.arange(self.numel(), device=self.device, dtype=dtypes.int32)._compact(
      (self != 0).flatten(), size, -1)
    coords, rest = [], flat
    for extent in reversed(self.shape):  # unravel the flat index, last dim first
      coords.append(rest.mod(extent) if extent else rest)
      rest = rest.div(extent, rounding_mode="floor") if extent else rest
    out = Tensor.stack(*reversed(coords), dim=-1)
    return (flat.unsqueeze(-1) < 0).where(fill_value, out).cast(dtypes.int32)


def _rearrange_groups(side: str) -> list[list[str] | tuple[str, ...]]:
  """"a (b c) ... 1 (...)" -> [["a"], ("b", "c"), ["..."], (), ("...",)]: a group in parentheses is a tuple (so "(...)",
  the ellipsis dims merged into one, differs from "..."); "1" is an empty group, a dim of size 1, as in einops."""
  groups, current = [], None
  for token in side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split():
    if token == "(":
      if current is not None: raise FormulaError(f"rearrange: nested parentheses in {side!r}")
      current = []
    elif token == ")":
      if current is None: raise FormulaError(f"rearrange: unbalanced parentheses in {side!r}")
      groups.append(tuple(current))
      current = None
    elif token == "1":
      if current is None: groups.append(())  # (inside a group a factor of 1 changes nothing)
    elif token != "..." and (not token.isidentifier() or token.startswith("_") or token.endswith("_")):
      raise FormulaError(f"rearrange: bad axis name {token!r} (an identifier not starting or ending with '_')")
    elif current is not None: current.append(token)
    else: groups.append([token])
  if current is not None: raise FormulaError(f"rearrange: unbalanced parentheses in {side!r}")
  return groups


def _split_group(group: list[str], size: int, sizes: dict[str, int]) -> dict[str, int]:
  """The size of each name of a left-side group of `size` elements (at most one name not in sizes)."""
  unknown = [n for n in group if n not in sizes]
  if len(unknown) > 1: raise FormulaError(f"rearrange: give sizes for all but one of {group}")
  known = math.prod(sizes[n] for n in group if n in sizes)
  if unknown and known and size % known == 0: return {n: sizes.get(n, size // known) for n in group}
  if not unknown and known == size: return {n: sizes[n] for n in group}
  raise FormulaError(f"rearrange: a dim of size {size} cannot split into {group} with sizes {sizes}")


def _rearrange_order(left: list[str], right: list[str], extent: dict[str, Any]) -> list[int]:
  """The permutation from the left's dims to the right's ("..." is as many dims as it stands for)."""
  position, start = {}, 0
  for name in left:
    width = len(extent[name]) if name == "..." else 1
    position[name] = list(range(start, start + width))
    start += width
  return [d for name in right for d in position[name]]


def _expand_einsum_ellipsis(inputs: list[str], output: str | None,
                            operands: Sequence[Tensor]) -> tuple[list[str], str]:
  """Replace "..." by fresh letters (upper case, not otherwise used) for the broadcast dims; without an output,
  the letters used once in sorted order, after the ellipsis dims."""
  used = set("".join(inputs) + (output or ""))
  fresh = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used]
  widest = 0
  for letters, t in zip(inputs, operands):
    if "..." in letters:
      extra = t.ndim - (len(letters) - 3)
      if letters.count("...") > 1: raise ArgumentError(f"einsum operand {letters!r} has more than one ellipsis")
      if extra < 0: raise ShapeError(f"einsum operand {letters!r} has more letters than dims {t.shape}")
      widest = max(widest, extra)
  # an operand with fewer broadcast dims lines its up on the right: re-letter so all end on the same fresh letters
  out_inputs = []
  for letters, t in zip(inputs, operands):
    if "..." in letters:
      extra = t.ndim - (len(letters) - 3)
      letters = letters.replace("...", "".join(fresh[widest - extra:widest]))
    out_inputs.append(letters)
  broadcast = "".join(fresh[:widest])
  if output is None:
    counts = "".join(out_inputs)
    output = broadcast + "".join(sorted(c for c in set(counts) if counts.count(c) == 1 and c not in broadcast))
  else: output = output.replace("...", broadcast)
  for letters in out_inputs + [output]:
    if not all(c.isalpha() for c in letters): raise ArgumentError(f"einsum subscripts must be letters, got {letters!r}")
  return out_inputs, output


def _einsum_diagonals(t: Tensor, letters: str) -> tuple[Tensor, str]:
  """A letter repeated within one operand ("ii") takes the diagonal of those dims."""
  from tinycore.tensor import Tensor
  while len(set(letters)) < len(letters):
    letter = next(c for c in letters if letters.count(c) > 1)
    first, second = letters.index(letter), letters.index(letter, letters.index(letter) + 1)
    n = t.shape[first]
    if t.shape[second] != n: raise ShapeError(f"einsum diagonal {letter!r} of unequal sizes {t.shape}")
    eye = Tensor.eye(n, device=t.device, dtype=dtypes.bool)
    view = [1] * t.ndim
    view[first], view[second] = n, n
    t = eye.reshape(view).where(t, 0).sum(second, dtype=t.dtype)
    letters = letters[:second] + letters[second + 1:]
  return t, letters

