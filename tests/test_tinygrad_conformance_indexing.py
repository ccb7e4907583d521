"""Creation, movement and indexing where tinycore once differed from tinygrad 0.14 (found by differential testing):
each test checks values against numpy, and bad input against the error tinygrad (and torch) raise too."""
import math
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.errors import ArgumentError, DTypeError


def test_int_index_is_applied_before_index_tensors():
  """tinygrad and torch drop an int's dim first, so `t[1, :, idx]` keeps idx's dims where idx is (numpy would move
  them to the front, as the int and the tensor are not adjacent)."""
  x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
  out = Tensor(x)[1, :, Tensor([0, 4])]
  assert out.shape == (4, 2)
  np.testing.assert_array_equal(out.numpy(), x[1][:, [0, 4]])
  np.testing.assert_array_equal(Tensor(x)[None, 1, :, Tensor([[0, 2]])].numpy(), x[None, 1][:, :, [[0, 2]]])
  # index tensors that are not adjacent still put their dims first
  np.testing.assert_array_equal(Tensor(x)[Tensor([0, 2]), :, Tensor([1, 3])].numpy(), x[[0, 2], :, [1, 3]])
  t = Tensor(x.copy()).contiguous().realize()
  values = np.arange(8, dtype=np.float32).reshape(4, 2) - 10
  t[1, :, Tensor([0, 4])] = Tensor(values)
  expected = x.copy()
  expected[1][:, [0, 4]] = values
  np.testing.assert_array_equal(t.numpy(), expected)
  with pytest.raises(ValueError): t[1, :, Tensor([0, 4])] = Tensor(values.T.copy())  # numpy's (2, 4) is not it


def test_list_of_lists_is_a_tuple_of_indices():
  x = np.arange(20, dtype=np.int32).reshape(4, 5)
  t = Tensor(x)
  np.testing.assert_array_equal(t[[[0, 1], [2, 0]]].numpy(), x[[0, 1], [2, 0]])
  np.testing.assert_array_equal(t[[0, slice(1, 3)]].numpy(), x[0, 1:3])
  np.testing.assert_array_equal(t[[np.int64(3), np.int64(0)]].numpy(), x[[3, 0]])  # numpy ints: still one index
  masked = Tensor(x.copy()).contiguous().realize()
  masked[[[True] * 5, [False] * 5, [True] * 5, [False] * 5]] = -1  # a nested list of bools stays a mask
  expected = x.copy()
  expected[[0, 2]] = -1
  np.testing.assert_array_equal(masked.numpy(), expected)


def test_setitem_tensor_value_needs_the_tensor_dtype():
  ints = Tensor(np.zeros((2, 3), np.int32)).contiguous().realize()
  with pytest.raises(TypeError, match="dtype mismatch"): ints[Tensor([0])] = Tensor([[1.5, 2.5, 3.5]])
  with pytest.raises(TypeError, match="dtype mismatch"): ints[[0, 1], [1, 2]] = Tensor([1.5, 2.5])
  with pytest.raises(TypeError, match="dtype mismatch"): ints[ints == 0] = Tensor(1.5)
  with pytest.raises(TypeError, match="dtype mismatch"): ints[0] = Tensor(1.5)
  ints[Tensor([1])] = 2.9  # a Python number is converted
  ints[0, Tensor([2])] = Tensor(7)  # a 0-d tensor of a Python int takes the int dtype, as tinygrad's weak ones
  with pytest.raises(TypeError, match="dtype mismatch"): ints[0] = Tensor(True)  # a bool tensor is not weak
  np.testing.assert_array_equal(ints.numpy(), [[0, 0, 7], [2, 2, 2]])
  half = Tensor(np.zeros((2, 2), np.float16)).contiguous().realize()
  half[0] = Tensor(1.5)
  half[Tensor([1]), 1] = Tensor(-2.25)
  assert half.dtype is dtypes.float16
  np.testing.assert_array_equal(half.numpy(), np.array([[1.5, 1.5], [0, -2.25]], np.float16))


def test_scatter_src_needs_the_tensor_dtype():
  base = Tensor(np.zeros((2, 3), np.int32))
  index = Tensor([[2, 0, 1]])
  with pytest.raises(DTypeError, match="scatter src dtype"): base.scatter(1, index, Tensor([[1.0, 2.0, 3.0]]))
  with pytest.raises(DTypeError, match="scatter src dtype"):
    base.scatter_reduce(1, index, Tensor([[1.0, 2.0, 3.0]]), reduce="sum")
  np.testing.assert_array_equal(base.scatter(1, index, Tensor([[1, 2, 3]])).numpy(), [[2, 3, 1], [0, 0, 0]])
  np.testing.assert_array_equal(base.scatter(1, index, 5).numpy(), [[5, 5, 5], [0, 0, 0]])  # a number: converted


def test_one_hot_needs_integer_classes():
  with pytest.raises(DTypeError): Tensor([True, False]).one_hot(2)
  with pytest.raises(DTypeError): Tensor([1.0, 0.0]).one_hot(2)
  classes = Tensor(np.array([2, 0], np.uint8)).one_hot(3)
  np.testing.assert_array_equal(classes.numpy(), np.eye(3, dtype=np.int32)[[2, 0]])


def test_randint_needs_ints():
  with pytest.raises(TypeError): Tensor.randint(3, low=0.5, high=3)
  with pytest.raises(TypeError): Tensor.randint(3, high=3.0)
  with pytest.raises(DTypeError): Tensor.randint(3, high=3, dtype=dtypes.float32)
  with pytest.raises(DTypeError): Tensor.randint(3, high=2, dtype=dtypes.bool)
  draws = Tensor.randint(200, low=-4, high=-1, dtype=dtypes.int64)
  assert draws.dtype is dtypes.int64 and draws.shape == (200,)
  assert set(draws.numpy().tolist()) == {-4, -3, -2}


def test_int_data_has_no_inf_or_nan():
  with pytest.raises(OverflowError, match="int32"): Tensor([1.0, math.inf], dtype=dtypes.int32)
  with pytest.raises(OverflowError): Tensor(-math.inf, dtype=dtypes.uint8)
  with pytest.raises(ValueError, match="int8"): Tensor([math.nan], dtype=dtypes.int8)
  with pytest.raises(OverflowError, match="int32"): Tensor.full((2,), math.inf, dtype=dtypes.int32)
  with pytest.raises(ValueError): Tensor.full((2,), math.nan, dtype=dtypes.int8)
  assert Tensor([math.inf, 0.0], dtype=dtypes.bool).tolist() == [True, False]
  assert Tensor([math.inf, -2.5], dtype=dtypes.float16).tolist() == [math.inf, -2.5]
  assert Tensor([1.9, -1.9], dtype=dtypes.int32).tolist() == [1, -1]


def test_tensor_of_none_is_zero():
  t = Tensor(None)
  assert t.shape == () and t.dtype is dtypes.float32 and t.item() == 0.0
  t = Tensor(None, dtype=dtypes.int32)
  assert t.dtype is dtypes.int32 and (t + Tensor([1, 2])).tolist() == [1, 2]


def test_pad_with_negative_zero_keeps_an_int_dtype():
  x = np.arange(6, dtype=np.int32).reshape(2, 3)
  out = Tensor(x).pad((1, 1), value=-0.0)
  assert out.dtype is dtypes.int32
  np.testing.assert_array_equal(out.numpy(), np.pad(x, ((0, 0), (1, 1))))
  flags = Tensor(x > 2).pad(((1, 0), (0, 0)), value=-0.0)
  assert flags.dtype is dtypes.bool and flags.numpy().tolist() == np.pad(x > 2, ((1, 0), (0, 0))).tolist()
  floats = Tensor(x.astype(np.float32)).pad((1, 0), value=-0.0).numpy()
  assert np.signbit(floats[:, 0]).all() and not np.signbit(floats[:, 1:]).any()


def test_rearrange_unit_axes_and_merged_ellipsis():
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  np.testing.assert_array_equal(Tensor(x).rearrange("b c h -> b 1 c h").numpy(), x[:, None])
  np.testing.assert_array_equal(Tensor(x).rearrange("b c h -> h (c b) 1").numpy(),
                                x.transpose(2, 1, 0).reshape(4, 6, 1))
  np.testing.assert_array_equal(Tensor(x[:, None]).rearrange("b 1 c h -> b h c").numpy(), x.transpose(0, 2, 1))
  np.testing.assert_array_equal(Tensor(x).rearrange("b ... -> b (...)").numpy(), x.reshape(2, 12))
  np.testing.assert_array_equal(Tensor(x).rearrange("b … h -> (h …) b").numpy(), x.transpose(2, 1, 0).reshape(12, 2))
  np.testing.assert_array_equal(Tensor(x).rearrange("b ... -> ... b").numpy(), x.transpose(1, 2, 0))
  with pytest.raises(ArgumentError): Tensor(x).rearrange("b (...) -> b ...")
  with pytest.raises(ValueError): Tensor(x).rearrange("b 1 h -> b h")  # dim 1 has size 3, not 1


def test_cat_and_stack_name_a_dim_passed_positionally():
  a, b = Tensor([[1, 2]]), Tensor([[3, 4]])
  with pytest.raises(TypeError, match="dim="): a.cat(b, 1)
  with pytest.raises(TypeError, match="dim="): a.stack(b, 1)
  with pytest.raises(TypeError, match="unpack"): Tensor.cat([a, b])
  with pytest.raises(IndexError, match="use stack"): Tensor(1).cat(Tensor(2))
  np.testing.assert_array_equal(a.cat(b, dim=1).numpy(), [[1, 2, 3, 4]])
  np.testing.assert_array_equal(Tensor.stack([a, b], dim=1).numpy(), [[[1, 2], [3, 4]]])  # stack takes a list


def test_eye_takes_whole_floats_and_full_one_number():
  np.testing.assert_array_equal(Tensor.eye(2.0, 3).numpy(), np.eye(2, 3, dtype=np.float32))
  with pytest.raises(TypeError, match="int sizes"): Tensor.eye(2.5)
  with pytest.raises(TypeError, match="one number"): Tensor.full((2,), (1, 2))
  with pytest.raises(TypeError, match="one number"): Tensor.full((2,), Tensor(3.0))


def test_pad_names_mixed_padding_forms():
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  for padding in [(None, 1), ((1, 1), 2), ((1, 2, 3), None)]:
    with pytest.raises(TypeError, match="mixes forms"): Tensor(x).pad(padding)
  np.testing.assert_array_equal(Tensor(x).pad([[1, 0], None]).numpy(), np.pad(x, ((1, 0), (0, 0))))


def test_movement_names_bad_arguments():
  t = Tensor(np.ones((1, 3, 1), np.float32))
  with pytest.raises(TypeError, match="one dim"): t.squeeze((0, 2))
  assert t.squeeze(-1).shape == (1, 3) and t.squeeze().shape == (3,)
  with pytest.raises(ValueError, match="repeat counts"): t.repeat(-1, 1, 1)
  with pytest.raises(ValueError, match="split size"): t.split(0, dim=1)
  assert [p.shape for p in Tensor.ones(0, 2).split(0)] == [(0, 2)]  # an empty dim splits into one empty piece
