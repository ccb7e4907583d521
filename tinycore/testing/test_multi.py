"""Multi-device tensors on the device under test: two instances of it (DEV:0, DEV:1) as one device tuple. Sharding,
gathering, lane-wise ops, reductions over the sharded axis (naive and ring allreduce), data-parallel matmul and
assign, each against numpy. Skipped when the device has no second instance."""
import numpy as np
import pytest
from tinycore import Context, Device, Tensor, dtypes
from tinycore.testing.helpers import assert_close, random_array


@pytest.fixture(scope="module")
def lanes() -> tuple[str, str]:
  kind = Device.DEFAULT.partition(":")[0]
  pair = (Device.canonicalize(f"{kind}:0"), Device.canonicalize(f"{kind}:1"))
  try: Device[pair[1]]
  except Exception as error: pytest.skip(f"{kind} has no second instance to shard over: {error}")
  return pair


def test_shard_and_gather(lanes, rng):
  x = random_array(rng, (6, 5), "float32")
  t = Tensor(x).shard(lanes, axis=0)
  assert t.device == lanes and t.shape == (6, 5)
  assert_close(t, x, dtype=dtypes.float32)
  assert_close(t.to(lanes[1]), x, dtype=dtypes.float32)
  assert_close(Tensor(x).shard(lanes) * 2, x * 2, dtype=dtypes.float32)


def test_lane_wise_ops_and_movement(lanes, rng):
  x, b = random_array(rng, (4, 6), "float32"), random_array(rng, (6,), "float32")
  t = Tensor(x).shard(lanes, axis=0)
  assert_close((t * Tensor(b).to(lanes)).relu() + 1, np.maximum(x * b, 0) + 1, dtype=dtypes.float32)
  assert_close(t.reshape(4, 2, 3).permute(0, 2, 1) + 0, x.reshape(4, 2, 3).transpose(0, 2, 1), dtype=dtypes.float32)
  assert_close(t[:, 1:4] * 1, x[:, 1:4], dtype=dtypes.float32)
  assert_close(t[1:3] * 1, x[1:3], dtype=dtypes.float32)
  assert_close(t.sum(1), x.sum(1), dtype=dtypes.float32)


@pytest.mark.parametrize("ring", [0, 2])
def test_reduce_over_the_sharded_axis(lanes, rng, ring):
  x = random_array(rng, (4, 33), "float32")
  with Context(RING=ring):
    t = Tensor(x).shard(lanes, axis=0)
    assert_close(t.sum(0), x.sum(0), dtype=dtypes.float32)
    assert_close(t.max(0), x.max(0), dtype=dtypes.float32)


def test_data_parallel_matmul_and_assign(lanes, rng):
  x, w = random_array(rng, (4, 8), "float32"), random_array(rng, (8, 3), "float32")
  assert_close(Tensor(x).shard(lanes, axis=0) @ Tensor(w).to(lanes), x @ w, dtype=dtypes.float32)
  t = Tensor(x).shard(lanes, axis=0).realize()
  t.assign(t * 2).realize()
  assert_close(t, x * 2, dtype=dtypes.float32)
