"""Bad input raises a clear exception that names the problem (and nothing is half-done): broadcasting shape
mismatches, wrong reshapes, out-of-range indices, unknown devices, matmul shape mismatches, and a few more.

tinygrad is not specific about every exception type, so most checks accept any of the usual ones and then look at
the message."""
import numpy as np
import pytest
from tinycore import Device, Tensor, dtypes
from tinycore.testing.helpers import assert_equal, random_array

USUAL = (ValueError, RuntimeError, IndexError, AssertionError, TypeError)


def _message(excinfo) -> str: return str(excinfo.value).lower()


def test_broadcast_shape_mismatch():
  with pytest.raises(USUAL) as excinfo:
    (Tensor.ones(3) + Tensor.ones(4)).realize()
  message = _message(excinfo)
  assert "broadcast" in message or ("3" in message and "4" in message), message


def test_broadcast_shape_mismatch_2d():
  with pytest.raises(USUAL) as excinfo:
    (Tensor.ones(2, 3) * Tensor.ones(3, 2)).realize()
  message = _message(excinfo)
  assert "broadcast" in message or "shape" in message, message


@pytest.mark.parametrize("new_shape", [(4, 2), (7,), (2, 2, 2)], ids=str)
def test_reshape_to_wrong_size(new_shape):
  with pytest.raises(USUAL) as excinfo:
    Tensor.ones(6).reshape(new_shape).realize()
  message = _message(excinfo)
  assert "reshape" in message or "size" in message or "shape" in message, message


def test_reshape_with_two_minus_ones():
  with pytest.raises(USUAL):
    Tensor.ones(6).reshape(-1, -1).realize()


@pytest.mark.parametrize("index", [3, -4, (0, 5), (1, 0, 0)], ids=str)
def test_index_out_of_range(index):
  t = Tensor.ones(3, 5)
  with pytest.raises(USUAL) as excinfo:
    t[index].realize()
  message = _message(excinfo)
  assert any(word in message for word in ("out of bounds", "out of range", "index", "dimension", "too many")), message


def test_unknown_device():
  with pytest.raises((ValueError, RuntimeError, LookupError)) as excinfo:
    Tensor.ones(2, device="NOSUCHDEV").realize()
  message = str(excinfo.value)
  assert "NOSUCHDEV" in message, message
  # the message helps: it names the devices that do exist (at least the one under test)
  assert Device.DEFAULT.partition(":")[0] in message, message


def test_unknown_device_lookup():
  with pytest.raises((ValueError, RuntimeError, LookupError)) as excinfo:
    Device["NOSUCHDEV"]
  assert "NOSUCHDEV" in str(excinfo.value)


@pytest.mark.parametrize("shapes", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3, 4), (5, 6)), ((7, 13), (5,))], ids=str)
def test_matmul_shape_mismatch(shapes):
  a, b = Tensor.ones(*shapes[0]), Tensor.ones(*shapes[1])
  with pytest.raises(USUAL) as excinfo:
    (a @ b).realize()
  message = _message(excinfo)
  assert any(str(n) in message for n in shapes[0] + shapes[1]) or "shape" in message, message


def test_cat_shape_mismatch():
  with pytest.raises(USUAL):
    Tensor.ones(2, 3).cat(Tensor.ones(2, 4), dim=0).realize()


def test_expand_to_incompatible_shape():
  with pytest.raises(USUAL):
    Tensor.ones(3).expand(4).realize()
  with pytest.raises(USUAL):
    Tensor.ones(2, 3).expand(2, 4).realize()


def test_permute_with_bad_order():
  with pytest.raises(USUAL):
    Tensor.ones(2, 3).permute(0, 0).realize()
  with pytest.raises(USUAL):
    Tensor.ones(2, 3).permute(0, 1, 2).realize()


def test_item_of_many_elements():
  with pytest.raises(USUAL):
    Tensor.ones(3).item()


def test_ragged_list():
  with pytest.raises(USUAL) as excinfo:
    Tensor([[1, 2], [3]])
  message = _message(excinfo)
  assert "shape" in message or "inhomogeneous" in message or "ragged" in message, message


def test_unknown_dtype_name():
  with pytest.raises((TypeError, ValueError, AttributeError, KeyError)) as excinfo:
    Tensor([1.0], dtype="float128")
  assert "float128" in str(excinfo.value)


def test_assign_shape_mismatch_leaves_target_untouched(rng):
  x = random_array(rng, (7, 5), "float32")
  a = Tensor(x).realize()
  with pytest.raises(USUAL):
    a.assign(Tensor.ones(5, 7)).realize()
  assert_equal(a, x)  # nothing half-written


def test_error_then_valid_work(rng):
  # a failed op leaves the library usable
  with pytest.raises(USUAL):
    (Tensor.ones(3) + Tensor.ones(4)).realize()
  x = random_array(rng, (3,), "float32")
  assert_equal(Tensor(x) + Tensor.ones(3), x + np.float32(1), dtype=dtypes.float32)
