"""The memory planner (tinycore/engine/memory.py): intermediates of one run whose lifetimes do not overlap share an
arena, never a buffer a tensor still reads; results are the same with the planner on and off, and the peak is lower."""
import numpy as np
import pytest
from tinycore import Context, GlobalCounters, Tensor, TinyJit, nn
from tinycore.engine.memory import ARENA_ALIGNMENT, ArenaAllocator, plannable
from tinycore.uop.ops import UOp
from tinycore.dtype import dtypes


def chain_of_intermediates(x: Tensor, links: int = 12) -> Tensor:
  """`links` kernels in a row, each result stored (contiguous) and read only by the next."""
  for i in range(links): x = (x * 1.01 + i).contiguous()
  return x.sum()


def peak_of(fn) -> tuple[int, object]:
  GlobalCounters.reset()
  before = GlobalCounters.mem_used
  result = fn()
  return GlobalCounters.mem_peak - before, result


@pytest.mark.parametrize("device", ["CPU", "SIM", "PYTHON"])
def test_a_chain_of_intermediates_fits_in_two_buffers_and_gives_the_same_value(device):
  rows = 8 if device == "PYTHON" else 256  # (the interpreter: 32 KiB)
  data = np.random.default_rng(0).standard_normal((rows, 1024)).astype(np.float32)
  x = Tensor(data, device=device).realize()
  planned_peak, planned = peak_of(lambda: chain_of_intermediates(x).realize().numpy())
  with Context(TINYCORE_NO_MEMORY_PLANNER=1):
    unplanned_peak, unplanned = peak_of(lambda: chain_of_intermediates(x).realize().numpy())
  np.testing.assert_array_equal(planned, unplanned)
  expected = data.astype(np.float64)
  for i in range(12): expected = expected * 1.01 + i
  np.testing.assert_allclose(planned, expected.sum(), rtol=1e-4)
  # twelve intermediates one after another: two live at a time (a link reads one and writes the next)
  assert unplanned_peak >= 12 * data.nbytes
  assert planned_peak <= 2 * data.nbytes + 4096


def test_an_intermediate_a_live_tensor_reads_is_not_shared():
  data = np.arange(4096, dtype=np.float32)
  x = Tensor(data).realize()
  kept = (x * 2).contiguous()               # realized inside the next realize, and read by this tensor after it
  out = chain_of_intermediates(kept + 1)    # many later intermediates that would reuse its memory
  out.realize()
  x.assign(Tensor(np.zeros(4096, np.float32))).realize()  # kept's value was computed before this
  np.testing.assert_array_equal(kept.numpy(), data * 2)


def test_a_lazy_tensor_over_a_planned_run_still_computes_its_value():
  data = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
  x = Tensor(data).realize()
  hidden = (x @ x).relu().contiguous()
  later = (hidden * 3).sum(axis=0)           # lazy: reads hidden, realized inside the next realize
  (hidden.exp().contiguous() + 1).sum().realize()
  np.testing.assert_allclose(later.numpy(), (np.maximum(data @ data, 0) * 3).sum(axis=0), rtol=1e-4)


def training_losses(steps: int, jit: bool) -> tuple[list[float], np.ndarray]:
  Tensor.manual_seed(5)
  rng = np.random.default_rng(2)
  model = [nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 10)]
  params = nn.state.get_parameters(model)
  opt = nn.optim.Adam(params, lr=1e-2)
  data, labels = rng.standard_normal((32, 16)).astype(np.float32), rng.integers(0, 10, 32).astype(np.int32)

  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      h = x
      for layer in model[:-1]: h = layer(h).gelu()
      loss = model[-1](h).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
    return loss.realize()

  fn = TinyJit(step) if jit else step
  losses = [fn(Tensor(data), Tensor(labels)).item() for _ in range(steps)]
  return losses, model[0].weight.numpy()


@pytest.mark.parametrize("jit", [False, True])
def test_training_steps_are_the_same_with_the_planner_on_and_off(jit):
  planned = training_losses(5, jit)
  with Context(TINYCORE_NO_MEMORY_PLANNER=1): unplanned = training_losses(5, jit)
  np.testing.assert_array_equal(planned[0], unplanned[0])
  np.testing.assert_array_equal(planned[1], unplanned[1])
  assert planned[0][-1] < planned[0][0]


def test_a_pruned_jit_keeps_its_onetime_results_out_of_the_arena():
  rng = np.random.default_rng(3)
  weights = Tensor(rng.standard_normal((128, 128)).astype(np.float32)).realize()

  def fn(x: Tensor) -> Tensor:
    # the contiguous constant takes no input (a pruned replay keeps it from the capture) and no tensor holds it, so
    # its memory is shared with the chain's later intermediates, which the replays write
    return chain_of_intermediates(x @ (weights.exp() * 0.01).contiguous(), 6).realize()

  fn_pruned = TinyJit(fn, prune=True)
  # the chain's intermediates are smaller than the constant: they reuse its bytes through views unlike its own
  inputs = [rng.standard_normal((16, 128)).astype(np.float32) for _ in range(4)]
  eager = [chain_of_intermediates(Tensor(a) @ (weights.exp() * 0.01).contiguous(), 6).numpy() for a in inputs]
  replayed = [fn_pruned(Tensor(a)).numpy() for a in inputs]
  np.testing.assert_allclose(replayed, eager, rtol=1e-5)


def test_storage_devices_are_never_planned(tmp_path):
  assert not plannable(UOp.new_buffer(f"DISK:{tmp_path / 'f.bin'}", 1024, dtypes.float32))
  assert plannable(UOp.new_buffer("CPU", 1024, dtypes.float32))
  assert not plannable(UOp.new_buffer("CPU", 0, dtypes.float32))


def test_the_arena_allocator_never_hands_out_live_bytes_twice():
  rng = np.random.default_rng(4)
  arena, live = ArenaAllocator(), {}
  for step in range(2000):
    if live and rng.random() < 0.45:
      key = list(live)[rng.integers(len(live))]
      offset, size = live.pop(key)
      arena.give_back(offset, size)
    else:
      size = int(rng.integers(1, 64)) * ARENA_ALIGNMENT
      live[step] = (arena.take(size), size)
    spans = sorted(live.values())
    assert all(a + s <= b for (a, s), (b, _) in zip(spans, spans[1:])), "two live blocks overlap"
    assert all(a + s <= arena.size for a, s in spans)
    free = arena.free_blocks
    assert all(a + s < b for (a, s), (b, _) in zip(free, free[1:])), "free blocks are not coalesced"
  for offset, size in live.values(): arena.give_back(offset, size)
  assert arena.free_blocks == [(0, arena.size)]
