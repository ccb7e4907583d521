"""Gradients against central differences of the same function in numpy (float64) on random inputs: elementwise,
reductions (max/min ties split equally), movement (getitem, pad, flip, cat), matmul, softmax family, where, cast.

Each case computes `loss = sum(f(*inputs) * w)` with a random weight w (so no gradient cancels by symmetry) and
compares `loss.gradient(*inputs)` (one realize of a lazy backward graph on the device) with numpy's differences."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, check_gradient, random_array, skip_unless_dtype


def _sigmoid(x): return 1 / (1 + np.exp(-x))
def _gelu(x): return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _softmax(x, axis=-1):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


def _logsumexp(x, axis):
  m = x.max(axis, keepdims=True)
  return (np.log(np.exp(x - m).sum(axis, keepdims=True)) + m).squeeze(axis)


# name: (tinycore fn, numpy fn, (low, high) of the inputs or None for normal(0, 1))
UNARY = {
  "neg": (lambda x: -x, lambda x: -x, None),
  "exp": (lambda x: x.exp(), np.exp, None),
  "exp2": (lambda x: x.exp2(), np.exp2, None),
  "log": (lambda x: x.log(), np.log, (0.5, 3.0)),
  "log2": (lambda x: x.log2(), np.log2, (0.5, 3.0)),
  "sqrt": (lambda x: x.sqrt(), np.sqrt, (0.5, 3.0)),
  "rsqrt": (lambda x: x.rsqrt(), lambda x: 1 / np.sqrt(x), (0.5, 3.0)),
  "sin": (lambda x: x.sin(), np.sin, None),
  "cos": (lambda x: x.cos(), np.cos, None),
  "tan": (lambda x: x.tan(), np.tan, (-1.0, 1.0)),
  "reciprocal": (lambda x: x.reciprocal(), lambda x: 1 / x, (0.5, 3.0)),
  "relu": (lambda x: x.relu(), lambda x: np.maximum(x, 0), None),
  "sigmoid": (lambda x: x.sigmoid(), _sigmoid, None),
  "tanh": (lambda x: x.tanh(), np.tanh, None),
  "square": (lambda x: x.square(), np.square, None),
  "abs": (lambda x: x.abs(), np.abs, None),
  "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: np.where(x < 0, 0.1 * x, x), None),
  "softplus": (lambda x: x.softplus(), lambda x: np.log1p(np.exp(x)), None),
  "gelu": (lambda x: x.gelu(), _gelu, None),
  "silu": (lambda x: x.silu(), lambda x: x * _sigmoid(x), None),
  "elu": (lambda x: x.elu(), lambda x: np.where(x > 0, x, np.exp(x) - 1), None),
  "pow_const": (lambda x: x ** 3, lambda x: x ** 3, None),
  "sqrt_pow": (lambda x: x ** 0.5, np.sqrt, (0.5, 3.0)),
  "clip": (lambda x: x.clip(-0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5), None),
  "floor": (lambda x: x.floor() + x, lambda x: np.floor(x) + x, None),
  "mul_const": (lambda x: 3 * x - x / 4 + 1, lambda x: 3 * x - x / 4 + 1, None),
}


@pytest.mark.parametrize("name", UNARY)
def test_unary_gradient(rng, name):
  tc_fn, np_fn, bounds = UNARY[name]
  low, high = bounds if bounds else (None, None)
  check_gradient(rng, tc_fn, np_fn, [random_array(rng, (3, 5), "float32", low, high)])


BINARY = {
  "add": (lambda a, b: a + b, lambda a, b: a + b),
  "sub": (lambda a, b: a - b, lambda a, b: a - b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b),
  "div": (lambda a, b: a / (b.abs() + 0.5), lambda a, b: a / (np.abs(b) + 0.5)),
  "maximum": (lambda a, b: a.maximum(b), np.maximum),
  "minimum": (lambda a, b: a.minimum(b), np.minimum),
  "pow": (lambda a, b: (a.abs() + 0.5) ** b, lambda a, b: (np.abs(a) + 0.5) ** b),
  "where": (lambda a, b: (a > b).where(a * 2, b * b), lambda a, b: np.where(a > b, a * 2, b * b)),
  "lerp": (lambda a, b: a.lerp(b, 0.25), lambda a, b: a + (b - a) * 0.25),
}


@pytest.mark.parametrize("name", BINARY)
def test_binary_gradient(rng, name):
  tc_fn, np_fn = BINARY[name]
  check_gradient(rng, tc_fn, np_fn, [random_array(rng, (3, 4), "float32"), random_array(rng, (3, 4), "float32")])


def test_broadcast_gradient(rng):
  check_gradient(rng, lambda a, b: a * b + b, lambda a, b: a * b + b,
                 [random_array(rng, (3, 4), "float32"), random_array(rng, (1, 4), "float32")])
  check_gradient(rng, lambda a, b: a - b, lambda a, b: a - b,
                 [random_array(rng, (2, 3, 4), "float32"), random_array(rng, (3, 1), "float32")])


REDUCTIONS = {
  "sum": (lambda x: x.sum(1), lambda x: x.sum(1)),
  "sum_all": (lambda x: x.sum(), lambda x: x.sum()),
  "sum_keepdim": (lambda x: x.sum((0, 2), keepdim=True), lambda x: x.sum((0, 2), keepdims=True)),
  "mean": (lambda x: x.mean(-1), lambda x: x.mean(-1)),
  "max": (lambda x: x.max(1), lambda x: x.max(1)),
  "max_all": (lambda x: x.max(), lambda x: x.max()),
  "min": (lambda x: x.min(0), lambda x: x.min(0)),
  "prod": (lambda x: x.prod(2), lambda x: x.prod(2)),
  "var": (lambda x: x.var(1), lambda x: x.var(1, ddof=1)),
  "std": (lambda x: x.std(2), lambda x: x.std(2, ddof=1)),
  "logsumexp": (lambda x: x.logsumexp(1), lambda x: _logsumexp(x, 1)),
  "softmax": (lambda x: x.softmax(), _softmax),
  "softmax_axis0": (lambda x: x.softmax(0), lambda x: _softmax(x, 0)),
  "log_softmax": (lambda x: x.log_softmax(), lambda x: np.log(_softmax(x))),
  "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
}


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_gradient(rng, name):
  tc_fn, np_fn = REDUCTIONS[name]
  check_gradient(rng, tc_fn, np_fn, [random_array(rng, (2, 3, 4), "float32")])


def test_prod_gradient_with_zero(rng):
  x = random_array(rng, (2, 4), "float32")
  x[0, 1] = 0.0
  check_gradient(rng, lambda t: t.prod(1), lambda t: t.prod(1), [x])


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_min_ties_split_equally(reduce):
  # as tinygrad: every element equal to the max (min) gets an equal share of the gradient
  x = Tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, -1.0]]) * (1 if reduce == "max" else -1)
  out = getattr(x, reduce)(1)
  (grad,) = (out * Tensor([1.0, 3.0])).sum().gradient(x)
  assert_close(grad, np.array([[0, 0.5, 0.5, 0], [1, 1, 1, 0]], dtype=np.float32))


def test_maximum_minimum_ties_split_in_halves_clip_and_abs_do_not():
  # as tinygrad: maximum is a MAX whose tie gives each operand half, minimum is built on it; clip (clamp) passes
  # the whole gradient at a bound, and abs none at zero, as tinygrad's and torch's
  a, b = Tensor([1.0, 2.0, 3.0, -4.0]), Tensor([1.0, 5.0, 0.0, -4.0])
  for fn, want_a, want_b in ((Tensor.maximum, [0.5, 0, 1, 0.5], [0.5, 1, 0, 0.5]),
                             (Tensor.minimum, [0.5, 1, 0, 0.5], [0.5, 0, 1, 0.5])):
    grad_a, grad_b = fn(a, b).sum().gradient(a, b)
    assert_close(grad_a, np.array(want_a, dtype=np.float32))
    assert_close(grad_b, np.array(want_b, dtype=np.float32))
  x = Tensor([-1.0, 0.5, 0.2, 1.0, -3.0])
  (grad,) = x.clip(-1.0, 0.5).sum().gradient(x)
  assert_close(grad, np.array([1, 1, 1, 0, 0], dtype=np.float32))
  (grad,) = x.clip(max_=0.2).sum().gradient(x)
  assert_close(grad, np.array([1, 0, 1, 0, 1], dtype=np.float32))
  z = Tensor([0.0, -0.0, -2.0, 3.0])
  (grad,) = z.abs().sum().gradient(z)
  assert_close(grad, np.array([0, 0, -1, 1], dtype=np.float32))


MOVEMENT = {
  "reshape": (lambda x: x.reshape(4, 6), lambda x: x.reshape(4, 6)),
  "permute": (lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
  "transpose": (lambda x: x.transpose(0, 2), lambda x: x.swapaxes(0, 2)),
  "expand": (lambda x: x[:, :1].expand(2, 5, 4), lambda x: np.broadcast_to(x[:, :1], (2, 5, 4))),
  "pad": (lambda x: x.pad(((1, 0), (0, 2), (1, 1))), lambda x: np.pad(x, ((1, 0), (0, 2), (1, 1)))),
  "pad_value": (lambda x: x.pad(((0, 1), None, (2, 0)), value=3.0),
                lambda x: np.pad(x, ((0, 1), (0, 0), (2, 0)), constant_values=3.0)),
  "shrink": (lambda x: x.shrink(((0, 1), (1, 3), None)), lambda x: x[0:1, 1:3, :]),
  "flip": (lambda x: x.flip((0, 2)), lambda x: x[::-1, :, ::-1]),
  "getitem": (lambda x: x[1, ::2, 1:], lambda x: x[1, ::2, 1:]),
  "getitem_neg_step": (lambda x: x[:, ::-2, None, 2], lambda x: x[:, ::-2, None, 2]),
  "repeat": (lambda x: x.repeat(2, 1, 2), lambda x: np.tile(x, (2, 1, 2))),
  "cat": (lambda x: x.cat(x * 2, x[:, :1], dim=1), lambda x: np.concatenate([x, x * 2, x[:, :1]], axis=1)),
  "stack": (lambda x: x[0].stack(x[1], dim=1), lambda x: np.stack([x[0], x[1]], axis=1)),
  "split": (lambda x: x.split([1, 2], dim=1)[1] * 2, lambda x: x[:, 1:] * 2),
  "flatten": (lambda x: x.flatten(1), lambda x: x.reshape(2, 12)),
}


@pytest.mark.parametrize("name", MOVEMENT)
def test_movement_gradient(rng, name):
  tc_fn, np_fn = MOVEMENT[name]
  check_gradient(rng, tc_fn, np_fn, [random_array(rng, (2, 3, 4), "float32")])


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)), ((2, 3, 4), (2, 4, 5))],
                         ids=lambda s: str(s).replace(" ", ""))
def test_matmul_gradient(rng, shapes):
  xs = [random_array(rng, shapes[0], "float32"), random_array(rng, shapes[1], "float32")]
  check_gradient(rng, lambda a, b: a @ b, lambda a, b: a @ b, xs)


def test_cast_gradient(rng):
  skip_unless_dtype(dtypes.float64)
  check_gradient(rng, lambda x: (x.cast(dtypes.float64) * 3).cast(dtypes.float32), lambda x: x * 3,
                 [random_array(rng, (3, 4), "float32")])


def test_mlp_gradient(rng):
  """A small two-layer network with a cross-entropy style loss: every parameter's gradient."""
  xs = [random_array(rng, (5, 4), "float32"), random_array(rng, (4, 6), "float32"),
        random_array(rng, (6,), "float32"), random_array(rng, (6, 3), "float32")]

  def tc_fn(x, w1, b1, w2): return ((x @ w1 + b1).relu() @ w2).log_softmax()
  def np_fn(x, w1, b1, w2): return np.log(_softmax(np.maximum(x @ w1 + b1, 0) @ w2))
  check_gradient(rng, tc_fn, np_fn, xs)


def test_backward_fills_grad_and_accumulates(rng):
  a, b = random_array(rng, (3,), "float32"), random_array(rng, (3,), "float32")
  x, y = Tensor(a, requires_grad=True), Tensor(b)
  (x * y).sum().backward()
  assert_close(x.grad, b)
  assert_close(y.grad, a)
  (x * y).sum().backward()  # a second backward adds to .grad
  assert_close(x.grad, 2 * b)


def test_detach_stops_gradient(rng):
  a = random_array(rng, (4,), "float32")
  x = Tensor(a)
  (grad,) = (x * x.detach()).sum().gradient(x)
  assert_close(grad, a)


def test_gradient_of_unrelated_target_is_zero(rng):
  x, y = Tensor(random_array(rng, (2, 2), "float32")), Tensor(random_array(rng, (3,), "float32"))
  assert_close(x.sum().gradient(y)[0], np.zeros(3, dtype=np.float32))


def test_gradient_errors():
  x = Tensor([1.0, 2.0])
  with pytest.raises(RuntimeError, match="shape"):
    (x * 2).gradient(x)
  with pytest.raises(RuntimeError, match="float"):
    Tensor([1, 2]).sum().gradient(Tensor([1, 2]))


def test_saturated_activations_have_zero_gradient_not_nan():
  # exp(-x) overflows for x << 0: a gradient built on it is inf * 0 = NaN there; torch gives 0 (as the math does)
  x = Tensor(np.array([-400.0, -300.0, -90.0, 90.0, 300.0, 400.0], np.float32))
  for name, fn in (("sigmoid", Tensor.sigmoid), ("tanh", Tensor.tanh), ("silu", Tensor.silu),
                   ("gelu", Tensor.gelu), ("quick_gelu", Tensor.quick_gelu)):
    (grad,) = fn(x).sum().gradient(x)
    got = grad.numpy()
    assert np.isfinite(got).all(), f"{name}: {got}"
    want_slope = {"silu": [0, 0, 0, 1, 1, 1], "gelu": [0, 0, 0, 1, 1, 1], "quick_gelu": [0, 0, 0, 1, 1, 1]}
    assert_close(got, np.array(want_slope.get(name, [0] * 6), np.float32), atol=1e-6)
  s = np.array([-3.0, -0.5, -0.0, 0.0, 0.5, 3.0], np.float32)
  t = Tensor(s)
  (grad,) = t.sigmoid().sum().gradient(t)
  assert_close(grad.numpy(), (_sigmoid(s) * (1 - _sigmoid(s))).astype(np.float32), atol=1e-7)


def test_abs_gradient_is_sign_with_zero_at_zero():
  # torch's and tinygrad's: d|x|/dx = sign(x), 0 at +-0; |-0.0| is +0.0 (numpy)
  values = np.array([-2.0, -0.0, 0.0, 3.0, np.inf, -np.inf], np.float32)
  x = Tensor(values)
  out = x.abs().numpy()
  assert_close(out, np.abs(values))
  assert not np.signbit(out).any()
  (grad,) = x.abs().sum().gradient(x)
  assert_close(grad.numpy(), np.array([-1, 0, 0, 1, 1, -1], np.float32))


def test_acosh_gradient_below_one_is_torchs():
  # torch differentiates acosh's formula everywhere: 1/sqrt(x^2 - 1), finite below -1 though the value is NaN
  values = np.array([-300.0, -2.0, 1.5, 2.0, 300.0], np.float32)
  x = Tensor(values)
  assert np.isnan(x.acosh().numpy()[:2]).all()
  (grad,) = x.acosh().sum().gradient(x)
  assert_close(grad.numpy(), (1 / np.sqrt(values.astype(np.float64) ** 2 - 1)).astype(np.float32), rtol=1e-5)
