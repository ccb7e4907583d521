"""Math, reductions and nn functions where tinycore differed from tinygrad 0.14 (or from the math) in a
differential test: ints and bools through float-valued functions, Python ints outside a dtype, empty and infinite
exp-sums, cumprod and einsum dtypes, shifts of bools, sort with NaN, half precision matmul and trigonometry.
numpy is the reference throughout."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore import tensor_sort

pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")
U8 = np.array([0, 1, 2, 3, 7, 100, 200, 255], np.uint8)
BOOLS = np.array([True, False, True, False])


def np_sigmoid(x: np.ndarray) -> np.ndarray: return 1 / (1 + np.exp(-x))


def np_log_softmax(x: np.ndarray) -> np.ndarray:
  shifted = x - x.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


FLOAT_FUNCTIONS = {
  "sigmoid": np_sigmoid, "silu": lambda x: x * np_sigmoid(x), "logsigmoid": lambda x: np.log(np_sigmoid(x)),
  "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6, "softsign": lambda x: x / (1 + np.abs(x)),
  "softmax": lambda x: np.exp(np_log_softmax(x)), "log_softmax": np_log_softmax,
  "softmin": lambda x: np.exp(np_log_softmax(-x)),
  "logsumexp": lambda x: np.log(np.exp(x - x.max()).sum()) + x.max(),
}


class TestIntsThroughFloatFunctions:
  """-x of a bool is its logical not and of an unsigned int a wrap, so these compute in float first."""
  @pytest.mark.parametrize("name", FLOAT_FUNCTIONS)
  @pytest.mark.parametrize("values", [U8, U8.astype(np.uint32), U8.astype(np.int8), BOOLS], ids=str)
  def test_matches_the_float_values(self, name, values):
    out = getattr(Tensor(values), name)()
    assert out.dtype is dtypes.float32
    expected = FLOAT_FUNCTIONS[name](values.astype(np.float64))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)

  def test_relu6_of_unsigned_keeps_small_values(self):
    np.testing.assert_equal(Tensor(U8).relu6().numpy(), np.clip(U8, 0, 6))


class TestPythonIntsOutsideTheDtype:
  def test_comparisons_use_the_value(self):
    x = np.array([-128, -1, 0, 127], np.int8)
    np.testing.assert_equal((Tensor(x) < 1000).numpy(), np.ones(4, bool))
    np.testing.assert_equal((Tensor(x) >= -1000).numpy(), np.ones(4, bool))
    np.testing.assert_equal((Tensor(U8) == 256).numpy(), np.zeros(8, bool))
    np.testing.assert_equal((Tensor(U8) != -1).numpy(), np.ones(8, bool))
    np.testing.assert_equal((Tensor(U8) > -1).numpy(), np.ones(8, bool))
    # the widest dtypes too: no cast can hold both sides, the answer is a constant
    big = np.array([0, 2 ** 63 + 5, 2 ** 64 - 1], np.uint64)
    np.testing.assert_equal((Tensor(big) > -1).numpy(), np.ones(3, bool))
    np.testing.assert_equal((Tensor(big.view(np.int64)) < 2 ** 63).numpy(), np.ones(3, bool))
    np.testing.assert_equal((2 ** 63 <= Tensor(big.view(np.int64))).numpy(), np.zeros(3, bool))

  def test_clip_and_maximum_bounds_do_not_wrap(self):
    np.testing.assert_equal(Tensor(U8).clip(-1, 1).numpy(), np.clip(U8, 0, 1))
    np.testing.assert_equal(Tensor(U8).hardtanh().numpy(), np.clip(U8, 0, 1))
    np.testing.assert_equal(Tensor(U8).maximum(-5).numpy(), U8)
    np.testing.assert_equal(Tensor(U8).minimum(300).numpy(), U8)


class TestExpSums:
  def test_logsumexp_of_empty_axis_is_minus_inf(self):
    out = Tensor(np.zeros((0, 3), np.float32)).logsumexp(0)
    np.testing.assert_equal(out.numpy(), np.full(3, -np.inf, np.float32))

  def test_logsumexp_of_infinite_rows(self):
    x = np.array([[-np.inf, -np.inf], [np.inf, 0.0], [np.inf, -np.inf], [1000.0, 1000.0]], np.float32)
    np.testing.assert_allclose(Tensor(x).logsumexp(1).numpy(), [-np.inf, np.inf, np.inf, 1000 + np.log(2)])

  @pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
  def test_softmax_of_empty(self, name):
    assert getattr(Tensor(np.zeros((0, 4), np.float32)), name)(0).shape == (0, 4)


class TestDtypes:
  def test_cumprod_keeps_the_dtype(self):
    x = np.array([[3, -5, 7, 2], [100, 2, 1, -1]], np.int8)
    out = Tensor(x).cumprod(1)
    assert out.dtype is dtypes.int8
    np.testing.assert_equal(out.numpy(), np.cumprod(x, 1, dtype=np.int8))
    assert Tensor(U8).cumprod(0).dtype is dtypes.uint8

  def test_cumprod_of_bools_is_running_and(self):
    x = np.array([[True, True, False, True], [True, True, True, True]])
    out = Tensor(x).cumprod(1)
    assert out.dtype is dtypes.bool
    np.testing.assert_equal(out.numpy(), np.logical_and.accumulate(x, 1))

  @pytest.mark.parametrize("values,dtype", [(BOOLS.reshape(2, 2), dtypes.int32),
                                            (np.array([[100, 100], [100, 1]], np.int8), dtypes.int32),
                                            (np.ones((2, 2), np.float16), dtypes.float16)], ids=str)
  def test_einsum_sums_in_the_sum_dtype(self, values, dtype):
    out = Tensor.einsum("ij->j", Tensor(values))
    assert out.dtype is dtype
    np.testing.assert_equal(out.numpy(), values.astype(np.int64).sum(0))

  def test_uint64_and_int64_meet_in_the_default_float(self):
    out = Tensor(np.array([1, 2], np.uint64)) + Tensor(np.array([-1, 2], np.int64))
    assert out.dtype is dtypes.float32
    np.testing.assert_equal(out.numpy(), [0.0, 4.0])

  def test_allclose_is_a_bool_tensor(self):
    a = Tensor([1.0, 2.0])
    close = a.allclose(a + 1e-7)
    assert isinstance(close, Tensor) and close.dtype is dtypes.bool and close.item() is True
    assert not a.allclose(a + 1)


@pytest.mark.parametrize("op", ["__lshift__", "__rshift__", "lshift", "rshift"])
def test_shifting_bools_by_bools_raises(op):
  with pytest.raises(TypeError, match="bool"): getattr(Tensor(BOOLS), op)(Tensor(BOOLS))
  with pytest.raises(TypeError, match="bool"): getattr(Tensor(BOOLS), op)(True)


class TestSortWithNaN:
  """NaN sorts as the largest value (torch's order), so no value is lost or invented."""
  X = np.array([3, np.nan, 1, -np.inf, np.inf, np.nan, 1], np.float32)

  @pytest.mark.parametrize("network", [False, True])
  def test_sort(self, network, monkeypatch):
    if network: monkeypatch.setattr(tensor_sort, "RANK_SORT_MAX", 2)
    values, indices = Tensor(self.X).sort()
    np.testing.assert_equal(values.numpy(), np.sort(self.X))
    np.testing.assert_equal(indices.numpy(), np.argsort(self.X, kind="stable"))
    values, indices = Tensor(self.X).sort(descending=True)
    np.testing.assert_equal(values.numpy(), [np.nan, np.nan, np.inf, 3, 1, 1, -np.inf])
    np.testing.assert_equal(indices.numpy(), [1, 5, 4, 0, 2, 6, 3])

  def test_topk(self):
    values, indices = Tensor(self.X).topk(2, largest=False)
    np.testing.assert_equal(values.numpy(), [-np.inf, 1])
    np.testing.assert_equal(indices.numpy(), [3, 2])


class TestHalfPrecision:
  def test_matmul_rounds_once(self):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 32)).astype(np.float16), rng.standard_normal((32, 8)).astype(np.float16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    out = (Tensor(a) @ Tensor(b)).numpy()
    assert out.dtype == np.float16
    # products in float32 are exact, so only the final rounding to half is left: at most half a unit in the last place
    np.testing.assert_array_less(np.abs(out - exact), np.spacing(np.abs(exact).astype(np.float16)) * 0.5 + 1e-7)
    accumulated = Tensor(a).dot(Tensor(b), dtype=dtypes.float32).numpy()
    np.testing.assert_allclose(accumulated, exact, rtol=1e-5, atol=1e-5)

  @pytest.mark.parametrize("name", ["cos", "tan", "exp"])
  def test_trigonometry_and_exp(self, name):
    x = np.array([-1.407, 1.5, 3.1, 0.3, 10.0, 11.0, -5.0], np.float16)
    expected = getattr(np, name)(x.astype(np.float64))
    out = getattr(Tensor(x), name)().numpy()
    np.testing.assert_allclose(out, expected, rtol=2 ** -10, atol=1e-3)


def test_sparse_categorical_crossentropy_default_ignores_nothing():
  logits = np.array([[1.0, 2.0, 3.0], [1.0, 0.0, 0.0], [0.0, 0.0, 5.0]], np.float32)
  labels = np.array([0, -1, 2], np.int32)
  logp = np_log_softmax(logits.astype(np.float64))
  # as tinygrad: the -1 label picks nothing but is one of the three in the mean
  out = Tensor(logits).sparse_categorical_crossentropy(Tensor(labels))
  np.testing.assert_allclose(out.numpy(), -(logp[0, 0] + logp[2, 2]) / 3, rtol=1e-6)
  out = Tensor(logits).sparse_categorical_crossentropy(Tensor(labels), ignore_index=2)
  np.testing.assert_allclose(out.numpy(), -logp[0, 0] / 2, rtol=1e-6)


class TestPoolingAndResampling:
  def test_int_max_pool_with_padding_stays_int(self):
    x = np.arange(-8, 8, dtype=np.int32).reshape(1, 1, 4, 4)
    out = Tensor(x).max_pool2d(3, 2, padding=1)
    assert out.dtype is dtypes.int32
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=np.iinfo(np.int32).min)
    expected = np.array([[padded[0, 0, i:i + 3, j:j + 3].max() for j in (0, 2)] for i in (0, 2)])
    np.testing.assert_equal(out.numpy()[0, 0], expected)

  def test_conv_transpose2d_takes_conv2d_padding_forms(self):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 3, 4)).astype(np.float32), rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    full = np.zeros((1, 3, 3 * 2, 4 * 2))  # stride 2, no padding: each input spreads its kernel at (2i, 2j)
    for i in range(3):
      for j in range(4): full[0, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] += np.einsum("c,cokl->okl", x[0, :, i, j], w)
    # torch's flat order, last dim first: (left, right, top, bottom) crops the full output
    out = Tensor(x).conv_transpose2d(Tensor(w), stride=2, padding=(1, 0, 0, 2))
    np.testing.assert_allclose(out.numpy(), full[:, :, 0:6 - 2, 1:8], rtol=1e-5, atol=1e-5)

  def test_interpolate_to_an_empty_size(self):
    assert Tensor(np.ones((1, 1, 3, 4), np.float32)).interpolate((0, 5)).shape == (1, 1, 0, 5)
    assert Tensor(np.ones((1, 1, 3, 4), np.uint8)).interpolate((0, 5)).shape == (1, 1, 0, 5)

  @pytest.mark.parametrize("shape, size", [((2, 3, 64, 64), (10, 10)), ((1, 3, 17, 23), (40, 50)),
                                           ((2, 4, 30, 31), (31, 30))])
  def test_uint8_bilinear_equals_torchs(self, shape, size):
    # torch resamples uint8 images in fixed point (tinygrad's TestOpsUint8.test_interpolate_bilinear): every element
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).integers(0, 256, shape).astype(np.uint8)
    for align in (False, True):
      want = torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode="bilinear", align_corners=align)
      np.testing.assert_array_equal(Tensor(x).interpolate(size, mode="linear", align_corners=align).numpy(),
                                    want.numpy())


class TestSoftplusAndLogits:
  """softplus as max(x, 0) + log(1 + exp(-|x|)) (one exp, no overflow) and binary cross entropy through one logsigmoid,
  against float64 references; log2 on the CPU is an inline polynomial (within 2 ulp of the float64 value)."""
  X = np.float32([0, -0.0, 1, -1, 3.5, -3.5, 20, -20, 88, -88, 100, 1e4, -1e4, np.inf, -np.inf])

  @pytest.mark.parametrize("beta", [1.0, 2.0, 0.5])
  def test_softplus_is_finite_for_large_inputs(self, beta):
    x = self.X.astype(np.float64) * beta
    expected = (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))) / beta
    np.testing.assert_allclose(Tensor(self.X).softplus(beta).numpy(), expected, rtol=1e-6, atol=1e-7)
    assert np.isnan(Tensor(np.float32([np.nan])).softplus(beta).numpy()).all()

  def test_binary_crossentropy_logits_matches_the_float64_formula(self):
    rng = np.random.default_rng(0)
    x = np.concatenate([self.X[:-2], rng.standard_normal(500).astype(np.float32) * 8])
    y = rng.random(x.shape).astype(np.float32)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    per = np.maximum(xd, 0) - xd * yd + np.log1p(np.exp(-np.abs(xd)))
    np.testing.assert_allclose(Tensor(x).binary_crossentropy_logits(Tensor(y)).numpy(), per.mean(), rtol=1e-5)
    weighted = (1 - yd) * xd + (1 + yd) * (np.log1p(np.exp(-np.abs(xd))) + np.maximum(-xd, 0))
    got = Tensor(x).binary_crossentropy_logits(Tensor(y), pos_weight=Tensor(np.float32([2.0]))).numpy()
    np.testing.assert_allclose(got, weighted.mean(), rtol=1e-5)

  def test_log2_is_within_two_ulp_of_float64(self):
    rng = np.random.default_rng(1)
    x = np.concatenate([np.float32([1e-45, 1e-40, 1.17549435e-38, 0.5, 1, 1.4142135, 1.4142137, 2, 3e38]),
                        np.exp(rng.uniform(-87, 88, 20000)).astype(np.float32)])
    got, expected = Tensor(x).log2().numpy(), np.log2(x.astype(np.float64))
    assert (np.abs(got - expected) <= 2 * np.spacing(np.abs(expected).astype(np.float32))).all()
    special = Tensor(np.float32([0, -0.0, -1, np.inf, -np.inf, np.nan])).log2().numpy()
    np.testing.assert_array_equal(special, [-np.inf, -np.inf, np.nan, np.inf, np.nan, np.nan])


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("shape,size", [((2, 3, 8, 8), (16, 16)), ((2, 3, 8, 8), (32, 8)), ((2, 3, 16, 12), (8, 6)),
                                        ((2, 3, 15, 12), (5, 4)), ((2, 3, 8, 8), (12, 12)), ((1, 2, 7), (28,)),
                                        ((1, 1, 6, 6), (3, 2)), ((2, 1, 4, 4, 4), (8, 2, 4))])
def test_nearest_interpolate_by_movement_picks_the_inputs_the_index_formula_does(mode, shape, size):
  """Upscales by powers of two and whole-factor downscales are expands and strided picks (no index computation);
  the rest (12 of 8) computes source indices: both against numpy's formula, floor(i * old / new) (nearest-exact:
  floor((i + 0.5) * old / new))."""
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  expected = x
  for axis, new in zip(range(x.ndim - len(size), x.ndim), size):
    old = x.shape[axis]
    i = np.arange(new, dtype=np.float64)
    source = np.floor((i + 0.5) * old / new) if mode == "nearest-exact" else np.floor(i * old / new)
    expected = np.take(expected, np.minimum(source, old - 1).astype(int), axis=axis)
  np.testing.assert_array_equal(Tensor(x).interpolate(size, mode=mode).numpy(), expected)
