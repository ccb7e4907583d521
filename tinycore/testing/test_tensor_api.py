"""More of the Tensor API against numpy: cumulative ops (cumsum, cumprod, cummax, cummin, logcumsumexp), 0-d
operands, tril/triu, roll, split/chunk, meshgrid, repeat_interleave, stack call forms, einsum, gather, scatter,
scatter_reduce, masked_fill, advanced indexing, sort/argsort/topk; and their gradients against central differences."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes, tensor_sort
from tinycore.testing.helpers import assert_close, assert_equal, check_gradient, random_array, skip_unless_dtype


def _ids(value) -> str: return str(value).replace(" ", "")


# ---------------------------------------------------------------------------- cumulative
# (shape, axis): odd sizes, one longer than a scan block (32) so the block totals are scanned too, and zero-size
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 75), -1), ((2, 0, 3), 1),
                                        ((4, 3, 2), 1)], ids=_ids)
def test_cumsum(rng, shape, axis):
  x = random_array(rng, shape, "float32")
  assert_close(Tensor(x).cumsum(axis), np.cumsum(x, axis), atol=1e-5, rtol=1e-5, dtype=dtypes.float32)


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_cumsum_ints(rng, dtype):
  x = random_array(rng, (3, 40), dtype)
  assert_equal(Tensor(x).cumsum(1), np.cumsum(x, 1).astype(np.int32), dtype=dtypes.int32)


@pytest.mark.parametrize("shape,axis", [((9,), 0), ((3, 40), 1), ((4, 3), 0)], ids=_ids)
def test_cumprod_cummax_cummin(rng, shape, axis):
  x = random_array(rng, shape, "float32", low=0.8, high=1.2)
  assert_close(Tensor(x).cumprod(axis), np.cumprod(x, axis), atol=1e-5, rtol=1e-5)
  y = random_array(rng, shape, "float32")
  assert_equal(Tensor(y).cummax(axis)[0], np.maximum.accumulate(y, axis))
  assert_equal(Tensor(y).cummin(axis)[0], np.minimum.accumulate(y, axis))


def test_cummax_cummin_ints(rng):
  x = random_array(rng, (2, 37), "int32")
  x[0, 5] = np.iinfo(np.int32).min  # ~x and the identity must not overflow
  assert_equal(Tensor(x).cummax(1)[0], np.maximum.accumulate(x, 1), dtype=dtypes.int32)
  assert_equal(Tensor(x).cummin(1)[0], np.minimum.accumulate(x, 1), dtype=dtypes.int32)


def test_logcumsumexp(rng):
  x = random_array(rng, (3, 40), "float32") * 30 + 100  # exp would overflow unshifted
  expected = np.logaddexp.accumulate(x.astype(np.float64), 1)
  assert_close(Tensor(x).logcumsumexp(1), expected, atol=1e-4, rtol=1e-5)


def test_zero_dim_operands():
  t = Tensor(3.0)
  assert_close(t.softmax(), np.float32(1.0))
  assert_close(t.log_softmax(), np.float32(0.0))
  assert_close(t.logsumexp(), np.float32(3.0))
  assert_close(t.cumsum(), np.float32(3.0))
  assert_close(t.cumsum(-1), np.float32(3.0))
  assert t.squeeze(-1).shape == () and t.squeeze(0).shape == ()
  assert_close(t.sum(0), np.float32(3.0))
  assert_close(t.max(-1), np.float32(3.0))
  with pytest.raises(IndexError): t.sum(1)


def test_cumsum_large_is_few_kernels(rng):
  x = random_array(rng, (5000,), "float32")
  out = Tensor(x).realize().cumsum()
  assert len(out.schedule_linear().src) <= 6
  assert_close(out, np.cumsum(x.astype(np.float64)), atol=2e-3, rtol=1e-4)


# ---------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 6), (5, 3), (0, 3)], ids=_ids)
@pytest.mark.parametrize("diagonal", [0, 1, -2])
def test_tril_triu(rng, shape, diagonal):
  x = random_array(rng, shape, "float32")
  assert_equal(Tensor(x).tril(diagonal), np.tril(x, diagonal), dtype=dtypes.float32)
  assert_equal(Tensor(x).triu(diagonal), np.triu(x, diagonal), dtype=dtypes.float32)
  xi = random_array(rng, shape, "int32")
  assert_equal(Tensor(xi).triu(diagonal), np.triu(xi, diagonal), dtype=dtypes.int32)


def test_tril_needs_2d():
  with pytest.raises(ValueError): Tensor([1.0, 2.0]).tril()


@pytest.mark.parametrize("shifts,dims", [(2, 1), (-1, 0), ((1, -3), (0, 1)), (7, None), (0, 1), (13, 1)], ids=_ids)
def test_roll(rng, shifts, dims):
  x = random_array(rng, (4, 5), "float32")
  assert_equal(Tensor(x).roll(shifts, dims), np.roll(x, shifts, dims))


def test_split_chunk(rng):
  x = random_array(rng, (7, 4), "float32")
  for got, want in zip(Tensor(x).split(3), np.split(x, [3, 6])): assert_equal(got, want)
  for got, want in zip(Tensor(x).split([2, 5], dim=0), np.split(x, [2])): assert_equal(got, want)
  for got, want in zip(Tensor(x).chunk(2, dim=1), np.split(x, 2, axis=1)): assert_equal(got, want)
  assert [t.shape for t in Tensor(x).chunk(3)] == [(3, 4), (3, 4), (1, 4)]
  assert [t.shape for t in Tensor(x).chunk(4, dim=1)] == [(7, 1)] * 4 and isinstance(Tensor(x).chunk(2), list)
  assert [t.shape for t in Tensor.zeros(0, 3).chunk(3)] == [(0, 3)] * 3  # an empty dim: chunks empties, as tinygrad
  with pytest.raises(ValueError):
    Tensor(x).chunk(0)
  with pytest.raises(ValueError):
    Tensor(x).split([3, 3])


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(rng, indexing):
  a, b, c = (random_array(rng, (n,), "float32") for n in (3, 4, 2))
  got = Tensor(a).meshgrid(Tensor(b), Tensor(c), indexing=indexing)
  for g, w in zip(got, np.meshgrid(a, b, c, indexing=indexing)): assert_equal(g, w)


@pytest.mark.parametrize("repeats,dim", [(2, 1), (3, None), (1, 0), (0, 0), (2, -1)], ids=_ids)
def test_repeat_interleave(rng, repeats, dim):
  x = random_array(rng, (3, 4), "int32")
  assert_equal(Tensor(x).repeat_interleave(repeats, dim), np.repeat(x, repeats, dim))


def test_stack_call_forms(rng):
  arrays = [random_array(rng, (2, 3), "float32") for _ in range(3)]
  a, b, c = (Tensor(x) for x in arrays)
  for dim in (0, 1, -1):
    want = np.stack(arrays, axis=dim)
    assert_equal(Tensor.stack(a, b, c, dim=dim), want)
    assert_equal(Tensor.stack([a, b, c], dim=dim), want)
    assert_equal(a.stack(b, c, dim=dim), want)
    assert_equal(a.stack([b, c], dim=dim), want)
  with pytest.raises(ValueError): Tensor.stack(a, Tensor.ones(3, 2))


# ---------------------------------------------------------------------------- einsum
EINSUM = [("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 2)]), ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]),
          ("i,i->", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 3)]),
          ("ii->i", [(4, 4)]), ("ii", [(3, 3)]), ("...ij,...jk->...ik", [(2, 3, 4), (4, 2)]),
          ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("ijk->kj", [(2, 3, 4)]), ("i,i,i->i", [(3,)] * 3)]


@pytest.mark.parametrize("formula,shapes", EINSUM, ids=[f for f, _ in EINSUM])
def test_einsum(rng, formula, shapes):
  arrays = [random_array(rng, s, "float32") for s in shapes]
  assert_close(Tensor.einsum(formula, *[Tensor(x) for x in arrays]), np.einsum(formula, *arrays),
               atol=1e-5, rtol=1e-5, dtype=dtypes.float32)


def test_einsum_bad_input():
  with pytest.raises(ValueError): Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3))
  with pytest.raises(ValueError): Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 2))
  with pytest.raises(ValueError): Tensor.einsum("ij->iz", Tensor.ones(2, 3))


# ---------------------------------------------------------------------------- gather / scatter
@pytest.mark.parametrize("dim,index_shape", [(0, (2, 3)), (1, (4, 7)), (-1, (3, 2)), (0, (0, 5))], ids=_ids)
def test_gather(rng, dim, index_shape):
  x = random_array(rng, (4, 5), "float32")
  index = rng.integers(-x.shape[dim], x.shape[dim], size=index_shape)
  trimmed = x[tuple(slice(0, s) if d != dim % 2 else slice(None) for d, s in enumerate(index_shape))]
  want = np.take_along_axis(trimmed, index % x.shape[dim], dim)
  assert_equal(Tensor(x).gather(dim, Tensor(index.astype(np.int32))), want, dtype=dtypes.float32)
  xi = random_array(rng, (4, 5), "int8")
  want_int = np.take_along_axis(xi[tuple(slice(0, s) if d != dim % 2 else slice(None)
                                         for d, s in enumerate(index_shape))], index % x.shape[dim], dim)
  assert_equal(Tensor(xi).gather(dim, Tensor(index.astype(np.int32))), want_int, dtype=dtypes.int8)


def _np_scatter(x, dim, index, src, reduce=None, include_self=True):
  """The reference: writes in index order (the last of several to one place wins), or reduce over them."""
  out = x.astype(np.float64).copy()
  touched: dict = {}
  for pos in np.ndindex(index.shape):
    target = list(pos)
    target[dim] = index[pos]
    touched.setdefault(tuple(target), []).append(src[pos])
  for target, values in touched.items():
    base = [out[target]] if include_self else []
    if reduce is None: out[target] = values[-1]
    elif reduce == "sum": out[target] = sum(base + values)
    elif reduce == "prod": out[target] = np.prod(base + values)
    elif reduce == "mean": out[target] = np.mean(base + values)
    elif reduce == "amax": out[target] = max(base + values)
    elif reduce == "amin": out[target] = min(base + values)
  return out.astype(x.dtype)


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(rng, dim):
  x, src = random_array(rng, (4, 5), "float32"), random_array(rng, (3, 4), "float32")
  index = rng.integers(0, x.shape[dim], size=(3, 4))
  assert_equal(Tensor(x).scatter(dim, Tensor(index), Tensor(src)), _np_scatter(x, dim, index, src))
  assert_equal(Tensor(x).scatter(dim, Tensor(index), 2.5), _np_scatter(x, dim, index, np.full((3, 4), 2.5)))
  assert_close(Tensor(x).scatter(dim, Tensor(index), Tensor(src), reduce="add"),
               _np_scatter(x, dim, index, src, "sum"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(rng, reduce, include_self):
  x, src = random_array(rng, (3, 6), "float32"), random_array(rng, (3, 5), "float32")
  index = rng.integers(0, 6, size=(3, 4))
  want = _np_scatter(x, 1, index, src[:, :4], reduce, include_self)
  got = Tensor(x).scatter_reduce(1, Tensor(index), Tensor(src), reduce, include_self=include_self)
  assert_close(got, want, atol=1e-5, rtol=1e-5, dtype=dtypes.float32)


def test_scatter_bad_input():
  with pytest.raises(RuntimeError): Tensor.ones(3, 4).scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "median")
  with pytest.raises(TypeError): Tensor.ones(3, 4).gather(0, Tensor([[0.5]]))
  with pytest.raises(RuntimeError): Tensor.ones(3, 4).gather(0, Tensor([0]))


def test_one_hot_default_classes(rng):
  labels = random_array(rng, (2, 5), "int32", low=0, high=6)
  assert_equal(Tensor(labels).one_hot(), np.eye(labels.max() + 1, dtype=np.int32)[labels], dtype=dtypes.int32)
  assert_equal(Tensor(labels).one_hot(8), np.eye(8, dtype=np.int32)[labels], dtype=dtypes.int32)


def test_masked_fill(rng):
  x = random_array(rng, (3, 4), "float32")
  mask = random_array(rng, (1, 4), "bool")
  assert_equal(Tensor(x).masked_fill(Tensor(mask), -1.5), np.where(mask, -1.5, x))
  assert_equal(Tensor(x).masked_fill(Tensor(mask), Tensor(np.float32(2.0))), np.where(mask, 2.0, x))


# ---------------------------------------------------------------------------- sorting
@pytest.mark.parametrize("shape,dim", [((9,), 0), ((3, 7), 1), ((5, 3), 0), ((2, 0), 1), ((2, 40), -1)], ids=_ids)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort(rng, shape, dim, descending):
  x = random_array(rng, shape, "int32", low=0, high=6)  # many ties: the order must be stable
  key = -x if descending else x
  want_indices = np.argsort(key, axis=dim, kind="stable")
  values, indices = Tensor(x).sort(dim, descending=descending)
  assert_equal(values, np.take_along_axis(x, want_indices, dim), dtype=dtypes.int32)
  assert_equal(indices, want_indices.astype(np.int32), dtype=dtypes.int32)
  assert_equal(Tensor(x.astype(np.float32)).argsort(dim, descending), want_indices.astype(np.int32))


def _sort_data(rng, shape, dtype: str) -> np.ndarray:
  """Few distinct values (ties), the dtype's extremes and, for floats, NaN, infinities and both zeros."""
  if dtype == "bool": return random_array(rng, shape, "bool")
  name = "float32" if dtype == "bfloat16" else dtype
  x = rng.integers(-3, 4, shape).astype(name) if np.dtype(name).kind != "u" else rng.integers(0, 4, shape).astype(name)
  flat = x.reshape(-1)
  if np.dtype(name).kind == "f":
    specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan, 0.5]
  else:  # the extremes, and (unsigned) values past the signed range of the same width
    info = np.iinfo(name)
    specials = [info.max, info.min, info.max // 2 + 1, info.max - 1]
  flat[:min(len(specials), flat.size)] = specials[:flat.size]
  rng.shuffle(flat)
  return x


def _np_sort_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
  """torch's stable sort order along axis: NaN the largest value, equal values by position."""
  moved = np.moveaxis(x, axis, -1)
  nan = np.isnan(moved) if moved.dtype.kind == "f" else np.zeros(moved.shape, bool)
  value = np.where(nan, 0, moved)
  if descending: value, nan = (-value if value.dtype.kind == "f" else ~value), ~nan
  order = np.zeros(moved.shape, np.int64)
  for row in np.ndindex(moved.shape[:-1]):
    order[row] = np.lexsort((np.arange(moved.shape[-1]), value[row], nan[row]))
  return np.moveaxis(order, -1, axis)


def _check_sort(x: np.ndarray, dim: int, descending: bool, dtype: str) -> None:
  order = _np_sort_order(x, dim, descending)
  tensor = Tensor(x).cast(dtype) if dtype == "bfloat16" else Tensor(x)
  values, indices = tensor.sort(dim, descending=descending)
  assert_equal(indices, order.astype(np.int32), dtype=dtypes.int32)
  if dtype == "bfloat16": values = values.float()
  assert_equal(values, np.take_along_axis(x, order, dim))


SORT_DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "uint32", "int64", "uint64",
               "bool"]


# (each order of each dtype is its own kernels: the dtypes take turns, float32 takes both)
SORT_CASES = [("float32", False)] + [(dtype, i % 2 == 0) for i, dtype in enumerate(SORT_DTYPES)]


@pytest.mark.parametrize("dtype,descending", SORT_CASES)
def test_sort_every_dtype(rng, dtype, descending):
  """Short rows (counted ranks) of every dtype: stable on ties, NaN the largest, -0.0 equal to 0.0, the dtype's
  extremes in place (each value becomes an integer key with its position below it)."""
  skip_unless_dtype(dtype)
  _check_sort(_sort_data(rng, (3, 13), dtype), 1, descending, dtype)


# each stage of the network is its own kernel: few cases, so the suite compiles few
@pytest.mark.parametrize("shape,dim,dtype,descending", [((21,), 0, "int8", False), ((3, 20), 1, "float32", True),
                                                        ((16, 2), 0, "bool", False), ((2, 1), 1, "int8", True),
                                                        ((2, 5), 1, "int64", True), ((2, 6), 1, "uint32", False)],
                         ids=_ids)
def test_sort_network(rng, monkeypatch, shape, dim, dtype, descending):
  """Long rows sort by a bitonic network: lowered here to every row, padded to a power of two, on few distinct values
  (ties stay stable) and the dtype's extremes (the padding must still sort after them); int64's keys are two words."""
  monkeypatch.setattr(tensor_sort, "RANK_SORT_MAX", 1)
  _check_sort(_sort_data(rng, shape, dtype), dim, descending, dtype)


def test_sort_network_gradient(rng, monkeypatch):
  monkeypatch.setattr(tensor_sort, "RANK_SORT_MAX", 1)
  check_gradient(rng, lambda x: x.sort(1, descending=True)[0], lambda x: -np.sort(-x, 1),
                 [random_array(rng, (2, 6), "float32")])


@pytest.mark.parametrize("largest", [True, False])
def test_topk(rng, largest):
  x = random_array(rng, (4, 9), "float32")
  order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :3]
  values, indices = Tensor(x).topk(3, largest=largest)
  assert_equal(values, np.take_along_axis(x, order, 1))
  assert_equal(indices, order.astype(np.int32))
  with pytest.raises(ValueError): Tensor(x).topk(10)


def _check_topk(x: np.ndarray, k: int, dim: int, largest: bool) -> None:
  order = np.take(_np_sort_order(x, dim, largest), np.arange(k), axis=dim)
  values, indices = Tensor(x).topk(k, dim, largest=largest)
  assert_equal(indices, order.astype(np.int32), dtype=dtypes.int32)
  assert_equal(values, np.take_along_axis(x, order, dim))


# k passes (k <= 16), ranks of a row of up to 1024, a sort (a short row or k = n); float32 and int64 (two-word keys)
@pytest.mark.parametrize("shape,k,dim,dtype,largest", [
  ((3, 70), 1, 1, "float32", True), ((3, 70), 4, 1, "float32", False), ((70, 3), 16, 0, "float32", True),
  ((2, 90), 20, 1, "float32", False), ((2, 40), 20, 1, "int64", True), ((2, 70), 5, 1, "int64", False),
  ((2, 9), 9, 1, "float32", True)], ids=_ids)
def test_topk_paths(rng, shape, k, dim, dtype, largest):
  """topk of every path gives the sort's first k: NaN first (last for the smallest), ties by position."""
  _check_topk(_sort_data(rng, shape, dtype), k, dim, largest)


@pytest.mark.parametrize("dtype,largest", [("float32", True), ("float32", False), ("int32", True), ("int64", False)])
def test_topk_in_chunks(rng, monkeypatch, dtype, largest):
  """A long row's topk picks among the chunks whose minima rank first, level by level: the same values and indices
  as the sort's order (NaN largest, ties by position), with ties across chunks, NaN, infinities and a last chunk
  filled up."""
  monkeypatch.setattr(tensor_sort, "TOPK_SELECT_MAX", 1)
  monkeypatch.setattr(tensor_sort, "RANK_SELECT_MAX", 16)  # k = 3: chunks of 4, levels of 70, 18 and 5 keys
  x = rng.integers(-4, 5, (3, 70)).astype(dtype)  # many ties, across chunks
  if dtype == "float32":
    x[0, [5, 40, 69]] = np.nan
    x[1, [3, 66]], x[1, 20] = -np.inf, np.inf
    x[2, :] = np.nan
    x[2, [7, 50]] = 1.0
  if dtype == "int64": x[0, [9, 60]] = [np.iinfo(np.int64).max, np.iinfo(np.int64).min]
  _check_topk(x, 3, 1, largest)


# ---------------------------------------------------------------------------- gradients
GRADIENTS = {
  "cumsum": (lambda x: x.cumsum(1), lambda x: np.cumsum(x, 1), (2, 37)),
  "cumprod": (lambda x: x.cumprod(1), lambda x: np.cumprod(x, 1), (2, 6)),
  "cummax": (lambda x: x.cummax(0)[0], lambda x: np.maximum.accumulate(x, 0), (5, 3)),
  "cummin": (lambda x: x.cummin(1)[0], lambda x: np.minimum.accumulate(x, 1), (3, 5)),
  "logcumsumexp": (lambda x: x.logcumsumexp(1), lambda x: np.logaddexp.accumulate(x, 1), (2, 5)),
  "tril": (lambda x: x.tril(), np.tril, (3, 4)),
  "roll": (lambda x: x.roll(2, 1), lambda x: np.roll(x, 2, 1), (3, 4)),
  "repeat_interleave": (lambda x: x.repeat_interleave(2, 0), lambda x: np.repeat(x, 2, 0), (3, 2)),
  "einsum": (lambda x: Tensor.einsum("ij,kj->ik", x, x), lambda x: np.einsum("ij,kj->ik", x, x), (3, 4)),
  "gather": (lambda x: x.gather(1, Tensor([[0, 2, 2], [1, 0, 3]])),
             lambda x: np.take_along_axis(x[:2], np.array([[0, 2, 2], [1, 0, 3]]), 1), (3, 4)),
  "sort": (lambda x: x.sort(1)[0], lambda x: np.sort(x, 1), (3, 5)),
  "topk": (lambda x: x.topk(2, 0)[0], lambda x: -np.sort(-x, 0)[:2], (4, 3)),
  "masked_fill": (lambda x: x.masked_fill(Tensor([True, False, True, False]), 0.5),
                  lambda x: np.where([True, False, True, False], 0.5, x), (3, 4)),
}


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradient(rng, name):
  tc_fn, np_fn, shape = GRADIENTS[name]
  low = 0.5 if name == "cumprod" else None
  check_gradient(rng, tc_fn, np_fn, [random_array(rng, shape, "float32", low=low, high=1.5 if low else None)])


def test_scatter_reduce_gradient(rng):
  index = np.array([[0, 2, 2], [1, 0, 3]])
  check_gradient(rng, lambda x, s: x.scatter_reduce(1, Tensor(index), s, "sum"),
                 lambda x, s: _np_scatter_sum(x, index, s), [random_array(rng, (2, 4), "float32"),
                                                             random_array(rng, (2, 3), "float32")])


def _np_scatter_sum(x, index, src):
  out = x.copy()
  for i, j in np.ndindex(index.shape): out[i, index[i, j]] += src[i, j]
  return out


# ---------------------------------------------------------------------------- advanced indexing
_I = np.array([[0, 2], [1, -1]])
_J = np.array([1, 0])
ADVANCED = [(_I,), ([0, 2],), (slice(None), _I), (slice(None), _I, _J), (_I, slice(1, 3), _J), (0, slice(None), _I),
            (Ellipsis, _J), (None, _I, None, slice(None, None, -1)), (_I, Ellipsis, [1, 0]), (1, _I, _J, 0),
            ([[1], [2]], [0, 1, 2]), ((0, 1),), (_I, None, _J), (np.array(2),), (np.zeros((0,), np.int64),)]


def _reference_view(x: np.ndarray, index: tuple) -> tuple[np.ndarray, tuple]:
  """(array, index) whose numpy indexing gives tinygrad's (and torch's) result for x[index]: they apply the int
  indices first, so an int does not count when placing the index tensors' dims (numpy's rule counts it)."""
  if index and isinstance(index[0], int) and any(isinstance(i, np.ndarray) for i in index[1:]):
    return x[index[0]], index[1:]  # (a numpy view: writes through it reach x)
  return x, index


@pytest.mark.parametrize("case", range(len(ADVANCED)))
def test_advanced_getitem(rng, case):
  index = ADVANCED[case]
  x = random_array(rng, (3, 4, 5, 2), "float32")
  as_tensors = tuple(Tensor(i.astype(np.int32)) if isinstance(i, np.ndarray) else i for i in index)
  base, ref_index = _reference_view(x, index)
  assert_equal(Tensor(x)[as_tensors], base[ref_index], dtype=dtypes.float32)
  xi = random_array(rng, (3, 4, 5, 2), "int16")
  base, ref_index = _reference_view(xi, index)
  assert_equal(Tensor(xi)[as_tensors], base[ref_index], dtype=dtypes.int16)


@pytest.mark.parametrize("case", range(len(ADVANCED)))
def test_advanced_setitem(rng, case):
  index = ADVANCED[case]
  x = random_array(rng, (3, 4, 5, 2), "float32")
  t = Tensor(x.copy())
  as_tensors = tuple(Tensor(i.astype(np.int32)) if isinstance(i, np.ndarray) else i for i in index)
  base, ref_index = _reference_view(x, index)
  values = random_array(rng, base[ref_index].shape, "float32")
  base[ref_index] = values
  t[as_tensors] = Tensor(values)
  assert_equal(t, x)
  base[ref_index] = -1.5
  t[as_tensors] = -1.5
  assert_equal(t, x)


def test_advanced_setitem_duplicates_last_wins():
  t = Tensor([0, 0, 0, 0])
  t[[1, 3, 1]] = Tensor([5, 6, 7])
  assert t.tolist() == [0, 7, 0, 6]


def test_advanced_index_errors():
  t = Tensor.ones(3, 4)
  with pytest.raises(IndexError): t[Tensor([0.5])]
  with pytest.raises(NotImplementedError): t[Tensor([True, False, True])]
  with pytest.raises(IndexError): t[[0], [1], [2]]
  with pytest.raises(ValueError): t[[0, 1]] = Tensor.ones(2, 2, 4)
  with pytest.raises(IndexError): t[[0, 1], [0, 1, 2]]  # index shapes that do not broadcast


def test_advanced_getitem_gradient(rng):
  index = np.array([[0, 2], [2, 1]])
  check_gradient(rng, lambda x: x[Tensor(index), 1:], lambda x: x[index, 1:], [random_array(rng, (3, 4), "float32")])


def test_assign_through_advanced_index(rng):
  """t[idx].assign(v) writes into t, as t[idx] = v does; the indexed tensor then reads the new values."""
  x = random_array(rng, (5, 4), "float32")
  v = random_array(rng, (3, 2), "float32")
  t = Tensor(x).contiguous().realize()
  picked = t[Tensor([4, 0, 2]), 1:3]
  picked.assign(Tensor(v))
  expected = x.copy()
  expected[[4, 0, 2], 1:3] = v
  assert_equal(t, expected)
  assert_equal(picked, v)
  t[[1, -1], [0, 3]].assign(Tensor([7.0, 8.0]))  # lists, negative indices, a broadcast of two index arrays
  expected[[1, -1], [0, 3]] = [7.0, 8.0]
  assert_equal(t, expected)
  t[:2][Tensor([1])].assign(0.5)  # an advanced index of a view writes through the view
  expected[1] = 0.5
  assert_equal(t, expected)


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0, 3)], ids=_ids)
def test_nonzero(rng, shape):
  x = random_array(rng, shape, "int32", low=-1, high=2)
  assert_equal(Tensor(x).nonzero(), np.argwhere(x).astype(np.int32), dtype=dtypes.int32)
  count = np.count_nonzero(x)
  padded = np.full((count + 2, len(shape)), -5, dtype=np.int32)
  padded[:count] = np.argwhere(x)
  assert_equal(Tensor(x).nonzero(size=count + 2, fill_value=-5), padded)
  assert_equal(Tensor(x.astype(np.float32)).nonzero(size=max(count - 1, 0)), np.argwhere(x)[:max(count - 1, 0)])
  assert_equal(Tensor(x.astype(bool)).nonzero(), np.argwhere(x).astype(np.int32))


def test_nonzero_0d():
  assert Tensor(3).nonzero().shape == (1, 0) and Tensor(0).nonzero().shape == (0, 0)


def test_masked_select(rng):
  x = random_array(rng, (3, 5), "float32")
  mask = random_array(rng, (3, 5), "bool")
  assert_equal(Tensor(x).masked_select(Tensor(mask)), x[mask], dtype=dtypes.float32)
  row = random_array(rng, (5,), "bool")
  assert_equal(Tensor(x).masked_select(Tensor(row)), x[np.broadcast_to(row, x.shape)])  # the mask broadcasts
  padded = np.concatenate([x[mask], np.full(2, 9.0, np.float32)])
  assert_equal(Tensor(x).masked_select(Tensor(mask), size=mask.sum() + 2, fill_value=9.0), padded)
  xi = random_array(rng, (3, 5), "int8")
  assert_equal(Tensor(xi).masked_select(Tensor(mask)), xi[mask], dtype=dtypes.int8)
  with pytest.raises(TypeError):
    Tensor(x).masked_select(Tensor(x))
  check_gradient(rng, lambda t: t.masked_select(Tensor(mask), size=int(mask.sum())), lambda a: a[mask], [x])


# ---------------------------------------------------------------------------- more shapes
@pytest.mark.parametrize("offset,dim1,dim2", [(0, 0, 1), (1, 1, 2), (-1, 2, 1), (2, 0, 2), (9, 0, 1)], ids=_ids)
def test_diagonal(rng, offset, dim1, dim2):
  x = random_array(rng, (3, 4, 5), "float32")
  assert_equal(Tensor(x).diagonal(offset, dim1, dim2), np.diagonal(x, offset, dim1, dim2))


def test_diag_and_diagonal_errors(rng):
  v = random_array(rng, (4,), "int32")
  assert_equal(Tensor(v).diag(), np.diag(v), dtype=dtypes.int32)
  with pytest.raises(ValueError):
    Tensor.ones(2, 2).diag()
  with pytest.raises(RuntimeError):
    Tensor.ones(2, 2).diagonal(0, 1, -1)
  check_gradient(rng, lambda t: t.diagonal(1), lambda a: np.diagonal(a, 1).copy(), [random_array(rng, (3, 4))])


@pytest.mark.parametrize("dim,size,step", [(0, 3, 2), (1, 2, 1), (-1, 4, 3), (1, 5, 5)], ids=_ids)
def test_unfold(rng, dim, size, step):
  x = random_array(rng, (4, 5), "float32")
  axis = dim % x.ndim  # of the windowed array, whose last axis is new
  windows = np.lib.stride_tricks.sliding_window_view(x, size, axis=axis)
  expected = np.take(windows, np.arange(0, windows.shape[axis], step), axis=axis)
  assert_equal(Tensor(x).unfold(dim, size, step), expected)


def test_unfold_errors():
  with pytest.raises(RuntimeError):
    Tensor.ones(3).unfold(0, 4, 1)
  with pytest.raises(RuntimeError):
    Tensor.ones(3).unfold(0, 2, 0)


def test_pad_to_shrink_to_size(rng):
  x = random_array(rng, (2, 3), "float32")
  assert_equal(Tensor(x).pad_to(4, None), np.pad(x, ((0, 2), (0, 0))))
  assert_equal(Tensor(x).pad_to((3, 5), value=7.0), np.pad(x, ((0, 1), (0, 2)), constant_values=7.0))
  assert_equal(Tensor(x).shrink_to(1, None), x[:1])
  assert Tensor(x).size() == (2, 3) and Tensor(x).size(-1) == 3 and Tensor(x).size(0) == 2
  with pytest.raises(ValueError):
    Tensor(x).pad_to(1, 3)


# ---------------------------------------------------------------------------- random
@pytest.mark.slow  # tens of thousands of samples: ~8 minutes on the emulated AMD
def test_normal_and_initializers(rng):
  from tinycore.testing.helpers import fresh_seed
  Tensor.manual_seed(fresh_seed(rng))
  samples = Tensor.normal(200, 100, mean=3.0, std=0.5).numpy()
  assert samples.dtype == np.float32 and abs(samples.mean() - 3.0) < 0.02 and abs(samples.std() - 0.5) < 0.02
  like = Tensor.ones(300, 100, dtype=dtypes.float16).randn_like()
  assert like.dtype == dtypes.float16 and like.shape == (300, 100) and abs(float(like.float().std().item()) - 1) < 0.03
  assert Tensor.zeros(2, 3, dtype=dtypes.int8).empty_like().shape == (2, 3)
  scaled = Tensor.scaled_uniform(50, 80).numpy()
  assert np.abs(scaled).max() <= 1 / np.sqrt(4000) and scaled.std() > 0.5 / np.sqrt(3 * 4000)
  he = Tensor.kaiming_normal(400, 50, a=0.0).numpy()
  assert abs(he.std() - np.sqrt(2 / 50)) < 0.01


def test_randperm_and_multinomial(rng):
  from tinycore.testing.helpers import fresh_seed
  Tensor.manual_seed(fresh_seed(rng))
  perm = Tensor.randperm(40)
  assert perm.dtype == dtypes.int32 and sorted(perm.tolist()) == list(range(40))
  weights = np.array([[0.0, 1.0, 3.0, 0.0], [2.0, 0.0, 0.0, 2.0]], np.float32)
  drawn = Tensor(weights).multinomial(2000, replacement=True).numpy()
  assert drawn.shape == (2, 2000) and set(np.unique(drawn[0])) <= {1, 2} and set(np.unique(drawn[1])) <= {0, 3}
  assert abs((drawn[0] == 2).mean() - 0.75) < 0.05 and abs((drawn[1] == 0).mean() - 0.5) < 0.05
  once = Tensor([1.0, 0.0, 5.0, 2.0, 0.5]).multinomial(4).numpy()
  assert once.shape == (4,) and len(set(once.tolist())) == 4 and 1 not in once.tolist()
  with pytest.raises(ValueError):
    Tensor([1.0, 2.0]).multinomial(3)


@pytest.mark.parametrize("formula,sizes,reference", [
  ("b (c p) h w -> b (h w) (c p)", {"p": 2},
   lambda x: x.reshape(2, 3, 2, 4, 5).transpose(0, 3, 4, 1, 2).reshape(2, 20, 6)),
  ("b ... w -> w b ...", {}, lambda x: x.transpose(3, 0, 1, 2)),
  ("... h w -> ... (h w)", {}, lambda x: x.reshape(2, 6, 20)),
  ("b c h w -> (b c h w)", {}, lambda x: x.reshape(-1)),
  ("b (c1 c2) h w -> c2 b h (w c1)", {"c2": 3}, lambda x: x.reshape(2, 2, 3, 4, 5).transpose(2, 0, 3, 4, 1)
   .reshape(3, 2, 4, 10)),
], ids=["split_merge", "ellipsis_move", "ellipsis_keep", "flatten", "inferred"])
def test_rearrange(rng, formula, sizes, reference):
  x = random_array(rng, (2, 6, 4, 5), "float32")
  assert_equal(Tensor(x).rearrange(formula, **sizes), reference(x))


@pytest.mark.parametrize("formula,sizes", [("a b -> a", {}), ("a b c d e -> a b c d e", {}), ("a b -> b a c", {}),
                                           ("(a b) c d e -> a b c d e", {}), ("a b c d -> a b c d", {"z": 2}),
                                           ("a (b c) d e -> a b c d e", {"b": 4}), ("a b c d", {})],
                         ids=str)
def test_rearrange_errors(formula, sizes):
  with pytest.raises((ValueError, RuntimeError)):
    Tensor.ones(2, 6, 4, 5).rearrange(formula, **sizes)


# ---------------------------------------------------------------------------- tinygrad call forms and results
def test_full_takes_dtype_before_device():
  t = Tensor.full((2, 2), 3, dtypes.int8)
  assert t.dtype is dtypes.int8 and t.tolist() == [[3, 3], [3, 3]]
  like = Tensor([1, 2]).full_like(2.5, dtypes.float32)
  assert like.dtype is dtypes.float32 and like.tolist() == [2.5, 2.5]
  assert Tensor([1, 2]).const_like(7).tolist() == [7, 7]


def test_prod_keeps_dtype():
  wrapped = Tensor([100, 100], dtype=dtypes.int8).prod()  # tinygrad does not widen: 10000 wraps to 16 in int8
  assert wrapped.dtype is dtypes.int8 and wrapped.item() == 16
  assert Tensor([1, 2, 3], dtype=dtypes.uint8).prod(dtype=dtypes.int32).dtype is dtypes.int32
  rows = Tensor([[True, True], [True, False]]).prod(axis=1)
  assert rows.dtype is dtypes.bool and rows.tolist() == [True, False]


def test_data_is_typed_memoryview():
  view = Tensor([[1.5, 2.0], [3.0, -4.0]]).data()
  assert view.format == "f" and view.shape == (2, 2) and view.tolist() == [[1.5, 2.0], [3.0, -4.0]]
  assert Tensor([7, 8], dtype=dtypes.int16).data().tolist() == [7, 8]
  assert Tensor(5).data().tolist() == 5


def _np_running_index(x: np.ndarray, running: np.ndarray, axis: int) -> np.ndarray:
  """For each i along axis, the first j <= i with x[j] == running[i]."""
  xs, rs = np.moveaxis(x, axis, -1), np.moveaxis(running, axis, -1)
  out = np.zeros(xs.shape, np.int32)
  for pos in np.ndindex(xs.shape[:-1]):
    for i in range(xs.shape[-1]): out[pos + (i,)] = int(np.argmax(xs[pos][:i + 1] == rs[pos + (i,)]))
  return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cummax_cummin_indices(rng, axis):
  x = rng.integers(-3, 4, size=(4, 5)).astype(np.int32)  # small range: many ties
  for method, accumulate in (("cummax", np.maximum.accumulate), ("cummin", np.minimum.accumulate)):
    values, indices = getattr(Tensor(x), method)(axis)
    expected = accumulate(x, axis)
    assert_equal(values, expected, dtype=dtypes.int32)
    assert_equal(indices, _np_running_index(x, expected, axis), dtype=dtypes.int32)


@pytest.mark.parametrize("dtype", ["float32", "uint32", "int64"])
def test_cummax_cummin_indices_of_long_rows(rng, dtype):
  """Rows of several scan blocks, ties, the dtype's extremes, NaN (it wins, and a later NaN is not a new maximum) and
  both zeros (equal): indices from a running maximum of keys (values above positions; 64-bit dtypes compare pairs)."""
  skip_unless_dtype(dtype)
  x = _sort_data(rng, (3, 20), dtype)
  if dtype.startswith("float"): x[1, 8:] = np.where(np.arange(12) % 5 == 0, np.nan, x[1, 8:])
  for method, accumulate in (("cummax", np.fmax.accumulate), ("cummin", np.fmin.accumulate)):
    values, indices = getattr(Tensor(x), method)(1)
    # NaN propagates from the first NaN on (fmax/fmin skip it: put it back), and equals NaN
    expected = accumulate(x, 1)
    if dtype.startswith("float"): expected = np.where(np.cumsum(np.isnan(x), 1) > 0, np.nan, expected)
    assert_equal(values, expected.astype(x.dtype))
    same = (x[:, :, None] == expected[:, None, :]) | (np.isnan(x)[:, :, None] & np.isnan(expected)[:, None, :])
    first = np.argmax(same & (np.arange(20)[:, None] <= np.arange(20)[None, :]), axis=1)
    assert_equal(indices, first.astype(np.int32), dtype=dtypes.int32)


@pytest.mark.parametrize("op,operand,expected", [
  ("+=", 2, [3, 4, 5]), ("-=", 1, [0, 1, 2]), ("*=", 3, [3, 6, 9]), ("//=", 2, [0, 1, 1]), ("**=", 2, [1, 4, 9]),
  ("&=", 2, [0, 2, 2]), ("|=", 4, [5, 6, 7]), ("^=", 1, [0, 3, 2]), ("<<=", 1, [2, 4, 6]), (">>=", 1, [0, 1, 1]),
])
def test_inplace_operators_write_into_the_tensor(op, operand, expected):
  t = Tensor([1, 2, 3]).realize()
  alias = t
  namespace = {"t": t, "operand": operand}
  exec(f"t {op} operand", namespace)
  assert namespace["t"] is alias and alias.tolist() == expected  # the same tensor, updated (assign), as tinygrad


def test_inplace_matmul_and_mod():
  t = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  alias = t
  t @= Tensor([[1.0, 0.0], [1.0, 1.0]])
  assert t is alias and alias.tolist() == [[3.0, 2.0], [7.0, 4.0]]
  m = Tensor([1, 2, 3]).realize()
  before = m
  m %= 2  # tinygrad has no __imod__: the name is rebound, the old tensor keeps its values
  assert m.tolist() == [1, 0, 1] and before.tolist() == [1, 2, 3]


def test_reverse_shifts():
  assert (1 << Tensor([1, 2, 3])).tolist() == [2, 4, 8]
  assert (64 >> Tensor([1, 2])).tolist() == [32, 16]
  assert Tensor([1, 2]).lshift(3, reverse=True).tolist() == [6, 12]


def test_dtype_arguments(rng):
  x = random_array(rng, (3, 4), "float32")
  soft = Tensor(x).softmax(dtype=dtypes.float16)
  e = np.exp(x - x.max(-1, keepdims=True))
  assert_close(soft, (e / e.sum(-1, keepdims=True)), atol=2e-3, rtol=2e-3, dtype=dtypes.float16)
  assert Tensor(x).log_softmax(dtype=dtypes.float16).dtype is dtypes.float16
  assert Tensor(x).softmin(0, dtype=dtypes.float16).dtype is dtypes.float16
  a, b = random_array(rng, (2, 3), "int32", low=-5, high=5), random_array(rng, (3, 2), "int32", low=-5, high=5)
  assert_equal(Tensor(a).dot(Tensor(b), dtype=dtypes.float32), (a @ b).astype(np.float32), dtype=dtypes.float32)
  assert_equal(Tensor(a).matmul(Tensor(b), dtype=dtypes.int32), a @ b, dtype=dtypes.int32)
  out = Tensor(x).linear(Tensor.ones(4, 2), Tensor.ones(2), dtype=dtypes.float32)
  assert_close(out, x.sum(-1, keepdims=True).repeat(2, 1) + 1, atol=1e-5, rtol=1e-5)


def test_list_of_bools_index_is_a_mask():
  with pytest.raises(NotImplementedError, match="boolean mask"): Tensor.arange(4)[[True, False, True, False]]
  assert Tensor.arange(6)[[-1, 0]].tolist() == [5, 0] and Tensor.arange(3)[[]].tolist() == []


# ---------------------------------------------------------------------------- N-d convolution and pooling
def _np_conv_nd(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
  """Cross-correlation over every dim after (N, C) by explicit windows (groups=1, dilation 1)."""
  dims = w.ndim - 2
  x = np.pad(x, ((0, 0), (0, 0)) + ((padding, padding),) * dims)
  windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=tuple(range(2, 2 + dims)))
  windows = windows[(slice(None), slice(None)) + (slice(None, None, stride),) * dims]
  letters = "xyz"[:dims]
  return np.einsum(f"nc{letters}{letters.upper()},oc{letters.upper()}->no{letters}", windows, w)


@pytest.mark.parametrize("xshape,wshape,stride,padding", [((2, 3, 9), (4, 3, 3), 2, 1),
                                                          ((1, 2, 4, 5, 3), (3, 2, 2, 3, 2), 1, 1)], ids=["1d", "3d"])
def test_conv_nd(rng, xshape, wshape, stride, padding):
  x, w = random_array(rng, xshape, "float32"), random_array(rng, wshape, "float32")
  got = Tensor(x).conv2d(Tensor(w), stride=stride, padding=padding)
  assert_close(got, _np_conv_nd(x.astype(np.float64), w.astype(np.float64), stride, padding).astype(np.float32),
               atol=1e-4, rtol=1e-4)


def test_conv_transpose1d(rng):
  x, w = random_array(rng, (2, 3, 4), "float32"), random_array(rng, (3, 2, 3), "float32")
  stride, padding = 2, 1
  full = np.zeros((2, 2, (4 - 1) * stride + 3), np.float64)
  for i in range(4):  # every input place adds the kernel, scaled, at i * stride
    full[:, :, i * stride:i * stride + 3] += np.einsum("nc,cok->nok", x[:, :, i], w)
  expected = full[:, :, padding:full.shape[2] - padding]
  assert_close(Tensor(x).conv_transpose2d(Tensor(w), stride=stride, padding=padding), expected.astype(np.float32),
               atol=1e-4, rtol=1e-4)


def _np_pool(x: np.ndarray, k: int, s: int, p: int, ceil_mode: bool, reduce: str, include_pad: bool) -> np.ndarray:
  """torch's 2-d max/avg pooling by explicit windows: a window is clipped to the padded input (ceil_mode), the
  divisor counts the padding only with include_pad."""
  h, w = x.shape[-2:]
  def count(n):
    room = n + 2 * p - k
    out = (-(-room // s) if ceil_mode else room // s) + 1
    return out - 1 if ceil_mode and (out - 1) * s >= n + p else out
  out = np.zeros(x.shape[:-2] + (count(h), count(w)), np.float64)
  for i in range(count(h)):
    for j in range(count(w)):
      r0, c0 = i * s - p, j * s - p
      r1, c1 = min(r0 + k, h + p), min(c0 + k, w + p)
      window = x[..., max(r0, 0):min(r1, h), max(c0, 0):min(c1, w)]
      if reduce == "max": out[..., i, j] = window.max((-2, -1))
      else:
        divisor = (r1 - r0) * (c1 - c0) if include_pad else window.shape[-2] * window.shape[-1]
        out[..., i, j] = window.sum((-2, -1)) / divisor
  return out


@pytest.mark.parametrize("k,s,p,ceil_mode,include_pad", [(2, 2, 0, True, True), (3, 2, 1, True, True),
                                                       (3, 2, 1, True, False), (2, 2, 1, False, False),
                                                       (3, 3, 1, True, True)], ids=_ids)
def test_pool_ceil_mode_and_padding_count(rng, k, s, p, ceil_mode, include_pad):
  x = random_array(rng, (1, 2, 7, 6), "float32")
  avg = Tensor(x).avg_pool2d(k, s, padding=p, ceil_mode=ceil_mode, count_include_pad=include_pad)
  assert_close(avg, _np_pool(x, k, s, p, ceil_mode, "avg", include_pad).astype(np.float32), atol=1e-5, rtol=1e-5)
  peak = Tensor(x).max_pool2d(k, s, padding=p, ceil_mode=ceil_mode)
  assert_close(peak, _np_pool(x, k, s, p, ceil_mode, "max", include_pad).astype(np.float32))


def test_pool_1d_and_3d(rng):
  x = random_array(rng, (2, 9), "float32")
  expected = np.lib.stride_tricks.sliding_window_view(x, 3, axis=1)[:, ::2].max(-1)
  assert_close(Tensor(x).max_pool2d((3,), 2), expected)
  cube = random_array(rng, (1, 4, 4, 4), "float32")
  assert_close(Tensor(cube).avg_pool2d((2, 2, 2)), cube.reshape(1, 2, 2, 2, 2, 2, 2).mean((2, 4, 6)), atol=1e-6)


# ---------------------------------------------------------------------------- nn layers of tinygrad's nn
def _np_normalize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
  return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)


def test_group_instance_layer2d_rms_norms(rng):
  from tinycore import nn
  x = random_array(rng, (2, 4, 3, 3), "float64")
  grouped = _np_normalize(x.reshape(2, 2, -1), (2,), 1e-5).reshape(x.shape)
  assert_close(nn.GroupNorm(2, 4)(Tensor(x.astype(np.float32))), grouped.astype(np.float32), atol=1e-4, rtol=1e-4)
  assert_close(nn.InstanceNorm(4)(Tensor(x.astype(np.float32))), _np_normalize(x, (2, 3), 1e-5).astype(np.float32),
               atol=1e-4, rtol=1e-4)
  assert_close(nn.LayerNorm2d(4)(Tensor(x.astype(np.float32))), _np_normalize(x, (1,), 1e-5).astype(np.float32),
               atol=1e-4, rtol=1e-4)
  rms = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
  assert_close(nn.RMSNorm(3)(Tensor(x.astype(np.float32))), rms.astype(np.float32), atol=1e-4, rtol=1e-4)
  with pytest.raises(ValueError, match="divisible"): nn.GroupNorm(3, 4)


def test_lstm_cell(rng):
  from tinycore import nn
  cell = nn.LSTMCell(3, 2)
  x, h, c = (random_array(rng, shape, "float64") for shape in ((4, 3), (4, 2), (4, 2)))
  w_ih, w_hh = cell.weight_ih.numpy().astype(np.float64), cell.weight_hh.numpy().astype(np.float64)
  gates = x @ w_ih.T + h @ w_hh.T
  sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
  i, f, g, o = np.split(gates, 4, axis=1)
  c2 = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
  h2, got_c = cell(Tensor(x.astype(np.float32)), (Tensor(h.astype(np.float32)), Tensor(c.astype(np.float32))))
  assert_close(got_c, c2.astype(np.float32), atol=1e-5, rtol=1e-4)
  assert_close(h2, (sigmoid(o) * np.tanh(c2)).astype(np.float32), atol=1e-5, rtol=1e-4)
  h0, c0 = cell(Tensor(x.astype(np.float32)))  # no state: starts from zeros
  assert h0.shape == c0.shape == (4, 2)


def test_conv_layers_of_other_ranks(rng):
  from tinycore import nn
  x = random_array(rng, (2, 2, 7), "float32")
  conv = nn.Conv1d(2, 3, 3, padding="same")
  assert conv(Tensor(x)).shape == (2, 3, 7)
  explicit = Tensor(x).conv2d(conv.weight, conv.bias, padding=1)
  assert_close(conv(Tensor(x)), explicit.numpy(), atol=1e-6, rtol=1e-6)
  even = nn.Conv2d(1, 1, (2, 4), padding="same", bias=False)
  assert even(Tensor.ones(1, 1, 5, 6)).shape == (1, 1, 5, 6)
  up = nn.ConvTranspose1d(2, 4, 3, stride=2)
  assert up(Tensor(x)).shape == (2, 4, 15)
  with pytest.raises(ValueError, match="stride 1"): nn.Conv2d(1, 1, 3, stride=2, padding="same")
  with pytest.raises(ValueError, match="'same'"): nn.Conv2d(1, 1, 3, padding="valid")
  volume = random_array(rng, (1, 2, 2, 3, 2), "float32")
  normed = nn.BatchNorm3d(2)(Tensor(volume))  # eval mode: the running statistics (0 mean, 1 variance)
  assert_close(normed, volume / np.sqrt(1 + 1e-5), atol=1e-5, rtol=1e-5)


def test_numpy_values_as_data_and_indices():
  assert Tensor([np.float32(1.5), np.float32(2.0)]).tolist() == [1.5, 2.0]
  grid = Tensor.arange(6).reshape(2, 3)
  assert grid[np.int64(1)].tolist() == [3, 4, 5]
  assert grid[np.int32(1), np.array([0, 2])].tolist() == [3, 5]
  assert grid[np.array([1, 0])].tolist() == [[3, 4, 5], [0, 1, 2]]
  t = Tensor.zeros(4).contiguous()
  t[np.int64(1)] = 3
  t[np.array([2, 3])] = Tensor([5.0, 6.0])
  assert t.tolist() == [0.0, 3.0, 5.0, 6.0]
  with pytest.raises(NotImplementedError, match="boolean mask"): grid[np.array([True, False])]


def test_rand_of_an_int_dtype_is_an_error():
  with pytest.raises(TypeError, match="float dtype"): Tensor([1, 2]).rand_like()
  assert Tensor([1, 2]).rand_like(dtype=dtypes.float32).dtype is dtypes.float32


def test_setitem_with_a_boolean_mask(rng):
  x = random_array(rng, (3, 4), "float32")
  t = Tensor(x).contiguous().realize()
  alias = t
  t[t < 0] = 0.0  # torch's clamp idiom: the selection's size is never needed
  assert_equal(alias, np.where(x < 0, 0, x).astype(np.float32))
  rows = Tensor.arange(6).reshape(2, 3).contiguous()
  rows[[True, False]] = Tensor(9)
  assert rows.tolist() == [[9, 9, 9], [3, 4, 5]]
  with pytest.raises(IndexError, match="does not match"): rows[Tensor([True, False, True])] = 1
  with pytest.raises(NotImplementedError, match="one value"): rows[rows > 3] = Tensor([1, 2])


def test_conv1d_and_pool_gradients(rng):
  x, w = random_array(rng, (1, 2, 7), "float32"), random_array(rng, (3, 2, 3), "float32")
  check_gradient(rng, lambda a, b: a.conv2d(b, stride=2, padding=1), lambda a, b: _np_conv_nd(a, b, 2, 1), [x, w])
  image = random_array(rng, (1, 1, 5, 5), "float32")
  check_gradient(rng, lambda a: a.avg_pool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
                 lambda a: _np_pool(a, 3, 2, 1, True, "avg", False), [image])
