"""Creating tensors: from Python scalars and lists, from numpy arrays of every dtype, and the factory methods
(zeros, ones, full, arange, eye, empty, linspace, rand, randn), with dtype= and the basic properties."""
import math
import numpy as np
import pytest
from tinycore import Device, Tensor, dtypes
from tinycore.testing.helpers import assert_close, assert_equal, fresh_seed, np_dtype, random_array, skip_unless_dtype

SHAPES = [(3,), (7, 5), (2, 3, 5), (1,), (4, 1, 6)]
NUMPY_DTYPES = [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
                dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64]


def _name(value) -> str: return getattr(value, "name", str(value))


# --- from Python values

@pytest.mark.parametrize("kind, dtype", [("int", dtypes.int32), ("float", dtypes.float32), ("bool", dtypes.bool)])
def test_from_python_scalar(rng, kind, dtype):
  value = {"int": int(rng.integers(-1000, 1000)), "float": float(np.float32(rng.uniform(-100, 100))),
           "bool": bool(rng.integers(0, 2))}[kind]
  t = Tensor(value)
  assert t.shape == () and t.ndim == 0 and t.numel() == 1
  assert t.dtype == dtype
  item = t.item()
  assert type(item) is type(value) and item == value
  assert_equal(t, np.array(value, dtype=np_dtype(dtype)))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("kind, dtype", [("int", dtypes.int32), ("float", dtypes.float32), ("bool", dtypes.bool)])
def test_from_nested_list_infers_dtype(rng, shape, kind, dtype):
  values = {"int": random_array(rng, shape, "int32", -1000, 1000), "float": random_array(rng, shape, "float32"),
            "bool": random_array(rng, shape, "bool")}[kind]
  t = Tensor(values.tolist())
  assert t.shape == shape and t.ndim == len(shape) and t.numel() == math.prod(shape)
  assert_equal(t, values, dtype=dtype)


def test_from_empty_list_is_float32_of_shape_0():
  t = Tensor([])
  assert t.shape == (0,) and t.dtype == dtypes.float32 and t.numel() == 0
  assert t.numpy().shape == (0,)


def test_from_mixed_lists():
  # one float makes the list float32; bools mixed with ints are ints
  assert_equal(Tensor([1, 2.5, -3]), np.array([1, 2.5, -3], dtype=np.float32), dtype=dtypes.float32)
  assert_equal(Tensor([[True, 2], [0, -1]]), np.array([[1, 2], [0, -1]], dtype=np.int32), dtype=dtypes.int32)


@pytest.mark.parametrize("values, dtype, expected", [
  ([1, 2, 3], dtypes.float16, np.array([1, 2, 3], dtype=np.float16)),
  ([1.7, -2.2, 0.5], dtypes.int32, np.array([1, -2, 0], dtype=np.int32)),  # float -> int truncates toward zero
  ([0, 1, -2], dtypes.bool, np.array([False, True, True])),
  ([[1, 2], [3, 4]], dtypes.uint8, np.array([[1, 2], [3, 4]], dtype=np.uint8)),
  ([1.5, -2.25], dtypes.float64, np.array([1.5, -2.25], dtype=np.float64)),
  ([True, False], dtypes.int8, np.array([1, 0], dtype=np.int8)),
], ids=["int->float16", "float->int32", "int->bool", "int->uint8", "float->float64", "bool->int8"])
def test_from_list_with_dtype(values, dtype, expected):
  skip_unless_dtype(dtype)
  assert_equal(Tensor(values, dtype=dtype), expected, dtype=dtype)


def test_dtype_given_by_name():
  skip_unless_dtype(dtypes.float16)
  assert_equal(Tensor([1, 2], dtype="float16"), np.array([1, 2], dtype=np.float16), dtype=dtypes.float16)


# --- from numpy

@pytest.mark.parametrize("shape", [(), (7, 5), (2, 3, 5), (0,), (3, 0)], ids=str)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=_name)
def test_from_numpy_every_dtype(rng, dtype, shape):
  skip_unless_dtype(dtype)
  kind = np_dtype(dtype).kind
  values = random_array(rng, shape, dtype, *({"i": (-100, 100), "u": (0, 200)}.get(kind, (None, None))))
  t = Tensor(values)
  assert t.dtype == dtype and t.shape == shape and t.numel() == values.size and t.device == Device.DEFAULT
  result = t.numpy()
  assert isinstance(result, np.ndarray) and result.dtype == values.dtype and result.shape == shape
  np.testing.assert_array_equal(result, values)


def test_from_non_contiguous_numpy(rng):
  base = random_array(rng, (6, 8), "float32")
  for view in (base.T, base[::2, 1::3], base[:, ::-1]):
    assert_equal(Tensor(view), view)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.int32, dtypes.bool], ids=_name)
def test_from_numpy_with_dtype_converts(rng, dtype):
  skip_unless_dtype(dtype)
  values = random_array(rng, (7, 5), "int32", -50, 50)
  assert_equal(Tensor(values, dtype=dtype), values.astype(np_dtype(dtype)), dtype=dtype)


def test_from_numpy_0d(rng):
  value = np.array(rng.standard_normal(), dtype=np.float32)
  t = Tensor(value)
  assert t.shape == () and t.dtype == dtypes.float32
  assert t.item() == float(value)


# --- factories

@pytest.mark.parametrize("shape", [(), (7, 5), (2, 3, 5), (3, 0)], ids=str)
def test_zeros_ones_default_float32(shape):
  for factory, fill in ((Tensor.zeros, 0.0), (Tensor.ones, 1.0)):
    t = factory(*shape) if shape else factory(())
    assert_equal(t, np.full(shape, fill, dtype=np.float32), dtype=dtypes.float32)
    assert_equal(factory(shape), np.full(shape, fill, dtype=np.float32), dtype=dtypes.float32)


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.float16, dtypes.bool, dtypes.uint32], ids=_name)
def test_zeros_ones_with_dtype(dtype):
  skip_unless_dtype(dtype)
  assert_equal(Tensor.zeros(7, 5, dtype=dtype), np.zeros((7, 5), dtype=np_dtype(dtype)), dtype=dtype)
  assert_equal(Tensor.ones(7, 5, dtype=dtype), np.ones((7, 5), dtype=np_dtype(dtype)), dtype=dtype)


@pytest.mark.parametrize("fill, dtype", [(7, dtypes.int32), (-2.5, dtypes.float32), (True, dtypes.bool)],
                         ids=["int", "float", "bool"])
def test_full_infers_dtype_from_fill(fill, dtype):
  assert_equal(Tensor.full((2, 3, 5), fill), np.full((2, 3, 5), fill, dtype=np_dtype(dtype)), dtype=dtype)
  assert_equal(Tensor.full((), fill), np.full((), fill, dtype=np_dtype(dtype)), dtype=dtype)


@pytest.mark.parametrize("fill, dtype", [(3, dtypes.float32), (1.5, dtypes.float16), (-4, dtypes.int8)],
                         ids=["int->float32", "float->float16", "int->int8"])
def test_full_with_dtype(fill, dtype):
  skip_unless_dtype(dtype)
  assert_equal(Tensor.full((4, 1, 6), fill, dtype=dtype), np.full((4, 1, 6), fill, dtype=np_dtype(dtype)), dtype=dtype)


@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 11, 3), (10, 0, -3), (-4, 4, 2), (0,), (3, 3), (5, 0), (1, 2)],
                         ids=str)
def test_arange_int(args):
  assert_equal(Tensor.arange(*args), np.arange(*args, dtype=np.int32), dtype=dtypes.int32)


@pytest.mark.parametrize("args", [(0, 2, 0.25), (1, -1, -0.5), (0.5, 4), (3.0,), (0, 1, 0.3), (-2.5, 2.5, 1.25)],
                         ids=str)
def test_arange_float(args):
  # any float argument makes the result float32
  assert_close(Tensor.arange(*args), np.arange(*args).astype(np.float32), atol=1e-6, rtol=1e-6,
               dtype=dtypes.float32)


def test_arange_with_dtype():
  assert_close(Tensor.arange(1, 8, 2, dtype=dtypes.float32), np.arange(1, 8, 2, dtype=np.float32),
               dtype=dtypes.float32)
  skip_unless_dtype(dtypes.int16)
  assert_equal(Tensor.arange(-3, 12, 4, dtype=dtypes.int16), np.arange(-3, 12, 4, dtype=np.int16), dtype=dtypes.int16)


@pytest.mark.parametrize("args", [(1,), (3,), (4, 2), (2, 5)], ids=str)
def test_eye(args):
  assert_equal(Tensor.eye(*args), np.eye(*args, dtype=np.float32), dtype=dtypes.float32)


def test_eye_with_dtype():
  assert_equal(Tensor.eye(3, dtype=dtypes.int32), np.eye(3, dtype=np.int32), dtype=dtypes.int32)
  assert_equal(Tensor.eye(3, dtype=dtypes.bool), np.eye(3, dtype=bool), dtype=dtypes.bool)


@pytest.mark.parametrize("shape, dtype", [((2, 3), dtypes.float32), ((4,), dtypes.int32), ((3, 0), dtypes.float32),
                                          ((1, 5, 1), dtypes.bool)], ids=str)
def test_empty_has_shape_and_dtype(shape, dtype):
  # the values of an empty tensor are undefined: only its shape, dtype and size are checked
  t = Tensor.empty(*shape, dtype=dtype)
  assert t.shape == shape and t.dtype == dtype and t.numel() == math.prod(shape) and t.ndim == len(shape)
  values = t.numpy()
  assert values.shape == shape and values.dtype == np_dtype(dtype)


@pytest.mark.parametrize("args", [(0, 1, 5), (-2, 3, 7), (5, 1, 3), (2.5, 2.5, 4), (3, 9, 1)], ids=str)
def test_linspace(args):
  assert_close(Tensor.linspace(*args), np.linspace(*args, dtype=np.float32), atol=1e-5, rtol=1e-5,
               dtype=dtypes.float32)


def test_linspace_with_dtype():
  skip_unless_dtype(dtypes.float64)
  assert_close(Tensor.linspace(-1, 1, 9, dtype=dtypes.float64), np.linspace(-1, 1, 9), atol=1e-12,
               dtype=dtypes.float64)


# --- random

def test_rand_same_seed_same_values(rng):
  seed = fresh_seed(rng)
  Tensor.manual_seed(seed)
  first = Tensor.rand(7, 5).numpy()
  also_first = Tensor.rand(33).numpy()
  Tensor.manual_seed(seed)
  second = Tensor.rand(7, 5).numpy()
  also_second = Tensor.rand(33).numpy()
  np.testing.assert_array_equal(first, second)
  np.testing.assert_array_equal(also_first, also_second)
  # the next draw differs from the first one
  assert not np.array_equal(Tensor.rand(7, 5).numpy(), first)


def test_rand_uniform_in_unit_interval(rng):
  Tensor.manual_seed(fresh_seed(rng))
  t = Tensor.rand(100, 100)
  assert t.shape == (100, 100) and t.dtype == dtypes.float32
  values = t.numpy()
  assert values.min() >= 0.0 and values.max() < 1.0
  assert abs(values.mean() - 0.5) < 0.02 and abs(values.std() - math.sqrt(1 / 12)) < 0.02
  assert len(np.unique(values)) > 9000  # not a handful of repeated values


def test_randn_mean_and_std(rng):
  Tensor.manual_seed(fresh_seed(rng))
  t = Tensor.randn(10_000)
  assert t.shape == (10_000,) and t.dtype == dtypes.float32
  values = t.numpy()
  assert np.isfinite(values).all()
  assert abs(values.mean()) < 0.05 and abs(values.std() - 1.0) < 0.05
  assert 0.6 < np.mean(np.abs(values) < 1.0) < 0.76  # about 68% within one standard deviation


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float64], ids=_name)
def test_rand_randn_with_dtype(rng, dtype):
  skip_unless_dtype(dtype)
  Tensor.manual_seed(fresh_seed(rng))
  uniform, normal = Tensor.rand(64, 3, dtype=dtype), Tensor.randn(2, 50, dtype=dtype)
  assert uniform.dtype == dtype and uniform.shape == (64, 3)
  assert normal.dtype == dtype and normal.shape == (2, 50)
  values = uniform.numpy()
  assert values.dtype == np_dtype(dtype) and values.min() >= 0.0 and values.max() < 1.0 and values.std() > 0.1
  assert np.isfinite(normal.numpy()).all() and normal.numpy().std() > 0.3


# --- properties

@pytest.mark.parametrize("shape", [(), (1,), (7, 5), (2, 3, 5), (4, 1, 6), (0,), (3, 0)], ids=str)
def test_properties(shape):
  t = Tensor.ones(*shape) if shape else Tensor(1.0)
  assert t.shape == shape and isinstance(t.shape, tuple)
  assert t.ndim == len(shape) and t.numel() == math.prod(shape) and t.dtype == dtypes.float32
  assert t.device == Device.DEFAULT
  assert_equal(t, np.ones(shape, dtype=np.float32))


def test_device_is_canonical_default(device):
  assert device == Device.DEFAULT == Device.canonicalize(device)
  assert Tensor([1, 2]).device == device and Tensor.zeros(3).device == device
  assert Tensor(np.ones(2, dtype=np.float32)).device == device
  prefix, separator, rest = device.partition(":")
  assert Tensor.ones(2, device=prefix.lower() + separator + rest).device == device  # names are case-insensitive
