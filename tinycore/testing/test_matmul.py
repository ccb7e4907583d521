"""matmul / dot / @ against numpy, on odd sizes, batched, vector-matrix and non-contiguous inputs; softmax and
log_softmax."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, assert_equal, random_array

MATMUL_TOL = {"atol": 1e-4, "rtol": 1e-4}
SHAPE_PAIRS = [((7,), (7,)), ((7, 13), (13, 5)), ((1, 4), (4, 3)), ((3, 4), (4, 1)), ((33, 17), (17, 9)),
               ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((4,), (4, 5)), ((5, 4), (4,)), ((1, 3, 4), (2, 4, 5))]


def _ids(value) -> str: return str(value).replace(" ", "")


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=_ids)
def test_matmul_float32(rng, shapes):
  a, b = random_array(rng, shapes[0], "float32"), random_array(rng, shapes[1], "float32")
  expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
  ta, tb = Tensor(a), Tensor(b)
  assert_close(ta @ tb, expected, dtype=dtypes.float32, **MATMUL_TOL)
  assert_close(ta.matmul(tb), expected, dtype=dtypes.float32, **MATMUL_TOL)
  assert_close(ta.dot(tb), expected, dtype=dtypes.float32, **MATMUL_TOL)


@pytest.mark.slow  # 12M multiply-adds: minutes on the PYTHON interpreter
def test_matmul_large_tiles(rng):
  # big enough for register tiles in both output dims and for a CPU kernel split across threads
  a, b = random_array(rng, (256, 192), "float32"), random_array(rng, (192, 240), "float32")
  expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
  assert_close(Tensor(a) @ Tensor(b), expected, dtype=dtypes.float32, **MATMUL_TOL)


def test_matmul_int32(rng):
  a, b = random_array(rng, (7, 13), "int32", -20, 20), random_array(rng, (13, 5), "int32", -20, 20)
  assert_equal(Tensor(a) @ Tensor(b), a @ b, dtype=dtypes.int32)
  v = random_array(rng, (13,), "int32", -20, 20)
  assert_equal(Tensor(v) @ Tensor(b), v @ b, dtype=dtypes.int32)


def test_matmul_non_contiguous_inputs(rng):
  a, b = random_array(rng, (13, 7), "float32"), random_array(rng, (5, 13), "float32")
  expected = (a.T.astype(np.float64) @ b.T.astype(np.float64)).astype(np.float32)
  assert_close(Tensor(a).T @ Tensor(b).T, expected, dtype=dtypes.float32, **MATMUL_TOL)
  c = random_array(rng, (8, 13), "float32")
  sliced = (c[::2, ::-1].astype(np.float64) @ b.T.astype(np.float64)).astype(np.float32)
  assert_close(Tensor(c)[::2, ::-1] @ Tensor(b).T, sliced, dtype=dtypes.float32, **MATMUL_TOL)


def test_matmul_then_elementwise(rng):
  a, b, bias = (random_array(rng, (7, 13), "float32"), random_array(rng, (13, 5), "float32"),
                random_array(rng, (5,), "float32"))
  expected = np.maximum(a.astype(np.float64) @ b + bias, 0).astype(np.float32)
  assert_close((Tensor(a) @ Tensor(b) + Tensor(bias)).relu(), expected, dtype=dtypes.float32, **MATMUL_TOL)


def test_matmul_with_zero_size_inner_dim():
  a, b = np.zeros((3, 0), dtype=np.float32), np.zeros((0, 4), dtype=np.float32)
  assert_equal(Tensor(a) @ Tensor(b), np.zeros((3, 4), dtype=np.float32), dtype=dtypes.float32)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
  shifted = x - x.max(axis=axis, keepdims=True)
  return np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape", [(7, 5), (2, 3, 5), (33, 17)], ids=_ids)
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(rng, shape, axis):
  x = random_array(rng, shape, "float32") * 3
  x64 = x.astype(np.float64)
  result = Tensor(x).softmax(axis)
  assert_close(result, _softmax(x64, axis).astype(np.float32), dtype=dtypes.float32, atol=1e-6, rtol=1e-4)
  np.testing.assert_allclose(result.numpy().sum(axis=axis), 1.0, rtol=1e-5)
  log_expected = np.log(_softmax(x64, axis)).astype(np.float32)
  assert_close(Tensor(x).log_softmax(axis), log_expected, dtype=dtypes.float32, atol=1e-5, rtol=1e-4)


def test_softmax_default_axis_and_large_values(rng):
  x = random_array(rng, (4, 6), "float32") * 3 + 100  # would overflow exp without the max shift
  expected = _softmax(x.astype(np.float64), -1).astype(np.float32)
  assert_close(Tensor(x).softmax(), expected, dtype=dtypes.float32, atol=1e-6, rtol=1e-4)
  assert_close(Tensor(x).log_softmax(), np.log(expected), dtype=dtypes.float32, atol=1e-5, rtol=1e-4)


def _rows_with_special_values(rng, width: int) -> np.ndarray:
  """Rows of `width` floats: ordinary ones, then one holding NaN, +inf, -inf, all -inf, and a constant row."""
  x = random_array(rng, (7, width), "float32") * 3
  x[1, width // 3] = np.nan
  x[2, width - 1] = np.inf
  x[3, 0] = -np.inf
  x[4, :] = -np.inf
  x[5, :] = 2.5
  return x


# 1000: not a multiple of any vector width; 1024: whole vectors (a CPU keeps the row's exps for the output loop);
# 4100: a row too long for that buffer (16 KiB), each exp computed twice
@pytest.mark.parametrize("width", [1000, 1024, 4100])
def test_softmax_rows_with_nan_inf_and_odd_lengths(rng, width):
  x = _rows_with_special_values(rng, width)
  with np.errstate(invalid="ignore", divide="ignore"):
    expected = _softmax(x.astype(np.float64), -1)
    log_expected = np.log(expected)
  assert_close(Tensor(x).softmax(-1), expected.astype(np.float32), dtype=dtypes.float32, atol=1e-6, rtol=1e-4)
  assert_close(Tensor(x).log_softmax(-1), log_expected.astype(np.float32), dtype=dtypes.float32, atol=1e-5,
               rtol=1e-4)


def test_softmax_float16_rows(rng):
  x = (random_array(rng, (5, 1024), "float32") * 3).astype(np.float16)
  x[1, 7], x[2, 9] = np.nan, np.inf
  with np.errstate(invalid="ignore"):
    expected = _softmax(x.astype(np.float64), -1).astype(np.float16)
  assert_close(Tensor(x).softmax(-1), expected, dtype=dtypes.float16, atol=1e-3, rtol=1e-2)
