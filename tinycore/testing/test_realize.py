"""Reading data back and the tensor lifecycle: contiguous, realize, numpy, tolist, item, clone, to(device) on the
same device, and assign (whole tensors and views; the buffer is kept; lazy reads before and after)."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, assert_equal, np_dtype, random_array, skip_unless_dtype


def _buffer_of(t: Tensor):
  """What identifies the storage behind a realized tensor: tinygrad's `t.uop.base.realized` (or `t.uop.buffer`),
  else the BUFFER UOp the tensor is a view of (`t.uop.buffer_uop`); None when the core exposes none of them."""
  for path in (("uop", "base", "realized"), ("uop", "buffer"), ("uop", "buffer_uop")):
    obj = t
    try:
      for attr in path: obj = getattr(obj, attr)
    except Exception:
      continue
    if obj is not None: return obj
  return None


def test_contiguous(rng):
  x = random_array(rng, (7, 5), "float32")
  t = Tensor(x).T.contiguous()
  assert_equal(t, x.T, dtype=dtypes.float32)
  assert_equal(Tensor(x)[::2, ::-1].contiguous() + 1, x[::2, ::-1] + 1, dtype=dtypes.float32)


def test_realize_returns_self(rng):
  x = random_array(rng, (7, 5), "float32")
  t = Tensor(x) * 3
  assert t.realize() is t
  assert_close(t, x * 3, dtype=dtypes.float32)
  assert_close(t + 1, x * 3 + 1)  # a realized tensor feeds later kernels
  a, b = Tensor(x) + 1, Tensor(x) - 1
  a.realize(b)  # several at once
  assert_close(a, x + 1)
  assert_close(b, x - 1)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.bool, dtypes.uint8, dtypes.float16],
                         ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(), (7, 5), (0,), (3, 0)], ids=str)
def test_numpy_dtype_and_shape(rng, shape, dtype):
  skip_unless_dtype(dtype)
  x = random_array(rng, shape, dtype)
  computed = Tensor(x) | False if dtype is dtypes.bool else Tensor(x) + 0  # read back a kernel's output
  result = computed.numpy()
  assert isinstance(result, np.ndarray) and result.dtype == np_dtype(dtype) and result.shape == shape
  np.testing.assert_array_equal(result, x)


def _flatten(nested) -> list:
  return [leaf for item in nested for leaf in _flatten(item)] if isinstance(nested, list) else [nested]


@pytest.mark.parametrize("shape", [(3,), (7, 5), (2, 3, 5)], ids=str)
def test_tolist(rng, shape):
  floats = random_array(rng, shape, "float32")
  assert (Tensor(floats) * 1).tolist() == floats.tolist()
  ints = random_array(rng, shape, "int32", -1000, 1000)
  assert (Tensor(ints) + 0).tolist() == ints.tolist()
  flags = random_array(rng, shape, "bool")
  listed = Tensor(flags).tolist()
  assert listed == flags.tolist()
  assert all(type(v) is bool for v in _flatten(listed))
  assert all(type(v) is int for v in _flatten((Tensor(ints) * 1).tolist()))
  assert all(type(v) is float for v in _flatten(Tensor(floats).tolist()))


def test_item_types(rng):
  value = float(np.float32(rng.standard_normal()))
  item = (Tensor(value) * 1).item()
  assert type(item) is float and item == value
  count = int(rng.integers(-1000, 1000))
  item = (Tensor(count) + 0).item()
  assert type(item) is int and item == count
  assert Tensor(True).item() is True and Tensor(False).item() is False
  x = random_array(rng, (7, 5), "float32")
  assert Tensor(x).sum().item() == pytest.approx(float(x.astype(np.float64).sum()), abs=1e-4, rel=1e-5)
  assert Tensor(x)[2:3, 4:5].item() == float(x[2, 4])  # any one-element shape


def test_clone(rng, device):
  x = random_array(rng, (7, 5), "float32")
  a = Tensor(x).realize()
  c = a.clone().realize()
  assert c is not a and c.device == device and c.dtype == dtypes.float32 and c.shape == (7, 5)
  assert_equal(c, x)
  c.assign(Tensor.zeros(7, 5)).realize()
  assert_equal(c, np.zeros((7, 5), dtype=np.float32))
  assert_equal(a, x)  # the original is untouched


def test_to_same_device(rng, device):
  x = random_array(rng, (7, 5), "float32")
  t = Tensor(x)
  moved = t.to(device)
  assert moved is t and moved.device == device
  assert_equal(moved, x)
  assert_equal((Tensor(x) + 1).to(device), x + 1)


# --- assign

def test_assign_whole_tensor(rng):
  x, y = random_array(rng, (7, 5), "float32"), random_array(rng, (7, 5), "float32")
  a = Tensor(x).realize()
  assert a.assign(Tensor(y)) is a
  a.realize()
  assert_equal(a, y, dtype=dtypes.float32)
  assert a.shape == (7, 5)


def test_assign_computed_value_of_itself(rng):
  x = random_array(rng, (33, 17), "float32")
  a = Tensor(x).realize()
  a.assign(a * 2 + 1).realize()
  assert_close(a, x * 2 + 1)
  a.assign(a.flip(0)).realize()  # reads every element it overwrites
  assert_close(a, (x * 2 + 1)[::-1])


def test_assign_int(rng):
  x, y = random_array(rng, (7, 5), "int32", -100, 100), random_array(rng, (7, 5), "int32", -100, 100)
  a = Tensor(x).realize()
  a.assign(Tensor(y) - a).realize()
  assert_equal(a, y - x, dtype=dtypes.int32)


def test_assign_keeps_the_buffer(rng):
  x, y = random_array(rng, (7, 5), "float32"), random_array(rng, (7, 5), "float32")
  a = Tensor(x).realize()
  before = _buffer_of(a)
  if before is None: pytest.skip("the core exposes no buffer of a tensor (t.uop.base.realized, t.uop.buffer, "
                                 "t.uop.buffer_uop)")
  a.assign(Tensor(y)).realize()
  assert _buffer_of(a) is before
  a.assign(a + 1).realize()
  assert _buffer_of(a) is before
  assert_close(a, y + 1)


def test_assign_into_slice(rng):
  a = Tensor.zeros(8).contiguous().realize()
  values = random_array(rng, (4,), "float32")
  a[2:6].assign(Tensor(values)).realize()
  expected = np.zeros(8, dtype=np.float32)
  expected[2:6] = values
  assert_equal(a, expected)


def test_assign_into_row_and_strided_view(rng):
  x = random_array(rng, (4, 6), "float32")
  a = Tensor(x).realize()
  row, block = random_array(rng, (6,), "float32"), random_array(rng, (4, 2), "float32")
  a[1].assign(Tensor(row)).realize()
  a[:, 1:5:2].assign(Tensor(block)).realize()
  expected = x.copy()
  expected[1] = row
  expected[:, 1:5:2] = block
  assert_equal(a, expected)


def test_assign_into_view_of_int(rng):
  x = random_array(rng, (5, 3), "int32", -100, 100)
  a = Tensor(x).realize()
  a[3:].assign(Tensor(np.full((2, 3), 7, dtype=np.int32))).realize()
  expected = x.copy()
  expected[3:] = 7
  assert_equal(a, expected, dtype=dtypes.int32)


def test_read_before_assign_keeps_old_values(rng):
  x, y = random_array(rng, (7, 5), "float32"), random_array(rng, (7, 5), "float32")
  a = Tensor(x).realize()
  doubled = (a * 2).realize()  # read (and realized) before the assign
  a.assign(Tensor(y)).realize()
  assert_close(doubled, x * 2)
  assert_equal(a, y)


def test_read_after_assign_sees_new_values(rng):
  x, y = random_array(rng, (7, 5), "float32"), random_array(rng, (7, 5), "float32")
  a = Tensor(x).realize()
  a.assign(Tensor(y))  # not realized explicitly: later reads must see it
  later = a * 2 + 1
  assert_close(later, y * 2 + 1)
  assert_equal(a, y)


def test_assign_sequence(rng):
  x = random_array(rng, (7, 5), "float32")
  a = Tensor(x).realize()
  for _ in range(3): a.assign(a + 1).realize()
  assert_close(a, x + 3)


def test_inplace_add(rng):
  x, y = random_array(rng, (7, 5), "float32"), random_array(rng, (7, 5), "float32")
  a = Tensor(x).realize()
  a += Tensor(y)
  assert_close(a.realize(), x + y)
