"""Inputs that ordinary random data never hits: inf, NaN and -0.0 through elementwise ops and reductions; matmul
and reduce sizes that leave every register-tile remainder (sizes that are not multiples of 2, 4 or 8); and casts to
float16 and bfloat16 checked bit for bit against round-to-nearest-even (ties included).

Exact ops compare bit patterns (so -0.0 is not 0.0); NaN compares as "is NaN" (payloads are not specified)."""
from fractions import Fraction
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, assert_equal, random_array, skip_unless_dtype

# the numpy references overflow and make NaN on purpose
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")

# (no subnormals: devices that flush them to zero are still IEEE enough for this suite)
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 2.5, -0.5, 3e38, -3e38, 1e-30], np.float32)


def special_pair() -> tuple[np.ndarray, np.ndarray]:
  """Every special value against every other (both operand orders)."""
  a, b = np.meshgrid(SPECIAL, SPECIAL, indexing="ij")
  return np.ascontiguousarray(a), np.ascontiguousarray(b)


def assert_same_floats(actual: np.ndarray, expected: np.ndarray, exact: bool, what: str = "",
                       atol: float = 1e-37) -> None:
  """NaN exactly where numpy has NaN; elsewhere the same bits (exact) or close values with the same infinities and
  zero signs (`atol`: the absolute slack, for sums whose terms cancel)."""
  assert actual.dtype == expected.dtype and actual.shape == expected.shape, f"{what}: {actual.dtype}{actual.shape}"
  nan = np.isnan(expected)
  np.testing.assert_array_equal(np.isnan(actual), nan, err_msg=f"{what}: NaN positions")
  a, e = actual[~nan], expected[~nan]
  if exact:
    np.testing.assert_array_equal(a.view(f"u{a.dtype.itemsize}"), e.view(f"u{e.dtype.itemsize}"), err_msg=what)
    return
  np.testing.assert_array_equal(np.isinf(a) & (a > 0), np.isinf(e) & (e > 0), err_msg=f"{what}: +inf")
  np.testing.assert_array_equal(np.isinf(a) & (a < 0), np.isinf(e) & (e < 0), err_msg=f"{what}: -inf")
  zero = (a == 0) & (e == 0)
  np.testing.assert_array_equal(np.signbit(a[zero]), np.signbit(e[zero]), err_msg=f"{what}: signed zeros")
  finite = np.isfinite(e)
  np.testing.assert_allclose(a[finite], e[finite], rtol=1e-5, atol=atol, err_msg=what)


# ---------------------------------------------------------------------------- elementwise
# name: (tinycore op, numpy op, exact)
UNARY_SPECIAL = {
  "neg": (lambda t: -t, np.negative, True),
  "abs": (lambda t: t.abs(), np.abs, True),
  "relu": (lambda t: t.relu(), lambda x: np.maximum(x, np.float32(0)), True),
  "sign": (lambda t: t.sign(), np.sign, True),
  "trunc": (lambda t: t.trunc(), np.trunc, True),
  "floor": (lambda t: t.floor(), np.floor, True),
  "ceil": (lambda t: t.ceil(), np.ceil, True),
  "square": (lambda t: t * t, np.square, True),
  "plus_zero": (lambda t: t + 0, lambda x: x + np.float32(0), True),
  "minus_zero": (lambda t: t - 0, lambda x: x - np.float32(0), True),
  "times_one": (lambda t: t * 1, lambda x: x * np.float32(1), True),
  "times_zero": (lambda t: t * 0, lambda x: x * np.float32(0), True),
  "clip": (lambda t: t.clip(-1, 2), lambda x: np.clip(x, np.float32(-1), np.float32(2)), True),
  "isnan": (lambda t: t.isnan(), np.isnan, True),
  "isinf": (lambda t: t.isinf(), np.isinf, True),
  "sqrt": (lambda t: t.sqrt(), np.sqrt, True),
  "exp": (lambda t: t.exp(), np.exp, False),
  "log": (lambda t: t.log(), np.log, False),
  "sin": (lambda t: t.sin(), np.sin, False),
  "reciprocal": (lambda t: t.reciprocal(), np.reciprocal, False),
}


@pytest.mark.parametrize("op", list(UNARY_SPECIAL))
def test_unary_special_values(op):
  fn, reference, exact = UNARY_SPECIAL[op]
  x = SPECIAL
  with np.errstate(all="ignore"): expected = np.asarray(reference(x))
  actual = fn(Tensor(x)).numpy()
  if expected.dtype == bool: np.testing.assert_array_equal(actual, expected, err_msg=op)
  else: assert_same_floats(actual, expected.astype(np.float32), exact, op)


BINARY_SPECIAL = {
  "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
  "mul": (lambda a, b: a * b, np.multiply), "div": (lambda a, b: a / b, np.divide),
  "maximum": (lambda a, b: a.maximum(b), np.maximum), "minimum": (lambda a, b: a.minimum(b), np.minimum),
  "lt": (lambda a, b: a < b, np.less), "eq": (lambda a, b: a == b, np.equal), "ne": (lambda a, b: a != b, np.not_equal),
  # false where either side is NaN (they were "not greater", true for NaN)
  "le": (lambda a, b: a <= b, np.less_equal), "ge": (lambda a, b: a >= b, np.greater_equal),
  "le_scalar": (lambda a, b: a <= 1.0, lambda a, b: a <= 1.0),
  "ge_scalar": (lambda a, b: 1.0 >= a, lambda a, b: 1.0 >= a),
  "where": (lambda a, b: (a > 0).where(a, b), lambda a, b: np.where(a > 0, a, b)),
}


@pytest.mark.parametrize("op", list(BINARY_SPECIAL))
def test_binary_special_values(op):
  fn, reference = BINARY_SPECIAL[op]
  a, b = special_pair()
  with np.errstate(all="ignore"): expected = np.asarray(reference(a, b))
  actual = fn(Tensor(a), Tensor(b)).numpy()
  if expected.dtype == bool: np.testing.assert_array_equal(actual, expected, err_msg=op)
  else: assert_same_floats(actual, expected, exact=True, what=op)  # all of these are correctly rounded in IEEE


# ---------------------------------------------------------------------------- reductions
def special_matrix(rng) -> np.ndarray:
  """7x9 random values with NaN, +-inf and -0.0 dropped into some rows and columns (others stay finite)."""
  x = random_array(rng, (7, 9), "float32")
  x[1, 2], x[3, 4], x[3, 5], x[5, 0], x[6, :] = np.nan, np.inf, -np.inf, np.inf, -0.0
  x[:, 7] = -0.0
  return x


REDUCTIONS = {"sum": (Tensor.sum, np.sum), "max": (Tensor.max, np.max), "min": (Tensor.min, np.min),
              "prod": (Tensor.prod, np.prod), "mean": (Tensor.mean, np.mean)}


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("op", list(REDUCTIONS))
def test_reductions_special_values(rng, op, axis):
  fn, reference = REDUCTIONS[op]
  x = special_matrix(rng)
  with np.errstate(all="ignore"): expected = np.asarray(reference(x, axis=axis)).astype(np.float32)
  actual = fn(Tensor(x), axis=axis).numpy()
  # a sum's rounding error scales with its terms, not its result: terms that cancel leave a small, less exact result
  terms = np.abs(np.where(np.isfinite(x), x, 0)).astype(np.float64)
  atol = 1e-6 * float(terms.sum()) if op in ("sum", "mean") else 1e-37
  assert_same_floats(actual, expected, exact=False, what=f"{op} axis={axis}", atol=atol)


@pytest.mark.parametrize("length", [1, 2, 7, 64, 1000])
def test_max_min_of_only_infinities(length):
  # the identity of max is -inf, not the lowest finite float: a row of only -inf has max -inf (and min of +inf is
  # +inf); a row holding -FLT_MAX next to -inf keeps -FLT_MAX, and -inf with NaN is NaN
  lowest = np.finfo(np.float32).min
  rows = np.full((4, length), -np.inf, np.float32)
  rows[1, length // 2], rows[2, -1] = lowest, np.nan
  rows[3] = np.inf
  assert_same_floats(Tensor(rows).max(1).numpy(), rows.max(1), exact=True, what="max of -inf rows")
  assert_same_floats(Tensor(-rows).min(1).numpy(), (-rows).min(1), exact=True, what="min of +inf rows")
  assert_same_floats(Tensor(rows[0]).max().numpy(), np.array(-np.inf, np.float32), exact=True, what="max of all -inf")


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_argmax_argmin_special_values(rng, op, axis):
  x = special_matrix(rng)
  assert_equal(getattr(Tensor(x), op)(axis), getattr(np, op)(x, axis=axis).astype(np.int32))


# ---------------------------------------------------------------------------- register-tile remainders
# Register tiles split an output dim by the largest of 64/32/16/8/4 dividing it (codegen/optimize.py): sizes that no
# width divides take the untiled path, and multiples of 4 but not 8, of 8 but not 16, ... take each width, next to
# dims that are not tiled.
REMAINDER_SIZES = [1, 3, 5, 7, 9, 17, 33]
TILED_SIZES = [4, 12, 24, 48, 96]
MATMUL_SHAPES = ([(s, s, s) for s in REMAINDER_SIZES] +
                 [(1, 33, 7), (33, 5, 17), (9, 17, 3), (5, 7, 9), (17, 1, 33), (7, 9, 1), (3, 33, 5), (33, 17, 9)] +
                 [(12, 7, 20), (24, 9, 40), (48, 5, 12), (20, 33, 24), (7, 12, 48), (4, 3, 4), (16, 17, 64),
                  (12, 12, 12), (33, 8, 96)])


def integral_floats(rng, shape) -> np.ndarray:
  """Small integers as float32: every sum of products below is exact, so the comparison can be exact."""
  return rng.integers(-8, 9, size=shape).astype(np.float32)


@pytest.mark.parametrize("m, k, n", MATMUL_SHAPES, ids=lambda v: str(v))
def test_matmul_tile_remainders(rng, m, k, n):
  a, b = integral_floats(rng, (m, k)), integral_floats(rng, (k, n))
  assert_equal(Tensor(a) @ Tensor(b), a @ b, dtype=dtypes.float32)
  ai, bi = a.astype(np.int32), b.astype(np.int32)
  assert_equal(Tensor(ai) @ Tensor(bi), ai @ bi, dtype=dtypes.int32)


@pytest.mark.parametrize("rows", REMAINDER_SIZES)
@pytest.mark.parametrize("cols", [1, 7, 9, 33] + TILED_SIZES)
def test_reduce_tile_remainders(rng, rows, cols):
  x = integral_floats(rng, (rows, cols))
  for axis in (0, 1):
    assert_equal(Tensor(x).sum(axis), x.sum(axis), dtype=dtypes.float32)
    assert_equal(Tensor(x).max(axis), x.max(axis), dtype=dtypes.float32)
  assert_equal(Tensor(x).sum(), np.float32(x.sum()), dtype=dtypes.float32)


# ---------------------------------------------------------------------------- exact 16-bit rounding
def rounding_cases(rng, dtype: str) -> np.ndarray:
  """Float32 values at and around the float16 and bfloat16 rounding points: exact ties (to even and to odd), one
  float32 ulp either side, the subnormal range of float16, the overflow threshold, and random bit patterns."""
  bits = rng.integers(0, 2**32, size=200, dtype=np.uint64).astype(np.uint32)
  random_finite = bits.view(np.float32)[np.isfinite(bits.view(np.float32))]
  halves = rng.integers(0, 2**16, size=120, dtype=np.uint64).astype(np.uint16).view(np.float16)
  halves = halves[np.isfinite(halves)].astype(np.float32)
  bf_bits = (rng.integers(0, 2**16, size=120, dtype=np.uint64).astype(np.uint32) << np.uint32(16))
  if dtype == "float16":  # ties between neighbouring float16 values, subnormal ones included
    grid = np.sort(np.abs(halves))
    ties = (grid[:-1].astype(np.float64) + grid[1:]) / 2
  else:
    ties = (bf_bits | np.uint32(0x8000)).view(np.float32).astype(np.float64)
  ties = ties.astype(np.float32)
  near = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
  edges = np.array([65504, 65519.996, 65520, 65536, 2**-24, 2**-25, 2**-25 * 1.0000001, 2**-26, 3.4e38, 1e-40,
                    -0.0, np.inf, -np.inf], np.float32)
  values = np.concatenate([near, -near, random_finite, halves, edges]).astype(np.float32)
  return values[np.isfinite(values) | np.isinf(values)]


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
  """Round-to-nearest-even float32 -> bfloat16, computed on the bits (NaN excluded by the callers)."""
  bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
  rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
  return rounded.astype(np.uint16)


def bfloat16_bits_exact(x: np.ndarray) -> np.ndarray:
  """Round-to-nearest-even float64 -> bfloat16 with exact rational arithmetic (no intermediate float32 rounding)."""
  out = []
  for value in x.astype(np.float64):
    if not np.isfinite(value): out.append(int(bfloat16_bits(np.array([value]))[0])); continue
    down = int(np.array([value], np.float32).view(np.uint32)[0]) >> 16  # a candidate near value; search neighbours
    candidates = []
    for word in range(max(down - 2, 0) if value >= 0 else down - 2, down + 3):
      word &= 0xFFFF
      cand = np.array([word << 16], np.uint32).view(np.float32)[0]
      if np.isfinite(cand) and (cand >= 0) == (value >= 0) or cand == 0: candidates.append((word, float(cand)))
    exact = Fraction(value)
    best = min(candidates, key=lambda c: (abs(Fraction(c[1]) - exact), c[0] & 1))
    limit = Fraction(2) ** 128 - Fraction(2) ** (128 - 9)  # at and past the midpoint to the next binade: infinity
    if abs(exact) >= limit: best = (0x7F80 | (0x8000 if value < 0 else 0), 0.0)
    out.append(best[0])
  return np.array(out, np.uint16)


def test_float32_to_float16_rounds_to_nearest_even(rng):
  skip_unless_dtype(dtypes.float16, dtypes.uint16)
  x = rounding_cases(rng, "float16")
  expected = x.astype(np.float16).view(np.uint16)
  assert_equal(Tensor(x).cast(dtypes.float16).bitcast(dtypes.uint16), expected, dtype=dtypes.uint16)


def test_float64_to_float16_rounds_once(rng):
  skip_unless_dtype(dtypes.float64, dtypes.float16, dtypes.uint16)
  x = rounding_cases(rng, "float16").astype(np.float64)
  x = np.concatenate([x, x + x * 2.0**-30, x - x * 2.0**-30])  # just off the ties: float32 would round onto them
  expected = x.astype(np.float16).view(np.uint16)
  assert_equal(Tensor(x).cast(dtypes.float16).bitcast(dtypes.uint16), expected, dtype=dtypes.uint16)


def test_float32_to_bfloat16_rounds_to_nearest_even(rng):
  skip_unless_dtype(dtypes.bfloat16, dtypes.uint16)
  x = rounding_cases(rng, "bfloat16")
  assert_equal(Tensor(x).cast(dtypes.bfloat16).bitcast(dtypes.uint16), bfloat16_bits(x), dtype=dtypes.uint16)


def test_float64_to_bfloat16_rounds_once(rng):
  skip_unless_dtype(dtypes.float64, dtypes.bfloat16, dtypes.uint16)
  x = rounding_cases(rng, "bfloat16").astype(np.float64)[::3]
  x = np.concatenate([x, x + x * 2.0**-30, x - x * 2.0**-30])
  assert_equal(Tensor(x).cast(dtypes.bfloat16).bitcast(dtypes.uint16), bfloat16_bits_exact(x), dtype=dtypes.uint16)


def test_16bit_nan_stays_nan():
  for dtype in (dtypes.float16, dtypes.bfloat16):
    skip_unless_dtype(dtype)
    out = Tensor(np.array([np.nan, -np.nan, 1.0], np.float32)).cast(dtype).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(np.isnan(out), [True, True, False])


def test_16bit_arithmetic_rounds_each_op(rng):
  skip_unless_dtype(dtypes.float16)
  a, b = (rng.standard_normal(64) * 100).astype(np.float16), (rng.standard_normal(64) * 100).astype(np.float16)
  ops = {"add": (lambda x, y: x + y, np.add), "sub": (lambda x, y: x - y, np.subtract),
         "mul": (lambda x, y: x * y, np.multiply), "div": (lambda x, y: x / y, np.divide)}
  for name, (fn, reference) in ops.items():
    with np.errstate(all="ignore"): expected = reference(a, b)
    actual = fn(Tensor(a), Tensor(b)).numpy()
    assert actual.dtype == np.float16
    np.testing.assert_array_equal(actual.view(np.uint16), expected.view(np.uint16), err_msg=name)
  assert_close(Tensor(a).sum(), np.float16(a.astype(np.float32).sum()), atol=0.5, rtol=1e-3)
