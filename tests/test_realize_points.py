"""The scheduler's realize points: each rule realizes what it names (and only that), every kernel is lowered once,
scheduling grows linearly with the graph, and devices with an argument limit get split kernels."""
import math
import numpy as np
import pytest
from tinycore import Device, Tensor
from tinycore.device import registry
from tinycore.schedule import create_schedule, explain_realize_points
from tinycore.schedule.jobs import LoweringStats
from tinycore.uop.ops import Ops


def realized(*shape, seed=0):
  data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
  return Tensor(data).realize(), data


def reasons(*tensors) -> list[tuple[Ops, str]]:
  return [(node.op, reason) for node, reason in explain_realize_points([t.uop for t in tensors])]


def test_a_reduce_read_by_two_kernels_is_computed_once():
  (x, xn) = realized(16, 8)
  s = x.sum(axis=1)
  a, b = x.max(axis=1) + s, s * 2
  assert (Ops.REDUCE_AXIS, "a reduce read by two kernels is computed once, in its own") in reasons(a, b)
  Tensor.realize(a, b)
  np.testing.assert_allclose(a.numpy(), xn.max(axis=1) + xn.sum(axis=1), rtol=1e-5)
  np.testing.assert_allclose(b.numpy(), xn.sum(axis=1) * 2, rtol=1e-5)


def test_a_reduce_broadcast_along_an_outer_loop_is_realized():
  (x, xn) = realized(6, 9)
  out = x - x.sum(axis=0)
  assert reasons(out) == [(Ops.REDUCE_AXIS, "a reduce broadcast along an outer loop would be recomputed for every "
                                            "element"), (Ops.SUB, "a root of the realize")]
  np.testing.assert_allclose(out.numpy(), xn - xn.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_a_softmax_feeding_a_matmul_is_stored_once():
  (q, qn), (v, vn) = realized(2, 8, 16, seed=1), realized(2, 16, 4, seed=2)
  out = q.softmax(-1) @ v
  assert any(r.startswith("a value computed from a reduce, broadcast into another reduction") for _, r in reasons(out))
  e = np.exp(qn - qn.max(-1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), (e / e.sum(-1, keepdims=True)) @ vn, rtol=1e-5, atol=1e-6)


def test_a_shared_residual_stream_is_stored_once_and_kernels_stay_small():
  (x, xn) = realized(4, 32)
  h, hn = x, xn
  for i in range(8):
    (w, wn) = realized(32, 32, seed=10 + i)
    h, hn = h + (h.layernorm() @ w), hn + (layernorm(hn) @ wn)
  linear = h.schedule_linear()
  # each layernorm kernel reads its layer's residual, not the whole chain of adds before it
  assert max(len(call.src) - 1 for call in linear.src) <= 6
  assert any(r.startswith("an elementwise value reading more than") for _, r in reasons(h))
  np.testing.assert_allclose(h.numpy(), hn, rtol=1e-4, atol=1e-4)


def layernorm(x: np.ndarray) -> np.ndarray:
  return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


def test_a_cheap_elementwise_value_read_by_two_kernels_is_recomputed():
  (a, an), (b, bn) = realized(16), realized(16, seed=3)
  shared = a * b + 1
  out1, out2 = shared.sum(), (shared * 2).max()
  assert [r for _, r in reasons(out1, out2)] == ["a root of the realize"] * 2  # nothing else
  Tensor.realize(out1, out2)
  np.testing.assert_allclose(out1.numpy(), (an * bn + 1).sum(), rtol=1e-5)


def test_a_store_reading_its_destination_elsewhere_stores_the_value_first():
  x = Tensor(np.arange(8, dtype=np.float32)).realize()
  x[1:].assign(x[:-1] * 10)
  assert any(r == "the stored value reads its own destination at other addresses" for _, r in reasons(x))
  np.testing.assert_array_equal(x.numpy(), [0, 0, 10, 20, 30, 40, 50, 60])


def transformer_block_graph(layers: int, dim: int = 32, seq: int = 8) -> Tensor:
  rng = np.random.default_rng(layers)
  x = Tensor(rng.standard_normal((1, seq, dim)).astype(np.float32)).realize()
  for _ in range(layers):
    w_qkv, w_out, w_fc, w_proj = (Tensor(rng.standard_normal(s).astype(np.float32) / math.sqrt(s[0])).realize()
                                  for s in ((dim, 3 * dim), (dim, dim), (dim, 4 * dim), (4 * dim, dim)))
    q, k, v = (x.layernorm() @ w_qkv).chunk(3, dim=2)
    attention = ((q @ k.transpose(-2, -1)) / math.sqrt(dim)).softmax(-1) @ v
    x = x + attention @ w_out
    x = x + (x.layernorm() @ w_fc).gelu() @ w_proj
  return x


def test_every_kernel_is_lowered_once_and_scheduling_grows_linearly():
  counts = {}
  for layers in (2, 4, 8):
    out = transformer_block_graph(layers)
    before = LoweringStats.kernels
    linear, _ = create_schedule([out.uop])
    lowered = LoweringStats.kernels - before
    kernels = sum(call.src[0].op is Ops.SINK for call in linear.src)
    assert lowered == kernels  # no kernel built twice, none thrown away
    counts[layers] = kernels
  per_layer = counts[4] - counts[2]
  assert counts[8] - counts[4] == 2 * per_layer  # the same kernels for every layer: linear in the depth


@pytest.fixture
def argument_limit(monkeypatch):
  """CPU as a device whose kernels take at most 8 arguments."""
  monkeypatch.setattr(type(Device["CPU"]), "max_kernel_args", 8)
  registry.kernel_argument_limit.cache_clear()
  yield 8
  registry.kernel_argument_limit.cache_clear()


def test_a_kernel_past_the_devices_argument_limit_is_split(argument_limit):
  arrays = [np.full((5,), i, np.float32) for i in range(30)]
  tensors = [Tensor(a, device="CPU").realize() for a in arrays]
  total = tensors[0]
  for t in tensors[1:]: total = total + t * 0.5
  linear = total.schedule_linear()
  assert len(linear.src) > 1 and all(len(call.src) - 1 <= argument_limit for call in linear.src)
  assert any("takes at most 8 arguments" in r for _, r in reasons(total))
  np.testing.assert_allclose(total.numpy(), np.full(5, sum(range(1, 30)) * 0.5, np.float32), rtol=1e-6)
  stacked = Tensor.stack(*tensors)
  assert all(len(call.src) - 1 <= argument_limit for call in stacked.schedule_linear().src)
  np.testing.assert_array_equal(stacked.numpy(), np.stack(arrays))


def test_a_depthwise_convolution_reads_its_input_stored_padded_and_a_full_one_does_not():
  rng = np.random.default_rng(4)
  x = Tensor(rng.standard_normal((2, 4, 10, 10)).astype(np.float32)).realize()
  depthwise, full = Tensor(rng.standard_normal((4, 1, 3, 3)).astype(np.float32)), \
    Tensor(rng.standard_normal((6, 16, 3, 3)).astype(np.float32))
  def padded_inputs(t: Tensor) -> list:
    return [node for node, why in explain_realize_points([t.uop]) if node.op is Ops.PAD and "sliding window" in why]
  out = x.conv2d(depthwise, groups=4, padding=1)
  assert [p.shape for p in padded_inputs(out)] == [(2, 4, 12, 12)]
  # a convolution over 16 input channels too keeps its padding in its packed panels; a stride-2 pool reads each
  # element about once; a window's own pads over an expanded view (the pool's layout) are never stored
  assert padded_inputs(x.repeat(1, 4, 1, 1).conv2d(full, padding=1)) == []
  assert padded_inputs(x.max_pool2d(kernel_size=3, stride=2, padding=1)) == []
  xp, w = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1))), depthwise.numpy()[:, 0]
  expected = sum(xp[:, :, i:i + 10, j:j + 10] * w[None, :, i, j, None, None] for i in range(3) for j in range(3))
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_value_rounded_to_float16_that_a_matmul_reuses_is_stored_rounded_once():
  rng = np.random.default_rng(6)
  a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 40)).astype(np.float32)
  x, w = Tensor(a).realize(), Tensor(b).realize()
  out = x.half() @ w.half()
  rounded = [node for node, why in explain_realize_points([out.uop]) if "16-bit float" in why]
  assert sorted(node.shape for node in rounded) == [(48, 40), (64, 48)] and all(n.op is Ops.CAST for n in rounded)
  expected = a.astype(np.float16).astype(np.float32) @ b.astype(np.float16).astype(np.float32)
  np.testing.assert_allclose(out.float().numpy(), expected, rtol=2e-3, atol=2e-2)
  # an elementwise rounding is not stored apart, nor a float16 sum's own rounding
  assert not [n for n, why in explain_realize_points([(x.half() + 1).uop]) if "16-bit float" in why]
