"""Numeric semantics that rewrite rules and codegen must not change: constants of different kinds (True, 1, 1.0;
0.0, -0.0), integer overflow, shifts, division by zero, Python int literals, NaN through max/min, signed zeros.

Each test class is a class of wrong answers that existed once; numpy is the reference throughout."""
import math
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.pattern import UPat, graph_rewrite
from tinycore.uop.symbolic import exec_alu, symbolic

# the numpy references overflow and make NaN on purpose
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")
INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


def bits_of(a: np.ndarray) -> np.ndarray:
  """The raw bits of a float array (so -0.0 and 0.0, and NaN payloads, compare as different)."""
  return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


def extremes(dtype: str) -> np.ndarray:
  info = np.iinfo(dtype)
  return np.array([info.min, info.min + 1, -1 if info.min else 1, 0, 1, 2, 3, info.max // 2 + 1, info.max - 1,
                   info.max], dtype)


# ---------------------------------------------------------------------------- constants of different kinds
class TestConstantKinds:
  def test_int_and_one_keeps_the_low_bit(self):
    x = np.array([-3, 5, 6], np.int32)
    np.testing.assert_equal((Tensor(x) & 1).numpy(), x & 1)

  @pytest.mark.parametrize("value", [0, 1, -1])
  def test_int_bitwise_with_small_constants(self, value):
    x = np.array([-3, 5, 6, 0], np.int32)
    np.testing.assert_equal((Tensor(x) & value).numpy(), x & value)
    np.testing.assert_equal((Tensor(x) | value).numpy(), x | value)
    np.testing.assert_equal((Tensor(x) ^ value).numpy(), x ^ value)

  def test_bool_identities_still_fold(self):
    x = np.array([True, False, True])
    np.testing.assert_equal((Tensor(x) & True).numpy(), x)
    np.testing.assert_equal((Tensor(x) | False).numpy(), x)
    np.testing.assert_equal((Tensor(x) & False).numpy(), np.zeros(3, bool))

  def test_patterns_compare_kind_and_sign(self):
    one, true, one_f = UOp.const(dtypes.int32, 1), UOp.const(dtypes.bool, True), UOp.const(dtypes.float32, 1.0)
    assert UPat.const(True).match(true, {}) and not UPat.const(True).match(one, {})
    assert UPat.const(1).match(one, {}) and not UPat.const(1).match(one_f, {}) and not UPat.const(1).match(true, {})
    zero, neg_zero = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.float32, -0.0)
    assert UPat.const(-0.0).match(neg_zero, {}) and not UPat.const(-0.0).match(zero, {})

  def test_signed_zero_constants_are_different_nodes(self):
    zero, neg_zero = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.float32, -0.0)
    assert zero is not neg_zero and math.copysign(1.0, neg_zero.arg) == -1.0
    assert UOp.const(dtypes.float32, -0.0) is neg_zero
    np.testing.assert_equal(bits_of(Tensor.full((2,), -0.0).numpy()), bits_of(np.full(2, -0.0, np.float32)))

  def test_int_rule_does_not_fold_bool_or_float(self):
    x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", -10, 10))
    assert graph_rewrite(UOp(Ops.AND, dtypes.int32, (x, UOp.const(dtypes.int32, 1))), symbolic).op is Ops.AND
    assert graph_rewrite(UOp(Ops.AND, dtypes.int32, (x, UOp.const(dtypes.int32, 0))), symbolic).arg == 0


# ---------------------------------------------------------------------------- IEEE identities
class TestFloatIdentities:
  SPECIAL = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1.5, -2.0], np.float32)

  @pytest.mark.parametrize("name, fn", [
    ("x+0", lambda x: x + 0), ("0+x", lambda x: 0 + x), ("x+0.0", lambda x: x + 0.0), ("x-0", lambda x: x - 0),
    ("x*1", lambda x: x * 1), ("x*0", lambda x: x * 0), ("x/1", lambda x: x / 1), ("x-x", lambda x: x - x),
    ("x*0+x", lambda x: x * 0 + x), ("0-x", lambda x: 0 - x), ("x+(-0.0)", lambda x: x + (-0.0))])
  def test_special_values_bit_exact(self, name, fn):
    expected = fn(self.SPECIAL.copy()).astype(np.float32)
    actual = fn(Tensor(self.SPECIAL)).numpy()
    assert actual.dtype == np.float32
    np.testing.assert_equal(bits_of(np.where(np.isnan(actual), np.nan, actual).astype(np.float32)),
                            bits_of(np.where(np.isnan(expected), np.nan, expected).astype(np.float32)), err_msg=name)

  def test_negative_zero_plus_zero_is_positive_zero(self):
    out = (Tensor([-0.0]) + 0).numpy()
    assert out[0] == 0 and not np.signbit(out[0])


# ---------------------------------------------------------------------------- integer overflow wraps
class TestIntegerWrapping:
  @pytest.mark.parametrize("dtype", INT_DTYPES)
  def test_add_sub_mul_neg_wrap_like_numpy(self, dtype):
    a = extremes(dtype)
    b = np.roll(a, 3)
    ta, tb = Tensor(a), Tensor(b)
    with np.errstate(over="ignore"):
      np.testing.assert_equal((ta + tb).numpy(), a + b)
      np.testing.assert_equal((ta - tb).numpy(), a - b)
      np.testing.assert_equal((ta * tb).numpy(), a * b)
      if np.dtype(dtype).kind == "i": np.testing.assert_equal((-ta).numpy(), -a)

  @pytest.mark.parametrize("dtype", ["int32", "int64"])
  def test_overflow_is_not_assumed_away(self, dtype):
    # with signed overflow undefined, a C compiler may fold (x + 1 > x) to true
    top = Tensor(np.array([np.iinfo(dtype).max, 0], dtype))
    np.testing.assert_equal((top + 1 > top).numpy(), [False, True])

  def test_bounds_of_wrapping_sums_do_not_decide_comparisons(self):
    near_top = Tensor.arange(4, dtype=dtypes.int32) + (2**31 - 2)
    np.testing.assert_equal((near_top < 0).numpy(), [False, False, True, True])

  def test_constant_folding_wraps(self):
    top = Tensor.full((2,), 2**31 - 1, dtype=dtypes.int32)
    np.testing.assert_equal((top + 1).numpy(), [-2**31] * 2)
    np.testing.assert_equal((-(top + 1)).numpy(), [-2**31] * 2)


# ---------------------------------------------------------------------------- shifts
def numpy_shift(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return np.left_shift(a, b) if op == "<<" else np.right_shift(a, b)


class TestShifts:
  @pytest.mark.parametrize("op", ["<<", ">>"])
  @pytest.mark.parametrize("dtype", INT_DTYPES)
  def test_every_count_like_numpy(self, dtype, op):
    bits = np.dtype(dtype).itemsize * 8
    counts = np.array([0, 1, bits - 1, bits, bits + 1, 2 * bits, 100] + ([-1, -bits] if dtype[0] == "i" else []))
    counts = counts.astype(dtype)
    values = np.resize(np.array([5, -5, 1, -1, np.iinfo(dtype).max, np.iinfo(dtype).min]).astype(dtype), len(counts))
    ta, tb = Tensor(values), Tensor(counts)
    np.testing.assert_equal((ta << tb if op == "<<" else ta >> tb).numpy(), numpy_shift(op, values, counts))

  @pytest.mark.parametrize("count", [-1, 31, 32, 40])
  def test_constant_counts_fold_like_the_device(self, count):
    x = np.array([1, -8, 2**31 - 1], np.int32)
    counts = np.full(3, count, np.int32)
    np.testing.assert_equal((Tensor(x) << count).numpy(), np.left_shift(x, counts))
    np.testing.assert_equal((Tensor(x) >> count).numpy(), np.right_shift(x, counts))
    const = Tensor.full((3,), -8, dtype=dtypes.int32)
    np.testing.assert_equal((const >> count).numpy(), np.right_shift(np.full(3, -8, np.int32), counts))
    np.testing.assert_equal((const << count).numpy(), np.left_shift(np.full(3, -8, np.int32), counts))

  def test_exec_alu_shifts(self):
    assert exec_alu(Ops.SHL, dtypes.int32, [1, 31]) == -2**31
    assert exec_alu(Ops.SHL, dtypes.int32, [1, 32]) == 0
    assert exec_alu(Ops.SHR, dtypes.int8, [-5, -1]) == -1
    assert exec_alu(Ops.SHR, dtypes.uint8, [200, 9]) == 0


# ---------------------------------------------------------------------------- division and modulo
class TestIntegerDivision:
  @pytest.mark.parametrize("dtype", INT_DTYPES)
  def test_floor_division_and_modulo_like_numpy(self, dtype):
    a = extremes(dtype)
    b = np.array([0, -1, 1, 2, -3, 7, 0, -1, 3, -2], dtype) if dtype[0] == "i" else np.array(
      [0, 1, 2, 3, 7, 0, 5, 1, 255, 9], dtype)
    with np.errstate(divide="ignore", over="ignore"):
      np.testing.assert_equal((Tensor(a) // Tensor(b)).numpy(), a // b)
      np.testing.assert_equal((Tensor(a) % Tensor(b)).numpy(), a % b)

  def test_constant_divisors_zero_and_minus_one(self):
    a = extremes("int32")
    with np.errstate(divide="ignore", over="ignore"):
      for d in (0, -1):
        np.testing.assert_equal((Tensor(a) // d).numpy(), a // np.int32(d))
        np.testing.assert_equal((Tensor(a) % d).numpy(), a % np.int32(d))

  def test_truncating_idiv(self):
    a, b = np.array([7, -7, 7, -7, -2**31, 5], np.int32), np.array([2, 2, -2, -2, -1, 0], np.int32)
    np.testing.assert_equal(Tensor(a).idiv(Tensor(b)).numpy(), [3, -3, -3, 3, -2**31, 0])


# ---------------------------------------------------------------------------- Python int literals
class TestIntLiterals:
  def test_large_literals_take_int64(self):
    assert Tensor([2**40]).dtype is dtypes.int64 and Tensor([2**40]).numpy()[0] == 2**40
    t = Tensor([1, 2**40])
    assert t.dtype is dtypes.int64 and t.tolist() == [1, 2**40]
    assert Tensor(-2**40).dtype is dtypes.int64 and Tensor(-2**40).item() == -2**40
    assert Tensor.full((2,), 2**33).tolist() == [2**33] * 2
    assert Tensor([1, 2]).dtype is dtypes.int32

  def test_scalar_promotion(self):
    assert (Tensor([True]) + 2**40).dtype is dtypes.int64 and (Tensor([True]) + 2**40).item() == 2**40 + 1
    assert (Tensor([1.0]) + 2**40).dtype is dtypes.float32
    assert (Tensor([1], dtype=dtypes.int64) + 2**40).item() == 2**40 + 1

  def test_outside_int64_is_an_error(self):
    with pytest.raises(OverflowError, match="int64"): Tensor([2**64])
    with pytest.raises(OverflowError, match="int64"): Tensor(-2**63 - 1)
    with pytest.raises(OverflowError, match="int64"): Tensor([1]) + 2**70
    assert Tensor([2**63], dtype=dtypes.uint64).tolist() == [2**63]


# ---------------------------------------------------------------------------- NaN through max and min
class TestNaN:
  X = np.array([[1.0, np.nan, -2.0], [3.0, 0.5, -np.inf], [np.inf, -0.0, 0.0]], np.float32)

  @pytest.mark.parametrize("axis", [None, 0, 1])
  def test_reductions_propagate(self, axis):
    np.testing.assert_equal(Tensor(self.X).max(axis).numpy(), self.X.max(axis))
    np.testing.assert_equal(Tensor(self.X).min(axis).numpy(), self.X.min(axis))

  @pytest.mark.parametrize("name, fn, ref", [
    ("maximum", lambda t: t.maximum(0.5), lambda x: np.maximum(x, np.float32(0.5))),
    ("minimum", lambda t: t.minimum(0.5), lambda x: np.minimum(x, np.float32(0.5))),
    ("maximum_t", lambda t: t.maximum(t.flip(0)), lambda x: np.maximum(x, x[::-1])),
    ("minimum_t", lambda t: t.minimum(t.flip(1)), lambda x: np.minimum(x, x[:, ::-1])),
    ("clip", lambda t: t.clip(-1, 1), lambda x: np.clip(x, -1, 1)),
    ("relu", lambda t: t.relu(), lambda x: np.maximum(x, np.float32(0))),
    ("abs", lambda t: t.abs(), np.abs),
    ("sign", lambda t: t.sign(), np.sign)])
  def test_elementwise_propagate(self, name, fn, ref):
    actual, expected = fn(Tensor(self.X)).numpy(), ref(self.X)
    np.testing.assert_equal(np.isnan(actual), np.isnan(expected), err_msg=name)
    np.testing.assert_equal(np.signbit(actual[~np.isnan(actual)]), np.signbit(expected[~np.isnan(expected)]),
                            err_msg=f"{name}: signed zeros")
    np.testing.assert_equal(actual, expected, err_msg=name)

  @pytest.mark.parametrize("axis", [None, 0, 1])
  def test_argmax_argmin_pick_the_first_nan(self, axis):
    np.testing.assert_equal(Tensor(self.X).argmax(axis).numpy(), np.argmax(self.X, axis))
    np.testing.assert_equal(Tensor(self.X).argmin(axis).numpy(), np.argmin(self.X, axis))

  def test_folded_max_propagates(self):
    assert math.isnan(exec_alu(Ops.MAX, dtypes.float32, [math.nan, 1.0]))
    assert math.isnan(exec_alu(Ops.MAX, dtypes.float32, [1.0, math.nan]))


# ---------------------------------------------------------------------------- folding constants
@pytest.mark.parametrize("op, args, expected", [
  (Ops.CMPLT, (3, 5), True), (Ops.CMPLT, (5, 3), False), (Ops.CMPNE, (3, 3), False), (Ops.CMPEQ, (3, 3), True),
  (Ops.CMPLT, (math.nan, 1.0), False), (Ops.CMPNE, (math.nan, math.nan), True), (Ops.MAX, (-1, 2), 2),
  (Ops.MAX, (1.0, math.nan), math.nan), (Ops.ADD, (2**31 - 1, 1), -2**31), (Ops.NEG, (-2**31,), -2**31)])
def test_constants_fold_like_the_device(op, args, expected):
  dtype = dtypes.float32 if isinstance(args[0], float) else dtypes.int32
  out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype
  folded = graph_rewrite(UOp(op, out_dtype, tuple(UOp.const(dtype, a) for a in args)), symbolic)
  assert folded.op is Ops.CONST
  assert (math.isnan(folded.arg) if isinstance(expected, float) and math.isnan(expected) else
          folded.arg == expected and type(folded.arg) is type(expected))


# ---------------------------------------------------------------------------- float -> int casts
class TestFloatToInt:
  VALUES = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e20, -1e20, 300.7, -300.7, 70000.5, 2.0**32, 1.8e19, -1.0,
                     -0.0, 2.0**63, 2.0**31 - 1, -2.0**31, 0.99], np.float64)

  @pytest.mark.parametrize("src", ["float32", "float64"])
  @pytest.mark.parametrize("dtype", INT_DTYPES)
  def test_out_of_range_and_nan_like_numpy(self, src, dtype):
    x = self.VALUES.astype(src)
    actual = Tensor(x).cast(getattr(dtypes, dtype)).numpy()
    with np.errstate(invalid="ignore"): expected = x.astype(dtype)
    if dtype == "uint32":  # numpy's own uint32 results outside [-2**31, 2**32) differ between its SIMD and scalar loops
      keep = (x >= -2.0**31) & (x < 2.0**32)
      actual, expected = actual[keep], expected[keep]
    np.testing.assert_array_equal(actual, expected)

  @pytest.mark.parametrize("dtype", INT_DTYPES)
  def test_folded_casts_match_the_device(self, dtype):
    for value in self.VALUES:
      folded = Tensor.full((1,), float(value), dtype=dtypes.float64).cast(getattr(dtypes, dtype)).numpy()
      computed = Tensor(np.array([value])).cast(getattr(dtypes, dtype)).numpy()
      np.testing.assert_array_equal(folded, computed, err_msg=f"{value}")


# ---------------------------------------------------------------------------- signed zeros through data movement
def test_cat_and_pad_keep_negative_zero():
  a, b = np.array([1.0, -0.0], np.float32), np.array([-0.0, 2.0, -0.0], np.float32)
  np.testing.assert_equal(bits_of(Tensor(a).cat(Tensor(b)).numpy()), bits_of(np.concatenate([a, b])))
  padded = Tensor(b).pad(((1, 1),), value=-0.0).numpy()
  np.testing.assert_equal(bits_of(padded), bits_of(np.pad(b, 1, constant_values=-0.0)))


def test_int32_to_bfloat16_rounds_once():
  # 0x01010001 is just above the bfloat16 tie 0x01010000; rounding it to float first lands on the tie, which then
  # rounds down to even: it must round up
  x = np.array([0x01010001, -0x01010001, 0x01030001, 0x01010000, 0x7FFFFFFF, 257, 0x0100C000], np.int32)
  exact = [float(v) for v in x]  # int32 is exact in double; round to 8 significant bits, ties to even
  def bf16(v: float) -> float:
    if v == 0: return 0.0
    exponent = math.floor(math.log2(abs(v))) - 7
    q, r = divmod(abs(v), 2.0 ** exponent)
    q += 1 if r > 2.0 ** (exponent - 1) or (r == 2.0 ** (exponent - 1) and q % 2) else 0
    return math.copysign(q * 2.0 ** exponent, v)
  np.testing.assert_array_equal(Tensor(x).cast(dtypes.bfloat16).cast(dtypes.float32).numpy(),
                                np.array([bf16(v) for v in exact], np.float32))


def test_division_by_zero_and_min_over_minus_one_do_not_kill_the_process(tmp_path):
  # integer division traps (SIGFPE) on x86 for x / 0 and MIN / -1: run it in a child and require a clean exit
  import subprocess
  import sys
  script = """
import numpy as np
from tinycore import Tensor
for dt in ("int8", "int16", "int32", "int64", "uint32", "uint64"):
  info = np.iinfo(dt)
  a = Tensor(np.array([info.min, 7, info.max, info.min], dt))
  b = Tensor(np.array([-1 if info.min else 1, 0, 0, 0], dt))
  print(dt, (a // b).tolist(), (a % b).tolist(), a.idiv(b).tolist())
"""
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, f"exit status {result.returncode} (a negative status is a signal): {result.stderr}"
  lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
  assert lines["int32"] == f"[{-2**31}, 0, 0, 0] [0, 0, 0, 0] [{-2**31}, 0, 0, 0]"
  assert lines["int8"] == "[-128, 0, 0, 0] [0, 0, 0, 0] [-128, 0, 0, 0]"
  assert lines["uint64"] == "[0, 0, 0, 0] [0, 0, 0, 0] [0, 0, 0, 0]"
