"""The 8-bit floats (dtypes.fp8e4m3, fp8e5m2 and their fnuz forms): the formats against ml_dtypes, rounding and
saturation, promotion, host interop, and a clear error where a renderer lacks a dtype. What each device computes with
them is the conformance suite's (tinycore.testing.test_dtypes: every byte, every tie, per-op rounding)."""
from __future__ import annotations
import math
import numpy as np
import pytest
from tinycore import Device, Tensor, dtypes
from tinycore.dtype import FP8_FORMATS, float_to_fp8, fp8_to_float, least_upper_dtype, round_to_fp8, to_np_dtype

FP8S = list(dtypes.fp8s)
# each format's largest finite value and its smallest subnormal
LARGEST = {dtypes.fp8e4m3: 448.0, dtypes.fp8e5m2: 57344.0, dtypes.fp8e4m3fnuz: 240.0, dtypes.fp8e5m2fnuz: 57344.0}
SMALLEST = {dtypes.fp8e4m3: 2.0 ** -9, dtypes.fp8e5m2: 2.0 ** -16, dtypes.fp8e4m3fnuz: 2.0 ** -10,
            dtypes.fp8e5m2fnuz: 2.0 ** -17}


def probe_values(dtype) -> np.ndarray:
  from tinycore.testing.test_dtypes import fp8_probe_values
  return fp8_probe_values(dtype, np.random.default_rng(0))


def test_the_formats_as_ml_dtypes_defines_them():
  ml_dtypes = pytest.importorskip("ml_dtypes")
  theirs = {dtypes.fp8e4m3: ml_dtypes.float8_e4m3fn, dtypes.fp8e5m2: ml_dtypes.float8_e5m2,
            dtypes.fp8e4m3fnuz: ml_dtypes.float8_e4m3fnuz, dtypes.fp8e5m2fnuz: ml_dtypes.float8_e5m2fnuz}
  for dtype, their_type in theirs.items():
    codes = np.arange(256, dtype=np.uint8)
    expected = codes.view(their_type).astype(np.float64)
    ours = np.array([fp8_to_float(int(c), dtype) for c in codes])
    np.testing.assert_array_equal(ours, expected)
    values = probe_values(dtype).astype(np.float64)
    # ml_dtypes rounds to nearest even and makes inf of a finite overflow: saturate first (the OCP convention)
    clipped = np.where(np.isinf(values), values, np.clip(values, -LARGEST[dtype], LARGEST[dtype]))
    expected_codes = clipped.astype(np.float32).astype(their_type).view(np.uint8)
    our_codes = np.array([float_to_fp8(v, dtype) for v in values], np.uint8)
    same = (expected_codes == our_codes) | (np.isnan(expected_codes.view(their_type).astype(np.float32)) &
                                            np.isnan(our_codes.view(their_type).astype(np.float32)))
    assert same.all(), [(values[i], expected_codes[i], our_codes[i]) for i in np.nonzero(~same)[0][:5]]


@pytest.mark.parametrize("dtype", FP8S, ids=lambda d: d.name)
def test_conversions_round_to_even_and_saturate(dtype):
  fmt = FP8_FORMATS[dtype]
  assert fp8_to_float(fmt.max_code, dtype) == LARGEST[dtype] == round_to_fp8(1e9, dtype)
  assert round_to_fp8(-1e9, dtype) == -LARGEST[dtype]
  assert fp8_to_float(1, dtype) == SMALLEST[dtype]
  assert round_to_fp8(SMALLEST[dtype] / 2, dtype) == 0.0  # a tie: to the even neighbour, zero
  assert round_to_fp8(SMALLEST[dtype] * 1.5, dtype) == SMALLEST[dtype] * 2  # a tie between 1 and 2 steps: 2
  one_ulp = 2.0 ** -fmt.mantissa_bits
  assert round_to_fp8(1 + one_ulp / 2, dtype) == 1.0 and round_to_fp8(1 + 1.5 * one_ulp, dtype) == 1 + 2 * one_ulp
  assert math.isnan(round_to_fp8(math.nan, dtype))
  assert round_to_fp8(math.inf, dtype) == math.inf if fmt.kind == "ieee" else math.isnan(round_to_fp8(math.inf, dtype))
  if fmt.kind == "fnuz": assert float_to_fp8(-0.0, dtype) == 0 and float_to_fp8(-SMALLEST[dtype] / 4, dtype) == 0
  else: assert float_to_fp8(-0.0, dtype) == 0x80


def test_python_scalars_and_constants_are_rounded():
  x = Tensor([1.0, 2.0, 3.0]).cast(dtypes.fp8e4m3)  # 0.3 is held as 0.3125
  np.testing.assert_array_equal((x * 0.3).numpy(), [round_to_fp8(v * 0.3125, dtypes.fp8e4m3) for v in (1, 2, 3)])
  np.testing.assert_array_equal(Tensor.full((3,), 1000.0, dtype=dtypes.fp8e4m3).numpy(), [448.0] * 3)


def test_promotion_and_host_interop():
  assert least_upper_dtype(dtypes.fp8e4m3, dtypes.fp8e5m2) is dtypes.float16
  assert least_upper_dtype(dtypes.fp8e4m3, dtypes.float32) is dtypes.float32
  assert least_upper_dtype(dtypes.int8, dtypes.fp8e5m2) is dtypes.fp8e5m2
  assert all(dtypes.is_float(d) and d.itemsize == 1 for d in FP8S) and dtypes.finfo(dtypes.fp8e5m2) == (5, 2)
  assert dtypes.float8_e4m3fn is dtypes.fp8e4m3 and repr(dtypes.fp8e4m3) == "dtypes.fp8e4m3"
  t = Tensor([[0.5, -2.0]], dtype="fp8e5m2")
  assert t.dtype is dtypes.fp8e5m2 and t.numpy().dtype == np.float32 and t.tolist() == [[0.5, -2.0]]
  assert (t + Tensor([[1, 2]], dtype=dtypes.int8)).dtype is dtypes.fp8e5m2
  assert (Tensor([1.5], dtype=dtypes.fp8e4m3) + 1).dtype is dtypes.fp8e4m3
  assert Tensor.rand(100, dtype=dtypes.fp8e4m3).numpy().max() < 1.0
  assert bytes(t.data()) == bytes([float_to_fp8(0.5, dtypes.fp8e5m2), float_to_fp8(-2.0, dtypes.fp8e5m2)])
  with pytest.raises(TypeError, match="fp8e4m3 has no numpy dtype"): to_np_dtype(dtypes.fp8e4m3)


def test_a_renderer_without_them_says_why():
  from types import SimpleNamespace
  from tinycore.device.kernels import check_dtypes
  renderer = SimpleNamespace(supported_dtypes=frozenset({dtypes.float32}),
                             unsupported_reasons={"fp8e4m3": "no 8-bit float conversions here"})
  kernel = Tensor([1.0]).cast(dtypes.fp8e4m3).uop
  with pytest.raises(TypeError, match="dtype fp8e4m3 is not supported on device X: no 8-bit float conversions here"):
    check_dtypes(renderer, kernel, "X")


@pytest.mark.parametrize("dtype", FP8S, ids=lambda d: d.name)
def test_numpy_conversions_match_the_scalar_ones(dtype):
  from tinycore.dtype import fp8_decode, fp8_encode
  values = probe_values(dtype).astype(np.float64)
  np.testing.assert_array_equal(fp8_encode(values, dtype), [float_to_fp8(v, dtype) for v in values])
  decoded = fp8_decode(np.arange(256), dtype)
  assert decoded.dtype == np.float32
  np.testing.assert_array_equal(decoded, np.array([fp8_to_float(c, dtype) for c in range(256)], np.float32))
