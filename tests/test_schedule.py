"""The scheduler: fusion, kernel counts, caching, rebinding and assign ordering."""
import numpy as np
import pytest
from tinycore import GlobalCounters, Tensor
from tinycore.codegen import CodegenStats
from tinycore.engine.realize import run_linear
from tinycore.engine.plan import PlanCacheStats
from tinycore.schedule.split_reduce import SPLIT_MIN_ELEMENTS
from tinycore.uop.ops import Ops


def realized(*shape, seed=None):
  data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
  return Tensor(data).realize(), data


def kinds(linear): return [call.src[0].op for call in linear.src]


def test_fused_elementwise_and_reduce_is_one_kernel():
  (a, an), (b, bn), (c, cn) = realized(64), realized(64), realized(64)
  out = ((a + b) * c).sum()
  assert kinds(out.schedule_linear()) == [Ops.SINK]
  GlobalCounters.reset()
  np.testing.assert_allclose(out.numpy(), ((an + bn) * cn).sum(), rtol=1e-4, atol=1e-5)
  assert GlobalCounters.kernel_count == 1


def test_elementwise_of_realized_inputs_is_one_kernel():
  (a, _), (b, _) = realized(3, 5), realized(3, 5)
  linear = (a + b).schedule_linear()
  assert kinds(linear) == [Ops.SINK]
  call = linear.src[0]
  # destination first, then the inputs
  assert call.src[1].arg == 15 and {call.src[2], call.src[3]} == {a.uop.base, b.uop.base}


def test_repeating_a_computation_compiles_nothing_new():
  (a, _), (b, _) = realized(33, 17), realized(33, 17)
  (a * b + 1).max(axis=1).numpy()
  rendered, compiled, hits = CodegenStats.rendered, CodegenStats.compiled, PlanCacheStats.hits
  (a2, _), (b2, _) = realized(33, 17), realized(33, 17)
  out = (a2 * b2 + 1).max(axis=1).numpy()
  assert (CodegenStats.rendered, CodegenStats.compiled) == (rendered, compiled)
  assert PlanCacheStats.hits > hits
  np.testing.assert_allclose(out, (a2.numpy() * b2.numpy() + 1).max(axis=1), rtol=1e-6)


def test_a_realized_tensor_is_never_recomputed():
  x, xn = realized(16)
  a = x.exp() + 1
  b = a * 2
  a.realize()
  linear = b.schedule_linear()
  assert kinds(linear) == [Ops.SINK]
  reads = linear.src[0].src[2:]
  assert a.uop.base in reads and x.uop.base not in reads
  np.testing.assert_allclose(b.numpy(), (np.exp(xn) + 1) * 2, rtol=1e-6)


def test_softmax_fuses_into_one_kernel():
  x, xn = realized(4, 9)
  out = x.softmax(-1)
  assert kinds(out.schedule_linear()) == [Ops.SINK]
  e = np.exp(xn - xn.max(-1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_reduce_broadcast_along_an_outer_loop_gets_its_own_kernel():
  x, xn = realized(6, 5)
  out = x - x.mean(0)
  assert kinds(out.schedule_linear()) == [Ops.SINK, Ops.SINK]
  np.testing.assert_allclose(out.numpy(), xn - xn.mean(0), rtol=1e-5, atol=1e-6)


def test_reads_before_an_assign_see_the_old_values():
  a = Tensor([1.0, 2.0, 3.0]).realize()
  before = a + 10
  a.assign(Tensor([5.0, 6.0, 7.0]))
  after = a + 10
  Tensor.realize(before, after)
  assert before.tolist() == [11.0, 12.0, 13.0]
  assert after.tolist() == [15.0, 16.0, 17.0]


def test_assign_that_reads_itself_elsewhere_goes_through_a_temporary():
  a = Tensor.arange(6).float().realize()
  a.assign(a.flip(0) + 1)
  assert a.tolist() == [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]


def test_assign_keeps_the_buffer_and_chains():
  a = Tensor.zeros(4).contiguous().realize()
  buffer = a.uop.base
  a.assign(a + 1)
  a.assign(a * 3)
  a[1:3].assign(Tensor([7.0, 8.0]))
  assert a.tolist() == [3.0, 7.0, 8.0, 3.0]
  assert a.uop.base is buffer


def test_schedule_linear_runs_with_run_linear():
  a, an = realized(5)
  out = a * 2
  linear = out.schedule_linear()
  run_linear(linear)
  assert len(linear.src) == 1


def test_zero_size_tensors_schedule_no_kernel():
  a = Tensor.ones(0, 3) + 1
  assert kinds(a.schedule_linear()) == []
  assert a.numpy().shape == (0, 3)
  assert Tensor.ones(0).sum().item() == 0


def test_realize_of_a_view_of_a_buffer_does_nothing():
  a, an = realized(4, 4)
  assert kinds(a.T.schedule_linear()) == []
  np.testing.assert_equal(a.T.numpy(), an.T)


def test_an_unknown_device_fails_at_creation_naming_the_devices_that_exist():
  with pytest.raises(ValueError, match="NOSUCHDEV.*CPU"):
    Tensor.ones(2, device="NOSUCHDEV")
  with pytest.raises(RuntimeError, match="CPU:x"):
    Tensor([1, 2], device="cpu:x")


def test_reducing_a_large_tensor_to_one_value_splits_into_partials():
  n = SPLIT_MIN_ELEMENTS + 5  # not a multiple of the parts: the tail is padded with the identity
  x = np.random.default_rng(5).integers(-1000, 1000, n).astype(np.int32)
  t = Tensor(x).realize()
  assert [call.src[0].op for call in t.sum().schedule_linear().src] == [Ops.SINK, Ops.SINK]
  assert t.sum().item() == x.sum() and t.max().item() == x.max() and t.min().item() == x.min()
  small = Tensor(x[:100]).realize()
  assert [call.src[0].op for call in small.sum().schedule_linear().src] == [Ops.SINK]


def test_contiguous_of_a_copy_or_an_assign_is_not_recomputed():
  moved = Tensor(np.arange(5, dtype=np.float32)).to("CPU:1").contiguous().realize()
  assert moved.uop.op is Ops.BUFFER and [c.src[0].op for c in (moved + 1).schedule_linear().src] == [Ops.SINK]
  a = Tensor.zeros(4).contiguous().realize()
  a.assign(Tensor.ones(4))
  b = a.contiguous().realize()
  assert b.uop.op is Ops.BUFFER and [c.src[0].op for c in (b * 2).schedule_linear().src] == [Ops.SINK]
  assert (b * 2).tolist() == [2.0] * 4


def test_split_reductions_follow_the_device_cores():
  from tinycore import Device
  from tinycore.schedule.split_reduce import SPLIT_PARTS_GRID, device_cores
  cores = device_cores("CPU")
  assert cores == Device["CPU"].capabilities()["cores"]
  def first_kernel_outputs(t: Tensor) -> int:
    calls = t.schedule_linear().src
    assert [c.src[0].op for c in calls] == [Ops.SINK, Ops.SINK]
    return calls[0].src[1].shape[0]  # the partials' buffer
  rng = np.random.default_rng(7)
  if cores >= 2:
    x = rng.standard_normal(1 << 18).astype(np.float32)
    x[1000], x[200000] = -np.inf, np.nan
    t = Tensor(x).realize()
    assert first_kernel_outputs(t.max()) == cores           # one contiguous slice per core
    assert np.isnan(t.max().item()) and np.isnan(t.min().item())
    m = rng.standard_normal((512, 96)).astype(np.float32)   # a column sum: each core reduces whole rows of its slice
    cm = Tensor(m).realize()
    assert first_kernel_outputs(cm.sum(0)) == cores * 96
    np.testing.assert_allclose(cm.sum(0).numpy(), m.sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(cm.max(0).numpy(), m.max(0))
  # a device without cores (the interpreter) gets the grid's parts for a big reduction to one value
  assert first_kernel_outputs(Tensor.ones(1 << 20, device="PYTHON").sum()) == SPLIT_PARTS_GRID


def test_a_column_sum_of_an_odd_row_count_splits_and_adds_the_rows_left_over():
  from tinycore.schedule.split_reduce import device_cores
  cores = device_cores("CPU")
  if cores < 2: pytest.skip("the CPU device has one core: nothing splits")
  rng = np.random.default_rng(13)
  m = rng.standard_normal((cores * 64 + 1, 96)).astype(np.float32)   # one row over `cores` slices of 64
  m[-1, 3], m[-1, 4] = np.nan, np.inf
  cm = Tensor(m).realize()
  calls = cm.sum(0).schedule_linear().src
  assert [c.src[0].op for c in calls] == [Ops.SINK, Ops.SINK] and calls[0].src[1].shape[0] == cores * 96
  assert len(calls[1].src) == 4                                     # the partials and the last row: one kernel
  np.testing.assert_allclose(cm.sum(0).numpy(), m.sum(0), rtol=1e-5, atol=1e-4)
  np.testing.assert_array_equal(cm.max(0).numpy(), m.max(0))
  ints = rng.integers(-1000, 1000, (cores * 64 + 1, 3, 40)).astype(np.int32)
  np.testing.assert_array_equal(Tensor(ints).min((0, 1)).numpy(), ints.min((0, 1)))
  np.testing.assert_array_equal(Tensor(ints).sum(0).numpy(), ints.sum(0, dtype=np.int32))


def test_split_keeps_row_sums_and_small_reductions_one_kernel():
  m = Tensor(np.ones((512, 1024), np.float32)).realize()
  assert len(m.sum(1).schedule_linear().src) == 1          # rows feed the cores already
  assert len(Tensor(np.ones((8, 8), np.float32)).realize().sum(0).schedule_linear().src) == 1


def test_split_into_outer_slices_on_a_many_core_device():
  # fewer outputs than cores (4 rows on 8 cores): each row's reduction splits into one slice per core
  from tinycore.caches import clear_caches
  from tinycore.device.registry import core_count
  from tinycore.schedule.split_reduce import install_core_count
  x = np.random.default_rng(11).standard_normal((4, 1 << 16)).astype(np.float32)
  t = Tensor(x).realize()
  install_core_count(lambda name: 8)
  try:
    clear_caches()
    calls = t.sum(1).schedule_linear().src
    assert len(calls) == 2 and calls[0].src[1].shape[0] == 4 * 8
    np.testing.assert_allclose(t.sum(1).numpy(), x.sum(1), rtol=1e-5, atol=1e-3)
    np.testing.assert_equal(t.max(1).numpy(), x.max(1))
  finally:
    install_core_count(core_count)
    clear_caches()


@pytest.mark.parametrize("x_shape, w_shape", [((5, 3), (3, 4)), ((3,), (3, 4)), ((2, 5, 3), (3, 4)),
                                              ((2, 1, 5, 3), (6, 3, 4)), ((3,), (2, 3, 4))])
def test_matmul_builds_the_graph_of_its_tensor_ops(x_shape, w_shape):
  # dot builds its broadcast product on the UOps (Tensor._matmul_product, for speed): the graph must be the one the
  # Tensor ops build (UOps are hash-consed, so equal graphs are one node), values as numpy's
  def through_tensor_ops(x: Tensor, w: Tensor) -> Tensor:
    xe = x.reshape(x.shape[:-1] + (1, x.shape[-1]))
    we = w.transpose(-1, -2)
    if x.ndim > 1: we = we.reshape(w.shape[:-2] + (1,) + w.shape[-1:] + w.shape[-2:-1])
    return (xe * we).sum(-1)
  x, x_np = realized(*x_shape, seed=1)
  w, w_np = realized(*w_shape, seed=2)
  out = x @ w
  assert out.uop is through_tensor_ops(x, w).uop
  np.testing.assert_allclose(out.numpy(), x_np @ w_np, rtol=1e-5, atol=1e-5)
  half = x.cast("float16")  # operands of two dtypes meet in the wider one, as `*` does
  assert (half @ w).dtype == w.dtype and (half @ w).uop is through_tensor_ops(half, w).uop


def test_a_reduction_is_no_view_of_its_unreduced_result():
  # the reshape dropping the reduced axes makes a plain tensor: nothing keeps the keepdim result alive, so a realize
  # has one tensor fewer to rebind, and an assign to the result simply replaces it
  x, x_np = realized(4, 5, seed=3)
  total = x.sum(1)
  assert total.view_of is None and total.uop.op is Ops.RESHAPE
  total.assign(Tensor(np.arange(4, dtype=np.float32)))
  np.testing.assert_array_equal(total.numpy(), np.arange(4, dtype=np.float32))
  np.testing.assert_allclose(x.sum(1).numpy(), x_np.sum(1), rtol=1e-5)
  image, weight = realized(1, 2, 5, 5, seed=4)[0], realized(3, 2, 3, 3, seed=5)[0]
  assert image.conv2d(weight, padding=1).view_of is None  # (a conv's last reshape: of its sum, no view either)
