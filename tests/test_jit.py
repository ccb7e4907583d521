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


# ---------------------------------------------------------------------------- inputs that are views, chained calls
def test_views_of_a_realized_tensor_are_read_as_the_elements_they_name():
  # a batch sliced from a realized dataset each step: every call reads its own rows, not the first capture's
  data = realized(np.arange(16, dtype=np.float32).reshape(4, 4))
  row_sum = TinyJit(lambda x: x.sum(axis=1).realize())
  np.testing.assert_equal([row_sum(data[i:i + 1]).numpy().tolist() for i in range(4)], [[6], [22], [38], [54]])
  # ... and of a tensor with a pending store (realized first, then the view's own elements)
  fresh, sums = TinyJit(lambda x: x.sum(axis=1).realize()), []
  for i in range(4):
    data.assign(data + 1)
    sums.append(fresh(data[i:i + 1]).item())
  assert sums == [10 + 20 * i for i in range(4)]  # row i of arange + (i + 1)


@pytest.mark.parametrize("device", ["CPU", "SIM"])
def test_a_transpose_flip_or_offset_view_after_a_contiguous_capture_replays_its_own_elements(device):
  Device[device]
  base = np.arange(12, dtype=np.float32).reshape(3, 4)
  big = realized(np.arange(40, dtype=np.float32).reshape(10, 4), device)
  square = realized(np.arange(16, dtype=np.float32).reshape(4, 4), device)
  f = TinyJit(lambda x: (x * 2 + 1).realize())
  for i in range(3): np.testing.assert_equal(f(realized(base + i, device)).numpy(), (base + i) * 2 + 1)
  np.testing.assert_equal(f(big[3:6]).numpy(), np.arange(40).reshape(10, 4)[3:6] * 2 + 1)
  np.testing.assert_equal(f(big[::-1][:3]).numpy(), np.arange(40).reshape(10, 4)[::-1][:3] * 2 + 1)
  np.testing.assert_equal(f(square.T[:3]).numpy(), np.arange(16).reshape(4, 4).T[:3] * 2 + 1)
  np.testing.assert_equal(f(big[1:7:2]).numpy(), np.arange(40).reshape(10, 4)[1:7:2] * 2 + 1)


def test_a_view_input_the_function_writes_into_raises():
  state = realized(np.zeros(8, np.float32))

  def bump(x: Tensor) -> Tensor:
    x.assign(x + 1)
    return (x * 1).realize()
  f = TinyJit(bump)
  f(state[:4])
  with pytest.raises(JitError, match="writes into an input passed as a view"): f(state[:4])


def test_an_output_fed_back_as_the_next_input_is_not_read_while_written():
  # f(f(x)): the replay's input is the buffer its flip kernel writes; each call must read the previous result
  f = TinyJit(lambda x: (x[::-1] * 2 + 1).realize())
  x, expected = realized(np.array([1.0, 3.0], np.float32)), np.array([1.0, 3.0], np.float32)
  for _ in range(5):
    x, expected = f(x), expected[::-1] * 2 + 1
    np.testing.assert_equal(x.numpy(), expected)


def test_a_slice_of_an_input_copied_to_another_device_follows_each_input():
  Device["CPU:1"]
  f = TinyJit(lambda x: (x[2:4].to("CPU:1") * 1).realize())
  for i in range(4):
    np.testing.assert_equal(f(realized(np.arange(6, dtype=np.float32) + 10 * i)).numpy(), [2 + 10 * i, 3 + 10 * i])


# ---------------------------------------------------------------------------- what TinyJit refuses
def test_a_tinyjit_inside_a_tinyjit_raises():
  inner = TinyJit(lambda x: (x + 1).realize())
  outer = TinyJit(lambda x: (inner(x) * 2).realize())
  np.testing.assert_equal(outer(realized(np.array([1.0], np.float32))).numpy(), [4])  # the eager call is fine
  with pytest.raises(JitError, match="inside a TinyJit is not supported"): outer(realized(np.array([2.0], np.float32)))
  inner.reset()  # the outer's capture failed, so it tries again (and fails again) on the next call
  with pytest.raises(JitError, match="inside a TinyJit is not supported"): outer(realized(np.array([2.0], np.float32)))


def test_a_function_that_runs_no_kernel_raises_rather_than_freezing_its_result():
  f = TinyJit(lambda x: x)
  f(realized(np.array([0.0], np.float32)))
  with pytest.raises(JitError, match="didn't JIT anything"): f(realized(np.array([1.0], np.float32)))


def test_prune_replays_every_kernel_that_reads_state_a_replayed_kernel_writes():
  # the input updates `state`; `doubled` reads state and the output reads `doubled`: neither reads the input, but
  # both must replay (a fixpoint of two rounds: doubled is found from state, the output from doubled)
  state, doubled = realized(np.zeros(4, np.float32)), realized(np.zeros(4, np.float32))

  def step(x: Tensor) -> Tensor:
    state.assign(state + x).realize()
    doubled.assign(state * 2).realize()
    return (doubled + 1).realize()
  f, total = TinyJit(prune=True)(step), np.zeros(4, np.float32)
  for i in range(5):
    x = np.arange(4, dtype=np.float32) + i
    total += x
    np.testing.assert_equal(f(realized(x)).numpy(), total * 2 + 1)
  assert f.plan.kernel_count == 3
