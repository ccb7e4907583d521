"""TinyJit: capture on the second call, replay from the third with new inputs (same results as eager, no scheduling,
no compiling), and clear errors for what a replay cannot honour."""
import numpy as np
import pytest
from tinycore import Device, GlobalCounters, Tensor, TinyJit, nn
from tinycore.codegen import CodegenStats
from tinycore.jit import JitError
from tinycore.nn import optim
from tinycore.nn.state import get_parameters
from tinycore.engine.plan import PlanCacheStats


def scheduled() -> int: return PlanCacheStats.hits + PlanCacheStats.misses


def realized(value: np.ndarray, device: str | None = None) -> Tensor: return Tensor(value, device=device).realize()


@pytest.mark.parametrize("device", ["CPU", "SIM"])
def test_replay_matches_eager_without_scheduling_or_compiling(device):
  Device[device]
  def fn(a: Tensor, b: Tensor) -> Tensor: return (a * b + a.exp()).sum(1)
  jitted = TinyJit(fn)
  rng = np.random.default_rng(0)
  for call in range(5):
    a, b = realized(rng.standard_normal((3, 5)).astype(np.float32), device), realized(
      rng.standard_normal((3, 5)).astype(np.float32), device)
    before, compiled = scheduled(), CodegenStats.compiled
    GlobalCounters.reset()
    out = jitted(a, b)
    if call >= 2:
      assert scheduled() == before and CodegenStats.compiled == compiled  # a replay: no scheduling, no compiling
      assert GlobalCounters.kernel_count >= 1
    np.testing.assert_allclose(out.numpy(), fn(a, b).numpy(), rtol=1e-6)


def test_outputs_tuple_and_lazy_inputs():
  @TinyJit
  def fn(x: Tensor):
    return x + 1, (x * 2).sum()
  for i in range(4):
    plus, total = fn(Tensor([1.0, 2.0]) * i)  # a lazy input is realized first
    assert plus.tolist() == [1 + i, 1 + 2 * i] and total.item() == 6 * i


def test_changed_input_shape_or_dtype_raises():
  fn = TinyJit(lambda x: (x * 2).realize())
  for _ in range(3): fn(realized(np.ones(4, np.float32)))
  with pytest.raises(JitError, match=r"inputs changed.*\(5,\)"):
    fn(realized(np.ones(5, np.float32)))
  with pytest.raises(JitError, match="int32"):
    fn(realized(np.ones(4, np.int32)))


def test_non_tensor_output_raises():
  fn = TinyJit(lambda x: (x.sum(), 3))
  fn(realized(np.ones(2, np.float32)))
  with pytest.raises(JitError, match="must return Tensors"):
    fn(realized(np.ones(2, np.float32)))


def test_duplicate_input_raises():
  fn = TinyJit(lambda a, b: a + b)
  x = realized(np.ones(2, np.float32))
  with pytest.raises(JitError, match="twice"):
    fn(x, x)


def _training_losses(jit: bool, steps: int = 6) -> tuple[list[float], np.ndarray]:
  rng = np.random.default_rng(5)
  xs = rng.standard_normal((steps, 16, 4)).astype(np.float32)
  ys = (xs[..., 0] > xs[..., 1]).astype(np.int32)
  Tensor.manual_seed(5)
  l1, bn, l2 = nn.Linear(4, 8), nn.BatchNorm(8), nn.Linear(8, 2)
  opt = optim.Adam(get_parameters([l1, bn, l2]), lr=0.05)

  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = l2(bn(l1(x)).relu()).sparse_categorical_crossentropy(y)
    loss.backward()
    Tensor.realize(loss, *opt.schedule_step())
    return loss
  fn = TinyJit(step) if jit else step
  with Tensor.train():
    losses = [fn(Tensor(x), Tensor(y)).item() for x, y in zip(xs, ys)]
  return losses, bn.running_mean.numpy()


def test_jitted_training_step_matches_eager():
  (eager, eager_mean), (jitted, jitted_mean) = _training_losses(False), _training_losses(True)
  np.testing.assert_allclose(jitted, eager, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(jitted_mean, eager_mean, atol=1e-5, rtol=1e-5)  # BatchNorm's running statistics
  assert jitted[-1] < jitted[0]


def test_reading_data_during_capture_raises():
  read = TinyJit(lambda x: Tensor([(x * 2).sum().item()]))
  read(realized(np.ones(2, np.float32)))
  with pytest.raises(JitError, match="reading tensor data"):
    read(realized(np.ones(2, np.float32)))


@pytest.mark.parametrize("device", ["CPU", "SIM"])
def test_dropout_in_jit_draws_fresh_numbers_each_replay(device):
  """A random draw's counter is a kernel argument that every replay advances: the jitted calls give exactly the
  eager calls' numbers for the same seed, with no scheduling or compiling on replays."""
  from tinycore.codegen import CodegenStats
  from tinycore.engine.plan import PlanCacheStats
  x_np = np.arange(1, 257, dtype=np.float32)
  x = Tensor(x_np, device=device).realize()

  def step(t: Tensor) -> Tensor:
    with Tensor.train(): return (t.dropout(0.5) + Tensor.rand(4, device=device).sum()).realize()
  Tensor.manual_seed(3)
  eager = [step(x).numpy() for _ in range(5)]
  Tensor.manual_seed(3)
  jitted, outs = TinyJit(step), []
  for call in range(5):
    before = (PlanCacheStats.hits + PlanCacheStats.misses, CodegenStats.compiled)
    out = jitted(x)
    if call >= 2: assert (PlanCacheStats.hits + PlanCacheStats.misses, CodegenStats.compiled) == before
    outs.append(out.numpy())
  for got, want in zip(outs, eager): np.testing.assert_allclose(got, want, rtol=1e-6)
  kept = [o != o.min() for o in outs]  # dropped elements hold only the rand sum
  assert all(0.3 < k.mean() < 0.7 for k in kept)
  assert all((kept[i] != kept[j]).any() for i in range(5) for j in range(i))  # fresh masks every call
