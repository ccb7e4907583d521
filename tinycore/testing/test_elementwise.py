"""Elementwise ops against numpy: unary math, binary arithmetic, comparisons, where, pow, rounding, integer floor
division and modulo, bitwise ops and shifts, broadcasting, Python scalars on either side, and zero-size tensors.

Python scalars in these tests are fixed constants (they become kernel constants: random ones would recompile
every run); the tensors hold fresh random data."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import (assert_close, assert_equal, nonzero_array, np_dtype, random_array,
                                      skip_unless_dtype)

SHAPES = [(), (33, 17), (2, 3, 5)]
TRANSCENDENTAL_TOL = {"atol": 1e-5, "rtol": 1e-4}


def _name(value) -> str: return getattr(value, "name", str(value))


def _domain(rng, shape, domain: str) -> np.ndarray:
  """float32 inputs inside an op's domain."""
  if domain == "normal": return random_array(rng, shape, "float32")
  if domain == "positive": return random_array(rng, shape, "float32", 0.1, 10.0)
  if domain == "small": return random_array(rng, shape, "float32", -5.0, 5.0)
  if domain == "wide": return random_array(rng, shape, "float32", -10.0, 10.0)
  if domain == "angle": return random_array(rng, shape, "float32", -6.3, 6.3)
  if domain == "away_from_zero":
    magnitude = random_array(rng, shape, "float32", 0.5, 5.0)
    return np.where(random_array(rng, shape, "bool"), magnitude, -magnitude).astype(np.float32)
  raise ValueError(domain)


def _sigmoid(x): return 1.0 / (1.0 + np.exp(-x))


# name: (tinycore op, numpy reference (computed in float64), input domain, exact)
UNARY = {
  "neg": (lambda t: -t, np.negative, "normal", True),
  "exp": (lambda t: t.exp(), np.exp, "small", False),
  "log": (lambda t: t.log(), np.log, "positive", False),
  "exp2": (lambda t: t.exp2(), np.exp2, "small", False),
  "log2": (lambda t: t.log2(), np.log2, "positive", False),
  "sqrt": (lambda t: t.sqrt(), np.sqrt, "positive", False),
  "rsqrt": (lambda t: t.rsqrt(), lambda x: 1.0 / np.sqrt(x), "positive", False),
  "sin": (lambda t: t.sin(), np.sin, "angle", False),
  "cos": (lambda t: t.cos(), np.cos, "angle", False),
  "tanh": (lambda t: t.tanh(), np.tanh, "small", False),
  "sigmoid": (lambda t: t.sigmoid(), _sigmoid, "wide", False),
  "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0), "normal", True),
  "abs": (lambda t: t.abs(), np.abs, "normal", True),
  "reciprocal": (lambda t: t.reciprocal(), np.reciprocal, "away_from_zero", False),
  "floor": (lambda t: t.floor(), np.floor, "wide", True),
  "ceil": (lambda t: t.ceil(), np.ceil, "wide", True),
  "round": (lambda t: t.round(), np.round, "wide", True),  # half to even, like numpy
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary_float32(rng, op, shape):
  fn, reference, domain, exact = UNARY[op]
  x = _domain(rng, shape, domain)
  expected = reference(x.astype(np.float64)).astype(np.float32)
  if exact: assert_equal(fn(Tensor(x)), expected, dtype=dtypes.float32)
  else: assert_close(fn(Tensor(x)), expected, dtype=dtypes.float32, **TRANSCENDENTAL_TOL)


def test_round_half_to_even(rng):
  halves = np.array([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.4, -0.6, 2.51, -2.49], dtype=np.float32)
  assert_equal(Tensor(halves).round(), np.array([-4, -2, -2, -0, 0, 2, 2, 4, 0, -1, 3, -2], dtype=np.float32))
  random_halves = (random_array(rng, (33,), "int32", -50, 50) + 0.5).astype(np.float32)
  assert_equal(Tensor(random_halves).round(), np.round(random_halves), dtype=dtypes.float32)


# name: (tinycore op, numpy op, domain of a, domain of b)
BINARY = {
  "add": (lambda a, b: a + b, np.add, "normal", "normal"),
  "sub": (lambda a, b: a - b, np.subtract, "normal", "normal"),
  "mul": (lambda a, b: a * b, np.multiply, "normal", "normal"),
  "div": (lambda a, b: a / b, np.divide, "normal", "away_from_zero"),
  "maximum": (lambda a, b: a.maximum(b), np.maximum, "normal", "normal"),
  "minimum": (lambda a, b: a.minimum(b), np.minimum, "normal", "normal"),
  "pow": (lambda a, b: a ** b, np.power, "positive", "small"),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_float32(rng, op, shape):
  fn, reference, domain_a, domain_b = BINARY[op]
  a, b = _domain(rng, shape, domain_a), _domain(rng, shape, domain_b)
  if op == "pow": a = random_array(rng, shape, "float32", 0.5, 3.0)
  expected = reference(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
  tolerance = TRANSCENDENTAL_TOL if op == "pow" else {"atol": 1e-6, "rtol": 1e-6}
  assert_close(fn(Tensor(a), Tensor(b)), expected, dtype=dtypes.float32, **tolerance)


COMPARISONS = {
  "lt": (lambda a, b: a < b, np.less), "le": (lambda a, b: a <= b, np.less_equal),
  "gt": (lambda a, b: a > b, np.greater), "ge": (lambda a, b: a >= b, np.greater_equal),
  "eq": (lambda a, b: a == b, np.equal), "ne": (lambda a, b: a != b, np.not_equal),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", list(COMPARISONS))
def test_comparison_returns_bool(rng, op, shape):
  fn, reference = COMPARISONS[op]
  # integral values in a small range, so that equal pairs occur
  a = random_array(rng, shape, "int32", -3, 4).astype(np.float32)
  b = random_array(rng, shape, "int32", -3, 4).astype(np.float32)
  assert_equal(fn(Tensor(a), Tensor(b)), reference(a, b), dtype=dtypes.bool)


@pytest.mark.parametrize("op", list(COMPARISONS))
def test_comparison_int32_and_scalar(rng, op):
  fn, reference = COMPARISONS[op]
  a, b = random_array(rng, (7, 5), "int32", -3, 4), random_array(rng, (7, 5), "int32", -3, 4)
  assert_equal(fn(Tensor(a), Tensor(b)), reference(a, b), dtype=dtypes.bool)
  assert_equal(fn(Tensor(a), 1), reference(a, 1), dtype=dtypes.bool)
  assert_equal(fn(Tensor(a), 0.5), reference(a, 0.5), dtype=dtypes.bool)


BROADCAST_PAIRS = [((3, 1), (1, 4)), ((5,), (2, 5)), ((2, 1, 5), (3, 1)), ((), (4, 3)), ((4, 1, 6), (4, 5, 1))]


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
def test_broadcasting(rng, shapes):
  shape_a, shape_b = shapes
  a, b = random_array(rng, shape_a, "float32"), random_array(rng, shape_b, "float32")
  ta, tb = Tensor(a), Tensor(b)
  assert_close(ta + tb, a + b, dtype=dtypes.float32)
  assert_close(tb * ta, b * a, dtype=dtypes.float32)
  assert_equal(ta < tb, a < b, dtype=dtypes.bool)
  assert_equal(ta.maximum(tb), np.maximum(a, b), dtype=dtypes.float32)


# name: (tinycore expression, numpy expression, input domain)
SCALAR_FLOAT32 = {
  "2+t": (lambda t: 2 + t, lambda x: 2 + x, "normal"),
  "t-1.5": (lambda t: t - 1.5, lambda x: x - 1.5, "normal"),
  "1-t": (lambda t: 1 - t, lambda x: 1 - x, "normal"),
  "3/t": (lambda t: 3 / t, lambda x: 3 / x, "away_from_zero"),
  "t/4": (lambda t: t / 4, lambda x: x / 4, "normal"),
  "t*2": (lambda t: t * 2, lambda x: x * 2, "normal"),
  "-0.5*t": (lambda t: -0.5 * t, lambda x: -0.5 * x, "normal"),
  "t.maximum(0.25)": (lambda t: t.maximum(0.25), lambda x: np.maximum(x, 0.25), "normal"),
}


@pytest.mark.parametrize("expr", list(SCALAR_FLOAT32))
def test_python_scalar_with_float32(rng, expr):
  fn, reference, domain = SCALAR_FLOAT32[expr]
  x = _domain(rng, (7, 5), domain)
  assert_close(fn(Tensor(x)), reference(x.astype(np.float64)).astype(np.float32), dtype=dtypes.float32)


def test_python_scalar_dtype_rules(rng):
  x = random_array(rng, (7, 5), "int32", -20, 20)
  t = Tensor(x)
  assert_equal(t + 1, x + 1, dtype=dtypes.int32)            # int tensor + python int stays int32
  assert_equal(2 - t, 2 - x, dtype=dtypes.int32)
  assert_equal(t * 3, x * 3, dtype=dtypes.int32)
  assert_close(t + 1.5, x + np.float32(1.5), dtype=dtypes.float32)  # + python float gives float32
  assert_close(t / 2, x / np.float32(2), dtype=dtypes.float32)       # / on ints gives float32
  nonzero = nonzero_array(rng, (7, 5), "int32")
  assert_close(3 / Tensor(nonzero), (3 / nonzero).astype(np.float32), dtype=dtypes.float32)
  assert_close(Tensor(x) / Tensor(nonzero), (x / nonzero).astype(np.float32), dtype=dtypes.float32)


def test_python_scalar_keeps_float16(rng):
  skip_unless_dtype(dtypes.float16)
  x = random_array(rng, (7, 5), "float16")
  assert_close(Tensor(x) + 3, x + np.float16(3), dtype=dtypes.float16)    # python int with float16 stays float16
  assert_close(Tensor(x) * 2.5, x * np.float16(2.5), dtype=dtypes.float16)  # so does a python float
  assert_close(1 - Tensor(x), np.float16(1) - x, dtype=dtypes.float16)


def test_pow_scalar_exponents_and_bases(rng):
  x = random_array(rng, (33, 17), "float32", 0.5, 3.0)
  signed = random_array(rng, (33, 17), "float32")
  x64 = x.astype(np.float64)
  assert_close(Tensor(signed) ** 2, (signed.astype(np.float64) ** 2).astype(np.float32), **TRANSCENDENTAL_TOL)
  assert_close(Tensor(x) ** 0.5, np.sqrt(x64).astype(np.float32), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)
  assert_close(Tensor(x) ** -1, (1 / x64).astype(np.float32), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)
  assert_close(Tensor(x) ** 3, (x64 ** 3).astype(np.float32), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)
  assert_close(Tensor(x) ** 1.7, (x64 ** 1.7).astype(np.float32), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)
  exponent = random_array(rng, (33, 17), "float32", -3.0, 3.0)
  e64 = exponent.astype(np.float64)
  assert_close(2 ** Tensor(exponent), (2.0 ** e64).astype(np.float32), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)
  assert_close(0.5 ** Tensor(exponent), (0.5 ** e64).astype(np.float32), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)


def test_pow_int_tensor_square(rng):
  x = random_array(rng, (7, 5), "int32", -30, 30)
  assert_close(Tensor(x) ** 2, x.astype(np.int64) ** 2)


def test_where(rng):
  cond = random_array(rng, (7, 5), "bool")
  a, b = random_array(rng, (7, 5), "float32"), random_array(rng, (7, 5), "float32")
  tc, ta, tb = Tensor(cond), Tensor(a), Tensor(b)
  assert_equal(tc.where(ta, tb), np.where(cond, a, b), dtype=dtypes.float32)
  assert_equal(Tensor.where(tc, ta, tb), np.where(cond, a, b), dtype=dtypes.float32)
  assert_equal(tc.where(ta, 0.0), np.where(cond, a, np.float32(0)), dtype=dtypes.float32)
  assert_equal(tc.where(1.5, tb), np.where(cond, np.float32(1.5), b), dtype=dtypes.float32)
  assert_equal((ta > 0).where(ta, tb), np.where(a > 0, a, b), dtype=dtypes.float32)


def test_where_broadcasts(rng):
  cond = random_array(rng, (3, 1), "bool")
  a, b = random_array(rng, (1, 4), "float32"), random_array(rng, (2, 1, 1), "float32")
  assert_equal(Tensor(cond).where(Tensor(a), Tensor(b)), np.where(cond, a, b), dtype=dtypes.float32)
  ints = random_array(rng, (3, 4), "int32", -100, 100)
  assert_equal(Tensor(cond).where(Tensor(ints), -1), np.where(cond, ints, -1).astype(np.int32), dtype=dtypes.int32)


# --- integer division and modulo: Python's floor semantics (the sign of % follows the divisor)

SIGNED = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64]
UNSIGNED = [dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]


@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED, ids=_name)
def test_floordiv_and_mod_int_tensors(rng, dtype):
  skip_unless_dtype(dtype)
  npdt = np_dtype(dtype)
  if npdt.kind == "i":
    a = random_array(rng, (33, 17), dtype, -50, 51)
    b = nonzero_array(rng, (33, 17), dtype, -9, 10)
  else:
    a, b = random_array(rng, (33, 17), dtype, 0, 200), nonzero_array(rng, (33, 17), dtype, 1, 16)
  assert_equal(Tensor(a) // Tensor(b), a // b, dtype=dtype)
  assert_equal(Tensor(a) % Tensor(b), a % b, dtype=dtype)


@pytest.mark.parametrize("divisor", [3, -3, 1, 7])
def test_floordiv_and_mod_int32_by_scalar(rng, divisor):
  a = random_array(rng, (7, 5), "int32", -50, 51)
  assert_equal(Tensor(a) // divisor, a // np.int32(divisor), dtype=dtypes.int32)
  assert_equal(Tensor(a) % divisor, a % np.int32(divisor), dtype=dtypes.int32)


def test_floordiv_and_mod_scalar_by_int32(rng):
  b = nonzero_array(rng, (7, 5), "int32", -9, 10)
  assert_equal(7 // Tensor(b), np.int32(7) // b, dtype=dtypes.int32)
  assert_equal(-7 // Tensor(b), np.int32(-7) // b, dtype=dtypes.int32)
  assert_equal(7 % Tensor(b), np.int32(7) % b, dtype=dtypes.int32)
  assert_equal(-7 % Tensor(b), np.int32(-7) % b, dtype=dtypes.int32)


@pytest.mark.parametrize("dtype", UNSIGNED[:3], ids=_name)
def test_floordiv_and_mod_of_a_wrapped_unsigned_difference(dtype):
  # a - b wraps around for unsigned types; // and % apply to the wrapped value, never distributed over a and b
  skip_unless_dtype(dtype)
  npdt = np_dtype(dtype)
  a, b = np.array([100, 5, 60, 0], dtype=npdt), np.array([200, 7, 3, 1], dtype=npdt)
  for d in (3, 5, 7):
    assert_equal((Tensor(a) - Tensor(b)) // d, (a - b) // npdt.type(d), dtype=dtype)
    assert_equal((Tensor(a) - Tensor(b)) % d, (a - b) % npdt.type(d), dtype=dtype)
  assert_equal((Tensor(a) + Tensor(a) + 200) // 3, (a + a + npdt.type(200)) // npdt.type(3), dtype=dtype)


def test_floordiv_mod_known_values():
  a = Tensor([7, -7, 7, -7, 0, 6, -6], dtype=dtypes.int32)
  b = Tensor([2, 2, -2, -2, 3, -3, 4], dtype=dtypes.int32)
  assert_equal(a // b, np.array([3, -4, -4, 3, 0, -2, -2], dtype=np.int32))
  assert_equal(a % b, np.array([1, 1, -1, -1, 0, 0, 2], dtype=np.int32))


# --- bitwise ops and shifts

BITWISE_DTYPES = [dtypes.bool, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64]


@pytest.mark.parametrize("dtype", BITWISE_DTYPES, ids=_name)
def test_bitwise(rng, dtype):
  skip_unless_dtype(dtype)
  npdt = np_dtype(dtype)
  if npdt.kind == "b": a, b = random_array(rng, (7, 5), dtype), random_array(rng, (7, 5), dtype)
  else:
    info = np.iinfo(npdt)
    a = rng.integers(info.min, info.max, size=(7, 5), dtype=npdt, endpoint=True)
    b = rng.integers(info.min, info.max, size=(7, 5), dtype=npdt, endpoint=True)
  ta, tb = Tensor(a), Tensor(b)
  assert_equal(ta & tb, a & b, dtype=dtype)
  assert_equal(ta | tb, a | b, dtype=dtype)
  assert_equal(ta ^ tb, a ^ b, dtype=dtype)
  assert_equal(~ta, ~a, dtype=dtype)


def test_bitwise_with_python_scalars(rng):
  a = random_array(rng, (7, 5), "int32", -1000, 1000)
  assert_equal(Tensor(a) & 0xF, a & np.int32(0xF), dtype=dtypes.int32)
  assert_equal(Tensor(a) | 1, a | np.int32(1), dtype=dtypes.int32)
  assert_equal(Tensor(a) ^ 3, a ^ np.int32(3), dtype=dtypes.int32)
  flags = random_array(rng, (7, 5), "bool")
  assert_equal(Tensor(flags) & True, flags & True, dtype=dtypes.bool)
  assert_equal(Tensor(flags) ^ True, flags ^ True, dtype=dtypes.bool)


@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.uint32, dtypes.int32, dtypes.int64], ids=_name)
def test_shifts(rng, dtype):
  skip_unless_dtype(dtype)
  npdt = np_dtype(dtype)
  bits = npdt.itemsize * 8
  # non-negative values small enough that a << 3 stays in range
  a = rng.integers(0, 2 ** (bits - 4), size=(7, 5), dtype=npdt)
  for shift in (1, 3):
    assert_equal(Tensor(a) << shift, a << npdt.type(shift), dtype=dtype)
    assert_equal(Tensor(a) >> shift, a >> npdt.type(shift), dtype=dtype)
  assert_equal(Tensor(a) >> (bits - 5), a >> npdt.type(bits - 5), dtype=dtype)


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32], ids=_name)
def test_right_shift_negative_is_arithmetic(rng, dtype):
  skip_unless_dtype(dtype)
  a = random_array(rng, (7, 5), dtype, -100, 100)
  for shift in (1, 2):
    assert_equal(Tensor(a) >> shift, a >> np_dtype(dtype).type(shift), dtype=dtype)


# --- zero-size tensors and scalars

@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 1)], ids=str)
def test_zero_size_elementwise(rng, shape):
  a = np.zeros(shape, dtype=np.float32)
  t = Tensor(a)
  assert_equal(t + 1, a + 1, dtype=dtypes.float32)
  assert_equal(t.exp() * t, np.exp(a) * a, dtype=dtypes.float32)
  assert_equal(t < 0.5, a < 0.5, dtype=dtypes.bool)
  assert_equal(Tensor(np.zeros(shape, dtype=np.int32)) // 2, np.zeros(shape, dtype=np.int32), dtype=dtypes.int32)
  broadcast_shape = np.broadcast_shapes(shape, (1,))
  assert_equal(t + Tensor(random_array(rng, (1,), "float32")), np.zeros(broadcast_shape, np.float32))


def test_scalar_tensors(rng):
  x, y = float(np.float32(rng.uniform(0.5, 3))), float(np.float32(rng.uniform(-3, 3)))
  a, b = Tensor(x), Tensor(y)
  assert_close(a * b + a, np.float32(x) * np.float32(y) + np.float32(x), dtype=dtypes.float32)
  assert_close(a.log(), np.log(np.float32(x)), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)
  assert_equal(a < b, np.bool_(x < y), dtype=dtypes.bool)
  assert_close(3 - a.sqrt(), 3 - np.sqrt(np.float32(x)), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)


def test_fused_chain(rng):
  # a longer expression compiles into (a few) kernels and still matches numpy
  a, b = random_array(rng, (33, 17), "float32"), random_array(rng, (33, 17), "float32", 0.5, 2.0)
  ta, tb = Tensor(a), Tensor(b)
  result = ((ta * 2 - tb).relu() + (tb.log() * ta).exp().minimum(3.0)) / tb.sqrt()
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  expected = (np.maximum(a64 * 2 - b64, 0) + np.minimum(np.exp(np.log(b64) * a64), 3.0)) / np.sqrt(b64)
  assert_close(result, expected.astype(np.float32), dtype=dtypes.float32, **TRANSCENDENTAL_TOL)
