"""Every dtype: arithmetic, comparisons and reductions per dtype (with the result dtypes tinygrad gives), full-range
integers, casts between every pair, bitcasts, promotion between dtypes, bfloat16 storage, and the 8-bit floats'
conversions and per-op rounding.

A dtype the device does not support (its renderer's `supported_dtypes`) is skipped with the reason."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import (assert_close, assert_equal, nonzero_array, np_dtype, random_array,
                                      skip_unless_dtype)

INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
        dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
NUMERIC = INTS + FLOATS
ALL = [dtypes.bool] + NUMERIC
SHAPE = (7, 5)

# the dtype `sum` returns (tinygrad's sum_acc_dtype; float16 sums are cast back to float16)
SUM_DTYPE = {dtypes.bool: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32,
             dtypes.int32: dtypes.int32, dtypes.int64: dtypes.int64, dtypes.uint8: dtypes.uint32,
             dtypes.uint16: dtypes.uint32, dtypes.uint32: dtypes.uint32, dtypes.uint64: dtypes.uint64,
             dtypes.float16: dtypes.float16, dtypes.float32: dtypes.float32, dtypes.float64: dtypes.float64}


def _name(value) -> str: return getattr(value, "name", str(value))


def _tolerance(dtype) -> dict:
  return {dtypes.float16: {"atol": 1e-2, "rtol": 1e-2}, dtypes.float32: {"atol": 1e-5, "rtol": 1e-5},
          dtypes.float64: {"atol": 1e-10, "rtol": 1e-10}}.get(dtype, {})


def _check(actual, expected, dtype) -> None:
  """Exact for ints and bools, with the dtype's tolerance for floats; `dtype` is the expected result dtype."""
  expected = np.asarray(expected).astype(np_dtype(dtype))
  if dtype in FLOATS: assert_close(actual, expected, dtype=dtype, **_tolerance(dtype))
  else: assert_equal(actual, expected, dtype=dtype)


# name: (tinycore op, numpy op computed in float64/int64, result dtype for an input dtype)
ARITHMETIC = {
  "add": (lambda a, b: a + b, lambda a, b: a + b, lambda d: d),
  "sub": (lambda a, b: a - b, lambda a, b: a - b, lambda d: d),
  "mul": (lambda a, b: a * b, lambda a, b: a * b, lambda d: d),
  "maximum": (lambda a, b: a.maximum(b), np.maximum, lambda d: d),
  "minimum": (lambda a, b: a.minimum(b), np.minimum, lambda d: d),
  "lt": (lambda a, b: a < b, np.less, lambda d: dtypes.bool),
  "eq": (lambda a, b: a == b, np.equal, lambda d: dtypes.bool),
  "ne": (lambda a, b: a != b, np.not_equal, lambda d: dtypes.bool),
  "truediv": (lambda a, b: a / b, np.divide, lambda d: d if d in FLOATS else dtypes.float32),
}


def _operands(rng, dtype, op: str) -> tuple[np.ndarray, np.ndarray]:
  """Two arrays of `dtype` whose result under `op` is exact in the dtype (no overflow, no division by zero)."""
  npdt = np_dtype(dtype)
  a, b = random_array(rng, SHAPE, dtype), random_array(rng, SHAPE, dtype)
  if op in ("eq", "ne", "lt") and npdt.kind == "f":  # integral floats, so that ties occur
    a, b = a.round().astype(npdt), b.round().astype(npdt)
  if op == "sub" and npdt.kind == "u": a = (a + b).astype(npdt)  # a >= b
  if op == "truediv": b = nonzero_array(rng, SHAPE, dtype, *((1, 16) if npdt.kind == "u" else (-9, 10)))
  if op == "truediv" and npdt.kind == "f": b = b + np.where(b > 0, 0.5, -0.5).astype(npdt)
  return a, b


@pytest.mark.parametrize("op", list(ARITHMETIC))
@pytest.mark.parametrize("dtype", NUMERIC, ids=_name)
def test_arithmetic(rng, dtype, op):
  skip_unless_dtype(dtype)
  fn, reference, result_dtype = ARITHMETIC[op]
  a, b = _operands(rng, dtype, op)
  wide = np.float64 if np_dtype(dtype).kind == "f" or op == "truediv" else np.int64
  if np_dtype(dtype) == np.uint64 and op != "truediv": wide = np.uint64
  _check(fn(Tensor(a), Tensor(b)), reference(a.astype(wide), b.astype(wide)), result_dtype(dtype))


@pytest.mark.parametrize("dtype", [d for d in NUMERIC if np_dtype(d).kind != "u"], ids=_name)
def test_neg_and_abs(rng, dtype):
  skip_unless_dtype(dtype)
  a = random_array(rng, SHAPE, dtype)
  _check(-Tensor(a), -a, dtype)
  _check(Tensor(a).abs(), np.abs(a), dtype)


@pytest.mark.parametrize("dtype", NUMERIC, ids=_name)
def test_python_scalar_keeps_dtype(rng, dtype):
  skip_unless_dtype(dtype)
  a = random_array(rng, SHAPE, dtype)
  _check(Tensor(a) + 2, a.astype(np.float64) + 2, dtype)
  _check(Tensor(a) * 3, a.astype(np.float64) * 3, dtype)


@pytest.mark.parametrize("dtype", ALL, ids=_name)
def test_sum_and_max(rng, dtype):
  skip_unless_dtype(dtype, SUM_DTYPE[dtype])
  a = random_array(rng, SHAPE, dtype)
  wide = a.astype(np.float64 if dtype in FLOATS else np.int64)
  _check(Tensor(a).sum(), wide.sum(), SUM_DTYPE[dtype])
  _check(Tensor(a).sum(axis=1), wide.sum(axis=1), SUM_DTYPE[dtype])
  _check(Tensor(a).max(axis=0), a.max(axis=0), dtype)
  _check(Tensor(a).min(), a.min(), dtype)


def test_bool_ops(rng):
  a, b = random_array(rng, SHAPE, "bool"), random_array(rng, SHAPE, "bool")
  ta, tb = Tensor(a), Tensor(b)
  assert_equal(ta & tb, a & b, dtype=dtypes.bool)
  assert_equal(ta | tb, a | b, dtype=dtypes.bool)
  assert_equal(ta ^ tb, a ^ b, dtype=dtypes.bool)
  assert_equal(ta == tb, a == b, dtype=dtypes.bool)
  assert_equal(ta != tb, a != b, dtype=dtypes.bool)
  assert_equal(ta.logical_not(), ~a, dtype=dtypes.bool)
  assert_equal(ta.where(tb, False), a & b, dtype=dtypes.bool)
  assert_equal(ta.max(axis=1), a.any(axis=1), dtype=dtypes.bool)


@pytest.mark.parametrize("dtype", INTS, ids=_name)
def test_full_range_integers(rng, dtype):
  # values spread over the whole type: catches a device computing a wide type in a narrower one
  skip_unless_dtype(dtype)
  npdt = np_dtype(dtype)
  info = np.iinfo(npdt)
  a = rng.integers(info.min // 2, info.max // 2, size=SHAPE, dtype=npdt, endpoint=True)
  b = rng.integers(info.min // 2, info.max // 2, size=SHAPE, dtype=npdt, endpoint=True)
  assert_equal(Tensor(a) + Tensor(b), a + b, dtype=dtype)
  assert_equal(Tensor(a) < Tensor(b), a < b, dtype=dtypes.bool)
  assert_equal(Tensor(a).maximum(Tensor(b)), np.maximum(a, b), dtype=dtype)
  assert_equal(Tensor(a).minimum(Tensor(b)), np.minimum(a, b), dtype=dtype)
  extremes = np.array([info.min, info.max, 0, info.max - 1], dtype=npdt)
  assert_equal(Tensor(extremes), extremes, dtype=dtype)
  assert_equal(Tensor(extremes).max(), np.array(info.max, dtype=npdt), dtype=dtype)


# --- promotion between tensor dtypes (tinygrad's lattice)

PROMOTIONS = [
  (dtypes.int8, dtypes.int16, dtypes.int16), (dtypes.uint8, dtypes.int8, dtypes.int16),
  (dtypes.uint8, dtypes.uint16, dtypes.uint16), (dtypes.int32, dtypes.int64, dtypes.int64),
  (dtypes.int32, dtypes.uint32, dtypes.int64), (dtypes.bool, dtypes.int32, dtypes.int32),
  (dtypes.bool, dtypes.float32, dtypes.float32), (dtypes.int32, dtypes.float16, dtypes.float16),
  (dtypes.int64, dtypes.float32, dtypes.float32), (dtypes.float16, dtypes.float32, dtypes.float32),
  (dtypes.float32, dtypes.float64, dtypes.float64), (dtypes.uint8, dtypes.float16, dtypes.float16),
]


@pytest.mark.parametrize("left, right, result", PROMOTIONS, ids=lambda d: _name(d))
def test_promotion(rng, left, right, result):
  skip_unless_dtype(left, right, result)
  a = random_array(rng, SHAPE, left, *((0, 10) if left is not dtypes.bool else ()))
  b = random_array(rng, SHAPE, right, *((0, 10) if right is not dtypes.bool else ()))
  expected = a.astype(np.float64) * b.astype(np.float64)
  _check(Tensor(a) * Tensor(b), expected, result)


# --- casts

CAST_DTYPES = ALL


def _cast_source(rng, src, dst) -> np.ndarray:
  """Values of `src` that `dst` holds after the cast without overflow or undefined behaviour: ints in a range both
  types hold (non-negative when either is unsigned or bool), floats with fractional parts (the cast to an int
  truncates toward zero), and some exact zeros (the cast to bool is `!= 0`)."""
  if src is dtypes.bool: return random_array(rng, (13,), "bool")
  non_negative = np_dtype(src).kind == "u" or np_dtype(dst).kind in "ub"
  ints = rng.integers(0 if non_negative else -100, 101, size=(13,))
  values = ints.astype(np.float64)
  if np_dtype(src).kind == "f": values = values + rng.uniform(0.0 if non_negative else -0.9, 0.9, size=(13,))
  values[::4] = 0
  return values.astype(np_dtype(src))


CAST_PAIRS = [(src, dst) for src in CAST_DTYPES for dst in CAST_DTYPES if src is not dst]


@pytest.mark.parametrize("src, dst", CAST_PAIRS, ids=[f"{src.name}->{dst.name}" for src, dst in CAST_PAIRS])
def test_cast(rng, src, dst):
  skip_unless_dtype(src, dst)
  x = _cast_source(rng, src, dst)
  expected = x.astype(np_dtype(dst))
  t = Tensor(x).cast(dst)
  if dst in FLOATS: assert_close(t, expected, dtype=dst, atol=0, rtol=1e-3 if dst is dtypes.float16 else 1e-6)
  else: assert_equal(t, expected, dtype=dst)


def test_cast_known_values():
  assert_equal(Tensor([1.9, -1.9, 0.5, -0.5, 0.0, 7.0]).cast(dtypes.int32), np.array([1, -1, 0, 0, 0, 7], np.int32))
  assert_equal(Tensor([0.0, -0.0, 0.25, -3.0]).cast(dtypes.bool), np.array([False, False, True, True]))
  assert_equal(Tensor([True, False, True]).cast(dtypes.int32), np.array([1, 0, 1], np.int32))
  assert_equal(Tensor([True, False]).cast(dtypes.float32), np.array([1.0, 0.0], np.float32))
  assert_equal(Tensor([3, 0, -2]).cast(dtypes.bool), np.array([True, False, True]))


def test_cast_of_computed_values(rng):
  a = random_array(rng, SHAPE, "float32", -50, 50)
  assert_equal((Tensor(a) * 2).cast(dtypes.int32), (a * 2).astype(np.int32), dtype=dtypes.int32)
  ints = random_array(rng, SHAPE, "int32", -100, 100)
  assert_close(Tensor(ints).cast(dtypes.float32) / 3, ints.astype(np.float32) / np.float32(3), dtype=dtypes.float32)


# --- bitcast: reinterpret the bytes

BITCASTS = [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32), (dtypes.int32, dtypes.float32),
            (dtypes.uint32, dtypes.float32), (dtypes.float16, dtypes.int16), (dtypes.int16, dtypes.float16),
            (dtypes.float16, dtypes.uint16), (dtypes.int32, dtypes.uint32)]


@pytest.mark.parametrize("src, dst", BITCASTS, ids=lambda d: _name(d))
def test_bitcast(rng, src, dst):
  skip_unless_dtype(src, dst)
  npsrc = np_dtype(src)
  if npsrc.kind == "f": x = random_array(rng, SHAPE, src)
  else:  # the bit patterns of finite floats, so that no NaN payload is involved
    float_of_size = {2: np.float16, 4: np.float32}[npsrc.itemsize]
    x = random_array(rng, SHAPE, float_of_size).view(npsrc)
  result = Tensor(x).bitcast(dst)
  assert result.dtype == dst and result.shape == SHAPE
  np.testing.assert_array_equal(result.numpy().view(npsrc), x)
  np.testing.assert_array_equal(result.numpy(), x.view(np_dtype(dst)))


def test_bitcast_of_computed_values(rng):
  x = random_array(rng, SHAPE, "float32")
  expected = (x * np.float32(2)).view(np.int32)
  assert_equal((Tensor(x) * 2).bitcast(dtypes.int32), expected, dtype=dtypes.int32)
  assert_equal(Tensor(x).bitcast(dtypes.uint32) >> 31, (x.view(np.uint32) >> np.uint32(31)), dtype=dtypes.uint32)


# --- bfloat16: no numpy dtype, so it is checked through float32 and its 16-bit storage

def _same_floats(got: np.ndarray, expected: np.ndarray) -> None:
  """Bit for bit, NaN for NaN (whatever its payload)."""
  nan = np.isnan(expected)
  assert np.array_equal(np.isnan(got), nan), "NaNs differ"
  bits = {2: np.uint16, 4: np.uint32}[expected.dtype.itemsize]
  wrong = np.flatnonzero(got[~nan].view(bits) != expected[~nan].view(bits))
  assert wrong.size == 0, f"{wrong.size} values differ, first {expected[~nan][wrong[:5]]} -> {got[~nan][wrong[:5]]}"


def test_float16_conversions_match_numpy_on_every_half_and_rounding_boundary():
  """Every float16 widens to float32 exactly (denormals, infinities, NaNs, -0); float32 values on and beside every
  halfway point between neighbouring float16s, and past the largest one, round to nearest even as numpy does."""
  skip_unless_dtype(dtypes.float16, dtypes.uint16)
  halves = np.arange(65536, dtype=np.uint16)
  _same_floats(Tensor(halves).bitcast(dtypes.float16).cast(dtypes.float32).numpy(),
               halves.view(np.float16).astype(np.float32))
  positive = halves[:0x7c00].view(np.float16).astype(np.float64)
  midpoints = ((positive[:-1] + positive[1:]) / 2).astype(np.float32)  # exact: 12 significant bits
  values = np.concatenate([positive.astype(np.float32), midpoints, np.nextafter(midpoints, np.float32(np.inf)),
                           np.nextafter(midpoints, np.float32(0)),
                           np.array([65504, 65519.996, 65520, 65536, 1e10, 2.0 ** -25, 2.0 ** -26, 3 * 2.0 ** -26,
                                     np.inf, np.nan, 1e-45], np.float32)])
  values = np.concatenate([values, -values])
  with np.errstate(over="ignore"): expected = values.astype(np.float16)  # (past 65520: infinity, as meant)
  _same_floats(Tensor(values).cast(dtypes.float16).numpy(), expected)


def test_bfloat16_roundtrip_exact(rng):
  skip_unless_dtype(dtypes.bfloat16)
  x = random_array(rng, SHAPE, "bfloat16")  # float32 values bfloat16 holds exactly
  t = Tensor(x).cast(dtypes.bfloat16)
  assert t.dtype == dtypes.bfloat16 and t.dtype.itemsize == 2 and t.shape == SHAPE
  assert_equal(t.cast(dtypes.float32), x, dtype=dtypes.float32)


def test_bfloat16_rounds_float32(rng):
  skip_unless_dtype(dtypes.bfloat16)
  x = random_array(rng, (33, 17), "float32")
  # bfloat16 keeps 8 significant bits: within 2**-7 relative, whether the device rounds or truncates
  assert_close(Tensor(x).cast(dtypes.bfloat16).cast(dtypes.float32), x, atol=1e-30, rtol=2.0 ** -7)


def test_bfloat16_storage_is_upper_half_of_float32(rng):
  skip_unless_dtype(dtypes.bfloat16, dtypes.uint16)
  x = random_array(rng, SHAPE, "bfloat16")
  upper = (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
  assert_equal(Tensor(x).cast(dtypes.bfloat16).bitcast(dtypes.uint16), upper, dtype=dtypes.uint16)
  # and back: 16-bit patterns read as bfloat16
  assert_equal(Tensor(upper).bitcast(dtypes.bfloat16).cast(dtypes.float32), x, dtype=dtypes.float32)


def test_bfloat16_from_list_and_arithmetic(rng):
  skip_unless_dtype(dtypes.bfloat16)
  x = random_array(rng, SHAPE, "bfloat16")
  t = Tensor(x.tolist(), dtype=dtypes.bfloat16)
  assert t.dtype == dtypes.bfloat16
  assert_equal(t.cast(dtypes.float32), x)
  assert_equal((t + t).cast(dtypes.float32), 2 * x)  # doubling is exact
  assert_equal((t * 0.5).cast(dtypes.float32), x * np.float32(0.5))


# ---------------------------------------------------------------------------- 8-bit floats
def fp8_probe_values(dtype, rng) -> np.ndarray:
  """Every finite value of the 8-bit float, the midpoints between neighbours (ties to even), values just off them,
  overflow, underflow and special values, and random floats over the format's range, as float32."""
  from tinycore.dtype import FP8_FORMATS, fp8_to_float
  exact = np.array(sorted({v for v in (fp8_to_float(c, dtype) for c in range(256)) if np.isfinite(v)}))
  middles = (exact[:-1] + exact[1:]) / 2
  largest, smallest = exact[-1], fp8_to_float(1, dtype)
  fmt = FP8_FORMATS[dtype]
  extra = [largest * 1.07, largest * 3, 1e30, -1e30, smallest / 2, smallest / 3, -smallest / 2, np.inf, -np.inf,
           np.nan, 0.0, -0.0]
  spread = rng.standard_normal(400) * np.exp2(rng.integers(-fmt.bias - fmt.mantissa_bits, fmt.bias + 2, 400))
  values = np.concatenate([exact, middles, middles * (1 + 2 ** -20), middles * (1 - 2 ** -20), extra, spread])
  return values.astype(np.float32)


@pytest.mark.parametrize("dtype", list(dtypes.fp8s), ids=_name)
def test_fp8_conversions_round_to_even_and_saturate(rng, dtype):
  from tinycore.dtype import float_to_fp8, fp8_to_float
  skip_unless_dtype(dtype, dtypes.uint8)
  values = fp8_probe_values(dtype, rng)
  codes = Tensor(values).cast(dtype).bitcast(dtypes.uint8).numpy()
  expected = np.array([float_to_fp8(float(v), dtype) for v in values], np.uint8)
  nan = np.isnan(values)
  assert_equal(codes[~nan], expected[~nan], dtype=dtypes.uint8)
  assert all(np.isnan(fp8_to_float(int(c), dtype)) for c in codes[nan])
  # every byte read back as float32
  decoded = Tensor(np.arange(256, dtype=np.uint8)).bitcast(dtype).cast(dtypes.float32).numpy()
  _same_floats(decoded, np.array([fp8_to_float(c, dtype) for c in range(256)], np.float32))


@pytest.mark.parametrize("dtype", list(dtypes.fp8s), ids=_name)
def test_fp8_arithmetic_rounds_after_every_op(rng, dtype):
  from tinycore.dtype import round_to_fp8
  skip_unless_dtype(dtype)
  def held(values): return np.array([round_to_fp8(float(v), dtype) for v in values], np.float32)
  def rounded(values): return held(values.astype(np.float32))  # computed in float32, then rounded to the dtype
  a, b = held(rng.standard_normal(48) * 4), held(rng.standard_normal(48) * 4)
  x, y = Tensor(a).cast(dtype), Tensor(b).cast(dtype)
  for result, expected in ((x + y, rounded(a + b)), (x * y, rounded(a * b)), ((x - y) * y, rounded(rounded(a - b) * b)),
                           (x * 0.3, rounded(a * np.float32(round_to_fp8(0.3, dtype))))):
    assert result.dtype is dtype
    assert_equal(result.cast(dtypes.float32), expected, dtype=dtypes.float32)
  # a sum accumulates in float32 and rounds once (halves: the float32 sum is exact, whatever the order)
  halves = held(rng.integers(-16, 16, 48) * 0.5)
  assert_equal(Tensor(halves).cast(dtype).sum().cast(dtypes.float32),
               rounded(np.array([halves.astype(np.float64).sum()])).reshape(()))
