"""tinygrad API compatibility of the host-side pieces: the helpers tinygrad users import from tinygrad.helpers,
optimizer keyword arguments and OptimizerGroup, load_state_dict's verbose/consume, is_param and to_."""
import numpy as np
import pytest
from tinycore import Tensor, nn
from tinycore.helpers import (DEBUG, Context, Timing, all_int, all_same, argfix, ceildiv, colored, dedup, flatten,
                              fully_flatten, make_tuple, merge_dicts, partition, prod, round_up, strides_for_shape,
                              unwrap)


def test_helpers():
  assert prod([2, 3, 4]) == 24 and prod([]) == 1
  assert flatten([[1, 2], [3]]) == [1, 2, 3] and fully_flatten([[1, [2]], (3,)]) == [1, 2, 3]
  assert fully_flatten(np.arange(4).reshape(2, 2)) == [0, 1, 2, 3]
  assert dedup([3, 1, 3, 2, 1]) == [3, 1, 2]
  assert argfix((2, 3)) == (2, 3) and argfix(2, 3) == (2, 3) and argfix([4]) == (4,)
  with pytest.raises(ValueError): argfix((2, 3), 4)
  assert make_tuple(3, 2) == (3, 3) and make_tuple([1, 2], 2) == (1, 2)
  assert all_int((1, 2)) and not all_int((1, 2.0)) and all_same([2, 2]) and not all_same([1, 2])
  assert round_up(10, 4) == 12 and round_up(12, 4) == 12 and ceildiv(10, 4) == 3 and ceildiv(-3, 2) == -1
  assert partition([1, 2, 3, 4], lambda v: v % 2 == 0) == ([2, 4], [1, 3])
  assert merge_dicts([{"a": 1}, {"b": 2, "a": 1}]) == {"a": 1, "b": 2}
  with pytest.raises(ValueError, match="'a'"): merge_dicts([{"a": 1}, {"a": 2}])
  assert strides_for_shape((2, 3, 4)) == (12, 4, 1) and strides_for_shape((2, 1, 3)) == (3, 0, 1)
  assert unwrap(5) == 5
  with pytest.raises(ValueError): unwrap(None)
  assert colored("x", None) == "x" and colored("x", "red").startswith("\x1b[31m")


def test_debug_and_timing(capsys):
  with Context(DEBUG=2):
    assert DEBUG >= 2 and DEBUG > 1 and not DEBUG < 2 and int(DEBUG) == 2
  with Timing("step ") as timing: sum(range(1000))
  assert capsys.readouterr().out.startswith("step ") and timing.elapsed_ns > 0


def test_tinygrad_tuning_settings_are_accepted_and_results_unchanged():
  x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
  with Context(NOOPT=1, BEAM=2, SPLIT_REDUCEOP=0):
    np.testing.assert_allclose((x * 2).sum(1).numpy(), [6, 24])
  with pytest.raises(KeyError, match="NOT_A_SETTING"): Context(NOT_A_SETTING=1)


def _train_step(optimizer, loss_fn) -> None:
  with Tensor.train():
    optimizer.zero_grad()
    loss_fn().backward()
    optimizer.step()


def test_optimizer_group_steps_every_optimizer():
  w, v = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
  group = nn.optim.OptimizerGroup(nn.optim.SGD([w], lr=0.1), nn.optim.Adam([v], lr=0.1))
  _train_step(group, lambda: (w * w).sum() + (v * v).sum())
  np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)  # w - 0.1 * 2w
  np.testing.assert_allclose(v.numpy(), [2.9], rtol=1e-6)       # Adam's first step moves by lr
  assert group[0].params[0] is w and len(group.params) == 2


def test_sgd_classic_and_device_keywords():
  results = []
  for classic in (False, True):
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.1, momentum=0.5, classic=classic, device="CPU", fused=False)
    for _ in range(2): _train_step(opt, lambda: (w * w).sum())
    results.append(w.numpy())
  # b1 = 2w0, w1 = 0.8 w0; b2 = 0.5 b1 + 2 w1 = 2.6 w0; w2 = w1 - 0.1 b2 = 0.54 w0 (the same with a constant lr)
  np.testing.assert_allclose(results[0], [0.54, 1.08], rtol=1e-6)
  np.testing.assert_allclose(results[1], [0.54, 1.08], rtol=1e-6)


def test_load_state_dict_consume_and_scalar_shapes():
  class Model:
    def __init__(self): self.layer, self.scale = nn.Linear(2, 3), Tensor([1.0])
  model = Model()
  state = {"layer.weight": Tensor.ones(3, 2), "layer.bias": Tensor.zeros(3), "scale": Tensor(4.0)}
  loaded = nn.state.load_state_dict(model, state, verbose=False, consume=True)
  assert len(loaded) == 3 and state == {}
  assert model.scale.shape == (1,) and model.scale.tolist() == [4.0]  # () and (1,) are interchangeable
  assert model.layer(Tensor([[1.0, 2.0]])).tolist() == [[3.0, 3.0, 3.0]]
  with pytest.raises(ValueError, match=r"Shape mismatch in layer `layer.weight`: Expected shape \(3, 2\)"):
    nn.state.load_state_dict(model, {"layer.weight": Tensor.ones(2, 3), "layer.bias": Tensor.zeros(3),
                                     "scale": Tensor([1.0])})
  # another dtype is cast into the model's (torch's copy_): the model stays float32, a BatchNorm count int64
  nn.state.load_state_dict(model, {"layer.weight": Tensor([[1, 2], [3, 4], [5, 6]]), "layer.bias": Tensor.zeros(3),
                                   "scale": Tensor([2.0], dtype="float16")}, verbose=False)
  assert model.layer.weight.dtype.name == "float32" and model.layer.weight.tolist()[2] == [5.0, 6.0]
  bn = nn.BatchNorm(1)
  nn.state.load_state_dict(bn, {"weight": Tensor.ones(1), "bias": Tensor.ones(1), "running_mean": Tensor.zeros(1),
                                "running_var": Tensor.ones(1), "num_batches_tracked": Tensor.ones(1)})
  assert bn.num_batches_tracked.dtype.name == "int64" and bn.num_batches_tracked.item() == 1


def test_is_param_and_to_():
  t = Tensor([1.0, 2.0])
  assert t.is_param and not t.is_param_(False).is_param and t.requires_grad is False
  bn = nn.BatchNorm(2)
  opt = nn.optim.SGD(nn.state.get_parameters(bn), lr=0.1)
  assert len(opt.params) == 2 and len(opt.buffers) == 3  # running mean/var and the batch count are buffers
  moved = Tensor([1.0, 2.0])
  assert moved.to_("CPU:1") is moved and moved.device == "CPU:1" and moved.tolist() == [1.0, 2.0]


def test_dtypes_from_np():
  from tinycore import dtypes
  assert dtypes.from_np(np.float32) is dtypes.float32 and dtypes.from_np(np.dtype("int16")) is dtypes.int16
  with pytest.raises(TypeError, match="complex64"): dtypes.from_np(np.complex64)


def test_layers_name_a_wrong_input_shape():
  with pytest.raises(ValueError, match=r"BatchNorm\(3\) needs an input \(N, 3, ...\), got shape \(2, 4, 5\)"):
    nn.BatchNorm(3)(Tensor.ones(2, 4, 5))
  with pytest.raises(ValueError, match="InstanceNorm"): nn.InstanceNorm(3)(Tensor.ones(2, 4, 5))
  with pytest.raises(ValueError, match="GroupNorm"): nn.GroupNorm(1, 3)(Tensor.ones(2, 4, 5))


def test_renderer_supported_dtypes_is_a_set_and_callable():
  from tinycore import Device, dtypes
  supported = Device[Device.DEFAULT].renderer.supported_dtypes
  assert dtypes.float32 in supported and dtypes.float32 in supported()  # tinygrad calls it; plugins test membership
  assert set(supported()) == set(supported)


def test_errors_are_the_classes_tinygrad_code_catches():
  # tinygrad raises these classes (tinycore's are subclasses of both the Python-natural one and tinygrad's)
  a, ints = Tensor.ones(10, 11, 12), Tensor([1, 2, 3], dtype="uint32")
  with pytest.raises(ValueError): Tensor([1, 2]).one_hot(-1)
  with pytest.raises(ValueError): Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6]))
  with pytest.raises(RuntimeError): Tensor([0.0, 1.0]).meshgrid(indexing="bad")
  with pytest.raises(RuntimeError): Tensor.ones(1, 1, 6, 7).conv2d(Tensor.ones(6, 1, 3, 3), dilation=3)
  for shift in (lambda: Tensor([1.0]) << 2, lambda: ints << Tensor([1.0]), lambda: ints << 1.0, lambda: ints & 1.5):
    with pytest.raises(RuntimeError): shift()
  with pytest.raises(IndexError, match="single ellipsis"): a[..., ...]
  with pytest.raises(IndexError): a[[1.1]]
  with pytest.raises(IndexError): a[Tensor([True, False])]
  np.testing.assert_equal((ints << 2).numpy(), [4, 8, 12])


def test_normalize_zero_and_infinite_orders():
  x = np.array([[3.0, 0.0, -4.0], [0.0, 0.0, 2.0]], np.float32)
  np.testing.assert_allclose(Tensor(x).normalize(p=0).numpy(), x / np.array([[2], [1]], np.float32))
  np.testing.assert_allclose(Tensor(x).normalize(p=float("inf")).numpy(), x / np.array([[4], [2]], np.float32))
  np.testing.assert_allclose(Tensor(x).normalize(p=1, dim=0).numpy(), x / np.abs(x).sum(0).clip(1e-12, None))


def test_unknown_dtype_name_is_a_type_and_attribute_error():
  for error in (TypeError, AttributeError):
    with pytest.raises(error, match="unknown dtype"): Tensor([1.0, 2.0]).sum(dtype="")


def test_einsum_mistakes_raise_tinygrads_classes():
  a, b = Tensor.ones(2, 3, 4), Tensor.ones(2, 3, 4)
  with pytest.raises(RuntimeError, match="ellipsis"): Tensor.einsum("...ik..., ...jk ->", a, b)
  with pytest.raises(RuntimeError, match="sizes"): Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 2))
  batched = Tensor.einsum("...ij,...jk->...ik", a, Tensor.ones(2, 4, 5))
  np.testing.assert_allclose(batched.numpy(), np.full((2, 3, 5), 4))


def test_topk_by_selection_matches_a_sort():
  # small k takes k selection passes; the order is the sort's: NaN largest, +inf before it, ties by position
  rng = np.random.default_rng(5)
  x = rng.standard_normal((4, 100)).astype(np.float32)
  x[0, 5], x[0, 7], x[1, 3], x[2, :], x[3, 10:20] = np.nan, np.inf, -np.inf, 1.0, np.nan
  nan, value, position = np.isnan(x).astype(np.int32), np.where(np.isnan(x), 0, x), np.arange(100)
  for k in (1, 3, 16, 17):  # (17: the sort path)
    for largest in (True, False):
      values, indices = Tensor(x).topk(k, largest=largest)
      keys = [(position, -value[r], -nan[r]) if largest else (position, value[r], nan[r]) for r in range(4)]
      want = np.stack([np.lexsort(key)[:k] for key in keys])
      np.testing.assert_array_equal(indices.numpy(), want)
      np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, want, -1))
  ints = rng.integers(-3, 3, (8, 40)).astype(np.int32)
  values, indices = Tensor(ints).topk(5, dim=0)
  assert values.shape == (5, 40) and indices.dtype.name == "int32"
  np.testing.assert_array_equal(values.numpy(), -np.sort(-ints, axis=0)[:5])
  np.testing.assert_array_equal(np.take_along_axis(ints, indices.numpy(), 0), values.numpy())
