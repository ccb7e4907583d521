"""Math functions of the Tensor API against numpy (math.erf for erf): erf, inverse and hyperbolic trigonometry,
isclose/isinf/isnan/isfinite, copysign, logaddexp, lerp, the activations (gelu both ways, mish, hardswish, ...),
softplus on large inputs, var_mean/std_mean, any/all; their gradients against central differences. Then the
correctness details: argmin of ints at the minimum, arange past int32, dtype limits, and which exception a mistake
raises (tinygrad's class; shape errors are both ValueError and RuntimeError)."""
import math
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, assert_equal, check_gradient, random_array

erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x): return 1 / (1 + np.exp(-x))
def _softplus(x): return np.logaddexp(x, 0)


# name -> (tinycore method, numpy reference, input range); inputs inside the function's domain
UNARY = {
  "erf": (lambda t: t.erf(), erf, (-4, 4)),
  "asin": (lambda t: t.asin(), np.arcsin, (-0.999, 0.999)),
  "acos": (lambda t: t.acos(), np.arccos, (-0.999, 0.999)),
  "atan": (lambda t: t.atan(), np.arctan, (-20, 20)),
  "sinh": (lambda t: t.sinh(), np.sinh, (-5, 5)),
  "cosh": (lambda t: t.cosh(), np.cosh, (-5, 5)),
  "tanh": (lambda t: t.tanh(), np.tanh, (-5, 5)),
  "asinh": (lambda t: t.asinh(), np.arcsinh, (-30, 30)),
  "acosh": (lambda t: t.acosh(), np.arccosh, (1.001, 30)),
  "atanh": (lambda t: t.atanh(), np.arctanh, (-0.99, 0.99)),
  "gelu_tanh": (lambda t: t.gelu(), lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
                (-5, 5)),
  "gelu_none": (lambda t: t.gelu(approximate="none"), lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))), (-5, 5)),
  "mish": (lambda t: t.mish(), lambda x: x * np.tanh(_softplus(x)), (-6, 6)),
  "hardswish": (lambda t: t.hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6, (-5, 5)),
  "hardsigmoid": (lambda t: t.hardsigmoid(), lambda x: np.clip(x / 6 + 0.5, 0, 1), (-5, 5)),
  "hardtanh": (lambda t: t.hardtanh(-0.5, 2.0), lambda x: np.clip(x, -0.5, 2.0), (-3, 3)),
  "celu": (lambda t: t.celu(0.7), lambda x: np.maximum(x, 0) + np.minimum(0, 0.7 * (np.exp(x / 0.7) - 1)), (-4, 4)),
  "selu": (lambda t: t.selu(), lambda x: 1.0507 * np.where(x >= 0, x, 1.67326 * (np.exp(x) - 1)), (-4, 4)),
  "logsigmoid": (lambda t: t.logsigmoid(), lambda x: -_softplus(-x), (-30, 30)),
  "softplus": (lambda t: t.softplus(2.0), lambda x: _softplus(2 * x) / 2, (-30, 30)),
  "softsign": (lambda t: t.softsign(), lambda x: x / (1 + np.abs(x)), (-5, 5)),
  "relu6": (lambda t: t.relu6(), lambda x: np.clip(x, 0, 6), (-3, 9)),
}
# functions with a kink (hardswish, hardtanh, ...) are left out of the gradient check: a difference straddling the
# kink is not a derivative
SMOOTH = ["erf", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "gelu_tanh", "gelu_none", "mish",
          "logsigmoid", "softplus", "selu"]


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math(rng, name):
  method, reference, (low, high) = UNARY[name]
  x = random_array(rng, (5, 7), "float32", low=low, high=high)
  expected = reference(x.astype(np.float64))
  assert_close(method(Tensor(x)), expected.astype(np.float32), atol=2e-6, rtol=3e-6, dtype=dtypes.float32)


@pytest.mark.parametrize("name", SMOOTH)
def test_unary_math_gradient(rng, name):
  method, reference, (low, high) = UNARY[name]
  x = random_array(rng, (6,), "float32", low=max(low, -3), high=min(high, 3))
  if name == "selu": x[np.abs(x) < 0.05] = 0.5  # selu's slope jumps at 0
  check_gradient(rng, method, reference, [x])


def test_math_precision_near_zero():
  """Where the textbook formula cancels (sinh, asinh, atanh near 0) the result keeps its relative precision."""
  x = np.array([1e-6, -3e-5, 2e-4, -1e-3, 0.2, 0.0], dtype=np.float32)
  for name, reference in (("sinh", np.sinh), ("asinh", np.arcsinh), ("atanh", np.arctanh), ("erf", erf),
                          ("asin", np.arcsin), ("atan", np.arctan)):
    assert_close(getattr(Tensor(x), name)(), reference(x.astype(np.float64)).astype(np.float32), atol=0, rtol=1e-6)
  assert_close(Tensor(x).acos(), np.arccos(x.astype(np.float64)).astype(np.float32), atol=0, rtol=1e-6)


def test_math_edges():
  with np.errstate(all="ignore"):
    x = np.array([-1.0, 1.0, 1.5, -2.0, np.inf, -np.inf, np.nan], dtype=np.float32)
    for name, reference in (("asin", np.arcsin), ("acos", np.arccos), ("atanh", np.arctanh), ("atan", np.arctan),
                            ("acosh", np.arccosh), ("asinh", np.arcsinh), ("erf", erf)):
      assert_close(getattr(Tensor(x), name)(), reference(x.astype(np.float64)).astype(np.float32), atol=1e-6,
                   rtol=1e-6)
  huge = np.array([1e30, -1e30, 3e38], dtype=np.float32)
  assert_close(Tensor(huge).asinh(), np.arcsinh(huge.astype(np.float64)).astype(np.float32), rtol=1e-6)
  assert_close(Tensor(huge[[0, 2]]).acosh(), np.arccosh(huge[[0, 2]].astype(np.float64)).astype(np.float32), rtol=1e-6)


def test_softplus_is_stable():
  x = np.array([-200.0, -50.0, 0.0, 50.0, 200.0, 1e30], dtype=np.float32)
  assert_close(Tensor(x).softplus(), np.logaddexp(x.astype(np.float64), 0).astype(np.float32), rtol=1e-6)
  assert_close(Tensor(x).logsigmoid(), -np.logaddexp(-x.astype(np.float64), 0).astype(np.float32), rtol=1e-6)
  assert_close(Tensor(x[:5]).mish(), x[:5] * np.tanh(np.logaddexp(x[:5].astype(np.float64), 0)), rtol=1e-6)


def test_int_inputs_become_float():
  assert_close(Tensor([0, 1, -1]).erf(), erf(np.array([0.0, 1.0, -1.0])).astype(np.float32), dtype=dtypes.float32)
  assert_close(Tensor([0, 1]).asin(), np.arcsin([0.0, 1.0]).astype(np.float32), dtype=dtypes.float32)


def test_gelu_bad_approximate():
  with pytest.raises(RuntimeError):
    Tensor([1.0]).gelu(approximate="erf")


def test_logaddexp(rng):
  a, b = random_array(rng, (4, 5), "float32") * 50, random_array(rng, (5,), "float32") * 50
  assert_close(Tensor(a).logaddexp(Tensor(b)), np.logaddexp(a, b), rtol=1e-6)
  assert_close(Tensor([-np.inf, 1.0]).logaddexp(-np.inf), np.array([-np.inf, 1.0], np.float32))
  check_gradient(rng, lambda x, y: x.logaddexp(y), np.logaddexp, [a[:2] / 50, b / 50])


# ---------------------------------------------------------------------------- tests and signs
def test_isclose():
  a = np.array([1.0, 1.0, np.nan, np.inf, -np.inf, np.inf, 0.0, 1e-9], dtype=np.float32)
  b = np.array([1.0 + 1e-6, 1.1, np.nan, np.inf, np.inf, 1e30, 1e-9, 0.0], dtype=np.float32)
  assert_equal(Tensor(a).isclose(Tensor(b)), np.isclose(a, b), dtype=dtypes.bool)
  assert_equal(Tensor(a).isclose(Tensor(b), equal_nan=True), np.isclose(a, b, equal_nan=True))
  assert_equal(Tensor(a).isclose(Tensor(b), rtol=0.2, atol=0.0), np.isclose(a, b, rtol=0.2, atol=0.0))
  assert_equal(Tensor([1, 2, 3]).isclose(2), np.isclose([1, 2, 3], 2))
  assert Tensor(a[:2]).allclose(Tensor(a[:2])) and not Tensor(a[:2]).allclose(Tensor(b[:2]))


def test_isinf_isnan_isfinite():
  x = np.array([1.0, np.inf, -np.inf, np.nan, 0.0, -3.0], dtype=np.float32)
  assert_equal(Tensor(x).isinf(), np.isinf(x), dtype=dtypes.bool)
  assert_equal(Tensor(x).isinf(detect_negative=False), np.isposinf(x))
  assert_equal(Tensor(x).isinf(detect_positive=False), np.isneginf(x))
  assert_equal(Tensor(x).isnan(), np.isnan(x), dtype=dtypes.bool)
  assert_equal(Tensor(x).isfinite(), np.isfinite(x), dtype=dtypes.bool)


def test_copysign(rng):
  a = random_array(rng, (3, 4), "float32")
  b = random_array(rng, (4,), "float32")
  b[0], b[1] = -0.0, 0.0
  assert_equal(Tensor(a).copysign(Tensor(b)), np.copysign(a, b))
  assert_equal(Tensor(a).copysign(-1.0), np.copysign(a, -1.0))
  assert_equal(Tensor([-3, 4]).copysign(Tensor([2, -2])), np.array([3, -4], np.int32), dtype=dtypes.int32)
  b[np.abs(b) < 0.05] = 0.5
  check_gradient(rng, lambda x: x.copysign(Tensor(b)), lambda x: np.copysign(x, b), [a])


def test_lerp(rng):
  a, b, w = (random_array(rng, (3, 4), "float32") for _ in range(3))
  assert_close(Tensor(a).lerp(Tensor(b), Tensor(w)), a + (b - a) * w, atol=1e-6)
  assert_close(Tensor(a).lerp(Tensor(b), 0.25), a + (b - a) * 0.25, atol=1e-6)
  check_gradient(rng, lambda x, y, z: x.lerp(y, z), lambda x, y, z: x + (y - x) * z, [a, b, w])


# ---------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("axis,keepdim,correction", [(None, False, 1), (1, True, 0), ((0, 2), False, 1)], ids=str)
def test_var_mean_std_mean(rng, axis, keepdim, correction):
  x = random_array(rng, (3, 4, 5), "float32")
  var, mean = Tensor(x).var_mean(axis, keepdim=keepdim, correction=correction)
  assert_close(var, np.var(x, axis=axis, keepdims=keepdim, ddof=correction), atol=1e-5, rtol=1e-5)
  assert_close(mean, np.mean(x, axis=axis, keepdims=keepdim), atol=1e-6, rtol=1e-5)
  std, mean = Tensor(x).std_mean(axis, keepdim=keepdim, correction=correction)
  assert_close(std, np.std(x, axis=axis, keepdims=keepdim, ddof=correction), atol=1e-5, rtol=1e-5)
  assert_close(mean, np.mean(x, axis=axis, keepdims=keepdim), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)], ids=str)
def test_any_all(rng, axis):
  x = random_array(rng, (4, 3), "bool")
  x[0] = True
  assert_equal(Tensor(x).any(axis), np.any(x, axis=axis), dtype=dtypes.bool)
  assert_equal(Tensor(x).all(axis), np.all(x, axis=axis), dtype=dtypes.bool)
  f = random_array(rng, (4, 3), "int32", low=0, high=2).astype(np.float32)
  assert_equal(Tensor(f).any(axis, keepdim=True), np.any(f, axis=axis, keepdims=True))
  assert_equal(Tensor(f).all(axis, keepdim=True), np.all(f, axis=axis, keepdims=True))
  assert_equal(Tensor.zeros(0, 3).any(), np.bool_(False))
  assert_equal(Tensor.zeros(0, 3).all(), np.bool_(True))


# ---------------------------------------------------------------------------- correctness details
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_argmin_argmax_of_int_extremes(dtype):
  info = np.iinfo(dtype)
  x = np.array([[3, info.min, 5, info.min], [info.max, 0, info.max, 1]], dtype=dtype)
  assert_equal(Tensor(x).argmin(1), np.argmin(x, 1).astype(np.int32), dtype=dtypes.int32)
  assert_equal(Tensor(x).argmax(1), np.argmax(x, 1).astype(np.int32))
  assert_equal(Tensor(x).argmin(), np.int32(np.argmin(x)))


def test_arange_past_int32():
  big = 2 ** 31
  t = Tensor.arange(big - 2, big + 3)
  assert_equal(t, np.arange(big - 2, big + 3, dtype=np.int64), dtype=dtypes.int64)
  assert_equal(Tensor.arange(-big - 1, -big + 2), np.arange(-big - 1, -big + 2, dtype=np.int64), dtype=dtypes.int64)
  assert Tensor.arange(big - 3, big).dtype == dtypes.int32  # the values, not the bound, decide
  assert Tensor.arange(5, 0, -2).dtype == dtypes.int32 and Tensor.arange(0.0, 2).dtype == dtypes.float32
  with pytest.raises(OverflowError):
    Tensor.arange(250, 260, dtype=dtypes.uint8)


def test_dtype_limits():
  assert (dtypes.int32.max, dtypes.int32.min) == (2 ** 31 - 1, -2 ** 31)
  assert (dtypes.uint8.max, dtypes.uint8.min, dtypes.int8.min) == (255, 0, -128)
  assert (dtypes.uint64.max, dtypes.int64.min) == (2 ** 64 - 1, -2 ** 63)
  assert dtypes.float32.max == math.inf and dtypes.float16.min == -math.inf
  assert dtypes.bool.max is True and dtypes.bool.min is False
  assert dtypes.int16.bitsize == 16 and dtypes.bool.bitsize == 1
  assert dtypes.finfo(dtypes.float16) == (5, 10) and dtypes.finfo(dtypes.bfloat16) == (8, 7)
  assert dtypes.float32 in dtypes.floats and dtypes.uint16 in dtypes.uints and dtypes.int8 in dtypes.sints
  assert set(dtypes.ints) == set(dtypes.uints) | set(dtypes.sints) and dtypes.bool in dtypes.all
  with pytest.raises(ValueError):
    dtypes.finfo(dtypes.int32)


@pytest.mark.parametrize("mistake", [
  lambda: Tensor.ones(3, 2).flip((0, 0)),
  lambda: Tensor.ones(3, 2).flip(1, -1),
  lambda: Tensor.ones(6).reshape(-1, -1),
  lambda: Tensor.ones(6).reshape(4, 2),
  lambda: Tensor.ones(2, 3).permute(0, 0),
  lambda: Tensor.ones(2, 3) @ Tensor.ones(2, 3),
  lambda: Tensor.ones(3).pad((1, 1, 1, 1)),
  lambda: Tensor.ones(2, 3).pad(((1, 1), (1, 1), (1, 1))),
  lambda: Tensor.ones(2, 3).expand(4, 3),
  lambda: Tensor.ones(3) + Tensor.ones(4),
], ids=["flip_twice", "flip_same_dim", "two_minus_ones", "reshape_size", "permute", "matmul", "flat_pad_dims",
        "pad_dims", "expand", "broadcast"])
def test_shape_mistakes_are_value_and_runtime_errors(mistake):
  with pytest.raises(ValueError) as excinfo:
    mistake()
  assert isinstance(excinfo.value, RuntimeError), type(excinfo.value).__mro__


def test_invalid_calls_raise():
  with pytest.raises(RuntimeError):  # tinygrad: "base needs to be float"
    Tensor([1, 2, 3]) ** -1
  with pytest.raises(RuntimeError):
    Tensor([1, 2], dtype=dtypes.int8).pow(-2)
  assert_equal(Tensor([1, 2, 3]) ** 2, np.array([1, 4, 9], np.int32), dtype=dtypes.int32)
  assert_close(Tensor([1, 2, 4]) ** -1.0, np.array([1.0, 0.5, 0.25], np.float32), dtype=dtypes.float32)
  with pytest.raises(ValueError):
    Tensor.linspace(0, 1, 5, dtype=dtypes.bool)
  with pytest.raises(RuntimeError):
    Tensor([1.0]).clip()
  with pytest.raises(RuntimeError):
    Tensor([1.0]).div(2, rounding_mode="up")
  with pytest.raises(RuntimeError):  # tinygrad raises RuntimeError, torch TypeError: both work
    Tensor([0.5]).one_hot(3)
  with pytest.raises(TypeError):
    Tensor([0.5]).one_hot(3)


def test_log10_fmod_eq_ne(rng):
  x = random_array(rng, (3, 4), "float32", low=0.01, high=100)
  assert_close(Tensor(x).log10(), np.log10(x), atol=1e-6, rtol=1e-6)
  a, b = random_array(rng, (3, 4), "float32") * 10, random_array(rng, (4,), "float32", low=0.5, high=3)
  b[1] = -b[1]
  assert_close(Tensor(a).fmod(Tensor(b)), np.fmod(a, b), atol=1e-5, rtol=1e-5)
  ai, bi = random_array(rng, (3, 4), "int32") * 5, np.array([3, -4, 7, -2], np.int32)
  assert_equal(Tensor(ai).fmod(Tensor(bi)), np.fmod(ai, bi), dtype=dtypes.int32)
  assert_equal(Tensor(ai).eq(Tensor(bi)), ai == bi, dtype=dtypes.bool)
  assert_equal(Tensor(ai).ne(3), ai != 3, dtype=dtypes.bool)
  assert_equal(Tensor(ai).short(), ai.astype(np.int16), dtype=dtypes.int16)
