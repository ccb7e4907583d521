"""Python scalars are kernel arguments: a loop over new values (a learning-rate schedule) compiles one program and
gets every step right, at every dtype the device supports (the value is exact at the kernel's dtype)."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.codegen import CodegenStats
from tinycore.testing.helpers import assert_equal, random_array, skip_unless_dtype


def _compiled() -> int: return CodegenStats.compiled


def test_learning_rate_loop_compiles_once(rng):
  x = random_array(rng, (9, 31), "float32")
  xt = Tensor(x).realize()
  lrs, biases = rng.uniform(1e-4, 0.5, 20), rng.uniform(-3, 3, 20)
  for step, (lr, b) in enumerate(zip(lrs.tolist(), biases.tolist())):
    out = (xt * lr + b).realize()
    if step == 0: compiled = _compiled()
    assert_equal(out, x * np.float32(lr) + np.float32(b), dtype=dtypes.float32)
  assert _compiled() == compiled


def test_integer_scalar_loop_and_a_value_used_twice(rng):
  a = rng.integers(-999, 999, (6, 13)).astype(np.int32)
  b = rng.integers(-999, 999, (6, 13)).astype(np.int32)
  at, bt = Tensor(a).realize(), Tensor(b).realize()
  for step, k in enumerate(range(2, 42, 2)):
    out = (at * k - bt * k + (k + 3)).realize()      # k is read twice
    if step == 0: compiled = _compiled()
    assert_equal(out, a * np.int32(k) - b * np.int32(k) + np.int32(k + 3), dtype=dtypes.int32)
  assert _compiled() == compiled


@pytest.mark.parametrize("dtype, values", [
  ("float16", [0.1, 0.3, 1e-4, 70000.0, -2.5]), ("float64", [1 / 3, -0.1, 1e-300, 2.5e300, 7.0]),
  ("int64", [2 ** 40 + 3, -(2 ** 58) - 7, 5, 123456789012]), ("int8", [-100, 77, 3]), ("uint8", [200, 7, 100]),
  ("uint32", [2 ** 32 - 2, 5, 2 ** 31 + 1])])
def test_scalar_is_exact_at_the_kernel_dtype(rng, dtype, values):
  skip_unless_dtype(dtype)
  npdt = np.dtype(dtype)
  data = random_array(rng, (5, 3), dtype)
  t = Tensor(data).realize()
  with np.errstate(all="ignore"):
    for v in values:
      assert_equal(t * v + v, data * npdt.type(v) + npdt.type(v), dtype=getattr(dtypes, dtype))


def _round_bf16(x) -> np.ndarray:
  """float32 values rounded to bfloat16 (to nearest, ties to even), as float32."""
  bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def test_bfloat16_scalar_rounds_to_bfloat16():
  skip_unless_dtype("bfloat16")
  x = np.array([3.0, 1.0, -5.0, 0.375], np.float32)
  xt = Tensor(x).cast(dtypes.bfloat16).realize()
  for v in (1.00390625, 1.01171875, 3.0, 0.1, -7.3):
    expected = _round_bf16(x * _round_bf16(np.float32(v)))   # the scalar is a bfloat16 before it meets x
    assert_equal((xt * v).cast(dtypes.float32), expected, dtype=dtypes.float32)


def test_scalars_in_a_fused_reduction(rng):
  x = random_array(rng, (16, 24), "float32", low=-1, high=1)
  xt = Tensor(x).realize()
  for scale, shift in ((0.3, 0.7), (0.9, -0.2), (1.7, 0.05)):
    out = ((xt * scale + shift).exp() * 0.5).sum(axis=1)
    ref = (np.exp(x.astype(np.float64) * scale + shift) * 0.5).sum(axis=1)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)
