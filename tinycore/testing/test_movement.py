"""Movement ops against numpy: reshape, permute, transpose, expand, pad, shrink, flip, getitem, cat, stack, squeeze,
unsqueeze, flatten, repeat, and chains of them feeding arithmetic (non-contiguous inputs into kernels)."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, assert_equal, random_array

BASE = (4, 5, 6)  # the shape most views are taken of


def _ids(value) -> str: return str(value).replace(" ", "")


@pytest.mark.parametrize("new_shape", [(20, 6), (4, -1), (-1,), (2, 10, 6), (1, 120, 1), (6, 5, 4)], ids=_ids)
def test_reshape(rng, new_shape):
  x = random_array(rng, BASE, "float32")
  assert_equal(Tensor(x).reshape(new_shape), x.reshape(new_shape), dtype=dtypes.float32)
  assert_equal(Tensor(x).reshape(*new_shape), x.reshape(new_shape), dtype=dtypes.float32)


def test_reshape_scalar_and_zero_size(rng):
  value = random_array(rng, (1,), "float32")
  assert_equal(Tensor(value).reshape(()), value.reshape(()))
  assert_equal(Tensor(value.reshape(())).reshape(1, 1), value.reshape(1, 1))
  empty = np.zeros((3, 0), dtype=np.float32)
  assert_equal(Tensor(empty).reshape(0, 5), empty.reshape(0, 5))


@pytest.mark.parametrize("order", [(2, 0, 1), (1, 2, 0), (0, 2, 1), (2, 1, 0)], ids=_ids)
def test_permute(rng, order):
  x = random_array(rng, BASE, "float32")
  assert_equal(Tensor(x).permute(order), x.transpose(order), dtype=dtypes.float32)
  assert_equal(Tensor(x).permute(*order), x.transpose(order), dtype=dtypes.float32)


def test_transpose(rng):
  x = random_array(rng, BASE, "float32")
  t = Tensor(x)
  assert_equal(t.transpose(), np.swapaxes(x, 1, 0))  # default: the first two dims
  assert_equal(t.transpose(0, 2), np.swapaxes(x, 0, 2))
  assert_equal(t.transpose(-1, -2), np.swapaxes(x, -1, -2))
  matrix = random_array(rng, (7, 5), "float32")
  assert_equal(Tensor(matrix).T, matrix.T)


def test_T_is_transpose_of_first_two_dims(rng):
  # tinygrad: `.T` is an alias for `.transpose()`, which swaps dims 0 and 1 (numpy's .T reverses all dims)
  x = random_array(rng, BASE, "float32")
  assert_equal(Tensor(x).T, np.swapaxes(x, 0, 1))


@pytest.mark.parametrize("source, target", [((3, 1), (3, 4)), ((1, 4), (5, 4)), ((3,), (2, 3)), ((4, 1, 6), (4, 5, 6)),
                                            ((1,), (2, 3, 1)), ((), (2, 2))], ids=_ids)
def test_expand(rng, source, target):
  x = random_array(rng, source, "float32")
  assert_equal(Tensor(x).expand(target), np.broadcast_to(x, target), dtype=dtypes.float32)
  assert_equal(Tensor(x).expand(*target), np.broadcast_to(x, target), dtype=dtypes.float32)


def test_expand_minus_one_keeps_dim(rng):
  x = random_array(rng, (4, 1, 6), "float32")
  assert_equal(Tensor(x).expand(-1, 3, -1), np.broadcast_to(x, (4, 3, 6)))


PADS = [((1, 2), (0, 3)), ((0, 0), (2, 2)), ((3, 0), (0, 0)), (None, (1, 0))]


@pytest.mark.parametrize("padding", PADS, ids=_ids)
@pytest.mark.parametrize("value", [0.0, -1.5], ids=["zero", "value"])
def test_pad(rng, padding, value):
  x = random_array(rng, (7, 5), "float32")
  np_padding = [(0, 0) if p is None else p for p in padding]
  expected = np.pad(x, np_padding, mode="constant", constant_values=value)
  result = Tensor(x).pad(padding) if value == 0.0 else Tensor(x).pad(padding, value=value)
  assert_equal(result, expected, dtype=dtypes.float32)


def test_pad_3d_and_int(rng):
  x = random_array(rng, (2, 3, 5), "float32")
  assert_equal(Tensor(x).pad(((1, 0), (0, 2), (1, 1))), np.pad(x, ((1, 0), (0, 2), (1, 1))))
  ints = random_array(rng, (3, 4), "int32", -100, 100)
  assert_equal(Tensor(ints).pad(((1, 1), (0, 2)), value=7), np.pad(ints, ((1, 1), (0, 2)), constant_values=7),
               dtype=dtypes.int32)


@pytest.mark.parametrize("arg, index", [
  (((1, 3), (0, 5), (2, 6)), (slice(1, 3), slice(0, 5), slice(2, 6))),
  ((None, (1, 2), None), (slice(None), slice(1, 2), slice(None))),
  (((0, 4), (4, 5), (0, 1)), (slice(0, 4), slice(4, 5), slice(0, 1))),
  (((2, 2), None, None), (slice(2, 2), slice(None), slice(None))),
], ids=["ranges", "none", "edges", "empty"])
def test_shrink(rng, arg, index):
  x = random_array(rng, BASE, "float32")
  assert_equal(Tensor(x).shrink(arg), x[index], dtype=dtypes.float32)


@pytest.mark.parametrize("axis", [0, -1, (0, 2), (0, 1, 2)], ids=_ids)
def test_flip(rng, axis):
  x = random_array(rng, BASE, "float32")
  assert_equal(Tensor(x).flip(axis), np.flip(x, axis), dtype=dtypes.float32)


GETITEM = {
  "int": 1, "negative_int": -1, "two_ints": (1, 2), "three_ints": (3, -2, 4),
  "slice": slice(1, 3), "step": (slice(None), slice(None, None, 2)), "negative_step": slice(None, None, -1),
  "negative_step_range": (slice(3, 0, -2), None, slice(1, None)), "ellipsis_last": (Ellipsis, -1),
  "none_front": (None, 1), "ellipsis_none": (Ellipsis, None), "int_ellipsis_slice": (1, Ellipsis, slice(-3, None)),
  "mixed": (slice(-2, None), 0, slice(None, None, 3)), "out_of_range_slice": slice(10, 20),
  "last_dim_step": (slice(None), slice(None), slice(None, None, -4)), "negative_bounds": (slice(-3, -1), slice(-4, 5)),
}


@pytest.mark.parametrize("name", list(GETITEM))
def test_getitem(rng, name):
  index = GETITEM[name]
  x = random_array(rng, BASE, "float32")
  assert_equal(Tensor(x)[index], x[index], dtype=dtypes.float32)


def test_getitem_scalar_item(rng):
  x = random_array(rng, BASE, "float32")
  element = Tensor(x)[3, 1, -1]
  assert element.shape == ()
  assert element.item() == float(x[3, 1, -1])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(rng, dim):
  shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
  for i, size in enumerate((1, 3, 2)): shapes[i][dim] = size
  arrays = [random_array(rng, shape, "float32") for shape in shapes]
  tensors = [Tensor(a) for a in arrays]
  expected = np.concatenate(arrays, axis=dim)
  assert_equal(tensors[0].cat(*tensors[1:], dim=dim), expected, dtype=dtypes.float32)
  assert_equal(Tensor.cat(*tensors, dim=dim), expected, dtype=dtypes.float32)


def test_cat_with_zero_size(rng):
  x = random_array(rng, (3, 4), "float32")
  assert_equal(Tensor(x).cat(Tensor(np.zeros((0, 4), np.float32)), dim=0), x)
  ints = random_array(rng, (5,), "int32", -100, 100)
  assert_equal(Tensor(ints).cat(Tensor(ints[::-1].copy())), np.concatenate([ints, ints[::-1]]), dtype=dtypes.int32)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack(rng, dim):
  arrays = [random_array(rng, (3, 4), "float32") for _ in range(3)]
  tensors = [Tensor(a) for a in arrays]
  expected = np.stack(arrays, axis=dim)
  assert_equal(tensors[0].stack(*tensors[1:], dim=dim), expected, dtype=dtypes.float32)
  assert_equal(Tensor.stack(*tensors, dim=dim), expected, dtype=dtypes.float32)


def test_squeeze_unsqueeze(rng):
  x = random_array(rng, (4, 1, 6, 1), "float32")
  t = Tensor(x)
  assert_equal(t.squeeze(), x.squeeze())
  assert_equal(t.squeeze(1), x.squeeze(1))
  assert_equal(t.squeeze(-1), x.squeeze(-1))
  assert_equal(t.squeeze(0), x)  # a dim whose size is not 1 is left alone
  y = random_array(rng, (3, 5), "float32")
  assert_equal(Tensor(y).unsqueeze(0), y[None])
  assert_equal(Tensor(y).unsqueeze(1), y[:, None])
  assert_equal(Tensor(y).unsqueeze(-1), y[..., None])
  assert_equal(Tensor(2.5).unsqueeze(0), np.array([2.5], dtype=np.float32))


def test_flatten(rng):
  x = random_array(rng, (2, 3, 4, 5), "float32")
  t = Tensor(x)
  assert_equal(t.flatten(), x.reshape(-1))
  assert_equal(t.flatten(1), x.reshape(2, -1))
  assert_equal(t.flatten(0, 1), x.reshape(6, 4, 5))
  assert_equal(t.flatten(start_dim=-2), x.reshape(2, 3, 20))
  assert_equal(t.flatten(1, 2), x.reshape(2, 12, 5))


@pytest.mark.parametrize("repeats", [(2, 1), (1, 3), (2, 3), (2, 1, 3)], ids=_ids)
def test_repeat(rng, repeats):
  x = random_array(rng, (3, 4), "float32")
  assert_equal(Tensor(x).repeat(repeats), np.tile(x, repeats), dtype=dtypes.float32)
  assert_equal(Tensor(x).repeat(*repeats), np.tile(x, repeats), dtype=dtypes.float32)


# --- chains of views feeding kernels

def test_chain_permute_slice_flip_arithmetic(rng):
  x = random_array(rng, BASE, "float32")
  expected = x.transpose(2, 0, 1)[:, ::-1, 1:] * 2 + 1
  assert_close(Tensor(x).permute(2, 0, 1)[:, ::-1, 1:] * 2 + 1, expected, dtype=dtypes.float32)


def test_chain_reshape_transpose_broadcast(rng):
  x, y = random_array(rng, (4, 6), "float32"), random_array(rng, (6,), "float32")
  expected = x.reshape(6, 4).T[1:3] + y
  assert_close(Tensor(x).reshape(6, 4).T[1:3] + Tensor(y), expected, dtype=dtypes.float32)


def test_chain_pad_flip_step_reduce(rng):
  x = random_array(rng, (2, 3, 5), "float32")
  expected = np.flip(np.pad(x, ((1, 1), (0, 0), (2, 1))), 0)[..., ::2].sum(axis=1)
  result = Tensor(x).pad(((1, 1), (0, 0), (2, 1))).flip(0)[..., ::2].sum(axis=1)
  assert_close(result, expected, dtype=dtypes.float32, atol=1e-5, rtol=1e-5)


def test_chain_expand_into_binary(rng):
  col, full = random_array(rng, (3,), "float32"), random_array(rng, (3, 4), "float32")
  expected = np.broadcast_to(col.reshape(3, 1), (3, 4)) * full - full.T.T
  assert_close(Tensor(col).reshape(3, 1).expand(3, 4) * Tensor(full) - Tensor(full).T.T, expected)


def test_chain_shrink_reshape_unary(rng):
  x = random_array(rng, (6, 8), "float32")
  expected = np.exp(x[1:5, 2:8].reshape(4, 3, 2).transpose(2, 0, 1))
  result = Tensor(x).shrink(((1, 5), (2, 8))).reshape(4, 3, 2).permute(2, 0, 1).exp()
  assert_close(result, expected, dtype=dtypes.float32, atol=1e-5, rtol=1e-4)


def test_chain_two_views_of_one_tensor(rng):
  x = random_array(rng, (5, 5), "float32")
  t = Tensor(x)
  assert_close(t * t.T + t[::-1] - t.flip(1), x * x.T + x[::-1] - x[:, ::-1], dtype=dtypes.float32)


def test_chain_cat_of_views_then_arithmetic(rng):
  x = random_array(rng, (4, 6), "float32")
  t = Tensor(x)
  expected = np.concatenate([x[:, :2], x[:, ::-3], x.T[:2].T], axis=1) * 3
  assert_close(t[:, :2].cat(t[:, ::-3], t.T[:2].T, dim=1) * 3, expected, dtype=dtypes.float32)


def test_views_of_int_and_bool(rng):
  ints = random_array(rng, BASE, "int32", -1000, 1000)
  assert_equal(Tensor(ints).permute(2, 0, 1)[1:, ::-2] + 1, ints.transpose(2, 0, 1)[1:, ::-2] + 1, dtype=dtypes.int32)
  flags = random_array(rng, BASE, "bool")
  assert_equal(Tensor(flags).flip(1)[:, :, 1:4], np.flip(flags, 1)[:, :, 1:4], dtype=dtypes.bool)


def test_views_of_computed_tensor(rng):
  x = random_array(rng, (7, 5), "float32")
  computed = Tensor(x) * 2
  expected = x * 2
  assert_close(computed.T[::2], expected.T[::2])
  assert_close(computed.reshape(5, 7)[1:, 3:], expected.reshape(5, 7)[1:, 3:])
  assert_close(computed[None, 1:3].expand(2, 2, 5), np.broadcast_to(expected[None, 1:3], (2, 2, 5)))
