"""Reductions against numpy: sum, max, min, mean, prod, var, std (with correction), argmax, argmin over axis=None,
int axes, negative axes and tuples of axes, with keepdim, on odd shapes, float and int dtypes, scalars and
zero-size tensors."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, assert_equal, random_array, skip_unless_dtype

# (shape, axis) cases shared by the reductions; the same few shapes keep the number of distinct kernels down
AXES = [
  ((33, 17), None), ((33, 17), 0), ((33, 17), 1), ((33, 17), -1), ((33, 17), (0, 1)),
  ((2, 3, 5), None), ((2, 3, 5), 1), ((2, 3, 5), -1), ((2, 3, 5), (0, 2)), ((2, 3, 5), (-1, 0)),
  ((4, 1, 6), 1), ((7,), 0),
]
FLOAT_TOL = {"atol": 1e-5, "rtol": 1e-5}


def _case_id(case) -> str: return f"{case[0]}-axis{case[1]}".replace(" ", "")


# name: (tinycore reduction, numpy reduction computed in float64, input domain)
FLOAT_REDUCTIONS = {
  "sum": (lambda t, **kw: t.sum(**kw), np.sum),
  "max": (lambda t, **kw: t.max(**kw), np.max),
  "min": (lambda t, **kw: t.min(**kw), np.min),
  "mean": (lambda t, **kw: t.mean(**kw), np.mean),
  "prod": (lambda t, **kw: t.prod(**kw), np.prod),
  "var": (lambda t, **kw: t.var(**kw), lambda x, **kw: np.var(x, ddof=1, **kw)),
  "std": (lambda t, **kw: t.std(**kw), lambda x, **kw: np.std(x, ddof=1, **kw)),
}


def _reduced_count(shape, axis) -> int:
  axes = range(len(shape)) if axis is None else (axis,) if isinstance(axis, int) else axis
  return int(np.prod([shape[a] for a in axes]))


# var and std of a single element divide by zero (correction=1): left out
FLOAT_CASES = [(op, case) for op in FLOAT_REDUCTIONS for case in AXES
               if not (op in ("var", "std") and _reduced_count(*case) <= 1)]
TOLERANCE = {"sum": {"atol": 2e-4, "rtol": 1e-5}, "mean": {"atol": 1e-5, "rtol": 1e-5},
             "prod": {"atol": 1e-6, "rtol": 1e-4}, "var": {"atol": 1e-5, "rtol": 1e-4},
             "std": {"atol": 1e-5, "rtol": 1e-4}}


@pytest.mark.parametrize("keepdim", [False, True], ids=["drop", "keepdim"])
@pytest.mark.parametrize("op, case", FLOAT_CASES, ids=[f"{op}-{_case_id(case)}" for op, case in FLOAT_CASES])
def test_float32_reduction(rng, op, case, keepdim):
  shape, axis = case
  fn, reference = FLOAT_REDUCTIONS[op]
  # prod: values near 1, so that a product of hundreds of them stays a normal float32
  x = random_array(rng, shape, "float32", 0.5, 1.6) if op == "prod" else random_array(rng, shape, "float32")
  expected = reference(x.astype(np.float64), axis=axis, keepdims=keepdim).astype(np.float32)
  assert_close(fn(Tensor(x), axis=axis, keepdim=keepdim), expected, dtype=dtypes.float32,
               **TOLERANCE.get(op, {"atol": 0, "rtol": 0}))


@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("case", [((33, 17), 1), ((2, 3, 5), None), ((2, 3, 5), (0, 2))], ids=_case_id)
def test_var_std_correction(rng, case, correction):
  shape, axis = case
  x = random_array(rng, shape, "float32")
  x64 = x.astype(np.float64)
  assert_close(Tensor(x).var(axis=axis, correction=correction), np.var(x64, axis=axis, ddof=correction),
               dtype=dtypes.float32, **TOLERANCE["var"])
  assert_close(Tensor(x).std(axis=axis, correction=correction), np.std(x64, axis=axis, ddof=correction),
               dtype=dtypes.float32, **TOLERANCE["var"])
  assert_close(Tensor(x).var(axis=axis, keepdim=True, correction=correction),
               np.var(x64, axis=axis, ddof=correction, keepdims=True), dtype=dtypes.float32, **TOLERANCE["var"])


# axis=None flattens (the result is a scalar whatever keepdim says), so it is only checked without keepdim
ARG_CASES = [((33, 17), None, False), ((2, 3, 5), None, False)] + [
  (shape, axis, keepdim) for shape, axis in [((33, 17), 0), ((33, 17), -1), ((2, 3, 5), 1), ((7,), 0)]
  for keepdim in (False, True)]


@pytest.mark.parametrize("shape, axis, keepdim", ARG_CASES, ids=lambda v: str(v).replace(" ", ""))
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_argmin_float32(rng, op, shape, axis, keepdim):
  x = random_array(rng, shape, "float32")
  result = getattr(Tensor(x), op)(axis=axis, keepdim=keepdim)
  expected = getattr(np, op)(x, axis=axis, keepdims=keepdim).astype(np.int32)
  assert_equal(result, expected, dtype=dtypes.int32)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_argmin_ties_take_first(rng, op):
  x = random_array(rng, (33, 17), "int32", 0, 3)  # many ties
  assert_equal(getattr(Tensor(x), op)(axis=1), getattr(np, op)(x, axis=1).astype(np.int32), dtype=dtypes.int32)
  assert_equal(getattr(Tensor(x), op)(), np.array(getattr(np, op)(x), dtype=np.int32), dtype=dtypes.int32)


INT_CASES = [((7, 5), None), ((7, 5), 0), ((7, 5), -1), ((2, 3, 5), (0, 2))]


@pytest.mark.parametrize("case", INT_CASES, ids=_case_id)
def test_int32_reductions(rng, case):
  shape, axis = case
  x = random_array(rng, shape, "int32", -1000, 1000)
  t = Tensor(x)
  assert_equal(t.sum(axis=axis), x.sum(axis=axis).astype(np.int32), dtype=dtypes.int32)      # sum of int32 is int32
  assert_equal(t.max(axis=axis), x.max(axis=axis), dtype=dtypes.int32)
  assert_equal(t.min(axis=axis, keepdim=True), x.min(axis=axis, keepdims=True), dtype=dtypes.int32)
  assert_close(t.mean(axis=axis), x.mean(axis=axis).astype(np.float32), dtype=dtypes.float32, **FLOAT_TOL)  # float32
  # prod: factors in {-2, -1, 1, 2} over at most 10 elements, {-1, 1} over the whole tensor (no overflow)
  magnitude = 1 if axis is None else np.where(random_array(rng, shape, "bool"), 2, 1)
  factors = (np.where(random_array(rng, shape, "bool"), -1, 1) * magnitude).astype(np.int32)
  assert_equal(Tensor(factors).prod(axis=axis), np.prod(factors, axis=axis).astype(np.int32), dtype=dtypes.int32)


def test_int32_argmax_returns_int32(rng):
  x = random_array(rng, (7, 5), "int32", -1000, 1000)
  assert_equal(Tensor(x).argmax(axis=0), x.argmax(axis=0).astype(np.int32), dtype=dtypes.int32)
  assert_equal(Tensor(x).argmin(), np.array(x.argmin(), dtype=np.int32), dtype=dtypes.int32)


def test_reductions_of_scalar(rng):
  value = np.float32(rng.standard_normal())
  t = Tensor(float(value))
  for reduced in (t.sum(), t.max(), t.min(), t.mean(), t.prod()):
    assert_close(reduced, np.array(value), dtype=dtypes.float32)
  assert_equal(t.argmax(), np.array(0, dtype=np.int32), dtype=dtypes.int32)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)], ids=str)
def test_sum_and_prod_of_zero_size(shape):
  x = np.zeros(shape, dtype=np.float32)
  assert_equal(Tensor(x).sum(), np.array(0.0, dtype=np.float32), dtype=dtypes.float32)
  assert_equal(Tensor(x).prod(), np.array(1.0, dtype=np.float32), dtype=dtypes.float32)
  assert_equal(Tensor(np.zeros(shape, dtype=np.int32)).sum(), np.array(0, dtype=np.int32), dtype=dtypes.int32)
  for axis in range(len(shape)):
    assert_equal(Tensor(x).sum(axis=axis), x.sum(axis=axis), dtype=dtypes.float32)
    assert_equal(Tensor(x).sum(axis=axis, keepdim=True), x.sum(axis=axis, keepdims=True), dtype=dtypes.float32)


def test_max_keeps_zero_size_axes():
  # reducing a non-empty axis of a zero-size tensor gives a zero-size result (no identity element is needed)
  x = np.zeros((3, 0), dtype=np.float32)
  assert_equal(Tensor(x).max(axis=0), np.zeros((0,), dtype=np.float32), dtype=dtypes.float32)
  assert_equal(Tensor(x).min(axis=0, keepdim=True), np.zeros((1, 0), dtype=np.float32), dtype=dtypes.float32)


def test_reduce_after_elementwise(rng):
  x = random_array(rng, (33, 17), "float32")
  y = random_array(rng, (17,), "float32")
  expected = (np.exp(x.astype(np.float64)) * y).sum(axis=1) / (x.astype(np.float64) ** 2 + 1).max(axis=1)
  result = ((Tensor(x).exp() * Tensor(y)).sum(axis=1)) / (Tensor(x) ** 2 + 1).max(axis=1)
  assert_close(result, expected.astype(np.float32), dtype=dtypes.float32, atol=1e-5, rtol=1e-4)


# Column sums (over rows, the kept axis contiguous) add several rows per pass (4 by default, 8 on the CPU), and a
# 2-core CPU splits the rows in halves first (an odd count leaves one row to the second kernel): row counts below one
# pass, and ones that leave 1 to 7 rows over after the passes (of the whole count or of each half), with NaN and
# infinities in both kinds of rows
COLUMN_ROWS = [3, 5, 7, 9, 12, 15, 23, 130, 131, 258, 271]


def _with_special_values(x: np.ndarray) -> np.ndarray:
  """x (rows, columns >= 8) with NaN and infinities in the first rows (a whole pass) and in the last (left over)."""
  x[0, 1], x[-1, 2], x[1, 3], x[-1, 4] = np.nan, np.nan, np.inf, -np.inf
  x[:, 5] = -np.inf                                 # a max over only -inf is -inf
  x[0, 6], x[-1, 6] = np.inf, -np.inf               # inf - inf: NaN
  x[:, 7] = np.inf                                  # a min over only inf is inf
  return x


@pytest.mark.parametrize("rows", COLUMN_ROWS)
def test_column_reductions_float32(rng, rows):
  x = _with_special_values(random_array(rng, (rows, 48), "float32"))
  with np.errstate(invalid="ignore"):
    sums, scaled_sums = x.astype(np.float64).sum(0), (x.astype(np.float64) * 2 + 1).sum(0)
  assert_close(Tensor(x).sum(0), sums.astype(np.float32), dtype=dtypes.float32, **TOLERANCE["sum"])
  assert_equal(Tensor(x).max(0), x.max(0), dtype=dtypes.float32)
  assert_equal(Tensor(x).min(axis=0, keepdim=True), x.min(axis=0, keepdims=True), dtype=dtypes.float32)
  assert_close((Tensor(x) * 2 + 1).sum(0), scaled_sums.astype(np.float32), dtype=dtypes.float32, **TOLERANCE["sum"])


@pytest.mark.parametrize("rows", COLUMN_ROWS)
def test_column_reductions_int32(rng, rows):
  x = random_array(rng, (rows, 48), "int32", -1000, 1000)
  x[0, 0], x[-1, 0] = 2**31 - 1, 2**31 - 1          # the sum wraps, as numpy's does
  assert_equal(Tensor(x).sum(0), x.sum(0, dtype=np.int32), dtype=dtypes.int32)
  assert_equal(Tensor(x).max(0), x.max(0), dtype=dtypes.int32)
  assert_equal(Tensor(x).min(0), x.min(0), dtype=dtypes.int32)


@pytest.mark.parametrize("rows", [5, 7, 131])
def test_column_reductions_float16(rng, rows):
  skip_unless_dtype(dtypes.float16)
  x = _with_special_values(random_array(rng, (rows, 48), "float16"))
  with np.errstate(invalid="ignore"):
    expected = x.astype(np.float64).sum(0).astype(np.float16)  # a float16 sum accumulates in float32
  assert_close(Tensor(x).sum(0), expected, dtype=dtypes.float16, atol=1e-2, rtol=2e-3)
  assert_equal(Tensor(x).max(0), x.max(0), dtype=dtypes.float16)
  assert_equal(Tensor(x).min(0), x.min(0), dtype=dtypes.float16)


@pytest.mark.parametrize("rows", [7, 131])
def test_column_sums_of_padded_and_sliced_rows(rng, rows):
  # masked loads (rows of zeros from the pad) and a row count that is not the buffer's (the slice)
  x = random_array(rng, (rows, 48), "float32")
  assert_close(Tensor(x).pad(((1, 2), (0, 0))).sum(0), np.pad(x, ((1, 2), (0, 0))).sum(0), dtype=dtypes.float32,
               **TOLERANCE["sum"])
  assert_close(Tensor(x)[1:].max(0), x[1:].max(0), dtype=dtypes.float32, atol=0, rtol=0)
  assert_close(Tensor(x)[:, 4:36].sum(0), x[:, 4:36].sum(0), dtype=dtypes.float32, **TOLERANCE["sum"])
