"""Bugs found by running tinygrad's own test files against tinycore, each checked against numpy."""
import json
import os
import subprocess
import sys
import numpy as np
import pytest
from tinycore import Tensor, Context, TinyJit, dtypes
from tinycore.nn.optim import SGD, Adam, AdamW, LAMB


def test_crossed_assigns_in_one_realize():
  a = Tensor(np.array([1.0, 2.0, 3.0], np.float32)).realize()
  b = Tensor(np.array([4.0, 5.0, 6.0], np.float32)).realize()
  new_a, new_b = a + b.sum(), b * a.sum()
  a.assign(new_a); b.assign(new_b)
  Tensor.realize(a, b)
  np.testing.assert_allclose(a.numpy(), [16.0, 17.0, 18.0])
  np.testing.assert_allclose(b.numpy(), [24.0, 30.0, 36.0])


def test_sgd_steps_where_each_gradient_reads_the_other_parameter():
  # d/dx sum(x*W) reads W and d/dW reads x: both updates fuse into kernels reading the other's old buffer
  x0, w0 = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32), np.eye(4, dtype=np.float32)
  x, w = Tensor(x0.copy()), Tensor(w0.copy())
  opt = SGD([x, w], lr=0.1)
  with Context(TRAINING=1):
    for _ in range(4):
      opt.zero_grad()
      (x * w).sum().backward()
      opt.step()
  xr, wr = x0.copy(), w0.copy()
  for _ in range(4): xr, wr = xr - 0.1 * wr.sum(0, keepdims=True), wr - 0.1 * np.broadcast_to(xr, wr.shape)
  np.testing.assert_allclose(x.numpy(), xr, rtol=1e-5)
  np.testing.assert_allclose(w.numpy(), wr, rtol=1e-5)


def test_backward_again_after_realizing_the_gradients():
  # realizing x.grad stores intermediates of out's graph; a second backward still reaches x and W and accumulates
  rng = np.random.default_rng(1)
  x0, w0 = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
  x, w = Tensor(x0), Tensor(w0)
  out = x.dot(w).relu().sum()
  active = (x0 @ w0 > 0).astype(np.float32)
  grad_x, grad_w = active @ w0.T, x0.T @ active
  for times in (1, 2, 3):
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), times * grad_x, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), times * grad_w, rtol=1e-5)
  np.testing.assert_allclose(out.gradient(x)[0].numpy(), grad_x, rtol=1e-5)


def test_jit_in_place_update_of_a_closed_over_tensor_runs_once_per_call():
  # the first call's pending store must not be captured again with the second call's
  state = {"x": Tensor([1]).realize()}

  @TinyJit
  def add_in_place(y: Tensor) -> Tensor:
    state["x"] += y
    return state["x"]

  for _ in range(5): add_in_place(Tensor([2]))
  assert state["x"].item() == 1 + 5 * 2


def test_setitem_through_detach_writes_the_source():
  t = Tensor.zeros((3, 3)).contiguous().realize()
  t.detach()[1, 2] = 5
  expected = np.zeros((3, 3), np.float32)
  expected[1, 2] = 5
  np.testing.assert_equal(t.numpy(), expected)


def test_clone_copies_the_gradient():
  a = Tensor(np.arange(4, dtype=np.float32))
  (a * 5.0).sum().backward()
  b = a.clone()
  np.testing.assert_equal(b.grad.numpy(), [5.0, 5.0, 5.0, 5.0])
  assert b.grad.uop is not a.grad.uop


def test_error_classes_as_tinygrad():
  t = Tensor.zeros(6).contiguous().realize()
  with pytest.raises(RuntimeError, match="dtype mismatch"): t[2:4] = Tensor([1, 2], dtype=dtypes.int32)
  with pytest.raises(TypeError, match="dtype mismatch"): t.assign(Tensor.ones(6, dtype=dtypes.int32))
  with pytest.raises(AttributeError, match="unknown dtype"): Tensor([3], dtype="typo")
  with pytest.raises(TypeError, match="unknown dtype"): Tensor([3], dtype="typo")


def test_default_float_and_int_settings():
  with Context(DEFAULT_FLOAT="HALF"):
    assert dtypes.default_float is dtypes.float16
    assert Tensor([1.5]).dtype is dtypes.float16 and Tensor.rand(2).dtype is dtypes.float16
    np.testing.assert_allclose((Tensor([1, 2]) / 2).numpy(), np.array([0.5, 1.0], np.float16))
  with Context(DEFAULT_FLOAT=dtypes.float64): assert Tensor([0.1]).numpy().dtype == np.float64
  with Context(DEFAULT_INT=dtypes.int64): assert Tensor([1, 2]).dtype is dtypes.int64
  assert dtypes.default_float is dtypes.float32 and Tensor([1]).dtype is dtypes.int32
  with Context(DEFAULT_FLOAT="int32"), pytest.raises(ValueError, match="DEFAULT_FLOAT"): Tensor([1.5])


def test_arange_and_indexing_past_int32():
  n = 2**31 + 3
  np.testing.assert_equal(Tensor.arange(n).shrink(((n - 3, n),)).numpy(), [2**31, 2**31 + 1, 2**31 + 2])
  big = Tensor([1]).expand(n)
  np.testing.assert_equal(big[Tensor([0, 2**31 + 2])].numpy(), [1, 1])


def test_optimizer_arguments_validated_as_tinygrad():
  with pytest.raises(ValueError, match="momentum"): SGD([Tensor([1.0])], lr=0.1, momentum=-0.1)
  with pytest.raises(ValueError, match="weight_decay"): AdamW([Tensor([1.0])], lr=0.1, weight_decay=-0.1)
  with pytest.raises(ValueError, match="weight_decay"): LAMB([Tensor([1.0])], lr=0.1, weight_decay=-0.1)


def test_bitcast_that_does_not_divide_raises_runtime_error():
  with pytest.raises(RuntimeError, match="bitcast"): Tensor.empty((3,), dtype=dtypes.int8).bitcast(dtypes.float16)
  with pytest.raises(ValueError, match="bitcast"): Tensor.empty((3,), dtype=dtypes.int8).bitcast(dtypes.float16)


def test_more_error_classes_as_tinygrad():
  with pytest.raises(RuntimeError, match="shape must be int"): Tensor.ones(2.0)
  with pytest.raises(ValueError, match="shape must be int"): Tensor.ones(2.5)
  with pytest.raises(IndexError, match="float"): Tensor([1, 2, 3])[0.0]
  with pytest.raises(TypeError, match="str"): Tensor([1, 2, 3])["a"]
  t = Tensor.ones(2, 3, 4)
  with pytest.raises(AssertionError, match="each name"): t.rearrange("a b c -> a b")
  with pytest.raises(AssertionError, match="bad axis name"): t.rearrange("a 2b c -> a 2b c")
  with pytest.raises(ValueError, match="'->'"): t.rearrange("a b c")


def test_rand_past_2_to_the_32_does_not_repeat():
  Tensor.manual_seed(0)
  numbers = Tensor.rand(2**33)
  head, tail = numbers[5:10].numpy(), numbers[2**32 + 5:2**32 + 10].numpy()
  assert ((0 <= tail) & (tail < 1)).all() and not np.allclose(head, tail)
  Tensor.manual_seed(0)
  np.testing.assert_equal(Tensor.rand(10)[5:].numpy(), head)  # the stream before 2**32 is unchanged


def test_jit_prune_runs_input_independent_kernels_once():
  weights = Tensor(np.arange(16, dtype=np.float32)).realize()

  def scaled_sum(x: Tensor) -> Tensor: return ((weights * 2).contiguous() + x).realize()

  plain, pruned = TinyJit(scaled_sum), TinyJit(prune=True)(scaled_sum)
  rng = np.random.default_rng(2)
  for _ in range(4):
    x = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(plain(Tensor(x)).numpy(), np.arange(16) * 2 + x, rtol=1e-6)
    np.testing.assert_allclose(pruned(Tensor(x)).numpy(), np.arange(16) * 2 + x, rtol=1e-6)
  assert pruned.plan.kernel_count < plain.plan.kernel_count


def test_rearrange_names_and_sizes_as_einops():
  t = Tensor.ones(8, 2)
  for name in ("_pre", "post_", "_", "2b"):
    with pytest.raises(AssertionError, match="bad axis name"): Tensor.ones(1).rearrange(f"{name} -> {name}")
  with pytest.raises(AssertionError, match="cannot split"): t.rearrange("(a1 a2 a3) b -> b a3 a2 a1", a1=2, a2=2, b=3)
  with pytest.raises(ValueError, match="cannot split"): t.rearrange("(a1 a2 a3) b -> b a3 a2 a1", a1=3, a2=2)
  np.testing.assert_equal(Tensor.arange(4).reshape(2, 2).rearrange("a_1 b -> b a_1").numpy(), [[0, 2], [1, 3]])


def test_adam_under_a_half_default_float_keeps_float32_moments():
  # one Adam step moves each weight by about lr * sign(grad); rounding b1/b2 powers to half would be 1% off
  x0 = np.array([1.0, -2.0, 3.0], np.float32)
  with Context(DEFAULT_FLOAT="HALF"):
    x = Tensor(x0)
    opt = Adam([x], lr=1e10)
    with Context(TRAINING=1):
      opt.zero_grad()
      (x * x).sum().backward()
      opt.step()
  np.testing.assert_allclose(x.numpy(), x0 - 1e10 * np.sign(x0), rtol=1e-4)


def test_softmax_gradient_has_no_residue_from_its_max_shift():
  # the max a softmax subtracts cancels: its gradient is left out (not one that sums to ~1e-7), so d sum(softmax)
  # is 0 to float rounding of the softmax itself, as torch's (tinygrad's test_softmax, grad_atol 1e-7)
  torch = pytest.importorskip("torch")
  x = np.random.default_rng(3).uniform(-2, 2, (45, 65)).astype(np.float32)
  for fn, torch_fn in ((Tensor.softmax, torch.softmax), (Tensor.log_softmax, torch.log_softmax)):
    xt = torch.tensor(x, requires_grad=True)
    want = torch.autograd.grad((torch_fn(xt, 1) * torch.arange(65.0)).sum(), xt)[0].numpy()
    t = Tensor(x)
    got = (fn(t, 1) * Tensor.arange(65).float()).sum().gradient(t)[0].numpy()
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)  # (terms up to ~70 cancel)
    xt = torch.tensor(x, requires_grad=True)
    want = torch.autograd.grad(torch_fn(xt, 1).sum(), xt)[0].numpy()
    np.testing.assert_allclose(fn(t, 1).sum().gradient(t)[0].numpy(), want, atol=1e-7, rtol=1e-3)
  t = Tensor(x)
  e = np.exp(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(t.logsumexp(1).sum().gradient(t)[0].numpy(), e / e.sum(1, keepdims=True), atol=1e-7)


def test_bitwise_op_with_an_int_that_is_a_bit_pattern_of_the_dtype():
  # int32 | 0xFFFFFFFF sets every bit (-1, as tinygrad); a value wider than the dtype still raises
  assert (Tensor([0], dtype=dtypes.int32) | 0xFFFFFFFF).item() == -1
  assert (Tensor([0x7F], dtype=dtypes.int8) & 0xF0).item() == 0x70
  assert (0xFFFF ^ Tensor([1], dtype=dtypes.int16)).item() == -2
  np.testing.assert_equal((Tensor(np.array([1, -1], np.int64)) & 0xFFFFFFFFFFFFFFFF).numpy(), [1, -1])
  with pytest.raises(OverflowError, match="int32"): Tensor([0], dtype=dtypes.int32) | (1 << 32)
  with pytest.raises(OverflowError, match="int32"): Tensor([0], dtype=dtypes.int32) + 0xFFFFFFFF


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])  # a queue device (a command batch) and a host-called one
def test_global_counters_count_ops_and_memory(device):
  # tinygrad's GlobalCounters.global_ops / global_mem (scripts print GFLOPS from them) were missing
  from tinycore import GlobalCounters
  rng = np.random.default_rng(2)
  a0, b0 = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
  a, b = Tensor(a0, device=device).realize(), Tensor(b0, device=device).realize()
  GlobalCounters.reset()
  out = (a @ b).realize()
  np.testing.assert_allclose(out.numpy(), a0 @ b0, rtol=1e-5)
  assert GlobalCounters.global_ops == 2 * 16 * 8 * 4  # a multiply and an add per term
  assert GlobalCounters.global_mem == a0.nbytes + b0.nbytes + 16 * 4 * 4
  jitted, c = TinyJit(lambda x, y: (x * y + 1).realize()), Tensor(a0 * 2, device=device).realize()
  for _ in range(3):
    GlobalCounters.reset()
    np.testing.assert_allclose(jitted(a, c).numpy(), a0 * a0 * 2 + 1, rtol=1e-6)
    assert (GlobalCounters.global_ops, GlobalCounters.global_mem) == (2 * a0.size, 3 * a0.nbytes)
  GlobalCounters.reset()
  assert (GlobalCounters.global_ops, GlobalCounters.global_mem) == (0, 0)


@pytest.mark.parametrize("param_device", ["PYTHON", ("CPU:0", "CPU:1")])
def test_optimizer_state_moved_to_another_device(param_device):
  # offloading Adam's moments or SGD's velocity with to_("CPU") raised "operands are on different devices"
  x0 = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
  def train(make_optimizer, offload):
    param = Tensor(x0.copy(), device=param_device) if isinstance(param_device, str) else \
      Tensor(x0.copy()).shard(param_device, axis=1)
    opt, device_before = make_optimizer([param]), param.device
    if offload:
      for state in [*getattr(opt, "m", []), *getattr(opt, "v", []), *getattr(opt, "velocity", [])]: state.to_("CPU")
    with Context(TRAINING=1):
      for _ in range(3):
        opt.zero_grad()
        (param * param).sum().backward()
        opt.step()
    assert param.device == device_before
    return param.numpy(), opt
  adam_values, adam = train(lambda ps: Adam(ps, lr=0.1), offload=True)
  assert adam.m[0].device == "CPU" and adam.v[0].device == "CPU"
  sgd_values, sgd = train(lambda ps: SGD(ps, lr=0.1, momentum=0.9), offload=True)
  assert sgd.velocity[0].device == "CPU"
  np.testing.assert_allclose(adam_values, train(lambda ps: Adam(ps, lr=0.1), offload=False)[0], rtol=1e-6)
  np.testing.assert_allclose(train(lambda ps: LAMB(ps, lr=0.1), offload=True)[0],
                             train(lambda ps: LAMB(ps, lr=0.1), offload=False)[0], rtol=1e-6)
  x, velocity = x0.copy(), np.zeros_like(x0)
  for _ in range(3): velocity = 0.9 * velocity + 2 * x; x = x - 0.1 * velocity
  np.testing.assert_allclose(sgd_values, x, rtol=1e-5)
  # Adam as torch.optim.Adam computes it (betas 0.9, 0.999, eps 1e-8), in float64 (the core env has no torch)
  x, m, v = x0.astype(np.float64), np.zeros(x0.shape), np.zeros(x0.shape)
  for step in range(1, 4):
    g = 2 * x
    m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
    x = x - 0.1 * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
  np.testing.assert_allclose(adam_values, x, rtol=1e-5, atol=1e-5)


SEARCHED_SUM_SCRIPT = """
import json
import numpy as np
from tinycore import Context, Tensor
from tinycore.engine import search
search.MIN_SEARCHED_SECONDS = 0.0
x = Tensor(np.linspace(-1, 1, 3000, dtype=np.float32).reshape(60, 50)).realize()
with Context(BEAM=1): value = (x.exp() * 2).sum(0).numpy()
print(json.dumps({"searches": len(search.reports), "first": float(value[0])}))
"""


def test_ignore_beam_cache_searches_again(tmp_path):
  # tinygrad's IGNORE_BEAM_CACHE setting (Context(IGNORE_BEAM_CACHE=1) raised KeyError): a process searches again
  # although the disk cache holds the kernel's choice
  from tinycore.helpers import IGNORE_BEAM_CACHE
  def run(ignore_cache: str) -> dict:
    env = {**os.environ, "TINYCORE_CACHE_DIR": str(tmp_path / "cache"), "IGNORE_BEAM_CACHE": ignore_cache}
    out = subprocess.run([sys.executable, "-c", SEARCHED_SUM_SCRIPT], capture_output=True, text=True, env=env,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])
  runs = [run("0"), run("1"), run("0")]
  assert [r["searches"] for r in runs] == [1, 1, 0]
  expected = 2 * np.exp(np.linspace(-1, 1, 3000, dtype=np.float32).reshape(60, 50)[:, 0]).sum()
  for r in runs: assert r["first"] == pytest.approx(expected, rel=1e-5)
  with Context(IGNORE_BEAM_CACHE=1): assert IGNORE_BEAM_CACHE.value == 1


def test_global_ops_count_an_index_read_as_the_gather_it_runs_as():
  # X[idx] is a one-hot sum over X's rows in the graph, and one read per element once compiled (tinygrad's
  # test_index_mnist bounds the ops): 512 x 784 picks, not 512 x 784 x 60000 compares
  from tinycore import GlobalCounters
  rng = np.random.default_rng(0)
  x0, idx0 = rng.standard_normal((6000, 784)).astype(np.float32), rng.integers(0, 6000, 512).astype(np.int32)
  x, idx = Tensor(x0).realize(), Tensor(idx0).realize()
  GlobalCounters.reset()
  picked = x[idx].realize()
  assert GlobalCounters.global_ops <= 2 * 512 * 784
  np.testing.assert_array_equal(picked.numpy(), x0[idx0])
