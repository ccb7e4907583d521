"""The run plan: a repeated graph (a training step, a model's forward on new inputs) is served from the one plan cache,
with no scheduling, lowering or compiling; lanes split in one place; the collector pause leaves gc as it found it."""
import gc
import numpy as np
from tinycore import Context, Tensor
from tinycore.codegen import CodegenStats
from tinycore.engine.plan import PlanCacheStats, RunPlan
from tinycore.nn import Linear, optim
from tinycore.nn.state import get_parameters
from tinycore.schedule.jobs import LoweringStats


class MLP:
  def __init__(self):
    self.layers = [Linear(12, 32), Linear(32, 32), Linear(32, 5)]

  def __call__(self, x: Tensor) -> Tensor:
    for layer in self.layers[:-1]: x = x.linear(layer.weight.T, layer.bias).gelu()
    return self.layers[-1](x)


def counters() -> tuple[int, int, int]:
  return PlanCacheStats.misses, LoweringStats.kernels, CodegenStats.rendered


def test_every_training_step_after_the_first_ones_is_served_from_the_plan_cache():
  Tensor.manual_seed(3)
  model = MLP()
  opt = optim.Adam(get_parameters(model), lr=0.01)
  rng = np.random.default_rng(0)
  data, labels = rng.standard_normal((16, 12)).astype(np.float32), rng.integers(0, 5, 16).astype(np.int32)
  losses = []
  with Context(TRAINING=1):
    for step in range(8):
      if step == 3: before, hits = counters(), PlanCacheStats.hits
      x, y = Tensor(data.copy()), Tensor(labels.copy())  # new tensors (new buffers) every step
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      losses.append(loss.item())
  assert counters() == before  # no schedule, no kernel lowered, nothing rendered: new batches, new learning state
  assert PlanCacheStats.hits >= hits + 5 * 2  # each step: its update, and its loss read back
  assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_a_forward_on_new_inputs_reuses_its_plan():
  Tensor.manual_seed(4)
  model = MLP()
  rng = np.random.default_rng(1)
  outs = []
  for i in range(4):
    if i == 2: before = counters()
    data = rng.standard_normal((3, 12)).astype(np.float32)
    outs.append((model(Tensor(data)).numpy(), data))
  assert counters() == before
  w = [(layer.weight.numpy(), layer.bias.numpy()) for layer in model.layers]
  for out, data in outs:
    h = data
    for weight, bias in w[:-1]:
      z = h @ weight.T + bias
      h = 0.5 * z * (1 + np.tanh(0.7978845608 * (z + 0.044715 * z ** 3)))
    np.testing.assert_allclose(out, h @ w[-1][0].T + w[-1][1], rtol=1e-4, atol=1e-5)


def test_a_tuple_call_is_split_into_its_lanes_by_the_plan():
  x = Tensor(np.arange(8, dtype=np.float32)).shard(("CPU", "CPU:1"), axis=0)
  linear = (x * 2 + 1).schedule_linear()
  tuple_calls = [call for call in linear.src if any(a.op.name == "MSTACK" for a in call.src[1:])]
  assert tuple_calls  # the schedule keeps one CALL for both lanes
  plan = RunPlan(linear)
  assert len(plan.linear.src) == len(linear.src) + len(tuple_calls)  # the plan runs it once per lane
  assert not any(a.op.name == "MSTACK" for call in plan.linear.src for a in call.src[1:])
  np.testing.assert_array_equal((x * 2 + 1).numpy(), np.arange(8) * 2 + 1)


def test_realize_leaves_the_garbage_collector_as_it_found_it():
  x = Tensor(np.ones(4, np.float32)).realize()
  assert gc.isenabled()
  (x + 1).realize()
  assert gc.isenabled()
  gc.disable()
  try:
    (x + 2).realize()
    assert not gc.isenabled()
  finally: gc.enable()
