"""A jitted step with collectives replays them with new inputs (no scheduling); local lanes (CPU and CPU:1 in every
process) reduce first, cross processes once, and fan back out: data parallel over lanes and processes gives the
gradient of the whole global batch."""
import numpy as np
from conftest import rank_input
from tinycore import Tensor, TinyJit, distributed
from tinycore.engine.plan import PlanCacheStats
from tinycore.uop.ops import Ops

LANES = ("CPU", "CPU:1")


def collective_calls(linear):
  return [call for call in linear.src if call.src[0].op is Ops.COLLECTIVE]


def global_batch(step: int, rows_per_rank: int, features: int) -> np.ndarray:
  return np.concatenate([rank_input(r, (rows_per_rank, features), "float32", 100 + step)
                         for r in range(distributed.world_size())])


def sgd_reference(w0: np.ndarray, batches: list[np.ndarray], lr: float) -> np.ndarray:
  """The same steps in numpy on each whole global batch: loss = mean over the batch of sum((x @ w) ** 2)."""
  w = w0.astype(np.float64)
  for x in batches:
    x = x.astype(np.float64)
    w = w - lr * (2 * x.T @ (x @ w)) / len(x)
  return w


def test_a_jitted_data_parallel_step_replays_its_collectives():
  rows, features, lr = 8, 16, 0.01
  w0 = rank_input(0, (features, 4), "float32", 7)
  w = Tensor(rank_input(distributed.rank(), (features, 4), "float32", 7), requires_grad=True).realize()
  distributed.broadcast_parameters([w])  # every rank starts from rank 0's
  np.testing.assert_array_equal(w.numpy(), w0)

  @TinyJit
  def step(x: Tensor) -> Tensor:
    w.grad = None
    loss = (x @ w).square().sum(1).mean()
    loss.backward()
    distributed.all_reduce_gradients([w])
    w.assign(w - lr * w.grad)
    return distributed.all_reduce(loss, "mean").realize(w)

  batches, losses = [], []
  for i in range(6):
    batch = global_batch(i, rows, features)
    batches.append(batch)
    mine = batch[distributed.rank() * rows:(distributed.rank() + 1) * rows]
    if i == 3: misses = PlanCacheStats.misses
    losses.append(step(Tensor(mine)).item())
  assert PlanCacheStats.misses == misses  # the replays scheduled nothing
  assert len(collective_calls(step.plan.linear)) == 2  # the gradient bucket and the loss
  np.testing.assert_allclose(w.numpy(), sgd_reference(w0, batches, lr), rtol=2e-5, atol=1e-6)
  expected_first = (batches[0].astype(np.float64) @ w0).__pow__(2).sum(1).mean()
  np.testing.assert_allclose(losses[0], expected_first, rtol=1e-5)


def test_lanes_reduce_first_and_cross_processes_once():
  x = global_batch(0, 8, 300)  # every rank's 8 rows; each rank splits its own over its two lanes
  mine = x[distributed.rank() * 8:(distributed.rank() + 1) * 8]
  local = Tensor(mine).shard(LANES, axis=0).sum(0)
  total = distributed.all_reduce(local)
  [call] = collective_calls(total.schedule_linear())
  assert call.src[1].device == "CPU" and total.device == LANES
  np.testing.assert_allclose(total.numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
  # every lane holds the result: added to a tensor sharded over the lanes, each lane reads its own copy's half
  halves = (total.reshape(2, 150) + Tensor.zeros(2, 150).shard(LANES, axis=0)).numpy()
  np.testing.assert_allclose(halves.reshape(-1), x.sum(0), rtol=1e-5, atol=1e-5)


def test_data_parallel_over_lanes_and_processes_gives_the_global_gradient():
  rows, features = 8, 12
  x = global_batch(1, rows, features)
  mine = x[distributed.rank() * rows:(distributed.rank() + 1) * rows]
  w0 = rank_input(0, (features, 3), "float32", 98)
  w = Tensor(w0, requires_grad=True).to(LANES).realize()
  loss = (Tensor(mine).shard(LANES, axis=0) @ w).square().sum(1).mean()
  loss.backward()
  distributed.all_reduce_gradients([w])
  expected = 2 * x.astype(np.float64).T @ (x @ w0) / len(x)
  np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-4, atol=1e-5)
  assert len(collective_calls(w.grad.schedule_linear())) == 1
