"""The ONNX operators `tinycore.nn.onnx.OnnxRunner` runs, each written with the public Tensor API.

A handler takes the node's inputs (Tensor, or None for an omitted optional input) positionally and its attributes as
keywords with the ONNX defaults; an attribute a handler has no parameter for is refused when the model loads. A
handler that needs host values (a shape, axes given as an input), the opset or the node takes `ctx` (an
`onnx.Context`). Where an attribute of an older opset became an input (Squeeze's axes, Slice's starts, Clip's
bounds, Pad's pads, ...), a handler accepts both.
"""
from __future__ import annotations
import math
from typing import Any, Callable, Sequence
from tinycore.dtype import FP8_FORMATS, DType, dtypes, fp8_to_float, least_upper_dtype
from tinycore.tensor import Tensor

OPS: dict[tuple[str, str], Callable[..., Any]] = {}
# ops never run on the PYTHON device for their host values: random, control flow (their subgraphs decide)
HOST_UNSAFE = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
                         "Multinomial", "If", "Loop", "Scan", "Dropout"})
MS = "com.microsoft"


def register(*names: str, domain: str = "ai.onnx") -> Callable:
  def wrap(fn: Callable) -> Callable:
    for name in names: OPS[(domain, name)] = fn
    return fn
  return wrap


def lookup(domain: str, op_type: str) -> Callable | None:
  if domain in ("", "ai.onnx"): return OPS.get(("ai.onnx", op_type))
  return OPS.get((domain, op_type))


# operators, or forms of them, that tinycore cannot run (string or map values: it has neither), refused when a model
# loads: (domain, op_type) -> a function of the node's attribute names that gives the reason, or None to accept it
REFUSALS: dict[tuple[str, str], Callable[[set[str]], str | None]] = {}


def refuse(name: str, reason: Callable[[set[str]], str | None], domain: str = "ai.onnx") -> None:
  """Refuse `name` nodes when a model loads wherever `reason(attribute names)` gives a message (say why, and what
  the user can do instead)."""
  REFUSALS[(domain, name)] = reason


def refusal(domain: str, op_type: str, attribute_names: set[str]) -> str | None:
  """Why a node of this operator with these attributes cannot run, or None."""
  reason = REFUSALS.get(("ai.onnx" if domain == "" else domain, op_type))
  return None if reason is None else reason(attribute_names)


def onnx_type(code: int) -> DType:
  from tinycore.nn.onnx import onnx_dtype
  return onnx_dtype(code, "Cast")


def positive_axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim, 1): raise ValueError(f"axis {axis} is out of range for {ndim} dims")
  return axis + ndim if axis < 0 else axis


def _axes(axes: Sequence[int] | None, ndim: int) -> list[int] | None:
  return None if axes is None else sorted({positive_axis(a, ndim) for a in axes})


def _axes_of(ctx: Any, axes_input: Tensor | None, axes_attr: Sequence[int] | None) -> list[int] | None:
  """Axes given as an input (newer opsets) or as an attribute (older ones)."""
  if axes_input is not None: return ctx.ints(axes_input)
  return None if axes_attr is None else list(axes_attr)


# ---------------------------------------------------------------------------------------------------- elementwise
def _unary(name: str, fn: Callable[[Tensor], Tensor]) -> None:
  register(name)(lambda x: fn(x))


for _name, _fn in {
    "Abs": Tensor.abs, "Acos": Tensor.acos, "Acosh": Tensor.acosh, "Asin": Tensor.asin, "Asinh": Tensor.asinh,
    "Atan": Tensor.atan, "Atanh": Tensor.atanh, "Ceil": Tensor.ceil, "Cos": Tensor.cos, "Cosh": Tensor.cosh,
    "Erf": Tensor.erf, "Exp": Tensor.exp, "Floor": Tensor.floor, "Log": Tensor.log, "Neg": Tensor.neg,
    "Reciprocal": Tensor.reciprocal, "Relu": Tensor.relu, "Round": Tensor.round, "Sigmoid": Tensor.sigmoid,
    "Sign": Tensor.sign, "Sin": Tensor.sin, "Sinh": Tensor.sinh, "Sqrt": Tensor.sqrt, "Tan": Tensor.tan,
    "Tanh": Tensor.tanh, "Softsign": Tensor.softsign, "Mish": Tensor.mish, "HardSwish": Tensor.hardswish,
    "IsNaN": Tensor.isnan, "Not": Tensor.logical_not, "BitwiseNot": Tensor.bitwise_not}.items():
  _unary(_name, _fn)


@register("Softplus")
def softplus(x): return x.softplus()
@register("Swish")
def swish(x, alpha=1.0): return x * (x * alpha).sigmoid()
@register("BitCast")
def bitcast(x, to): return x.bitcast(onnx_type(to))
@register("Identity")
def identity(x): return [x] if isinstance(x, list) else x  # a sequence is one output
@register("LeakyRelu")
def leaky_relu(x, alpha=0.01): return x.leaky_relu(alpha)
@register("Elu")
def elu(x, alpha=1.0): return x.elu(alpha)
@register("Celu")
def celu(x, alpha=1.0): return x.maximum(0) + (alpha * ((x / alpha).exp() - 1)).minimum(0)
@register("Selu")
def selu(x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
  return gamma * (x > 0).where(x, alpha * (x.exp() - 1))
@register("HardSigmoid")
def hard_sigmoid(x, alpha=0.2, beta=0.5): return (alpha * x + beta).clip(0, 1)
@register("ThresholdedRelu")
def thresholded_relu(x, alpha=1.0): return (x > alpha).where(x, 0)
@register("Shrink")
def shrink(x, bias=0.0, lambd=0.5): return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)
@register("PRelu")
def prelu(x, slope):
  if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] and slope.shape[0] != x.shape[-1]:
    slope = _channel(slope, x.ndim)  # one slope per channel, as torch's PReLU exports it
  return (x < 0).where(x * slope, x)
@register("Gelu")
def gelu(x, approximate="none"):
  if approximate == "tanh": return x.gelu()
  return 0.5 * x * (1 + (x / math.sqrt(2)).erf())
@register("IsInf")
def isinf(x, detect_negative=1, detect_positive=1):
  return x.isinf(detect_positive=bool(detect_positive), detect_negative=bool(detect_negative))


def _binary(name: str, fn: Callable[[Tensor, Tensor], Tensor]) -> None:
  register(name)(lambda a, b, broadcast=1, axis=None: fn(a, _legacy_broadcast(a, b, broadcast, axis)))


def _legacy_broadcast(a: Tensor, b: Tensor, broadcast: int, axis: int | None) -> Tensor:
  """Opsets before 7: b broadcast to a from `axis` on."""
  if axis is None or b.ndim == a.ndim: return b
  axis = positive_axis(axis, a.ndim)
  return b.reshape(*b.shape, *(1,) * (a.ndim - axis - b.ndim))


def _div(a: Tensor, b: Tensor) -> Tensor:
  if dtypes.is_int(a.dtype) and dtypes.is_int(b.dtype): return a.div(b, rounding_mode="trunc").cast(a.dtype)
  return a / b


for _name, _fn in {"Add": Tensor.add, "Sub": Tensor.sub, "Mul": Tensor.mul, "Div": _div,
                   "Equal": Tensor.eq, "Greater": lambda a, b: a > b, "Less": lambda a, b: a < b,
                   "GreaterOrEqual": lambda a, b: a >= b, "LessOrEqual": lambda a, b: a <= b,
                   "And": lambda a, b: a & b, "Or": lambda a, b: a | b, "Xor": lambda a, b: a ^ b,
                   "BitwiseAnd": lambda a, b: a & b, "BitwiseOr": lambda a, b: a | b,
                   "BitwiseXor": lambda a, b: a ^ b}.items():
  _binary(_name, _fn)


@register("Pow")
def pow_(x, y):
  if dtypes.is_int(x.dtype) and dtypes.is_int(y.dtype): return x.pow(y).cast(x.dtype)
  return x.cast(least_upper_dtype(x.dtype, dtypes.float32) if dtypes.is_int(x.dtype) else x.dtype).pow(y).cast(x.dtype)
@register("Mod")
def mod(a, b, fmod=0): return a.fmod(b) if fmod else a.mod(b)
@register("BitShift")
def bitshift(x, y, direction="LEFT"): return x.lshift(y) if direction == "LEFT" else x.rshift(y)


def _variadic(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable:
  def run(*xs):
    out = xs[0]
    for x in xs[1:]: out = fn(out, x)
    return out
  return run


register("Max")(_variadic(Tensor.maximum))
register("Min")(_variadic(Tensor.minimum))
register("Sum")(_variadic(Tensor.add))
@register("Mean")
def mean_(*xs): return _variadic(Tensor.add)(*xs) / len(xs)


@register("Clip")
def clip(x, min_input=None, max_input=None, min=None, max=None):
  lo = min_input if min_input is not None else min
  hi = max_input if max_input is not None else max
  if lo is not None: x = (x < lo).where(lo, x).cast(x.dtype)
  if hi is not None: x = (x > hi).where(hi, x).cast(x.dtype)
  return x


@register("Where")
def where(cond, x, y): return cond.where(x, y)
@register("Cast")
def cast(x, to, saturate=1, round_mode="up"):
  dtype = onnx_type(to)
  return cast_to_fp8(x, dtype, saturate) if dtype in dtypes.fp8s else x.cast(dtype)


def cast_to_fp8(x, dtype, saturate):
  """x as an 8-bit float by ONNX's rule: rounded to nearest even; `saturate` (the default) makes a value beyond the
  largest, infinity included, the largest of its sign; without it such a value becomes infinity (e5m2) or NaN."""
  fmt = FP8_FORMATS[dtype]
  y = x.cast(dtype)  # tinycore's conversion saturates finite values and keeps infinity in e5m2, NaN elsewhere
  if not dtypes.is_float(x.dtype): return y
  largest = fp8_to_float(fmt.max_code, dtype)
  if saturate: return x.isinf().where((x > 0).where(largest, -largest).cast(dtype), y)
  # past the midpoint above the largest value a value rounds beyond it (at the midpoint: when the largest is odd)
  midpoint = largest + (largest - fp8_to_float(fmt.max_code - 1, dtype)) / 2
  magnitude = x.abs()
  over = (magnitude > midpoint) | (magnitude == midpoint) if fmt.max_code & 1 else magnitude > midpoint
  beyond = (x > 0).where(math.inf, -math.inf).cast(dtype) if fmt.kind == "ieee" else math.nan
  return over.where(beyond, y)


@register("CastLike")
def cast_like(x, target, saturate=1, round_mode="up"):
  return cast_to_fp8(x, target.dtype, saturate) if target.dtype in dtypes.fp8s else x.cast(target.dtype)


# ---------------------------------------------------------------------------------------------------- softmax family
def _last_axes_op(x: Tensor, axis: int, ctx: Any, fn: Callable[[Tensor, int], Tensor]) -> Tensor:
  """Opsets before 13 apply softmax-like ops to x flattened into (prod(shape[:axis]), prod(shape[axis:]))."""
  if ctx.opset >= 13 or x.ndim == 0: return fn(x, axis)
  axis = positive_axis(axis, x.ndim)
  return fn(x.reshape(math.prod(x.shape[:axis]), -1), 1).reshape(x.shape)


@register("Softmax")
def softmax(x, axis=None, ctx=None): return _last_axes_op(x, _default_axis(axis, ctx), ctx, lambda t, a: t.softmax(a))
@register("LogSoftmax")
def log_softmax(x, axis=None, ctx=None):
  return _last_axes_op(x, _default_axis(axis, ctx), ctx, lambda t, a: t.log_softmax(a))
@register("Hardmax")
def hardmax(x, axis=None, ctx=None):
  def hard(t: Tensor, a: int) -> Tensor:
    a = positive_axis(a, t.ndim)
    hot = t.argmax(a).one_hot(t.shape[a]).cast(t.dtype)
    return hot.permute(*range(a), hot.ndim - 1, *range(a, hot.ndim - 1))
  return _last_axes_op(x, _default_axis(axis, ctx), ctx, hard)


def _default_axis(axis: int | None, ctx: Any) -> int:
  return axis if axis is not None else (-1 if ctx.opset >= 13 else 1)


# ---------------------------------------------------------------------------------------------------- shapes
@register("Shape")
def shape(x, start=0, end=None, ctx=None):
  dims = list(x.shape)[start:end]
  return ctx.remember(Tensor(dims, dtype=dtypes.int64, device=ctx.device) if dims else
                      Tensor.empty(0, dtype=dtypes.int64, device=ctx.device), dims)
@register("Size")
def size(x, ctx=None): return ctx.remember(Tensor(x.numel(), dtype=dtypes.int64, device=ctx.device), x.numel())


@register("Constant")
def constant(value=None, value_float=None, value_floats=None, value_int=None, value_ints=None, sparse_value=None,
             value_string=None, value_strings=None, ctx=None):
  if value is not None:
    t, host = value
    return ctx.remember(t, host) if host is not None else t
  for v, dtype in ((value_float, dtypes.float32), (value_floats, dtypes.float32), (value_int, dtypes.int64),
                   (value_ints, dtypes.int64)):
    if v is not None: return ctx.remember(Tensor(v, dtype=dtype, device=ctx.device), v)
  raise ctx.error("a Constant of strings or a sparse tensor is not supported")


@register("ConstantOfShape")
def constant_of_shape(shape_, value=None, ctx=None):
  dims = ctx.ints(shape_)
  fill, dtype = (0.0, dtypes.float32) if value is None else (value[0].reshape(-1)[0], value[0].dtype)
  if isinstance(fill, Tensor): fill = ctx.value(value[0].reshape(-1))[0] if value[1] is None else first_value(value[1])
  return Tensor.full(tuple(dims), fill, dtype=dtype, device=ctx.device)


def first_value(v: Any) -> Any: return first_value(v[0]) if isinstance(v, list) else v


@register("Reshape")
def reshape(data, shape_=None, allowzero=0, shape=None, ctx=None):
  dims = ctx.ints(shape_) if shape_ is not None else list(shape)
  if not allowzero: dims = [data.shape[i] if d == 0 else d for i, d in enumerate(dims)]
  return data.reshape(dims)


@register("Flatten")
def flatten(x, axis=1):
  axis = axis + x.ndim if axis < 0 else axis
  return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@register("Squeeze")
def squeeze(x, axes_=None, axes=None, ctx=None):
  ax = _axes(_axes_of(ctx, axes_, axes), x.ndim)
  if ax is None: ax = [i for i, s in enumerate(x.shape) if s == 1]
  return x.reshape([s for i, s in enumerate(x.shape) if i not in ax])


@register("Unsqueeze")
def unsqueeze(x, axes_=None, axes=None, ctx=None):
  ax = _axes(_axes_of(ctx, axes_, axes), x.ndim + len(_axes_of(ctx, axes_, axes)))
  dims = list(x.shape)
  for a in ax: dims.insert(a, 1)
  return x.reshape(dims)


@register("Transpose")
def transpose(x, perm=None): return x.permute(perm if perm is not None else list(range(x.ndim))[::-1])
@register("Concat")
def concat(*xs, axis=0): return xs[0].cat(*xs[1:], dim=axis) if len(xs) > 1 else xs[0]


@register("Split")
def split(x, split_=None, axis=0, split=None, num_outputs=None, ctx=None):
  sizes = ctx.ints(split_) if split_ is not None else split
  count = num_outputs or len(ctx.node.outputs)
  if sizes is None:
    n = x.shape[positive_axis(axis, x.ndim)]
    chunk = -(-n // count)
    sizes = [min(chunk, n - i * chunk) for i in range(count)]
  return x.split(list(sizes), dim=axis)


@register("Slice")
def slice_(data, starts_=None, ends_=None, axes_=None, steps_=None, starts=None, ends=None, axes=None, ctx=None):
  starts = ctx.ints(starts_) if starts_ is not None else starts
  ends = ctx.ints(ends_) if ends_ is not None else ends
  axes = ctx.ints(axes_) if axes_ is not None else (axes if axes is not None else list(range(len(starts))))
  steps = ctx.ints(steps_) if steps_ is not None else [1] * len(starts)
  index = [slice(None)] * data.ndim
  for start, end, axis, step in zip(starts, ends, axes, steps):
    if step == 0: raise ctx.error("a Slice step of 0")
    axis, dim = positive_axis(axis, data.ndim), data.shape[positive_axis(axis, data.ndim)]
    if start < 0: start += dim
    if end < 0: end += dim
    if step > 0: start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else: start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    index[axis] = slice(start, end if end >= 0 else None, step)
  return data[tuple(index)]


def _wrap_indices(indices: Tensor, dim: int) -> Tensor:
  indices = indices.cast(dtypes.int64) if indices.dtype is not dtypes.int64 else indices
  return (indices < 0).where(indices + dim, indices)


@register("Gather")
def gather(data, indices, axis=0):
  axis = positive_axis(axis, data.ndim)
  idx = _wrap_indices(indices, data.shape[axis])
  if idx.ndim == 0: return data[(slice(None),) * axis + (idx.reshape(1),)].squeeze(axis)
  return data[(slice(None),) * axis + (idx,)]


@register("GatherElements")
def gather_elements(data, indices, axis=0):
  axis = positive_axis(axis, data.ndim)
  return data.gather(axis, _wrap_indices(indices, data.shape[axis]))


@register("GatherND")
def gather_nd(data, indices, batch_dims=0):
  k = indices.shape[-1]
  batch = data.shape[:batch_dims]
  nb = math.prod(batch)
  flat = data.reshape(nb, *data.shape[batch_dims:])
  idx = indices.reshape(nb, *indices.shape[batch_dims:])
  parts = [Tensor.arange(nb, device=data.device).reshape(nb, *(1,) * (idx.ndim - 2))]
  for i in range(k): parts.append(_wrap_indices(idx[..., i], flat.shape[1 + i]))
  out = flat[tuple(parts)]
  return out.reshape(*batch, *indices.shape[batch_dims:-1], *data.shape[batch_dims + k:])


@register("ScatterElements", "Scatter")
def scatter_elements(data, indices, updates, axis=0, reduction="none"):
  axis = positive_axis(axis, data.ndim)
  idx = _wrap_indices(indices, data.shape[axis])
  if reduction == "none": return data.scatter(axis, idx, updates)
  name = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction]
  return data.scatter_reduce(axis, idx, updates, name, include_self=True)


@register("ScatterND")
def scatter_nd(data, indices, updates, reduction="none"):
  k = indices.shape[-1]
  lead, rest = data.shape[:k], data.shape[k:]
  flat = data.reshape(math.prod(lead), *rest)
  linear = Tensor.zeros(*indices.shape[:-1], dtype=dtypes.int64, device=data.device)
  for i in range(k): linear = linear * lead[i] + _wrap_indices(indices[..., i], lead[i])
  n = math.prod(indices.shape[:-1])
  linear = linear.reshape(n, *(1,) * len(rest)).expand(n, *rest)
  ups = updates.reshape(n, *rest)
  if reduction == "none": out = flat.scatter(0, linear, ups)
  else:
    out = flat.scatter_reduce(0, linear, ups, {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction])
  return out.reshape(data.shape)


@register("Expand")
def expand(x, shape_, ctx=None):
  dims = ctx.ints(shape_)
  n = max(len(dims), x.ndim)
  a, b = [1] * (n - x.ndim) + list(x.shape), [1] * (n - len(dims)) + dims
  return x.reshape(a).expand([max(p, q) if min(p, q) != 0 else 0 for p, q in zip(a, b)])


@register("Tile")
def tile(x, repeats, ctx=None): return x.repeat(ctx.ints(repeats))


@register("Range")
def range_(start, limit, delta, ctx=None):
  s, l, d = (first_value(ctx.value(t)) for t in (start, limit, delta))
  count = max(math.ceil((l - s) / d), 0)
  return (Tensor.arange(count, device=ctx.device).cast(start.dtype) * d + s).cast(start.dtype)


@register("EyeLike")
def eye_like(x, dtype=None, k=0):
  out_dtype = onnx_type(dtype) if dtype is not None else x.dtype
  rows, cols = x.shape
  r = Tensor.arange(rows, device=x.device).reshape(rows, 1)
  c = Tensor.arange(cols, device=x.device).reshape(1, cols)
  return (c - r == k).cast(out_dtype)


@register("OneHot")
def one_hot(indices, depth, values, axis=-1, ctx=None):
  n = int(first_value(ctx.value(depth)))
  idx = indices.cast(dtypes.int64)
  idx = (idx < 0).where(idx + n, idx)
  axis = positive_axis(axis, indices.ndim + 1)
  hot = idx.unsqueeze(-1) == Tensor.arange(n, device=indices.device)
  off, on = values[0], values[1]
  out = hot.where(on, off).cast(values.dtype)
  return out.permute(*range(axis), out.ndim - 1, *range(axis, out.ndim - 1)) if axis != out.ndim - 1 else out


@register("Trilu")
def trilu(x, k=None, upper=1, ctx=None):
  diag = int(first_value(ctx.value(k))) if k is not None else 0
  return x.triu(diag) if upper else x.tril(diag)


@register("NonZero")
def nonzero(x):
  if x.ndim == 0: x = x.reshape(1)
  return x.nonzero().cast(dtypes.int64).transpose(0, 1)


@register("Compress")
def compress(x, condition, axis=None, ctx=None):
  keep = [i for i, c in enumerate(flatten_list(ctx.value(condition))) if c]
  if axis is None: x, axis = x.reshape(-1), 0
  axis = positive_axis(axis, x.ndim)
  keep = [i for i in keep if i < x.shape[axis]]
  if not keep: return x.shrink(tuple((0, 0) if i == axis else (0, s) for i, s in enumerate(x.shape)))
  return x[(slice(None),) * axis + (Tensor(keep, dtype=dtypes.int64, device=x.device),)]


def flatten_list(v: Any) -> list:
  """A nested list's values in order (a host value of any rank as one flat list)."""
  return [x for e in v for x in flatten_list(e)] if isinstance(v, list) else [v]


def _rows_before(rows: Tensor) -> Tensor:
  """(n, n): whether row j sorts before row i (lexicographic order of rows (n, m): at their first differing column)."""
  differs = rows.unsqueeze(1) != rows.unsqueeze(0)  # [i, j, column]
  column = differs.argmax(-1).unsqueeze(-1)  # the first one where they differ
  n = rows.shape[0]
  mine = rows.unsqueeze(1).expand(n, n, rows.shape[1]).gather(2, column).squeeze(-1)
  theirs = rows.unsqueeze(0).expand(n, n, rows.shape[1]).gather(2, column).squeeze(-1)
  return differs.any(-1) & (theirs < mine)


@register("Unique")
def unique(x, axis=None, sorted=1, ctx=None):
  """The distinct elements (or slices along axis), sorted or in order of first occurrence, with the index of each
  one's first occurrence, each input's index into them and their counts. Pairwise comparisons (n x n), so the one
  host read is the count of distinct values."""
  if axis is None: rows, rest = x.reshape(-1, 1), ()
  else:
    axis = positive_axis(axis, x.ndim)
    moved = x.permute(axis, *[d for d in range(x.ndim) if d != axis])
    rows, rest = moved.reshape(x.shape[axis], -1), moved.shape[1:]
  n = rows.shape[0]
  positions = Tensor.arange(n, device=x.device, dtype=dtypes.int64)
  same = (rows.unsqueeze(1) == rows.unsqueeze(0)).all(-1)  # [i, j]
  first = same.cast(dtypes.int32).argmax(1).cast(dtypes.int64)  # the first j holding row i's value
  is_first = first == positions
  before = _rows_before(rows) if sorted else positions.reshape(1, n) < positions.reshape(n, 1)
  rank = (is_first.reshape(1, n) & before).cast(dtypes.int64).sum(1)  # row i's place among the distinct rows
  count = int(first_value(ctx.value(is_first.cast(dtypes.int64).sum().reshape(1))))
  slots = Tensor.arange(count, device=x.device, dtype=dtypes.int64).reshape(-1, 1)
  owner = is_first.reshape(1, n) & (rank.reshape(1, n) == slots)  # [slot, i]: the first occurrence in that slot
  values = owner.unsqueeze(-1).where(rows.unsqueeze(0), 0).sum(1).cast(x.dtype)
  indices = owner.where(positions.reshape(1, n), 0).sum(1)
  inverse = rank.gather(0, first)
  counts = (inverse.reshape(1, n) == slots).cast(dtypes.int64).sum(1)
  if axis is None: out = values.reshape(count)
  else:
    out = values.reshape(count, *rest)
    out = out.permute(*range(1, axis + 1), 0, *range(axis + 1, x.ndim))
  return [out, indices, inverse, counts]


@register("Det")
def det(x):
  """Determinants of [..., n, n] by Gaussian elimination with partial pivoting (n steps, each a few tensor ops)."""
  n = x.shape[-1]
  a = x.cast(dtypes.float64 if x.dtype is dtypes.float64 else dtypes.float32)
  result = a[..., 0, 0].full_like(1.0)
  rows = Tensor.arange(n, device=x.device).reshape(n, 1)
  for k in range(n):
    pivot_row = a[..., k:, k].abs().argmax(-1) + k  # [...]
    p = pivot_row.reshape(*pivot_row.shape, 1, 1)
    order = (rows == k).where(p, (rows == p).where(k, rows))  # rows k and p swapped
    a = a.gather(-2, order.expand(*a.shape[:-2], n, n))
    result = (pivot_row != k).where(-result, result)
    pivot = a[..., k, k]
    result = result * pivot
    if k + 1 < n:
      safe = (pivot == 0).where(1.0, pivot)
      factors = (a[..., k + 1:, k] / safe.unsqueeze(-1)).unsqueeze(-1)
      a = a[..., :k + 1, :].cat(a[..., k + 1:, :] - factors * a[..., k:k + 1, :], dim=-2)
  return result.cast(x.dtype)


@register("CumSum")
def cumsum(x, axis, exclusive=0, reverse=0, ctx=None):
  ax = positive_axis(int(first_value(ctx.value(axis))), x.ndim)
  if reverse: x = x.flip(ax)
  out = x.cumsum(ax).cast(x.dtype)
  if exclusive: out = out.pad(tuple((1, 0) if i == ax else (0, 0) for i in range(x.ndim)))[
      tuple(slice(0, s) for s in x.shape)]
  return out.flip(ax) if reverse else out


@register("CumProd")
def cumprod(x, axis, exclusive=0, reverse=0, ctx=None):
  ax = positive_axis(int(first_value(ctx.value(axis))), x.ndim)
  if reverse: x = x.flip(ax)
  out = x.cumprod(ax).cast(x.dtype)
  if exclusive: out = out.pad(tuple((1, 0) if i == ax else (0, 0) for i in range(x.ndim)), value=1)[
      tuple(slice(0, s) for s in x.shape)]
  return out.flip(ax) if reverse else out


@register("CenterCropPad")
def center_crop_pad(x, shape_, axes=None, ctx=None):
  sizes = ctx.ints(shape_)
  ax = [positive_axis(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
  for a, want in zip(ax, sizes):
    have = x.shape[a]
    if want < have:
      start = (have - want) // 2
      x = x[(slice(None),) * a + (slice(start, start + want),)]
    elif want > have:
      before = (want - have) // 2
      x = x.pad(tuple((before, want - have - before) if i == a else (0, 0) for i in range(x.ndim)))
  return x


def _window(size: Tensor, periodic: int, output_datatype: int, ctx: Any, coefficients: Sequence[float]) -> Tensor:
  n = int(first_value(ctx.value(size)))
  denominator = n if periodic else n - 1
  k = Tensor.arange(n, device=ctx.device).cast(dtypes.float32) * (2 * math.pi / max(denominator, 1))
  out = Tensor.zeros(n, dtype=dtypes.float32, device=ctx.device) + coefficients[0]
  for i, c in enumerate(coefficients[1:], start=1): out = out + ((-1) ** i) * c * (k * i).cos()
  return out.cast(onnx_type(output_datatype))


@register("HannWindow")
def hann_window(size, output_datatype=1, periodic=1, ctx=None):
  return _window(size, periodic, output_datatype, ctx, [0.5, 0.5])
@register("HammingWindow")
def hamming_window(size, output_datatype=1, periodic=1, ctx=None):
  return _window(size, periodic, output_datatype, ctx, [25 / 46, 21 / 46])
@register("BlackmanWindow")
def blackman_window(size, output_datatype=1, periodic=1, ctx=None):
  return _window(size, periodic, output_datatype, ctx, [0.42, 0.5, 0.08])


@register("ReverseSequence")
def reverse_sequence(x, sequence_lens, batch_axis=1, time_axis=0, ctx=None):
  lens = ctx.ints(sequence_lens)
  steps = x.shape[time_axis]
  # per batch entry b, time t reads t' = lens[b] - 1 - t for t < lens[b], else t
  table = [[(n - 1 - t) if t < n else t for t in range(steps)] for n in lens]
  idx = Tensor(table, dtype=dtypes.int64, device=x.device)  # (batch, time)
  if batch_axis > time_axis: idx = idx.transpose(0, 1)
  shape = [1] * x.ndim
  shape[batch_axis], shape[time_axis] = x.shape[batch_axis], steps
  return x.gather(time_axis, idx.reshape(shape).expand(*x.shape))


@register("TopK")
def topk(x, k, axis=-1, largest=1, sorted=1, ctx=None):
  n = int(first_value(ctx.value(k)))
  values, indices = x.topk(n, dim=axis, largest=bool(largest))
  return values, indices.cast(dtypes.int64)


def _arg(x: Tensor, axis: int, keepdims: int, last: int, fn: Callable) -> Tensor:
  axis = positive_axis(axis, x.ndim)
  if last:
    n = x.shape[axis]
    out = (n - 1) - fn(x.flip(axis), axis)
  else: out = fn(x, axis)
  out = out.cast(dtypes.int64)
  return out.unsqueeze(axis) if keepdims else out


@register("ArgMax")
def argmax(x, axis=0, keepdims=1, select_last_index=0): return _arg(x, axis, keepdims, select_last_index, Tensor.argmax)
@register("ArgMin")
def argmin(x, axis=0, keepdims=1, select_last_index=0): return _arg(x, axis, keepdims, select_last_index, Tensor.argmin)


@register("Pad")
def pad(data, pads_=None, constant_value=None, axes_=None, mode="constant", pads=None, value=0.0, ctx=None):
  widths = ctx.ints(pads_) if pads_ is not None else list(pads)
  fill = value if constant_value is None else first_value(ctx.value(constant_value))
  axes = [positive_axis(a, data.ndim) for a in ctx.ints(axes_)] if axes_ is not None else list(range(data.ndim))
  n = len(axes)
  per = [(0, 0)] * data.ndim
  for i, a in enumerate(axes): per[a] = (widths[i], widths[i + n])
  # negative widths crop
  crop = tuple(slice(-b if b < 0 else None, e if e < 0 else None) for b, e in per)
  data = data[crop]
  per = [(max(b, 0), max(e, 0)) for b, e in per]
  if not any(b or e for b, e in per): return data
  torch_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode]
  if torch_mode == "constant": return data.pad(tuple(per), value=fill)
  return data.pad(tuple(per), mode=torch_mode)


@register("DepthToSpace")
def depth_to_space(x, blocksize, mode="DCR"):
  n, c, h, w = x.shape
  b = blocksize
  if mode == "DCR":
    return x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2).reshape(n, c // (b * b), h * b, w * b)
  return x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3).reshape(n, c // (b * b), h * b, w * b)


@register("SpaceToDepth")
def space_to_depth(x, blocksize, mode="DCR"):
  n, c, h, w = x.shape
  b = blocksize
  if mode == "CRD":
    return x.reshape(n, c, h // b, b, w // b, b).permute(0, 1, 3, 5, 2, 4).reshape(n, c * b * b, h // b, w // b)
  return x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


@register("Einsum")
def einsum(*xs, equation): return Tensor.einsum(equation.replace(" ", ""), *xs)


# ---------------------------------------------------------------------------------------------------- reductions
def _reduce(name: str, fn: Callable[[Tensor, Any, bool], Tensor]) -> None:
  def run(x, axes_=None, axes=None, keepdims=1, noop_with_empty_axes=0, ctx=None):
    ax = _axes_of(ctx, axes_, axes)
    if not ax:
      if noop_with_empty_axes: return x
      ax = list(range(x.ndim))
    ax = tuple(_axes(ax, x.ndim))
    return fn(x, ax, bool(keepdims))
  register(name)(run)


def _sum_keep(x: Tensor, ax, keep) -> Tensor: return x.sum(ax, keepdim=keep).cast(x.dtype)


for _name, _fn in {
    "ReduceSum": _sum_keep,
    "ReduceMean": lambda x, ax, keep: x.mean(ax, keepdim=keep).cast(x.dtype),
    "ReduceMax": lambda x, ax, keep: x.max(ax, keepdim=keep) if x.numel() else
    Tensor.full(_reduced_shape(x, ax, keep), -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype),
                dtype=x.dtype, device=x.device),
    "ReduceMin": lambda x, ax, keep: x.min(ax, keepdim=keep) if x.numel() else
    Tensor.full(_reduced_shape(x, ax, keep), math.inf if dtypes.is_float(x.dtype) else dtypes.max(x.dtype),
                dtype=x.dtype, device=x.device),
    "ReduceProd": lambda x, ax, keep: x.prod(ax, keepdim=keep).cast(x.dtype),
    "ReduceL1": lambda x, ax, keep: _sum_keep(x.abs(), ax, keep),
    "ReduceL2": lambda x, ax, keep: x.cast(dtypes.float32).square().sum(ax, keepdim=keep).sqrt().cast(x.dtype),
    "ReduceSumSquare": lambda x, ax, keep: _sum_keep(x * x, ax, keep),
    "ReduceLogSum": lambda x, ax, keep: x.sum(ax, keepdim=keep).log(),
    "ReduceLogSumExp": lambda x, ax, keep: x.logsumexp(ax, keepdim=keep) if x.numel() else
    Tensor.full(_reduced_shape(x, ax, keep), -math.inf, dtype=x.dtype, device=x.device)}.items():
  _reduce(_name, _fn)


def _reduced_shape(x: Tensor, ax, keep: bool) -> tuple[int, ...]:
  return tuple(1 if i in ax else s for i, s in enumerate(x.shape) if keep or i not in ax)


# ---------------------------------------------------------------------------------------------------- linear algebra
@register("MatMul")
def matmul(a, b): return a.matmul(b)


@register("Gemm")
def gemm(a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
  if transA: a = a.transpose(-1, -2)
  if transB: b = b.transpose(-1, -2)
  out = a.matmul(b)
  if alpha != 1.0: out = out * alpha
  if c is not None: out = out + (c * beta if beta != 1.0 else c)
  return out


def _zero_centered(x: Tensor, zero: Tensor | None) -> Tensor:
  out = x.cast(dtypes.int32)
  return out if zero is None else out - zero.cast(dtypes.int32)


@register("MatMulInteger")
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
  if a_zero_point is not None and a_zero_point.ndim == 1 and a.ndim >= 2: a_zero_point = a_zero_point.reshape(-1, 1)
  return _zero_centered(a, a_zero_point).matmul(_zero_centered(b, b_zero_point), dtype=dtypes.int32)


# ---------------------------------------------------------------------------------------------------- convolution
def _conv_pads(x_spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
               pads: Sequence[int] | None, auto_pad: str) -> list[tuple[int, int]]:
  """(begin, end) padding per spatial dim from ONNX's pads [b1, b2, ..., e1, e2, ...] or auto_pad."""
  n = len(kernel)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = []
    for size, k, s, d in zip(x_spatial, kernel, strides, dilations):
      total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
      small, big = total // 2, total - total // 2
      out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
    return out
  if auto_pad == "VALID" or pads is None: return [(0, 0)] * n
  return [(pads[i], pads[i + n]) for i in range(n)]


def _spatial_pad(x: Tensor, sides: list[tuple[int, int]], value: float = 0.0) -> Tensor:
  if not any(b or e for b, e in sides): return x
  return x.pad(((0, 0), (0, 0)) + tuple(sides), value=value)


@register("Conv")
def conv(x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
  n = w.ndim - 2
  strides, dilations = strides or [1] * n, dilations or [1] * n
  sides = _conv_pads(x.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad)
  return _spatial_pad(x, sides).conv2d(w, b, groups=group, stride=strides, dilation=dilations)


@register("ConvTranspose")
def conv_transpose(x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, output_padding=None,
                   output_shape=None, pads=None, strides=None):
  n = w.ndim - 2
  strides, dilations = strides or [1] * n, dilations or [1] * n
  output_padding = output_padding or [0] * n
  kernel = w.shape[2:]
  full = [(i - 1) * s + (k - 1) * d + 1 + op for i, k, s, d, op in zip(x.shape[2:], kernel, strides, dilations,
                                                                     output_padding)]
  if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    target = list(output_shape)[-n:] if output_shape is not None else [i * s for i, s in zip(x.shape[2:], strides)]
    totals = [f - t for f, t in zip(full, target)]
    sides = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2) for t in totals]
  elif pads is not None and auto_pad != "VALID": sides = [(pads[i], pads[i + n]) for i in range(n)]
  else: sides = [(0, 0)] * n
  out = x.conv_transpose2d(w, None, groups=group, stride=strides, dilation=dilations, output_padding=output_padding)
  # positive pads crop the full output; negative ones (an output_shape past it) extend it with zeros
  if any(bb < 0 or e < 0 for bb, e in sides):
    out = out.pad(((0, 0), (0, 0)) + tuple((max(-bb, 0), max(-e, 0)) for bb, e in sides))
    sides = [(max(bb, 0), max(e, 0)) for bb, e in sides]
  out = out[(slice(None), slice(None)) + tuple(slice(bb, out.shape[2 + i] - e) for i, (bb, e) in enumerate(sides))]
  return out if b is None else out + b.reshape(1, -1, *(1,) * n)


def _pool_sides(x: Tensor, kernel, strides, dilations, pads, auto_pad, ceil_mode) -> list[tuple[int, int]]:
  sides = _conv_pads(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
  if ceil_mode:  # the extra right padding a last partial window needs (the window must start inside input or pad)
    out = []
    for size, k, s, d, (bb, e) in zip(x.shape[2:], kernel, strides, dilations, sides):
      room = size + bb + e - ((k - 1) * d + 1)
      count = -(-room // s) + 1
      if (count - 1) * s >= size + bb: count -= 1
      out.append((bb, e + max(0, (count - 1) * s - room)))
    return out
  return sides


@register("MaxPool")
def max_pool(x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None, storage_order=0,
             strides=None, ctx=None):
  n = len(kernel_shape)
  strides, dilations = strides or [1] * n, dilations or [1] * n
  sides = _pool_sides(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
  low = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
  windows = _spatial_pad(x, sides, low)._pool(tuple(kernel_shape), tuple(strides), tuple(dilations))
  reduced = tuple(range(-n, 0))
  values = windows.max(reduced)
  if len(ctx.node.outputs) < 2 or not ctx.node.outputs[1]: return values
  # indices into the flattened input (N, C, *spatial), row-major (storage_order 0) or column-major (1)
  spatial = x.shape[2:]
  dims = spatial if not storage_order else tuple(reversed(spatial))
  positions = Tensor.arange(math.prod(spatial), device=x.device).reshape(dims)
  if storage_order: positions = positions.permute(*reversed(range(n)))
  positions = positions.reshape(1, 1, *spatial).cast(dtypes.float32)
  pos_windows = _spatial_pad(positions, sides, -1.0)._pool(tuple(kernel_shape), tuple(strides), tuple(dilations))
  flat_w = windows.reshape(*windows.shape[:2 + n], -1)
  first = flat_w.argmax(-1, keepdim=True)
  picked = pos_windows.reshape(*pos_windows.shape[:2 + n], -1).expand(*flat_w.shape).gather(-1, first).squeeze(-1)
  batch, channels = x.shape[:2]
  plane = math.prod(spatial)
  base = Tensor.arange(batch * channels, device=x.device).reshape(batch, channels, *(1,) * n) * plane
  return values, (picked.cast(dtypes.int64) + base).cast(dtypes.int64)


@register("AveragePool")
def average_pool(x, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, kernel_shape=None, pads=None,
                 strides=None):
  n = len(kernel_shape)
  strides, dilations = strides or [1] * n, dilations or [1] * n
  explicit = _conv_pads(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad)
  sides = _pool_sides(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
  windows = _spatial_pad(x, sides)._pool(tuple(kernel_shape), tuple(strides), tuple(dilations))
  reduced = tuple(range(-n, 0))
  ones = Tensor.ones(1, 1, *x.shape[2:], device=x.device, dtype=dtypes.float32)
  if count_include_pad:
    ones = _spatial_pad(ones, explicit, 1.0)
    ones = _spatial_pad(ones, [(0, s[1] - e[1]) for s, e in zip(sides, explicit)])
  else: ones = _spatial_pad(ones, sides)
  divisor = ones._pool(tuple(kernel_shape), tuple(strides), tuple(dilations)).sum(reduced)
  return (windows.sum(reduced) / divisor).cast(x.dtype)


@register("LpPool")
def lp_pool(x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2, pads=None, strides=None):
  n = len(kernel_shape)
  strides, dilations = strides or [1] * n, dilations or [1] * n
  sides = _pool_sides(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
  windows = _spatial_pad(x, sides)._pool(tuple(kernel_shape), tuple(strides), tuple(dilations))
  return windows.abs().pow(p).sum(tuple(range(-n, 0))).pow(1.0 / p)


@register("GlobalAveragePool")
def global_average_pool(x): return x.mean(tuple(range(2, x.ndim)), keepdim=True)
@register("GlobalMaxPool")
def global_max_pool(x): return x.max(tuple(range(2, x.ndim)), keepdim=True)
@register("GlobalLpPool")
def global_lp_pool(x, p=2): return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1.0 / p)


@register("MaxUnpool")
def max_unpool(x, indices, output_shape=None, kernel_shape=None, pads=None, strides=None, ctx=None):
  n = len(kernel_shape)
  strides, pads = strides or [1] * n, pads or [0] * (2 * n)
  if output_shape is not None: out_spatial = ctx.ints(output_shape)[-n:]
  else: out_spatial = [(i - 1) * s + k - pads[d] - pads[d + n] for d, (i, s, k) in
                       enumerate(zip(x.shape[2:], strides, kernel_shape))]
  batch, channels = x.shape[:2]
  plane = math.prod(out_spatial)
  flat = Tensor.zeros(batch * channels * plane, dtype=x.dtype, device=x.device)
  out = flat.scatter(0, indices.reshape(-1).cast(dtypes.int64), x.reshape(-1))
  return out.reshape(batch, channels, *out_spatial)


# ---------------------------------------------------------------------------------------------------- normalization
def _channel(t: Tensor, ndim: int) -> Tensor: return t.reshape(1, -1, *(1,) * (ndim - 2))


@register("BatchNormalization")
def batch_norm(x, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, training_mode=0, spatial=1, is_test=None,
               consumed_inputs=None):
  if training_mode:
    axes = (0,) + tuple(range(2, x.ndim))
    batch_mean = x.mean(axes)
    batch_var = ((x - _channel(batch_mean, x.ndim)).square()).mean(axes)
    out = (x - _channel(batch_mean, x.ndim)) * _channel((batch_var + epsilon).rsqrt() * scale, x.ndim) + \
        _channel(bias, x.ndim)
    return out, mean * momentum + batch_mean * (1 - momentum), var * momentum + batch_var * (1 - momentum)
  invstd = (var + epsilon).rsqrt()
  return (x - _channel(mean, x.ndim)) * _channel(invstd * scale, x.ndim) + _channel(bias, x.ndim)


@register("InstanceNormalization")
def instance_norm(x, scale, bias, epsilon=1e-5):
  axes = tuple(range(2, x.ndim))
  mean = x.mean(axes, keepdim=True)
  var = (x - mean).square().mean(axes, keepdim=True)
  return (x - mean) * (var + epsilon).rsqrt() * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@register("LayerNormalization")
def layer_norm(x, scale, bias=None, axis=-1, epsilon=1e-5, stash_type=1):
  axis = positive_axis(axis, x.ndim)
  axes = tuple(range(axis, x.ndim))
  xf = x.cast(dtypes.float32) if stash_type == 1 and x.dtype is not dtypes.float64 else x
  mean = xf.mean(axes, keepdim=True)
  invstd = ((xf - mean).square().mean(axes, keepdim=True) + epsilon).rsqrt()
  out = ((xf - mean) * invstd).cast(x.dtype) * scale
  if bias is not None: out = out + bias
  return out, mean, invstd


@register("GroupNormalization")
def group_norm(x, scale, bias, epsilon=1e-5, num_groups=1, stash_type=1, ctx=None):
  batch, channels = x.shape[:2]
  grouped = x.reshape(batch, num_groups, -1)
  mean = grouped.mean(-1, keepdim=True)
  var = (grouped - mean).square().mean(-1, keepdim=True)
  normed = ((grouped - mean) * (var + epsilon).rsqrt()).reshape(x.shape)
  if scale.shape[0] == num_groups and num_groups != channels:  # opset 18: one scale per group
    scale = scale.reshape(num_groups, 1).expand(num_groups, channels // num_groups).reshape(-1)
    bias = bias.reshape(num_groups, 1).expand(num_groups, channels // num_groups).reshape(-1)
  return normed * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@register("RMSNormalization")
def rms_norm(x, scale, axis=-1, epsilon=1e-5, stash_type=1):
  axes = tuple(range(positive_axis(axis, x.ndim), x.ndim))
  xf = x.cast(dtypes.float32) if x.dtype is not dtypes.float64 else x
  return (xf * (xf.square().mean(axes, keepdim=True) + epsilon).rsqrt()).cast(x.dtype) * scale


@register("LpNormalization")
def lp_normalization(x, axis=-1, p=2):
  norm = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
  return (norm == 0).where(0.0, x / norm).cast(x.dtype)  # a zero norm gives 0, not NaN


@register("MeanVarianceNormalization")
def mean_variance_normalization(x, axes=None):
  ax = tuple(_axes(axes if axes is not None else [0, 2, 3], x.ndim))
  mean = x.mean(ax, keepdim=True)
  return (x - mean) / ((x - mean).square().mean(ax, keepdim=True).sqrt() + 1e-9)


@register("LRN")
def lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
  c = x.shape[1]
  sq = x.square().reshape(x.shape[0], 1, c, -1)
  padded = sq.pad(((0, 0), (0, 0), ((size - 1) // 2, size // 2), (0, 0)))
  windows = padded._pool((size, 1), (1, 1), (1, 1)).sum((-2, -1)).reshape(x.shape)
  return x / (bias + alpha / size * windows).pow(beta)


@register("Dropout")
def dropout(x, ratio=None, training_mode=None, seed=None, is_test=None, consumed_inputs=None, ctx=None):
  outs = [x]
  if len(ctx.node.outputs) > 1: outs.append(Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device))
  return outs


# ---------------------------------------------------------------------------------------------------- resize
def _resize_sources(out_size: int, in_size: int, scale: float, mode: str, roi: tuple[float, float]) -> list[float]:
  """The input coordinate of each output index (coordinate_transformation_mode `mode`)."""
  coords = []
  for o in range(out_size):
    if mode == "half_pixel": c = (o + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
      adj = out_size / (scale * in_size) if in_size else 1.0
      center = in_size / 2
      c = center * (1 - adj) + (o + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel": c = (o + 0.5) / scale - 0.5 if out_size > 1 else 0.0
    elif mode == "align_corners": c = o * (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    elif mode == "asymmetric": c = o / scale
    elif mode == "tf_crop_and_resize":
      start, end = roi
      c = (start * (in_size - 1) + o * (end - start) * (in_size - 1) / (out_size - 1)) if out_size > 1 else \
          0.5 * (start + end) * (in_size - 1)
    else: raise ValueError(f"coordinate_transformation_mode {mode!r}")
    coords.append(c)
  return coords


def _nearest(c: float, rule: str) -> int:
  if rule == "round_prefer_floor": return math.ceil(c - 0.5)
  if rule == "round_prefer_ceil": return math.floor(c + 0.5)
  if rule == "floor": return math.floor(c)
  if rule == "ceil": return math.ceil(c)
  raise ValueError(f"nearest_mode {rule!r}")


def _cubic_weights(t: float, a: float) -> list[float]:
  return [_cubic_kernel(t + 1, a), _cubic_kernel(t, a), _cubic_kernel(1 - t, a), _cubic_kernel(2 - t, a)]


def _antialias_taps(c: float, scale: float, mode: str, cubic_a: float, exclude_outside: int,
                    in_size: int) -> list[tuple[int, float]]:
  """Resize's antialiased linear or cubic filter around input coordinate c: when downsampling, the kernel is
  stretched by 1 / scale over more input pixels, normalized; the taps are the pixels nearest c (ties to the lower),
  clamped to the edges."""
  scale = min(scale, 1.0)
  ratio = 1.0 if c == math.floor(c) else c - math.floor(c)  # in (0, 1]: the pixel left of c is preferred
  if mode == "linear":
    start = math.floor(-1 / scale) + 1
    weights = [max(0.0, 1 - abs((i - ratio) * scale)) for i in range(start, 2 - start)]
  else:
    start = math.floor(-2 / scale) + 1
    weights = [_cubic_kernel(scale * (i - ratio), cubic_a) for i in range(start, 2 - start)]
  total = sum(weights)
  weights = [w / total for w in weights]
  n = len(weights)
  pad = math.ceil(n / 2)
  padded = c + pad
  base = math.floor(padded)
  frac = padded - base
  if n % 2 == 0: offset = -(n // 2) if frac == 0 else -(n // 2) + 1
  else: offset = -((n - 1) // 2) + (0 if frac <= 0.5 else 1)
  first = base + offset - pad
  taps = [(first + k, w) for k, w in enumerate(weights)]
  if exclude_outside:
    inside = sum(w for p, w in taps if 0 <= p < in_size) or 1.0
    taps = [(p, w / inside if 0 <= p < in_size else 0.0) for p, w in taps]
  return [(min(max(p, 0), in_size - 1), w) for p, w in taps]


def _cubic_kernel(d: float, a: float) -> float:
  d = abs(d)
  if d <= 1: return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
  if d < 2: return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
  return 0.0


def _resize_axis(x: Tensor, axis: int, out_size: int, scale: float, mode: str, coord_mode: str, nearest_mode: str,
                 cubic_a: float, exclude_outside: int, roi: tuple[float, float], extrapolation: float,
                 antialias: int = 0) -> Tensor:
  """x resized along one axis: a weighted sum of gathered rows (indices and weights are host constants)."""
  in_size = x.shape[axis]
  coords = _resize_sources(out_size, in_size, scale, coord_mode, roi)
  taps: list[list[tuple[int, float]]] = []
  for c in coords:
    if coord_mode == "tf_crop_and_resize" and not (0 <= c <= in_size - 1): taps.append([]); continue
    if antialias and mode != "nearest":
      taps.append(_antialias_taps(c, scale, mode, cubic_a, exclude_outside, in_size))
    elif mode == "nearest": taps.append([(min(max(_nearest(c, nearest_mode), 0), in_size - 1), 1.0)])
    elif mode == "linear":
      c = min(max(c, 0.0), in_size - 1) if coord_mode != "tf_crop_and_resize" else c
      lo = math.floor(c)
      t = c - lo
      taps.append([(min(max(lo, 0), in_size - 1), 1 - t), (min(max(lo + 1, 0), in_size - 1), t)])
    else:  # cubic
      lo = math.floor(c)
      weights = _cubic_weights(c - lo, cubic_a)
      pts = [(lo - 1 + i, wt) for i, wt in enumerate(weights)]
      if exclude_outside:
        inside = [(p, wt) for p, wt in pts if 0 <= p < in_size]
        total = sum(wt for _, wt in inside) or 1.0
        pts = [(p, wt / total) for p, wt in inside]
      taps.append([(min(max(p, 0), in_size - 1), wt) for p, wt in pts])
  width = max((len(t) for t in taps), default=0)
  if width == 0: return Tensor.full(tuple(out_size if i == axis else s for i, s in enumerate(x.shape)), extrapolation,
                                    dtype=x.dtype, device=x.device)
  out = None
  shape = [1] * x.ndim
  shape[axis] = out_size
  for k in range(width):
    idx = [t[k][0] if k < len(t) else 0 for t in taps]
    wts = [t[k][1] if k < len(t) else 0.0 for t in taps]
    picked = x[(slice(None),) * axis + (Tensor(idx, dtype=dtypes.int64, device=x.device),)]
    term = picked.cast(dtypes.float32) * Tensor(wts, dtype=dtypes.float32, device=x.device).reshape(shape)
    out = term if out is None else out + term
  if coord_mode == "tf_crop_and_resize" and any(not t for t in taps):
    valid = Tensor([bool(t) for t in taps], device=x.device).reshape(shape)
    out = valid.where(out, extrapolation)
  if dtypes.is_int(x.dtype): out = out.round().clip(dtypes.min(x.dtype), dtypes.max(x.dtype))
  return out.cast(x.dtype)


@register("Resize")
def resize(x, roi=None, scales=None, sizes=None, antialias=0, axes=None, coordinate_transformation_mode="half_pixel",
           cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
           mode="nearest", nearest_mode="round_prefer_floor", ctx=None):
  ax = [positive_axis(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
  roi_values = [float(v) for v in flatten_list(ctx.value(roi))] if roi is not None and roi.numel() else []
  scale_values = [float(v) for v in flatten_list(ctx.value(scales))] if scales is not None and scales.numel() else None
  size_values = ctx.ints(sizes) if sizes is not None and sizes.numel() else None
  if size_values is not None:
    if keep_aspect_ratio_policy != "stretch":
      ratios = [size_values[i] / x.shape[a] for i, a in enumerate(ax)]
      r = min(ratios) if keep_aspect_ratio_policy == "not_larger" else max(ratios)
      size_values = [int(round(r * x.shape[a])) for a in ax]
      scale_values = [r] * len(ax)
    else: scale_values = [size_values[i] / x.shape[a] for i, a in enumerate(ax)]
  else: size_values = [int(math.floor(x.shape[a] * s)) for a, s in zip(ax, scale_values)]
  out = x
  for i, a in enumerate(ax):
    unchanged = size_values[i] == x.shape[a] and scale_values[i] == 1.0
    if unchanged and coordinate_transformation_mode != "tf_crop_and_resize": continue
    roi_axis = (roi_values[i], roi_values[i + len(ax)]) if roi_values else (0.0, 1.0)
    out = _resize_axis(out, a, size_values[i], scale_values[i], mode, coordinate_transformation_mode, nearest_mode,
                       cubic_coeff_a, exclude_outside, roi_axis, extrapolation_value, antialias)
  return out


@register("Upsample")
def upsample(x, scales_=None, mode="nearest", scales=None, ctx=None):
  values = [float(v) for v in flatten_list(ctx.value(scales_))] if scales_ is not None else scales
  sizes = [int(math.floor(s * f)) for s, f in zip(x.shape, values)]
  out = x
  for a in range(x.ndim):
    if values[a] != 1.0:
      out = _resize_axis(out, a, sizes[a], values[a], mode, "asymmetric", "floor", -0.75, 0, (0.0, 1.0), 0.0)
  return out


# ---------------------------------------------------------------------------------------------------- quantization
def _per_axis(t: Tensor, x: Tensor, axis: int, block_size: int = 0) -> Tensor:
  """A scale or zero point shaped to broadcast against x: a scalar, per `axis` (1-d), or per block."""
  if t.ndim == 0 or t.numel() == 1 and t.ndim <= 1: return t.reshape(())
  axis = positive_axis(axis, x.ndim)
  if block_size:
    return t.repeat_interleave(block_size, dim=axis)[tuple(slice(0, s) for s in x.shape)]
  shape = [1] * x.ndim
  shape[axis] = -1
  return t.reshape(shape)


@register("QuantizeLinear")
def quantize_linear(x, y_scale, y_zero_point=None, axis=1, saturate=1, block_size=0, output_dtype=0, precision=0):
  out_dtype = y_zero_point.dtype if y_zero_point is not None else (onnx_type(output_dtype) if output_dtype else
                                                                  dtypes.uint8)
  scale = _per_axis(y_scale, x, axis, block_size)
  y = x.cast(dtypes.float32) / scale.cast(dtypes.float32)
  if out_dtype not in dtypes.fp8s: y = y.round()  # to an 8-bit float: its own rounding, to nearest even
  if y_zero_point is not None: y = y + _per_axis(y_zero_point, x, axis, block_size).cast(dtypes.float32)
  if out_dtype in dtypes.fp8s: return cast_to_fp8(y, out_dtype, saturate)
  return y.clip(dtypes.min(out_dtype), dtypes.max(out_dtype)).cast(out_dtype)


@register("DequantizeLinear")
def dequantize_linear(x, x_scale, x_zero_point=None, axis=1, block_size=0, output_dtype=0, precision=0):
  scale = _per_axis(x_scale, x, axis, block_size)
  centered = x.cast(dtypes.float32 if x.dtype in dtypes.fp8s else dtypes.int32)
  if x_zero_point is not None:
    centered = centered - _per_axis(x_zero_point, x, axis, block_size).cast(centered.dtype)
  return (centered.cast(dtypes.float32) * scale.cast(dtypes.float32)).cast(
      onnx_type(output_dtype) if output_dtype else x_scale.dtype)


@register("DynamicQuantizeLinear")
def dynamic_quantize_linear(x):
  lo, hi = x.min().minimum(0), x.max().maximum(0)
  scale = (hi - lo) / 255
  zero = (-lo / scale).round().clip(0, 255)
  y = ((x / scale).round() + zero).clip(0, 255).cast(dtypes.uint8)
  return y, scale, zero.cast(dtypes.uint8)


@register("QLinearMatMul")
def qlinear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero):
  af = dequantize_linear(a, a_scale, a_zero, axis=0 if a_scale.numel() > 1 else 1)
  bf = dequantize_linear(b, b_scale, b_zero, axis=-1)
  return quantize_linear(af.cast(dtypes.float32).matmul(bf.cast(dtypes.float32)), y_scale, y_zero, axis=-1)


@register("QLinearConv")
def qlinear_conv(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, b=None, auto_pad="NOTSET", dilations=None,
                 group=1, kernel_shape=None, pads=None, strides=None):
  xf = dequantize_linear(x, x_scale, x_zero).cast(dtypes.float32)
  wf = dequantize_linear(w, w_scale, w_zero, axis=0).cast(dtypes.float32)
  bias = None if b is None else b.cast(dtypes.float32) * (x_scale.cast(dtypes.float32) * w_scale.cast(dtypes.float32))
  out = conv(xf, wf, bias, auto_pad, dilations, group, kernel_shape, pads, strides)
  return quantize_linear(out, y_scale, y_zero)


@register("ConvInteger")
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
  xi = _zero_centered(x, x_zero_point)
  wi = w.cast(dtypes.int32)
  if w_zero_point is not None: wi = wi - _per_axis(w_zero_point, w, 0).cast(dtypes.int32)
  n = w.ndim - 2
  strides, dilations = strides or [1] * n, dilations or [1] * n
  sides = _conv_pads(x.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad)
  return _spatial_pad(xi, sides).conv2d(wi, None, groups=group, stride=strides, dilation=dilations,
                                        dtype=dtypes.int32).cast(dtypes.int32)


# ---------------------------------------------------------------------------------------------------- attention
@register("Attention")
def attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, is_causal=0,
              kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0,
              softmax_precision=None, left_window_size=-1, right_window_size=-1, ctx=None):
  """ONNX 23-25's Attention: 4-d (B, heads, S, D) or 3-d (B, S, heads*D) inputs, grouped-query heads, a bool or
  additive mask, key and value caches in front, a causal mask and a sliding window (25) aligned after the cache (or
  per batch after nonpad_kv_seqlen), a fully masked row giving zeros."""
  three_d = q.ndim == 3
  if three_d:
    b = q.shape[0]
    q = q.reshape(b, q.shape[1], q_num_heads, -1).transpose(1, 2)
    k = k.reshape(b, k.shape[1], kv_num_heads, -1).transpose(1, 2)
    v = v.reshape(b, v.shape[1], kv_num_heads, -1).transpose(1, 2)
  if past_key is not None: k = past_key.cat(k, dim=2)
  if past_value is not None: v = past_value.cat(v, dim=2)
  present_k, present_v = k, v
  s_q, s_k = q.shape[2], k.shape[2]
  dtype = q.dtype
  bias = Tensor.zeros(s_q, s_k, dtype=dtype, device=q.device)
  if attn_mask is not None:
    mask = attn_mask
    if mask.shape[-1] < s_k:
      mask = mask.pad(((0, 0),) * (mask.ndim - 1) + ((0, s_k - mask.shape[-1]),),
                      value=False if mask.dtype is dtypes.bool else -math.inf)
    bias = bias + (mask.where(0.0, -math.inf).cast(dtype) if mask.dtype is dtypes.bool else mask.cast(dtype))
  rows = Tensor.arange(s_q, device=q.device).reshape(s_q, 1)
  cols = Tensor.arange(s_k, device=q.device).reshape(1, s_k)
  # where each query sits among the keys: after the cache, or per batch after its nonpad_kv_seqlen
  if past_key is None and nonpad_kv_seqlen is not None:
    offset = (nonpad_kv_seqlen.cast(dtypes.int64) - s_q).reshape(-1, 1, 1, 1)
  else: offset = past_key.shape[2] if past_key is not None else 0
  if is_causal: bias = bias + (cols <= rows + offset).where(0.0, -math.inf).cast(dtype)
  if left_window_size >= 0 or right_window_size >= 0:
    behind = rows + offset - cols
    allowed = (behind <= left_window_size) if left_window_size >= 0 else behind == behind
    if right_window_size >= 0: allowed = allowed & (-behind <= right_window_size)
    bias = bias + allowed.where(0.0, -math.inf).cast(dtype)
  if nonpad_kv_seqlen is not None:
    keep = Tensor.arange(s_k, device=q.device).reshape(1, s_k) < nonpad_kv_seqlen.cast(dtypes.int64).reshape(-1, 1)
    bias = bias + keep.reshape(-1, 1, 1, s_k).where(0.0, -math.inf).cast(dtype)
  if k.shape[1] != q.shape[1]:
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
  root = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
  qk = (q * root).matmul(k.transpose(-1, -2) * root)
  if softcap: qk = softcap * (qk / softcap).tanh()
  with_bias = qk + bias
  qk_out = with_bias if qk_matmul_output_mode == 2 else qk  # 1: the softcapped product, 2: with the mask added
  masked = bias.max(-1, keepdim=True) == -math.inf
  logits = with_bias if softmax_precision is None else with_bias.cast(onnx_type(softmax_precision))
  safe = masked.where(0.0, logits)
  probs = masked.where(0.0, safe.softmax(-1)).cast(dtype)
  if qk_matmul_output_mode == 3: qk_out = probs
  out = probs.matmul(v)
  if three_d: out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
  return [out, present_k, present_v, qk_out.cast(dtype)][:max(1, len(ctx.node.outputs))]


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, interleaved: int, rotary_dim: int) -> Tensor:
  rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
  if interleaved:
    x1, x2 = rot[..., 0::2], rot[..., 1::2]
    out = Tensor.stack(x1 * cos - x2 * sin, x1 * sin + x2 * cos, dim=-1).reshape(rot.shape)
  else:
    half = rotary_dim // 2
    x1, x2 = rot[..., :half], rot[..., half:]
    out = (x1 * cos - x2 * sin).cat(x1 * sin + x2 * cos, dim=-1)
  return out.cat(rest, dim=-1) if rest.shape[-1] else out


@register("RotaryEmbedding")
def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, interleaved=0, num_heads=0, rotary_embedding_dim=0):
  """ONNX 23's RotaryEmbedding: x (B, heads, S, D) or (B, S, heads*D); caches (max_pos, D/2) indexed by
  position_ids (B, S), or already (B, S, D/2)."""
  three_d = x.ndim == 3
  if three_d:
    b, s = x.shape[:2]
    heads = num_heads or x.shape[2] // (cos_cache.shape[-1] * 2)
    x = x.reshape(b, s, heads, -1).transpose(1, 2)
  if position_ids is not None: cos, sin = cos_cache[position_ids], sin_cache[position_ids]
  else: cos, sin = cos_cache, sin_cache
  rotary_dim = rotary_embedding_dim or cos.shape[-1] * 2
  cos, sin = cos[..., :rotary_dim // 2].unsqueeze(1), sin[..., :rotary_dim // 2].unsqueeze(1)
  out = _rotate(x, cos, sin, interleaved, rotary_dim)
  if three_d: out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
  return out


# ---------------------------------------------------------------------------------------------------- com.microsoft
@register("Gelu", domain=MS)
def ms_gelu(x): return gelu(x)
@register("QuickGelu", domain=MS)
def ms_quick_gelu(x, alpha=1.702): return x * (x * alpha).sigmoid()
@register("BiasGelu", domain=MS)
def ms_bias_gelu(x, bias): return gelu(x + bias)
@register("FastGelu", domain=MS)
def ms_fast_gelu(x, bias=None): return (x if bias is None else x + bias).gelu()


@register("SkipLayerNormalization", domain=MS)
def ms_skip_layer_norm(x, skip, gamma, beta=None, bias=None, epsilon=1e-12, ctx=None):
  summed = x + skip + (bias if bias is not None else 0)
  out, mean, invstd = layer_norm(summed, gamma, beta, -1, epsilon)
  return [out, mean, invstd, summed][:max(1, len(ctx.node.outputs))]


@register("SkipSimplifiedLayerNormalization", domain=MS)
def ms_skip_simplified_layer_norm(x, skip, gamma, bias=None, epsilon=1e-12, ctx=None):
  summed = x + skip + (bias if bias is not None else 0)
  out = rms_norm(summed, gamma, -1, epsilon)
  return [out, None, None, summed][:max(1, len(ctx.node.outputs))]


@register("SimplifiedLayerNormalization")
def simplified_layer_norm(x, scale, axis=-1, epsilon=1e-5, stash_type=1): return rms_norm(x, scale, axis, epsilon)
register("SimplifiedLayerNormalization", domain=MS)(simplified_layer_norm)


@register("Attention", domain=MS)
def ms_attention(x, weights, bias=None, mask_index=None, past=None, attention_bias=None, past_sequence_length=None,
                 num_heads=1, unidirectional=0, scale=None, do_rotary=0, mask_filter_value=-10000.0,
                 past_present_share_buffer=0, qkv_hidden_sizes=None, rotary_embedding_dim=0):
  """com.microsoft Attention (BERT-style exports): x (B, S, H) times packed QKV weights, a mask index of (B, S) ones
  and zeros (or lengths (B,)), optional additive bias; no past state."""
  if past is not None: raise NotImplementedError("com.microsoft Attention with a past state is not supported")
  b, s, _ = x.shape
  qkv = x.matmul(weights) + (bias if bias is not None else 0)
  sizes = qkv_hidden_sizes or [qkv.shape[-1] // 3] * 3
  q, k, v = qkv.split(list(sizes), dim=-1)
  def heads(t: Tensor) -> Tensor: return t.reshape(b, s, num_heads, -1).transpose(1, 2)
  q, k, v = heads(q), heads(k), heads(v)
  scores = q.matmul(k.transpose(-1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
  if mask_index is not None:
    if mask_index.ndim == 1:
      keep = Tensor.arange(s, device=x.device).reshape(1, s) < mask_index.reshape(b, 1)
    else: keep = mask_index.reshape(b, -1)[:, -s:] != 0
    scores = scores + (1 - keep.cast(scores.dtype)).reshape(b, 1, 1, s) * mask_filter_value
  if attention_bias is not None: scores = scores + attention_bias
  if unidirectional:
    scores = Tensor.ones(s, s, dtype=dtypes.bool, device=x.device).tril().where(scores, -math.inf)
  out = scores.softmax(-1).matmul(v)
  return out.transpose(1, 2).reshape(b, s, -1)


@register("EmbedLayerNormalization", domain=MS)
def ms_embed_layer_norm(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding=None,
                        gamma=None, beta=None, mask=None, position_ids=None, epsilon=1e-12, mask_index_type=1,
                        ctx=None):
  b, s = input_ids.shape
  pos = position_ids if position_ids is not None else \
      Tensor.arange(s, device=input_ids.device).reshape(1, s).expand(b, s)
  emb = word_embedding[input_ids] + position_embedding[pos]
  if segment_embedding is not None and segment_ids is not None: emb = emb + segment_embedding[segment_ids]
  out = layer_norm(emb, gamma, beta, -1, epsilon)[0]
  mask_index = (mask.cast(dtypes.int32).sum(-1) if mask is not None else
                Tensor.full((b,), s, dtype=dtypes.int32, device=input_ids.device)).cast(dtypes.int32)
  return [out, mask_index, emb][:max(1, len(ctx.node.outputs))]


@register("RotaryEmbedding", domain=MS)
def ms_rotary_embedding(x, position_ids, cos_cache, sin_cache, interleaved=0, is_packed_batching=0, num_heads=0,
                        rotary_embedding_dim=0, scale=1.0):
  if position_ids.ndim == 1 or position_ids.numel() == 1 and x.ndim >= 3:
    start = position_ids.reshape(-1)[0]
    s = x.shape[-2] if x.ndim == 4 else x.shape[1]
    position_ids = (Tensor.arange(s, device=x.device) + start).reshape(1, s).expand(x.shape[0], s)
  return rotary_embedding(x, cos_cache, sin_cache, position_ids, interleaved, num_heads, rotary_embedding_dim)


# ---------------------------------------------------------------------------------------------------- recurrent
def _activation(name: str, alpha: float | None = None, beta: float | None = None) -> Callable[[Tensor], Tensor]:
  name = name.lower()
  if name == "sigmoid": return Tensor.sigmoid
  if name == "tanh": return Tensor.tanh
  if name == "relu": return Tensor.relu
  if name == "leakyrelu": return lambda t: t.leaky_relu(alpha if alpha is not None else 0.01)
  if name == "hardsigmoid": return lambda t: hard_sigmoid(t, alpha if alpha is not None else 0.2,
                                                          beta if beta is not None else 0.5)
  if name == "elu": return lambda t: t.elu(alpha if alpha is not None else 1.0)
  if name == "softsign": return Tensor.softsign
  if name == "softplus": return Tensor.softplus
  if name == "affine": return lambda t: t * (alpha if alpha is not None else 1.0) + (beta if beta is not None else 0.0)
  if name == "scaledtanh": return lambda t: (alpha or 1.0) * (t * (beta or 1.0)).tanh()
  if name == "thresholdedrelu": return lambda t: thresholded_relu(t, alpha if alpha is not None else 1.0)
  raise NotImplementedError(f"recurrent activation {name!r} is not supported")


def _recurrent_cell(kind: str, gx, h, c, rd, rb, f, peephole, clip, linear_before_reset, input_forget):
  """One step of an LSTM, GRU or RNN cell: (h, c) from the step's input projection gx and the state."""
  if kind == "LSTM":
    g = gx + h.matmul(rd.transpose(0, 1)) + rb
    i, o, fg, cc = g.chunk(4, dim=-1)
    if peephole is not None:
      pi, po, pf = peephole.chunk(3)
      i, fg = i + pi * c, fg + pf * c
    if clip: i, o, fg, cc = (t_.clip(-clip, clip) for t_ in (i, o, fg, cc))
    i, fg, cc = f[0](i), f[0](fg), f[1](cc)
    if input_forget: fg = 1 - i
    c_new = fg * c + i * cc
    if peephole is not None: o = o + po * c_new
    if clip: o = o.clip(-clip, clip)
    return f[0](o) * f[2](c_new), c_new
  if kind == "GRU":
    wz, wr, wh = gx.chunk(3, dim=-1)
    rz, rr, rh = rd.chunk(3, dim=0)
    bz, br, bh = rb.chunk(3)
    z = f[0](_clip(wz + h.matmul(rz.transpose(0, 1)) + bz, clip))
    rg = f[0](_clip(wr + h.matmul(rr.transpose(0, 1)) + br, clip))
    if linear_before_reset: hh = f[1](_clip(wh + rg * (h.matmul(rh.transpose(0, 1)) + bh), clip))
    else: hh = f[1](_clip(wh + (rg * h).matmul(rh.transpose(0, 1)) + bh, clip))
    return (1 - z) * hh + z * h, c
  return f[0](_clip(gx + h.matmul(rd.transpose(0, 1)) + rb, clip)), c


def _recurrent(kind: str, x, w, r, b, sequence_lens, initial_h, initial_c, p, activation_alpha, activation_beta,
               activations, clip, direction, hidden_size, layout, linear_before_reset, input_forget, ctx):
  if layout: x = x.transpose(0, 1)
  if initial_h is not None and layout: initial_h = initial_h.transpose(0, 1)
  if initial_c is not None and layout: initial_c = initial_c.transpose(0, 1)
  seq, batch = x.shape[:2]
  gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
  per_direction = {"LSTM": 3, "GRU": 2, "RNN": 1}[kind]
  names = activations or {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}[kind]
  directions = 2 if direction == "bidirectional" else 1
  if len(names) == per_direction and directions == 2: names = names * 2
  alphas, betas = activation_alpha or [], activation_beta or []
  fns = [_activation(n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
         for i, n in enumerate(names)]
  lens = ctx.ints(sequence_lens) if sequence_lens is not None else None
  ys, hs, cs = [], [], []
  for d in range(directions):
    reverse = direction == "reverse" or d == 1
    wd, rd = w[d], r[d]
    bias = b[d] if b is not None else Tensor.zeros(2 * gates * hidden_size, dtype=x.dtype, device=x.device)
    wb, rb = bias[:gates * hidden_size], bias[gates * hidden_size:]
    h = initial_h[d] if initial_h is not None else Tensor.zeros(batch, hidden_size, dtype=x.dtype, device=x.device)
    c = initial_c[d] if initial_c is not None else Tensor.zeros(batch, hidden_size, dtype=x.dtype, device=x.device)
    f = fns[d * per_direction:(d + 1) * per_direction]
    xw = x.matmul(wd.transpose(0, 1)) + wb  # every step's input projection at once
    outs: list[Tensor | None] = [None] * seq
    steps = range(seq - 1, -1, -1) if reverse else range(seq)
    for t in steps:
      h_new, c_new = _recurrent_cell(kind, xw[t], h, c, rd, rb, f, p[d] if p is not None else None, clip,
                                     linear_before_reset, input_forget)
      if lens is not None:  # a batch entry past its length keeps its state and outputs zeros
        alive = Tensor([t < n for n in lens], device=x.device).reshape(batch, 1)
        h, c = alive.where(h_new, h), alive.where(c_new, c)
        outs[t] = alive.where(h_new, 0)
      else: h, c, outs[t] = h_new, c_new, h_new
    ys.append(Tensor.stack(*outs, dim=0))
    hs.append(h)
    cs.append(c)
  y = Tensor.stack(*ys, dim=1)  # (seq, directions, batch, hidden)
  y_h, y_c = Tensor.stack(*hs, dim=0), Tensor.stack(*cs, dim=0)
  if layout: y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
  return [y, y_h, y_c][:max(1, len(ctx.node.outputs))] if kind == "LSTM" else [y, y_h][:max(1, len(ctx.node.outputs))]


def _clip(t: Tensor, clip: float | None) -> Tensor: return t.clip(-clip, clip) if clip else t


@register("LSTM")
def lstm(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, activation_alpha=None,
         activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, input_forget=0,
         layout=0, ctx=None):
  return _recurrent("LSTM", x, w, r, b, sequence_lens, initial_h, initial_c, p, activation_alpha, activation_beta,
                    activations, clip, direction, hidden_size or r.shape[-1], layout, 0, input_forget, ctx)


@register("GRU")
def gru(x, w, r, b=None, sequence_lens=None, initial_h=None, activation_alpha=None, activation_beta=None,
        activations=None, clip=None, direction="forward", hidden_size=None, layout=0, linear_before_reset=0, ctx=None):
  return _recurrent("GRU", x, w, r, b, sequence_lens, initial_h, None, None, activation_alpha, activation_beta,
                    activations, clip, direction, hidden_size or r.shape[-1], layout, linear_before_reset, 0, ctx)


@register("RNN")
def rnn(x, w, r, b=None, sequence_lens=None, initial_h=None, activation_alpha=None, activation_beta=None,
        activations=None, clip=None, direction="forward", hidden_size=None, layout=0, ctx=None):
  return _recurrent("RNN", x, w, r, b, sequence_lens, initial_h, None, None, activation_alpha, activation_beta,
                    activations, clip, direction, hidden_size or r.shape[-1], layout, 0, 0, ctx)


# ---------------------------------------------------------------------------------------------------- control flow
@register("If")
def if_(cond, then_branch, else_branch, ctx=None):
  branch = then_branch if bool(first_value(ctx.value(cond))) else else_branch
  return ctx.run_graph(branch, {}, ctx.scope)


@register("Loop")
def loop(max_trip, cond, *carried, body, ctx=None):
  trips = int(first_value(ctx.value(max_trip))) if max_trip is not None else None
  keep_going = bool(first_value(ctx.value(cond))) if cond is not None else True
  names = [i.name for i in body.input]
  n_carried = len(carried)
  state = list(carried)
  scans: list[list[Tensor]] = []
  i = 0
  while keep_going and (trips is None or i < trips):
    bindings = {names[0]: Tensor(i, dtype=dtypes.int64, device=ctx.device)}
    bindings[names[0]] = ctx.remember(bindings[names[0]], i)
    if len(names) > 1: bindings[names[1]] = ctx.remember(Tensor(keep_going, device=ctx.device), keep_going)
    for name, value in zip(names[2:], state): bindings[name] = value
    outs = ctx.run_graph(body, bindings, ctx.scope)
    keep_going = bool(first_value(ctx.value(outs[0])))
    state = outs[1:1 + n_carried]
    for j, s in enumerate(outs[1 + n_carried:]):
      if len(scans) <= j: scans.append([])
      scans[j].append(s)
    i += 1
  n_scans = len(body.output) - 1 - n_carried
  stacked = [Tensor.stack(*s, dim=0) if s else Tensor.empty(0, dtype=dtypes.float32, device=ctx.device)
             for s in scans] + [Tensor.empty(0, dtype=dtypes.float32, device=ctx.device)] * (n_scans - len(scans))
  return state + stacked


@register("Scan")
def scan(*inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None, scan_output_axes=None,
         scan_output_directions=None, ctx=None):
  if ctx.opset < 9: return _scan_batched(inputs, body, num_scan_inputs, scan_input_directions, ctx)
  n_state = len(inputs) - num_scan_inputs
  state, xs = list(inputs[:n_state]), inputs[n_state:]
  in_axes = scan_input_axes or [0] * num_scan_inputs
  in_dirs = scan_input_directions or [0] * num_scan_inputs
  xs = [x.flip(positive_axis(a, x.ndim)) if d else x for x, a, d in zip(xs, in_axes, in_dirs)]
  steps = xs[0].shape[positive_axis(in_axes[0], xs[0].ndim)] if xs else 0
  names = [i.name for i in body.input]
  outs_per_step: list[list[Tensor]] = []
  for t in range(steps):
    bindings = dict(zip(names[:n_state], state))
    for name, x, a in zip(names[n_state:], xs, in_axes):
      a = positive_axis(a, x.ndim)
      bindings[name] = x[(slice(None),) * a + (t,)]
    outs = ctx.run_graph(body, bindings, ctx.scope)
    state = outs[:n_state]
    outs_per_step.append(outs[n_state:])
  n_out = len(body.output) - n_state
  out_axes = scan_output_axes or [0] * n_out
  out_dirs = scan_output_directions or [0] * n_out
  results = []
  for j in range(n_out):
    stacked = Tensor.stack(*[o[j] for o in outs_per_step], dim=0)
    if out_dirs[j]: stacked = stacked.flip(0)
    a = positive_axis(out_axes[j], stacked.ndim)
    if a: stacked = stacked.permute(*range(1, a + 1), 0, *range(a + 1, stacked.ndim))
    results.append(stacked)
  return state + results


def _scan_batched(inputs: tuple, body: Any, num_scan_inputs: int, directions: list[int] | None, ctx: Any) -> list:
  """Scan of opset 8: a leading batch axis on every state and scan input (scanned along axis 1), and sequence_lens
  first; each batch entry is scanned as opset 9 would, and the results stacked."""
  lengths, inputs = inputs[0], inputs[1:]
  n_state = len(inputs) - num_scan_inputs
  batch = inputs[0].shape[0]
  steps = inputs[n_state].shape[1] if num_scan_inputs else 0
  if lengths is not None and any(n != steps for n in ctx.ints(lengths)):
    raise ctx.error("Scan (opset 8) with sequence_lens shorter than the sequence is not supported")
  per_batch = [scan(*[t[b] for t in inputs], body=body, num_scan_inputs=num_scan_inputs,
                    scan_input_directions=directions, ctx=_Opset9(ctx)) for b in range(batch)]
  return [Tensor.stack(*[outs[j] for outs in per_batch], dim=0) for j in range(len(per_batch[0]))]


class _Opset9:
  """The context of an opset-8 Scan, seen by the opset-9 scan it runs per batch entry."""
  opset = 9

  def __init__(self, ctx: Any): self.ctx = ctx
  def __getattr__(self, name: str) -> Any: return getattr(self.ctx, name)


@register("TensorScatter")
def tensor_scatter(past_cache, update, write_indices=None, axis=-2, mode="linear"):
  """A KV cache written in place: update's positions along `axis` land at write_indices[batch] + i (mod the cache
  length when circular); a gather from update where a position is written, the old cache elsewhere."""
  axis = positive_axis(axis, past_cache.ndim)
  length, steps, batch = past_cache.shape[axis], update.shape[axis], past_cache.shape[0]
  starts = write_indices.cast(dtypes.int64) if write_indices is not None else \
      Tensor.zeros(batch, dtype=dtypes.int64, device=past_cache.device)
  shape = [1] * past_cache.ndim
  shape[axis] = length
  offset = Tensor.arange(length, device=past_cache.device).reshape(shape) - \
      starts.reshape(batch, *[1] * (past_cache.ndim - 1))
  if mode == "circular": offset = offset % length
  written = (offset >= 0) & (offset < steps)
  index = written.where(offset, 0).expand(past_cache.shape)
  return written.where(update.gather(axis, index), past_cache)


@register("TfIdfVectorizer")
def tfidf_vectorizer(x, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts, ngram_indexes,
                     pool_int64s=None, pool_strings=None, weights=None, ctx=None):
  """Counts of the pool's n-grams in each row of x (ints; a gap of up to max_skip_count between the items of an
  n-gram of 2 or more), mapped to output columns by ngram_indexes: TF (counts), IDF (weight where present) or TFIDF.
  Each n and gap is a comparison of x's windows with the pool's n-grams of that length."""
  if pool_int64s is None: raise ctx.error("a pool of strings (pool_strings) is not supported: tinycore has no strings")
  rows = x.reshape(1, -1) if x.ndim == 1 else x
  length = rows.shape[1]
  starts = list(ngram_counts) + [len(pool_int64s)]
  counts = []
  for n in range(1, len(ngram_counts) + 1):
    pool_n = pool_int64s[starts[n - 1]:starts[n]]
    grams = len(pool_n) // n
    if grams == 0: continue
    found = Tensor.zeros(rows.shape[0], grams, device=x.device)
    if min_gram_length <= n <= max_gram_length:
      pool = Tensor(pool_n, dtype=dtypes.int64, device=x.device).reshape(1, 1, grams, n)
      for gap in range(1, (max_skip_count + 2) if n > 1 else 2):
        span = (n - 1) * gap
        if span >= length: break
        windows = Tensor.stack(*[rows[:, j * gap:length - span + j * gap] for j in range(n)], dim=-1)
        hits = (windows.cast(dtypes.int64).unsqueeze(2) == pool).all(-1)  # (rows, starts, grams)
        found = found + hits.cast(dtypes.float32).sum(1)
    counts.append(found)
  total = counts[0].cat(*counts[1:], dim=1) if len(counts) > 1 else counts[0]
  width = max(ngram_indexes) + 1
  placement = Tensor([[1.0 if ngram_indexes[k] == col else 0.0 for col in range(width)]
                      for k in range(len(ngram_indexes))], device=x.device)
  out = total @ placement  # each pool n-gram's count in its output column
  scale = Tensor(weights if weights is not None else [1.0] * len(ngram_indexes), device=x.device) @ placement
  if mode == "IDF": out = (out > 0).where(scale.reshape(1, -1), 0.0)
  elif mode == "TFIDF": out = out * scale.reshape(1, -1)
  return out.reshape(width) if x.ndim == 1 else out


# ---------------------------------------------------------------------------------------------------- sequences
# A sequence value is a Python list of Tensors, an empty optional is None; a handler returning one sequence returns
# it inside a list (its one output).
def _position(ctx: Any, position: Tensor | None, length: int, default: int, insert: bool = False) -> int:
  pos = default if position is None else int(first_value(ctx.value(position)))
  if not -length <= pos <= (length if insert else length - 1):
    raise ctx.error(f"position {pos} is out of range for a sequence of {length}")
  return pos + length if pos < 0 else pos


@register("SequenceConstruct")
def sequence_construct(*xs): return [list(xs)]
@register("SequenceEmpty")
def sequence_empty(dtype=1): return [[]]
@register("SequenceLength")
def sequence_length(seq, ctx=None):
  return ctx.remember(Tensor(len(seq), dtype=dtypes.int64, device=ctx.device), len(seq))
@register("SequenceAt")
def sequence_at(seq, position, ctx=None): return seq[_position(ctx, position, len(seq), 0)]


@register("SequenceInsert")
def sequence_insert(seq, tensor, position=None, ctx=None):
  out = list(seq)
  out.insert(_position(ctx, position, len(seq), len(seq), insert=True), tensor)
  return [out]


@register("SequenceErase")
def sequence_erase(seq, position=None, ctx=None):
  out = list(seq)
  del out[_position(ctx, position, len(seq), len(seq) - 1)]
  return [out]


@register("ConcatFromSequence")
def concat_from_sequence(seq, axis, new_axis=0):
  if new_axis: return Tensor.stack(*seq, dim=axis if axis >= 0 else axis + seq[0].ndim + 1)
  return seq[0].cat(*seq[1:], dim=axis) if len(seq) > 1 else seq[0]


@register("SplitToSequence")
def split_to_sequence(x, split=None, axis=0, keepdims=1, ctx=None):
  axis = positive_axis(axis, x.ndim)
  if split is None:
    pieces = x.split(1, dim=axis)
    return [[p.squeeze(axis) for p in pieces] if not keepdims else list(pieces)]
  sizes = ctx.ints(split)
  return [list(x.split(sizes[0] if split.ndim == 0 else sizes, dim=axis))]


@register("SequenceMap")
def sequence_map(seq, *extra, body, ctx=None):
  names = [i.name for i in body.input]
  outs: list[list[Tensor]] = [[] for _ in body.output]
  for i in range(len(seq)):
    args = [seq[i]] + [e[i] if isinstance(e, list) else e for e in extra]
    for j, value in enumerate(ctx.run_graph(body, dict(zip(names, args)), ctx.scope)): outs[j].append(value)
  return outs


@register("Optional")
def optional(x=None, type=None): return [x]
@register("OptionalHasElement")
def optional_has_element(x=None, ctx=None): return ctx.remember(Tensor(x is not None, device=ctx.device), x is not None)


@register("OptionalGetElement")
def optional_get_element(x, ctx=None):
  if x is None: raise ctx.error("the optional input is empty")
  return [x]


# ---------------------------------------------------------------------------------------------------- training
@register("Gradient", domain="ai.onnx.preview.training")
def gradient(*inputs, xs, y, zs=None, ctx=None):
  """The gradients of y (summed, if not a scalar) with respect to the inputs named by xs, by tinycore's autograd."""
  targets = [ctx.scope[name] for name in xs]
  out = ctx.scope[y]
  return out.gradient(*targets, gradient=Tensor.ones(*out.shape, dtype=out.dtype, device=out.device))


TRAINING = "ai.onnx.preview.training"


def _optimizer_groups(inputs: tuple, per_tensor: int) -> list[tuple[Tensor, ...]]:
  """(x_i, g_i, state_i...) per optimized tensor: the inputs after R and T come as all Xs, all Gs, then each state."""
  n = len(inputs) // per_tensor
  return [tuple(inputs[k * n + i] for k in range(per_tensor)) for i in range(n)]


@register("Adagrad", domain=TRAINING)
def adagrad(r, t, *inputs, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
  rate = r / (1 + t.cast(r.dtype) * decay_factor)
  xs, hs = [], []
  for x, g, h in _optimizer_groups(inputs, 3):
    g = norm_coefficient * x + g
    h = h + g * g
    xs.append((x - rate * g / (h.sqrt() + epsilon)).cast(x.dtype))
    hs.append(h.cast(x.dtype))
  return xs + hs


@register("Momentum", domain=TRAINING)
def momentum(r, t, *inputs, alpha, beta, mode, norm_coefficient):
  xs, vs = [], []
  for x, g, v in _optimizer_groups(inputs, 3):
    g = norm_coefficient * x + g
    v = alpha * v + (t > 0).where(beta, 1.0).cast(x.dtype) * g  # the gradient's coefficient is 1 at the first step
    xs.append(x - r * (g + alpha * v if mode == "nesterov" else v))
    vs.append(v)
  return xs + vs


@register("Adam", domain=TRAINING)
def adam(r, t, *inputs, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0, norm_coefficient_post=0.0):
  steps = t.cast(dtypes.float64 if r.dtype is dtypes.float64 else dtypes.float32)
  corrected = r * (1 - beta ** steps).sqrt() / (1 - alpha ** steps)  # bias correction after the first step
  rate = (t > 0).where(corrected, r)
  xs, vs, hs = [], [], []
  for x, g, v, h in _optimizer_groups(inputs, 4):
    g = norm_coefficient * x + g
    v = alpha * v + (1 - alpha) * g
    h = beta * h + (1 - beta) * g * g
    x = x - rate * (v / (h.sqrt() + epsilon))
    xs.append(((1 - norm_coefficient_post) * x).cast(x.dtype))
    vs.append(v.cast(x.dtype))
    hs.append(h.cast(x.dtype))
  return xs + vs + hs


# ---------------------------------------------------------------------------------------------------- losses
@register("NegativeLogLikelihoodLoss")
def nll_loss(x, target, weight=None, ignore_index=None, reduction="mean"):
  c = x.shape[1]
  t = target.cast(dtypes.int64)
  valid = (t != ignore_index) if ignore_index is not None else Tensor.ones(*t.shape, dtype=dtypes.bool, device=x.device)
  safe = valid.where(t, 0)
  picked = -x.gather(1, safe.unsqueeze(1)).squeeze(1)
  w = weight[safe] if weight is not None else Tensor.ones(*t.shape, dtype=x.dtype, device=x.device)
  w = valid.where(w, 0).cast(x.dtype)
  loss = picked * w
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  del c
  return loss.sum() / w.sum()


@register("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(scores, labels, weights=None, ignore_index=None, reduction="mean", ctx=None):
  log_prob = scores.log_softmax(1)
  loss = nll_loss(log_prob, labels, weights, ignore_index, reduction)
  return [loss, log_prob][:max(1, len(ctx.node.outputs))]


# operators in modules of their own register into OPS when imported
from tinycore.nn import onnx_ml_ops, onnx_signal_ops, onnx_vision_ops  # noqa: E402,F401
