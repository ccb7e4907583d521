"""tinycore.distributed in one process, on MIRROR (tests/mirror_collective.py: the other ranks mirror this one): a
collective is a CALL(COLLECTIVE) in the LINEAR, run through the backend after the header exchange, replayed by
TinyJit, on the profiler's collective track and in VIZ; staging, device memory, the hierarchical lowering of a
sharded tensor, gradients, in-place broadcasts, gradient buckets and the errors. Real processes (MPI under mpiexec)
are tests/distributed, in the mpi tox env."""
import pathlib
import struct
import sys
import numpy as np
import pytest
from tinycore import Tensor, TinyJit, distributed, dtypes, profiler
from tinycore.device.collective import (HEADER_BYTES, HEADER_FORMAT, CollectiveError, CollectiveMismatch,
                                        current_group, describe_header, header_words, inline_bytes)
from tinycore.errors import ArgumentError, DTypeError
from tinycore.plugin.manager import register_plugin, unregister_plugin
from tinycore.uop.collective import Collective
from tinycore.uop.ops import Ops

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import mirror_collective  # noqa: E402

SMALL, LARGE = 16, 4096  # elements: a small payload rides in the header records, a large one is its own call


@pytest.fixture
def mirror_plugin():
  register_plugin(mirror_collective, "tiny-mirror", "0.1")
  yield mirror_collective
  unregister_plugin(mirror_collective)


@pytest.fixture
def mirror(mirror_plugin, monkeypatch):
  """MIRROR started as rank 0 of 2 (TINYCORE_DIST_BACKEND names it); shut down after the test."""
  monkeypatch.setenv("TINYCORE_DIST_BACKEND", "MIRROR")
  monkeypatch.setitem(mirror_collective.SETTINGS, "world_size", 2)
  distributed.init()
  yield mirror_collective.OPENED[-1]
  distributed.shutdown()


def collective_calls(linear):
  return [call for call in linear.src if call.src[0].op is Ops.COLLECTIVE]


def test_init_outside_a_launcher_says_what_to_do(mirror_plugin, monkeypatch):
  monkeypatch.delenv("TINYCORE_DIST_BACKEND", raising=False)
  for variable in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK"):
    monkeypatch.delenv(variable, raising=False)
  with pytest.raises(CollectiveError, match="not started by the launcher of a collective backend") as error:
    distributed.init()
  assert "MIRROR: every other rank mirrors this process" in str(error.value)
  assert not distributed.is_initialized()
  with pytest.raises(CollectiveError, match=r"call tinycore.distributed.init\(\) first"): distributed.rank()


def test_a_named_backend_that_does_not_exist(mirror_plugin, monkeypatch):
  monkeypatch.setenv("TINYCORE_DIST_BACKEND", "NCCL")
  with pytest.raises(CollectiveError, match="'NCCL' names no installed collective backend.*MIRROR"):
    distributed.init()


def test_the_launched_backend_is_picked(mirror_plugin, monkeypatch):
  monkeypatch.delenv("TINYCORE_DIST_BACKEND", raising=False)
  monkeypatch.setitem(mirror_collective.SETTINGS, "launched", True)
  distributed.init()
  try: assert (distributed.backend_name(), distributed.rank(), distributed.world_size()) == ("MIRROR", 0, 2)
  finally: distributed.shutdown()
  assert mirror_collective.OPENED[-1].finalized and not distributed.is_initialized()


@pytest.mark.parametrize("size", [SMALL, LARGE])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "float64", "uint8"])
def test_all_reduce_sum_max_min_mean(mirror, size, dtype):
  x = (np.random.default_rng(size).standard_normal(size) * 20).astype(dtype)
  t = Tensor(x)
  np.testing.assert_allclose(distributed.all_reduce(t).numpy(), (x + x).astype(dtype), rtol=1e-3)
  np.testing.assert_array_equal(distributed.all_reduce(t, "max").numpy(), x)
  np.testing.assert_array_equal(distributed.all_reduce(t, "min").numpy(), x)
  mean = distributed.all_reduce(t, "mean")
  assert mean.dtype is (t.dtype if dtypes.is_float(t.dtype) else dtypes.float32)
  np.testing.assert_allclose(mean.numpy(), x.astype(np.float64), rtol=1e-3)


def test_a_small_all_reduce_is_one_exchange_and_a_kernel(mirror):
  """Its bytes ride in the header records: one backend call (the exchange); the sum over the ranks is a kernel."""
  assert SMALL * 4 <= current_group().inline_bytes < LARGE * 4
  x = Tensor(np.arange(SMALL, dtype=np.float32))
  linear = distributed.all_reduce(x).schedule_linear()
  [call] = collective_calls(linear)
  assert call.src[0].arg.kind == "all_gather" and any(c.src[0].op is Ops.SINK for c in linear.src)
  before = dict(mirror.calls)
  np.testing.assert_array_equal(distributed.all_reduce(x).numpy(), 2 * np.arange(SMALL, dtype=np.float32))
  assert mirror.calls["all_gather"] - before["all_gather"] == 1 and mirror.calls["all_reduce"] == before["all_reduce"]


def test_a_large_all_reduce_is_a_call_of_its_own_between_kernels(mirror):
  x = Tensor(np.ones((64, 64), np.float32))
  y = distributed.all_reduce(x * 3) + 1
  linear = y.schedule_linear()
  [call] = collective_calls(linear)
  assert call.src[0].arg == Collective("all_reduce", 2, (64, 64), "sum")
  position = list(linear.src).index(call)
  assert 0 < position < len(linear.src) - 1  # the kernel computing x * 3 before, the + 1 after
  dst, src = call.src[1], call.src[2]
  assert dst.op is Ops.BUFFER and src.op is Ops.BUFFER and dst is not src and dst.arg == src.arg == 64 * 64
  np.testing.assert_array_equal(y.numpy(), np.full((64, 64), 7, np.float32))


@pytest.mark.parametrize("size", [SMALL, LARGE])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_all_gather_joins_along_an_axis(mirror, size, axis):
  x = np.random.default_rng(1).standard_normal((4, size // 4)).astype(np.float32)
  out = distributed.all_gather(Tensor(x), axis)
  np.testing.assert_array_equal(out.numpy(), np.concatenate([x, x], axis=axis))


def test_all_gather_of_a_scalar_is_a_vector_per_rank(mirror):
  assert distributed.all_gather(Tensor(3.5)).tolist() == [3.5, 3.5]


@pytest.mark.parametrize("size", [SMALL, LARGE])
def test_broadcast(mirror, size):
  x = np.arange(size, dtype=np.int32)
  np.testing.assert_array_equal(distributed.broadcast(Tensor(x), 0).numpy(), x)
  with pytest.raises(ValueError, match="broadcast src 2 is not a rank of 2"): distributed.broadcast(Tensor(x), 2)


def test_bool_all_reduce(mirror):
  x = np.array([True, False, True])
  np.testing.assert_array_equal(distributed.all_reduce(Tensor(x), "max").numpy(), x)
  with pytest.raises(DTypeError, match="all_reduce sum of bools"): distributed.all_reduce(Tensor(x))


def test_zero_size_tensors_exchange_only_the_header(mirror):
  out = distributed.all_reduce(Tensor.zeros(0, 3))
  assert out.shape == (0, 3) and out.numpy().shape == (0, 3)
  assert distributed.all_gather(Tensor.zeros(0, 3), axis=1).shape == (0, 6)


def test_jit_captures_and_replays_the_collective(mirror):
  @TinyJit
  def step(x: Tensor) -> Tensor: return (distributed.all_reduce(x * 2) + 1).realize()

  for i in range(5):
    before = dict(mirror.calls)
    x = np.full(LARGE, i, np.float32)
    np.testing.assert_array_equal(step(Tensor(x)).numpy(), x * 4 + 1)
    assert mirror.calls["all_reduce"] - before["all_reduce"] == 1, f"call {i}"
  assert step.plan is not None and len(collective_calls(step.plan.linear)) == 1


def test_jit_prune_keeps_collectives(mirror):
  """A collective of a constant would look like a one-time call; the other ranks' values change, so it replays."""
  weights = Tensor(np.ones(LARGE, np.float32)).realize()

  @TinyJit(prune=True)
  def step(x: Tensor) -> Tensor: return (distributed.all_reduce(weights) + x).realize()

  for _ in range(4): step(Tensor.ones(LARGE))
  before = mirror.calls["all_reduce"]
  step(Tensor.ones(LARGE))
  assert mirror.calls["all_reduce"] == before + 1


def test_the_header_names_what_each_rank_called(mirror):
  def other_shape(rank: int, record: bytearray) -> None:
    words = list(struct.unpack_from(HEADER_FORMAT, record))
    words[7] += 1  # its first dim
    struct.pack_into(HEADER_FORMAT, record, 0, *words)
  mirror.edit_peer_record = other_shape
  with pytest.raises(CollectiveMismatch) as error:
    distributed.all_reduce(Tensor.ones(LARGE, 2)).realize()
  message = str(error.value)
  assert "rank 0: all_reduce sum float32 (4096, 2)" in message and "rank 1: all_reduce sum float32 (4097, 2)" in message
  mirror.edit_peer_record = None


def test_headers_describe_collectives():
  words = header_words("all_reduce", 7, 1, dtypes.bfloat16, (3, 4))
  assert len(struct.pack(HEADER_FORMAT, *words)) == HEADER_BYTES
  assert describe_header(words) == "all_reduce sum bfloat16 (3, 4) (collective #7)"
  assert describe_header(header_words("broadcast", 2, 1, dtypes.int8, ())) == "broadcast from rank 1 int8 () " \
    "(collective #2)"
  assert describe_header(header_words("exit", 5)) == "exiting after 4 collectives"
  assert describe_header(header_words("exit", 2)) == "exiting after 1 collective"
  assert describe_header(header_words("all_gather", 1, 0, dtypes.float32, tuple(range(1, 13)))).endswith(
    "(1, 2, 3, 4, 5, 6, 7, 8, 9, '...') (collective #1)")
  assert inline_bytes(2) == 4096 and inline_bytes(64) == 896 and inline_bytes(1024) == 0


def test_the_profiler_shows_collectives_on_their_own_track(mirror):
  x = Tensor.ones(LARGE).realize()
  with profiler.profile():
    distributed.all_reduce(x + 1).realize()
  events = [e for e in profiler.trace()["traceEvents"] if e.get("cat") == "collective"]
  assert len(events) == 1 and events[0]["name"] == f"all_reduce float32[{LARGE}]"
  assert events[0]["args"]["bytes"] == LARGE * 4 and events[0]["args"]["collective"] == f"all_reduce sum ({LARGE},)"
  threads = {e["args"]["name"] for e in profiler.trace()["traceEvents"]
             if e.get("name") == "thread_name" and e["pid"] == events[0]["pid"] and e["tid"] == events[0]["tid"]}
  assert threads == {"collective"}


def test_viz_lists_the_collective(mirror):
  from tinycore import viz
  viz.enable()
  try:
    distributed.all_reduce(Tensor.ones(LARGE) * 2).realize()
    realizes = viz.data().realizes()["realizes"]
  finally: viz.disable()
  [item] = [item for realize in realizes for item in realize["items"] if item["kind"] == "collective"]
  assert item["name"] == f"all_reduce sum ({LARGE},) on {Tensor.ones(1).device}" and item["bytes"] == LARGE * 4


def test_memory_without_a_host_view_is_staged(mirror):
  """SIM's memory is private: the collective copies it out, combines it in host memory, and copies it back."""
  x = np.arange(LARGE, dtype=np.float32)
  out = distributed.all_reduce(Tensor(x, device="SIM"))
  assert out.device == "SIM"
  np.testing.assert_array_equal(out.numpy(), 2 * x)
  assert mirror.seen[-1][:2] == ("all_reduce", memoryview)


def test_a_backend_that_takes_device_memory_gets_buffers(mirror):
  mirror.device_memory = True
  try: out = distributed.all_reduce(Tensor(np.arange(LARGE, dtype=np.float32), device="SIM")).numpy()
  finally: mirror.device_memory = False
  np.testing.assert_array_equal(out, 2 * np.arange(LARGE, dtype=np.float32))
  assert mirror.seen[-1][:2] == ("all_reduce", mirror_collective.Buffer)


def test_a_sharded_tensor_crosses_processes_once(mirror):
  """Lanes on CPU and CPU:1: a reduce over the sharded axis reduces the lanes (the local allreduce) and the result
  crosses processes in one collective on the first lane's device, then fans back out to both lanes."""
  x = np.random.default_rng(2).standard_normal((4, LARGE)).astype(np.float32)
  local = Tensor(x).shard(("CPU", "CPU:1"), axis=0).sum(0)
  crossed = distributed.all_reduce(local)
  [call] = collective_calls(crossed.schedule_linear())
  assert call.src[1].device == "CPU" and call.src[0].arg.shape == (LARGE,)
  assert crossed.device == ("CPU", "CPU:1")
  np.testing.assert_allclose(crossed.numpy(), 2 * x.sum(0), rtol=1e-5, atol=1e-5)
  # sharded along the axis it keeps: gathered once, then each lane gets its slice back
  halves = distributed.all_reduce(Tensor(x).shard(("CPU", "CPU:1"), axis=1))
  assert halves.device == ("CPU", "CPU:1") and len(collective_calls(halves.schedule_linear())) == 1
  np.testing.assert_array_equal(halves.numpy(), 2 * x)


@pytest.mark.parametrize("size", [SMALL, LARGE])
def test_the_gradient_of_an_all_reduce_is_the_all_reduce_of_the_gradient(mirror, size):
  w = Tensor(np.arange(size, dtype=np.float32), requires_grad=True)
  (distributed.all_reduce(w * 3, "mean") * 2).sum().backward()
  # d/dw of mean_r(3 w) * 2: each rank's 6 / world, all-reduced (summed) over the ranks: 6
  np.testing.assert_allclose(w.grad.numpy(), np.full(size, 6.0, np.float32))
  with pytest.raises(RuntimeError, match="no gradient through all_reduce max"):
    distributed.all_reduce(w, "max").sum().backward()


def test_broadcast_parameters_works_in_place(mirror):
  p = Tensor(np.arange(LARGE, dtype=np.float32)).realize()
  before = p.uop.buffer_uop
  [call] = collective_calls(Tensor(p.uop).assign(distributed.broadcast(p)).schedule_linear())
  assert call.src[1] is call.src[2]  # the store dropped into the collective: no second buffer
  distributed.broadcast_parameters([p])
  assert p.uop.buffer_uop is before and mirror.seen[-1] == ("broadcast", memoryview, True)
  np.testing.assert_array_equal(p.numpy(), np.arange(LARGE, dtype=np.float32))


def test_gradients_of_one_device_and_dtype_travel_as_one_buffer(mirror):
  """Each gradient's kernel stores it into its slice of the bucket (no copy kernel), one collective sends it."""
  params = [Tensor(np.ones(shape, np.float32), requires_grad=True) for shape in ((64, 64), (64,), (10, 64))]
  x = Tensor(np.arange(64, dtype=np.float32))
  sum(((p * x).sum() * (i + 1)) for i, p in enumerate(params)).backward()
  distributed.all_reduce_gradients(params, op="sum")
  grads = [p.grad for p in params]
  linear = grads[0].schedule_linear(*grads[1:])
  [call] = collective_calls(linear)
  bucket = call.src[2]
  assert bucket.arg == 64 * 64 + 64 + 10 * 64
  def base(b): return b.src[0] if b.op is Ops.BUFFER_VIEW else b
  assert len([c for c in linear.src if c.src[0].op is Ops.SINK and base(c.src[1]) is bucket]) == 3
  for i, g in enumerate(grads):
    np.testing.assert_array_equal(g.numpy(), 2.0 * (i + 1) * np.broadcast_to(np.arange(64), params[i].shape))


def test_the_collectives_of_a_step_run_together(mirror):
  """Two independent collectives with kernels between their inputs: both wait until no kernel can run, then run one
  after the other (one wait for the device queues, not two)."""
  a, b = Tensor.ones(LARGE).realize(), Tensor.ones(LARGE).realize()
  first = distributed.all_reduce(a * 2)
  second = distributed.all_reduce((b + 1).exp().sum(0, keepdim=True).expand(LARGE) + b)
  linear = (first + 1).schedule_linear(second * 3)
  kinds = [c.src[0].op for c in linear.src]
  at = kinds.index(Ops.COLLECTIVE)
  assert kinds[at:at + 2] == [Ops.COLLECTIVE, Ops.COLLECTIVE] and kinds.count(Ops.COLLECTIVE) == 2


def test_bad_arguments(mirror):
  with pytest.raises(ArgumentError, match="all_reduce op must be one of sum, mean, max, min, got 'prod'"):
    distributed.all_reduce(Tensor.ones(3), "prod")
  with pytest.raises(TypeError, match="all_reduce takes a Tensor, got list"):
    distributed.all_reduce([1, 2])
  with pytest.raises(IndexError, match="all_gather axis 2 out of range for 2 dims"):
    distributed.all_gather(Tensor.ones(2, 2), axis=2)


def test_barrier_exchanges_a_header(mirror):
  before = mirror.calls["all_gather"]
  distributed.barrier()
  assert mirror.calls["all_gather"] == before + 1


def test_tinycore_devices_lists_collective_backends(mirror_plugin):
  from tinycore.cli import collect_collective_rows, format_table
  rows = {row.name: row for row in collect_collective_rows()}
  row = rows["MIRROR"]
  assert row.kind == "collective" and row.status == "ok (not launched here)" and row.distribution == "tiny-mirror"
  assert row.capabilities == {"library": "mirror 1.0"}
  assert "COLLECTIVE BACKEND" in format_table([row], "COLLECTIVE BACKEND")


def test_a_job_of_one_rank_runs_no_collective(mirror_plugin, monkeypatch):
  # with one rank every collective is its input: nothing is exchanged, no CALL is scheduled, and the gradients of a
  # data-parallel step are left as they are (a script launched with `mpiexec -n 1` pays nothing for them)
  monkeypatch.setenv("TINYCORE_DIST_BACKEND", "MIRROR")
  monkeypatch.setitem(mirror_collective.SETTINGS, "world_size", 1)
  distributed.init()
  try:
    backend = mirror_collective.OPENED[-1]
    before = dict(backend.calls)  # (init's own exchanges)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for op in ("sum", "max", "min", "mean"):
      np.testing.assert_array_equal(distributed.all_reduce(Tensor(x), op).numpy(), x)
    mean = distributed.all_reduce(Tensor(np.arange(5, dtype=np.int32)), "mean")
    assert mean.dtype is dtypes.float32 and mean.tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(distributed.all_gather(Tensor(x), axis=1).numpy(), x)
    assert distributed.all_gather(Tensor(3.0)).tolist() == [3.0]
    np.testing.assert_array_equal(distributed.broadcast(Tensor(x)).numpy(), x)
    assert not collective_calls((Tensor(x) + 1).contiguous().schedule_linear())
    assert not collective_calls(distributed.all_reduce(Tensor(x) + 1).contiguous().schedule_linear())
    w = Tensor(x, requires_grad=True)
    (w * w).sum().backward()
    grad = w.grad
    distributed.all_reduce_gradients([w])
    assert w.grad is grad
    np.testing.assert_array_equal(w.grad.numpy(), 2 * x)
    with pytest.raises(ArgumentError, match="all_reduce op"): distributed.all_reduce_gradients([w], op="prod")
    assert backend.calls == before
  finally: distributed.shutdown()
