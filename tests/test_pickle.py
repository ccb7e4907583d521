"""Tensors pickle as their values (numpy's and torch's habit): realized or lazy, any dtype, protocol 5 out of band."""
import pickle
import numpy as np
import pytest
from tinycore import Tensor, Variable, dtypes, nn
from tinycore.nn.state import get_state_dict


def round_trip(t: Tensor, protocol: int = pickle.HIGHEST_PROTOCOL) -> Tensor:
  return pickle.loads(pickle.dumps(t, protocol=protocol))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_values_shape_dtype_and_requires_grad_survive(protocol):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((3, 5)).astype(np.float32)
  for t, expected in ((Tensor(x).realize(), x), (Tensor(x) * 2 + 1, x * 2 + 1), (Tensor(x).T, x.T),
                      (Tensor(x)[1:, ::2], x[1:, ::2])):
    back = round_trip(t, protocol)
    assert back.shape == expected.shape and back.dtype is dtypes.float32 and back.device == t.device
    np.testing.assert_array_equal(back.numpy(), expected)
  w = Tensor([1.0, 2.0], requires_grad=True)
  assert round_trip(w, protocol).requires_grad is True and round_trip(Tensor([1.0]), protocol).requires_grad is None
  assert round_trip(Tensor.empty(0, 3), protocol).shape == (0, 3) and round_trip(Tensor(3.5), protocol).item() == 3.5


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint16, dtypes.int64, dtypes.float16,
                                   dtypes.bfloat16, dtypes.fp8e4m3, dtypes.float64], ids=lambda d: d.name)
def test_every_dtype_byte_for_byte(dtype):
  t = Tensor([[1.5, -2.0, 0.0], [3.0, 0.25, -7.0]], dtype=dtype)
  back = round_trip(t)
  assert back.dtype is dtype and back.shape == (2, 3)
  raw = dtypes.uint16 if dtype.itemsize == 2 else dtypes.uint8 if dtype.itemsize == 1 else None
  if raw is not None and dtype is not dtypes.bool:
    np.testing.assert_array_equal(back.bitcast(raw).numpy(), t.bitcast(raw).numpy())
  np.testing.assert_array_equal(back.numpy(), t.numpy())


def test_out_of_band_buffers_are_copied_in_at_once():
  ts = [Tensor(np.arange(i, i + 6, dtype=np.float32)).realize() for i in range(3)]
  buffers: list = []
  stream = pickle.dumps(ts, protocol=5, buffer_callback=buffers.append)
  assert len(buffers) == 3 and len(stream) < 1000  # the values travel out of band
  copies = [bytearray(b.raw()) for b in buffers]
  loaded = pickle.loads(stream, buffers=copies)
  for copy in copies: copy[:] = bytes(len(copy))  # the caller's buffers are theirs again: the tensors own copies
  for i, t in enumerate(loaded): np.testing.assert_array_equal(t.numpy(), np.arange(i, i + 6, dtype=np.float32))


def test_a_model_state_and_a_disk_tensor(tmp_path):
  layer = nn.Linear(3, 2)
  state = pickle.loads(pickle.dumps(get_state_dict(layer)))
  for name, value in get_state_dict(layer).items(): np.testing.assert_array_equal(state[name].numpy(), value.numpy())
  path = tmp_path / "weights.bin"
  path.write_bytes(np.arange(4, dtype=np.float32).tobytes())
  on_disk = Tensor(path).bitcast(dtypes.float32)
  back = round_trip(on_disk)  # its values, on the default device: the file is never written
  assert not back.device.startswith("DISK")
  np.testing.assert_array_equal(back.numpy(), np.arange(4, dtype=np.float32))
  assert path.read_bytes() == np.arange(4, dtype=np.float32).tobytes()


def test_what_cannot_be_pickled_says_why():
  with pytest.raises(TypeError, match="sharded over .* cannot be pickled"):
    pickle.dumps(Tensor.ones(4, 2).shard(("CPU", "CPU:1"), axis=0))
  v = Variable("n", 1, 8).bind(3)
  with pytest.raises(TypeError, match="symbolic shape .* bind its Variables"):
    pickle.dumps(Tensor.ones(8)[:v])


def test_a_realized_value_knows_its_buffer():
  t = Tensor.arange(4).clone()
  assert not t.uop.is_realized and t.uop.realized is None
  t.realize()
  assert t.uop.is_realized and t.uop.realized.size == 4 and t.reshape(2, 2).uop.is_realized
  assert not (t + 1).uop.is_realized
  back = round_trip(t)  # unpickled realized, as tinygrad's
  assert back.uop.is_realized and back.tolist() == [0, 1, 2, 3]
