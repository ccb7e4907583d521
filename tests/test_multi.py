"""Multi-device tensors: shard over device tuples, propagation of the sharded axis through every op (values against
numpy), allreduce (naive, ring, all2all) with the seed's copy and kernel counts, and lanes on queue devices."""
import numpy as np
import pytest
from tinycore import Context, Device, GlobalCounters, Tensor, dtypes
from tinycore.device.buffers import linear_buffers
from tinycore.engine.realize import run_linear
from tinycore.hcq import SignalWait
from tinycore.hcq.runtime import call_is_hcq, compile_linear, queue_of
from tinycore.schedule.multi import MultiError, chunk_bounds, split_lanes
from tinycore.uop.ops import Ops


def _has(prefix: str) -> bool: return any(spec.prefix == prefix for spec in Device.specs())


def _cl_works() -> bool:
  if not _has("CL"): return False
  try: return Device["CL"].can_compute
  except Exception: return False


CPU4 = tuple(f"CPU:{i}" for i in range(4))
DEVICE_LISTS = [
  pytest.param(CPU4, id="CPU0-3"),
  pytest.param(("CPU:0", "CPU:1"), id="CPU0-1"),
  pytest.param(("SIM:0", "SIM:1"), id="SIM0-1",
               marks=pytest.mark.skipif(not _has("SIM"), reason="the simulated queue device is not installed")),
  pytest.param(("CPU", "CL"), id="CPU+CL", marks=pytest.mark.skipif(not _cl_works(), reason="no working CL device")),
]


@pytest.fixture(params=DEVICE_LISTS)
def devs(request): return request.param


@pytest.fixture
def rng(): return np.random.default_rng(0)


def _rand(rng, *shape): return rng.standard_normal(shape).astype(np.float32)


def _close(t: Tensor, expected, atol=1e-5):
  got = t.numpy()
  assert got.shape == np.shape(expected)
  np.testing.assert_allclose(got, expected, atol=atol, rtol=1e-5)


# ---------------------------------------------------------------------------- shard and to
def test_shard_splits_along_the_axis(devs, rng):
  x = _rand(rng, 2 * len(devs), 3)
  t = Tensor(x).shard(devs, axis=0)
  assert t.device == tuple(Device.canonicalize(d) for d in devs) and t.shape == x.shape
  _close(t, x)
  lanes = t.uop.src[0].src
  assert [lane.shape for lane in lanes] == [(2, 3)] * len(devs)


def test_shard_replicates_without_an_axis(devs, rng):
  x = _rand(rng, 3, 5)
  t = Tensor(x).shard(devs).realize()
  assert t.uop.arg is None and all(lane.shape == (3, 5) for lane in t.uop.src[0].src)
  _close(t + 1, x + 1)


def test_shard_on_a_later_and_negative_axis(devs, rng):
  x = _rand(rng, 3, 2 * len(devs))
  _close(Tensor(x).shard(devs, axis=-1) * 2, x * 2)


def test_uneven_shard_names_axis_size_and_count():
  with pytest.raises(ValueError, match=r"uneven: axis 0 of size 5 does not split over 4 devices"):
    Tensor.zeros(5, 2).shard(CPU4, axis=0)


def test_shard_onto_one_device_is_to():
  t = Tensor([1.0, 2.0]).shard(("CPU:1",), axis=0)
  assert t.device == "CPU:1" and t.tolist() == [1.0, 2.0]


def test_to_single_device_gathers(devs, rng):
  x = _rand(rng, 4 * len(devs))
  t = Tensor(x).shard(devs, axis=0)
  g = t.to("CPU:1")
  assert g.device == "CPU:1"
  _close(g, x)


def test_to_a_tuple_replicates_and_tensor_creation_on_a_tuple(devs):
  t = Tensor([1.0, 2.0, 3.0]).to(devs)
  assert t.device == tuple(Device.canonicalize(d) for d in devs) and t.uop.arg is None
  assert (t * 2).tolist() == [2.0, 4.0, 6.0]
  assert Tensor.full((2, 2), 3.0, device=devs).sum().item() == 12.0
  assert (Tensor.arange(4, device=devs) + 1).tolist() == [1, 2, 3, 4]


# ---------------------------------------------------------------------------- propagation
def test_elementwise_sharded_with_replicated_broadcast(devs, rng):
  n = len(devs)
  x, b = _rand(rng, 2 * n, 3), _rand(rng, 3)
  xs = Tensor(x).shard(devs, axis=0)
  _close(xs * Tensor(b).shard(devs) + 1.5, x * b + 1.5)
  full = _rand(rng, 2 * n, 3)
  _close(xs - Tensor(full).to(devs), x - full)  # a replicated operand is cut to each lane's rows
  _close((xs > 0).where(xs, 0.0).exp(), np.exp(np.where(x > 0, x, 0)), atol=1e-4)


def test_reductions_over_every_axis(devs, rng):
  n = len(devs)
  x = _rand(rng, 2 * n, 6)
  for axis in (0,):
    xs = Tensor(x).shard(devs, axis=axis)
    _close(xs.sum(0), x.sum(0))                 # over the sharded axis: allreduce
    _close(xs.sum(1), x.sum(1))                 # along it: stays sharded
    _close(xs.max(0), x.max(0))
    _close(xs.sum(), x.sum(), atol=1e-4)
    _close(xs.mean(0, keepdim=True), x.mean(0, keepdims=True))
  _close(Tensor(x).shard(devs, axis=1).sum(1), x.sum(1)) if 6 % n == 0 else None


def test_reshape_keeps_or_refuses_the_shards(devs, rng):
  n = len(devs)
  x = _rand(rng, 2 * n, 3, 4)
  xs = Tensor(x).shard(devs, axis=0)
  _close(xs.reshape(2 * n, 12) + 0, x.reshape(2 * n, 12))
  r = xs.reshape(n, 2, 12)
  assert r.uop.shape == (n, 2, 12)
  _close(r * 1.5, x.reshape(n, 2, 12) * 1.5)
  with pytest.raises(MultiError, match="across shards"):
    Tensor(x).shard(devs, axis=1 if 3 % n == 0 else 2).reshape(-1).realize() if False else \
      Tensor(_rand(rng, 3, 2 * n)).shard(devs, axis=1).reshape(6 * n).realize()


def test_permute_expand_pad_shrink_flip(devs, rng):
  n = len(devs)
  x = _rand(rng, 2 * n, 3)
  xs = Tensor(x).shard(devs, axis=0)
  _close(xs.permute(1, 0) * 2, x.T * 2)
  _close(xs.reshape(2 * n, 1, 3).expand(2 * n, 4, 3) + 0, np.broadcast_to(x.reshape(2 * n, 1, 3), (2 * n, 4, 3)))
  _close(xs.pad(((0, 0), (1, 2))) + 0, np.pad(x, ((0, 0), (1, 2))))
  _close(xs.pad(((1, 0), (0, 0))) + 0, np.pad(x, ((1, 0), (0, 0))))  # pads the sharded axis: replicated
  _close(xs.shrink(((0, 2 * n), (1, 3))) * 1, x[:, 1:3])
  _close(xs.shrink(((1, 2 * n - 1), None)) * 1, x[1:-1])             # across shards: the axis is dropped
  _close(xs.flip(0) + 0, x[::-1])
  _close(xs.flip(1) + 0, x[:, ::-1])


def test_getitem_and_cat(devs, rng):
  n = len(devs)
  x, y = _rand(rng, 2 * n, 4), _rand(rng, 2 * n, 2)
  xs, ys = Tensor(x).shard(devs, axis=0), Tensor(y).shard(devs, axis=0)
  _close(xs[:, 1:3] * 1, x[:, 1:3])
  _close(xs[1], x[1])
  _close(xs[1:3] + 0, x[1:3])
  _close(xs.cat(ys, dim=1), np.concatenate([x, y], 1))
  _close(xs.cat(xs, dim=0), np.concatenate([x, x], 0))


def test_softmax_argmax_cumsum_and_advanced_indexing(devs, rng):
  n = len(devs)
  x = _rand(rng, 2 * n, 5)
  xs = Tensor(x).shard(devs, axis=0)
  e = np.exp(x - x.max(0, keepdims=True))
  _close(xs.softmax(0), e / e.sum(0, keepdims=True))
  _close(xs.softmax(1), np.exp(x) / np.exp(x).sum(1, keepdims=True))
  np.testing.assert_equal(xs.argmax(0).numpy(), x.argmax(0))
  _close(xs.cumsum(0), x.cumsum(0), atol=1e-4)
  _close(xs[Tensor([0, 2 * n - 1, 1])], x[[0, 2 * n - 1, 1]])  # a one-device index is replicated onto the tuple


def test_matmul_data_and_model_parallel(devs, rng):
  n = len(devs)
  x, w = _rand(rng, 2 * n, 8), _rand(rng, 8, 2 * n)
  # data parallel: the batch is sharded, the weights replicated
  _close(Tensor(x).shard(devs, axis=0) @ Tensor(w).shard(devs), x @ w, atol=1e-4)
  # model parallel: the weights' output columns are sharded
  _close(Tensor(x).shard(devs) @ Tensor(w).shard(devs, axis=1), x @ w, atol=1e-4)
  # the contracted dim sharded on both sides: a partial product per lane, then allreduce
  if 8 % n == 0:
    _close(Tensor(x).shard(devs, axis=1) @ Tensor(w).shard(devs, axis=0), x @ w, atol=1e-4)


def test_assign_and_realize(devs, rng):
  n = len(devs)
  x, y = _rand(rng, 2 * n, 3), _rand(rng, 2 * n, 3)
  t = Tensor(x).shard(devs, axis=0).realize()
  lanes_before = [lane.buffer_uop for lane in t.uop.src[0].src]
  t.assign(t + Tensor(y).shard(devs, axis=0)).realize()
  assert [lane.base for lane in t.uop.src[0].src] == lanes_before  # stored in place on every lane
  _close(t, x + y)
  _close(t, x + y)  # (read twice: the store ran once)
  t.assign(Tensor(y))  # a single-device value is copied to the tuple and cut to each lane's rows
  _close(t, y)
  t[:, 1:2].assign(Tensor(np.zeros((2 * n, 1), np.float32)).shard(devs, axis=0)).realize()  # a view of every lane
  expected = y.copy()
  expected[:, 1] = 0
  _close(t, expected)


def test_operands_sharded_differently(rng):
  x, y = _rand(rng, 4, 4), _rand(rng, 4, 4)
  a, b = Tensor(x).shard(CPU4, axis=0), Tensor(y).shard(CPU4, axis=1)
  out = a + b  # as in tinygrad, the second operand is resharded onto the first one's axis (copies)
  linear = out.contiguous().schedule_linear()
  assert any(c.src[0].op is Ops.COPY for c in linear.src)
  _close(out, x + y)
  with pytest.raises(RuntimeError, match="different devices"): a + Tensor(_rand(rng, 4, 4))
  with pytest.raises(RuntimeError, match="different devices"):
    a + Tensor(_rand(rng, 4, 4)).shard(("CPU:1", "CPU:0", "CPU:2", "CPU:3"), axis=0)


# ---------------------------------------------------------------------------- allreduce counts
def _counts(linear):
  copies = [c for c in linear.src if c.src[0].op is Ops.COPY]
  sinks = [c for c in linear.src if c.src[0].op is Ops.SINK]
  def dev(b): return b.src[0].device if b.op is Ops.BUFFER_VIEW else b.device
  return copies, sinks, {(dev(c.src[1]), dev(c.src[2])) for c in copies}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_ring_allreduce_counts(n, rng):
  devs = tuple(Device.canonicalize(d) for d in CPU4[:n])
  x = _rand(rng, n, 1000)
  t = Tensor(x).shard(devs, axis=0).realize()
  with Context(RING=2):
    out = t.sum(0).mul(2.0).contiguous()
    linear = out.schedule_linear()
  copies, sinks, pairs = _counts(linear)
  assert len(copies) == 2 * n * (n - 1)          # reduce-scatter and allgather
  assert len(sinks) == n * (n - 1) + 3           # local reduce, partial sums per hop, reassembly, mul: 15 for N=4
  assert pairs == {(devs[(i + 1) % n], devs[i]) for i in range(n)}  # a ring: exactly N (dst, src) pairs
  GlobalCounters.reset()
  run_linear(linear)
  # each tuple kernel counts once per lane, each copy and single-lane kernel once
  assert GlobalCounters.kernel_count == len(copies) + n * (n - 1) + 3 * n
  with Context(RING=2): _close(out, 2 * x.sum(0), atol=1e-4)


def test_seed_ring_counts_for_four_devices(rng):
  t = Tensor(_rand(rng, 8, 256)).shard(CPU4, axis=0).realize()
  with Context(RING=2):
    copies, sinks, pairs = _counts(t.sum(0).mul(2.0).contiguous().schedule_linear())
  assert (len(copies), len(sinks), len(pairs)) == (24, 15, 4)


def test_naive_and_all2all_counts(rng):
  x = _rand(rng, 8, 256)
  t = Tensor(x).shard(CPU4, axis=0).realize()
  with Context(RING=0):
    out = t.sum(0).mul(2.0).contiguous()
    copies, sinks, pairs = _counts(out.schedule_linear())
    assert (len(copies), len(sinks), len(pairs)) == (12, 3, 12)  # every lane copies to every other lane
    _close(out, 2 * x.sum(0), atol=1e-4)
  with Context(ALL2ALL=2):
    out = t.sum(0).mul(2.0).contiguous()
    copies, sinks, pairs = _counts(out.schedule_linear())
    assert len(copies) == 24 and len(sinks) == 1 + 4 + 1 + 1 and len(pairs) == 12
    _close(out, 2 * x.sum(0), atol=1e-4)


def test_default_rule_picks_ring_for_large_tensors_on_more_than_two_devices(rng, monkeypatch):
  small = Tensor.ones(4, 64).shard(CPU4, axis=0).realize()
  assert len(_counts(small.sum(0).contiguous().schedule_linear())[0]) == 12  # naive below 256k elements
  big = Tensor.ones(4, 300_000).shard(CPU4, axis=0).realize()
  with Context(RING=1): assert len(_counts(big.sum(0).contiguous().schedule_linear())[0]) == 24
  with Context(RING=0): assert len(_counts(big.sum(0).contiguous().schedule_linear())[0]) == 12
  two = Tensor.ones(2, 300_000).shard(CPU4[:2], axis=0).realize()
  with Context(RING=1): assert len(_counts(two.sum(0).contiguous().schedule_linear())[0]) == 2


def test_ring_chunks_are_aligned():
  assert chunk_bounds(1000, 4) == [(0, 256), (256, 504), (504, 752), (752, 1000)]
  assert all((e - s) % 8 == 0 for s, e in chunk_bounds(1000, 4))
  assert chunk_bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]


@pytest.mark.parametrize("ring", [0, 2])
def test_allreduce_cast_keeps_half_while_copying(ring, rng):
  x = rng.standard_normal((4, 64)).astype(np.float16)
  t = Tensor(x).shard(CPU4, axis=0).realize()
  for cast, wire in ((1, dtypes.float16), (0, dtypes.float32)):
    with Context(RING=ring, ALLREDUCE_CAST=cast):
      out = t.sum(0)
      copies, _, _ = _counts(out.contiguous().schedule_linear())
      assert {c.src[1].dtype for c in copies} == {wire}
      np.testing.assert_allclose(out.numpy().astype(np.float32), x.astype(np.float32).sum(0), atol=2e-2)


@pytest.mark.parametrize("op", ["max", "prod"])
def test_allreduce_of_max_and_prod(op, rng):
  x = rng.uniform(0.5, 1.5, (8, 33)).astype(np.float32)
  for ring in (0, 2):
    with Context(RING=ring):
      _close(getattr(Tensor(x).shard(CPU4, axis=0), op)(0), getattr(x, op)(0), atol=1e-5)


# ---------------------------------------------------------------------------- lanes on queue devices
@pytest.mark.skipif(not _has("SIM"), reason="the simulated queue device is not installed")
def test_sim_lanes_copy_on_the_source_queue_and_wait_across_lanes(rng):
  x = _rand(rng, 4, 8)
  t = Tensor(x).shard(("SIM:0", "SIM:1"), axis=0).realize()
  out = t.sum(0).contiguous()
  linear = split_lanes(out.schedule_linear())
  copy_calls = [c for c in linear.src if c.src[0].op is Ops.COPY]
  assert len(copy_calls) == 2
  for call in copy_calls:  # enqueued on the source device's copy queue (peer writes beat peer reads)
    assert queue_of(call) == (Device[call.src[2].device], "copy") and call.src[1].device != call.src[2].device
  compiled = compile_linear(linear, input_uops=linear_buffers(linear))
  batch = next(call.src[0].arg for call in compiled.src if call_is_hcq(call))
  sim0, sim1 = Device["SIM"], Device["SIM:1"]
  copies = {dev: [c for c in batch.plan.get((dev, "copy"), []) if type(c).__name__ == "Copy"] for dev in (sim0, sim1)}
  assert len(copies[sim0]) == 1 and len(copies[sim1]) == 1  # each lane's copy runs on its source's copy queue
  for dev in (sim0, sim1):  # the sum on each lane waits for the other lane's copy queue
    assert any(isinstance(c, SignalWait) for c in batch.plan[(dev, "compute")])
  run_linear(compiled)
  _close(out, x.sum(0))


def test_tuple_kernels_split_per_lane_and_count_per_lane(rng):
  x = _rand(rng, 8, 5)
  t = Tensor(x).shard(CPU4, axis=0).realize()
  linear = (t * 3).contiguous().schedule_linear()
  assert len(linear.src) == 1 and [a.op for a in linear.src[0].src[1:3]] == [Ops.MSTACK, Ops.MSTACK]
  assert len(split_lanes(linear).src) == 4
  GlobalCounters.reset()
  out = (t * 3).contiguous().realize()
  assert GlobalCounters.kernel_count == 4
  _close(out, x * 3)


# ---------------------------------------------------------------------------- data parallel training
def _sgd_run(devices, steps=3):
  from tinycore import nn
  from tinycore.nn import optim
  from tinycore.nn.state import get_parameters
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(8, 16), nn.Linear(16, 4)
  params = get_parameters([l1, l2])
  if devices:
    for p in params: p.replace(p.to(devices).realize())
  opt = optim.SGD(params, lr=0.1, momentum=0.9)
  rng = np.random.default_rng(0)
  losses = []
  with Tensor.train():
    for _ in range(steps):
      x = Tensor(rng.standard_normal((8, 8)).astype(np.float32))
      y = Tensor(rng.integers(0, 4, 8).astype(np.int32))
      if devices: x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
      opt.zero_grad()
      loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
      losses.append(loss.item())
  return losses, [p.numpy() for p in params]


@pytest.mark.parametrize("devices", [("CPU:0", "CPU:1"), CPU4])
def test_sharded_sgd_steps_match_one_device(devices):
  losses, weights = _sgd_run(None)
  sharded_losses, sharded_weights = _sgd_run(devices)
  np.testing.assert_allclose(sharded_losses, losses, atol=1e-5)
  for single, sharded in zip(weights, sharded_weights): np.testing.assert_allclose(sharded, single, atol=1e-5)


def test_assign_resharding_and_replicated_values(rng):
  x, y = _rand(rng, 4, 8), _rand(rng, 4, 8)
  t = Tensor(x).shard(CPU4, axis=0).realize()
  t.assign(Tensor(y).shard(CPU4, axis=1)).realize()  # another axis: resharded onto t's
  _close(t, y)
  t.assign(Tensor(x).to(CPU4) * 2).realize()         # replicated: each lane keeps its rows
  _close(t, x * 2)
  assert t.uop.arg == 0 and all(lane.shape == (1, 8) for lane in t.uop.src[0].src)


def test_shard_in_place(rng):
  x = _rand(rng, 4, 2)
  t = Tensor(x)
  assert t.shard_(CPU4, axis=0) is t and t.device == tuple(Device.canonicalize(d) for d in CPU4)
  _close(t, x)


def test_the_sharding_axis_of_any_value_and_a_sharded_model_loading_a_state_dict():
  from tinycore import nn
  from tinycore.nn.state import load_state_dict
  t = Tensor.ones(4, 6).shard(CPU4[:2], axis=1)
  assert [u.axis for u in (t.uop, (t + 1).uop, t.reshape(4, 2, 3).uop, t.T.uop)] == [1, 1, 1, 0]
  assert t.sum(1).uop.axis is None and Tensor.ones(4).uop.axis is None
  assert Tensor.ones(4).shard(CPU4[:2]).uop.axis is None
  layer = nn.Conv2d(3, 6, kernel_size=3)
  layer.weight.shard_(CPU4[:3], 0)
  layer.bias.shard_(CPU4[:3], None)
  weight, bias = Tensor.randn(6, 3, 3, 3).realize(), Tensor.randn(6).realize()
  load_state_dict(layer, {"weight": weight, "bias": bias})
  assert len(layer.weight.device) == 3 and layer.weight.uop.axis == 0 and layer.bias.uop.axis is None
  np.testing.assert_array_equal(layer.weight.numpy(), weight.numpy())
  np.testing.assert_array_equal(layer.bias.numpy(), bias.numpy())


def test_shard_like_takes_the_devices_and_axis_of_another_tensor():
  like = Tensor.ones(4, 6).shard(CPU4[:2], axis=1)
  t = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).shard_like(like)
  assert t.device == like.device and t.uop.axis == 1
  np.testing.assert_array_equal(t.numpy(), np.arange(24, dtype=np.float32).reshape(4, 6))
  assert Tensor([1.0]).shard_like(Tensor([2.0], device="CPU:1")).device == "CPU:1"
