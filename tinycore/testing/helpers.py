"""Helpers of the conformance suite: dtype support, comparison against numpy, random data.

    from tinycore.testing.helpers import assert_close, random_array, skip_unless_dtype

    def test_exp(rng):
      x = random_array(rng, (7, 5), "float32", low=-5, high=5)
      assert_close(Tensor(x).exp(), np.exp(x), atol=1e-5, rtol=1e-4, dtype=dtypes.float32)
"""
from __future__ import annotations
from typing import Any, Sequence
import numpy as np
import pytest

# (atol, rtol) used by assert_close when none is given, by the dtype of the expected array
DEFAULT_TOLERANCE: dict[str, tuple[float, float]] = {
  "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2), "float32": (1e-6, 1e-5), "float64": (1e-12, 1e-10),
}


def _device_name(device: str | None) -> str:
  from tinycore import Device
  return Device.DEFAULT if device is None else Device.canonicalize(device)


def _as_dtype(dtype: Any):
  """A tinycore DType from a DType, a name ("float32") or a numpy dtype."""
  from tinycore import dtypes
  if isinstance(dtype, type(dtypes.float32)): return dtype
  name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
  result = getattr(dtypes, name, None)
  if not isinstance(result, type(dtypes.float32)): raise TypeError(f"not a tinycore dtype: {dtype!r}")
  return result


def supports_dtype(device: str | None, dtype: Any) -> bool:
  """Whether `device` (None: the default device) computes with `dtype`: the dtype is in its renderer's
  `supported_dtypes`. A device without a renderer supports nothing; one whose renderer does not list its dtypes
  is assumed to support all of them."""
  from tinycore import Device
  renderer = getattr(Device[_device_name(device)], "renderer", None)
  if renderer is None: return False
  supported = getattr(renderer, "supported_dtypes", None)
  return True if supported is None else _as_dtype(dtype) in supported


def skip_unless_dtype(*dtypes: Any, device: str | None = None) -> None:
  """Skip the calling test (with the reason) unless the device supports every one of `dtypes`."""
  name = _device_name(device)
  for dtype in dtypes:
    if not supports_dtype(name, dtype):
      pytest.skip(f"device {name} does not support {_as_dtype(dtype).name}")


def np_dtype(dtype: Any) -> np.dtype:
  """The numpy dtype of a tinycore dtype (bfloat16 has none: TypeError)."""
  name = _as_dtype(dtype).name
  if name == "bfloat16": raise TypeError("bfloat16 has no numpy dtype")
  return np.dtype(name)


def is_tensor(x: Any) -> bool:
  from tinycore import Tensor
  return isinstance(x, Tensor)


def to_numpy(x: Any) -> np.ndarray:
  """A Tensor's values (`.numpy()`), or np.asarray of anything else."""
  return x.numpy() if is_tensor(x) else np.asarray(x)


def assert_close(actual: Any, expected: Any, atol: float | None = None, rtol: float | None = None,
                 dtype: Any = None, shape: Sequence[int] | None = None) -> None:
  """Assert that `actual` (a Tensor, array or scalar) matches `expected` (numpy) in shape and values.

  Floats compare with `atol`/`rtol` (defaults by dtype in DEFAULT_TOLERANCE; NaNs must match), ints and bools
  exactly. `dtype` (a tinycore dtype or name), if given, must be the Tensor's dtype; `shape` defaults to the
  expected array's shape and is checked on the Tensor before it is read back."""
  expected_array = np.asarray(expected)
  want_shape = tuple(expected_array.shape if shape is None else shape)
  if is_tensor(actual):
    if dtype is not None:
      assert actual.dtype == _as_dtype(dtype), f"dtype: got {actual.dtype}, expected {_as_dtype(dtype)}"
    assert tuple(actual.shape) == want_shape, f"shape: got {tuple(actual.shape)}, expected {want_shape}"
  elif dtype is not None:
    assert np.asarray(actual).dtype == np_dtype(dtype), f"dtype: got {np.asarray(actual).dtype}, expected {dtype}"
  actual_array = to_numpy(actual)
  assert actual_array.shape == want_shape, f"shape of the values: got {actual_array.shape}, expected {want_shape}"
  exact = expected_array.dtype.kind in "biu" and actual_array.dtype.kind in "biu"
  if exact and atol is None and rtol is None:
    np.testing.assert_array_equal(actual_array, expected_array)
    return
  reference_dtype = actual_array.dtype.name if actual_array.dtype.kind == "f" else expected_array.dtype.name
  default_atol, default_rtol = DEFAULT_TOLERANCE.get(reference_dtype, (0.0, 0.0))
  np.testing.assert_allclose(actual_array.astype(np.float64), expected_array.astype(np.float64),
                             atol=default_atol if atol is None else atol, rtol=default_rtol if rtol is None else rtol,
                             equal_nan=True)


def assert_equal(actual: Any, expected: Any, dtype: Any = None) -> None:
  """Exact comparison (ints, bools, and floats that must be bit-for-bit the reference's values)."""
  assert_close(actual, expected, atol=0.0, rtol=0.0, dtype=dtype)


def random_array(rng: np.random.Generator, shape: Sequence[int] | int, dtype: Any = "float32",
                 low: float | None = None, high: float | None = None) -> np.ndarray:
  """Fresh random data of `dtype` (a tinycore dtype, a name or a numpy dtype; bfloat16 gives float32 values that
  bfloat16 holds exactly). Floats: normal(0, 1), or uniform in [low, high) when a bound is given. Ints: uniform in
  [low, high), by default a small range whose sums and products of pairs fit the type (signed [-10, 10],
  unsigned [0, 15]). Bools: fair coin flips."""
  shape = (shape,) if isinstance(shape, int) else tuple(shape)
  name = _as_dtype(dtype).name
  if name == "bool": return np.asarray(rng.random(shape) < 0.5)  # np.asarray: a 0-d comparison gives a numpy scalar
  if name == "bfloat16":
    # 8 significant bits and a small exponent: exactly representable in bfloat16
    mantissa = rng.integers(-128, 129, size=shape).astype(np.float32)
    return np.asarray(mantissa * np.exp2(rng.integers(-8, 4, size=shape))).astype(np.float32)
  npdt = np.dtype(name)
  if npdt.kind == "f":
    if low is None and high is None: return rng.standard_normal(shape).astype(npdt)
    return rng.uniform(-1.0 if low is None else low, 1.0 if high is None else high, size=shape).astype(npdt)
  if low is None: low = 0 if npdt.kind == "u" else -10
  if high is None: high = 16 if npdt.kind == "u" else 11
  return rng.integers(int(low), int(high), size=shape, dtype=npdt)


def nonzero_array(rng: np.random.Generator, shape: Sequence[int] | int, dtype: Any = "int32",
                  low: int = -9, high: int = 10) -> np.ndarray:
  """Random ints (or integral floats) in [low, high) without zeros: divisors."""
  values = random_array(rng, shape, "int64", low=low, high=high)
  values[values == 0] = high - 1 if high - 1 != 0 else low
  return values.astype(np_dtype(dtype))


def fresh_seed(rng: np.random.Generator) -> int:
  """A seed for Tensor.manual_seed drawn from the test's generator (fresh each run, reproducible)."""
  return int(rng.integers(0, 2**31 - 1))


# ---------------------------------------------------------------------------- gradients
GRAD_TOL = {"atol": 2e-3, "rtol": 2e-3}  # float32 gradients against float64 differences
EPS = 1e-6                               # the central differences' step


def numeric_gradient(fn, xs: list[np.ndarray], weight: np.ndarray) -> list[np.ndarray]:
  """d sum(fn(*xs) * weight) / d xs by central differences in float64."""
  xs = [x.astype(np.float64) for x in xs]
  grads = []
  for x in xs:
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
      saved = x[i]
      x[i] = saved + EPS
      up = float((fn(*xs) * weight).sum())
      x[i] = saved - EPS
      down = float((fn(*xs) * weight).sum())
      x[i] = saved
      grad[i] = (up - down) / (2 * EPS)
    grads.append(grad)
  return grads


def check_gradient(rng: np.random.Generator, tc_fn, np_fn, xs: list[np.ndarray], tol: dict | None = None) -> None:
  """The gradients of sum(tc_fn(*inputs) * w) (w random; one realize of the lazy backward graph) against central
  differences of np_fn in float64."""
  from tinycore import Tensor
  out_shape = np.shape(np_fn(*[x.astype(np.float64) for x in xs]))
  weight = random_array(rng, out_shape, "float32")
  tensors = [Tensor(x) for x in xs]
  loss = (tc_fn(*tensors) * Tensor(weight)).sum()
  grads = loss.gradient(*tensors)
  grads[0].realize(*grads[1:])
  for got, want in zip(grads, numeric_gradient(np_fn, xs, weight.astype(np.float64))):
    assert_close(got, want.astype(np.float32), **(tol or GRAD_TOL))
