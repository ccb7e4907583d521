"""Symbolic shapes: a bound Variable (or an expression of them) as a size in shrink/reshape/pad/arange and everything
built on them. Each graph shape compiles once: the Variable's value is a kernel argument (loops run to its largest
value, gated by the value), so new values reuse the schedule and the programs, eagerly and in TinyJit replays."""
import numpy as np
import pytest
from tinycore import Device, Tensor, TinyJit, Variable
from tinycore.codegen import CodegenStats
from tinycore.jit import JitError
from tinycore.engine.plan import PlanCacheStats

DEVICES = ["CPU", "SIM", "PYTHON"]
RNG = np.random.default_rng(7)


def realized(value: np.ndarray, device: str) -> Tensor: return Tensor(value, device=device).realize()


class CompileCounter:
  """Asserts that nothing new is compiled or scheduled after the first value."""
  def __init__(self): self.first: tuple[int, int] | None = None

  def check(self) -> None:
    now = (CodegenStats.compiled, PlanCacheStats.misses)
    if self.first is None: self.first = now
    else: assert now == self.first, f"a new value compiled or scheduled again: {self.first} -> {now}"


CASES = {
  "shrink_elementwise": (lambda t, v: t.shrink((None, (0, v))) * 2 + 1, lambda x, n: x[:, :n] * 2 + 1),
  "shrink_offset": (lambda t, v: t.shrink(((1, 3), (v - 1, v + 2))), lambda x, n: x[1:3, n - 1:n + 2]),
  "sum_symbolic_axis": (lambda t, v: t.shrink((None, (0, v))).sum(1), lambda x, n: x[:, :n].sum(1)),
  "sum_all": (lambda t, v: t.shrink((None, (0, v))).sum(), lambda x, n: x[:, :n].sum()),
  "max_symbolic_axis": (lambda t, v: t.shrink((None, (0, v))).max(1), lambda x, n: x[:, :n].max(1)),
  "mean": (lambda t, v: t.shrink((None, (0, v))).mean(1), lambda x, n: x[:, :n].mean(1)),
  "softmax": (lambda t, v: t.shrink((None, (0, v))).softmax(1),
              lambda x, n: np.exp(x[:, :n] - x[:, :n].max(1, keepdims=True)) /
              np.exp(x[:, :n] - x[:, :n].max(1, keepdims=True)).sum(1, keepdims=True)),
  "reshape_symbolic": (lambda t, v: t.reshape(40).shrink(((0, v * 4),)).reshape(v, 4).sum(0),
                       lambda x, n: x.reshape(40)[:n * 4].reshape(n, 4).sum(0)),
  "transpose": (lambda t, v: t.shrink((None, (0, v))).T + 1, lambda x, n: x[:, :n].T + 1),
  "pad": (lambda t, v: t.shrink((None, (0, v))).pad(((1, 0), (v, 2))),
          lambda x, n: np.pad(x[:, :n], ((1, 0), (n, 2)))),
  "pad_value": (lambda t, v: t.shrink((None, (0, v))).pad(((0, 0), (1, v)), value=-2.5),
                lambda x, n: np.pad(x[:, :n], ((0, 0), (1, n)), constant_values=-2.5)),
  "variable_operand": (lambda t, v: t.shrink((None, (0, v))) * (v * 2 + 1), lambda x, n: x[:, :n] * (n * 2 + 1)),
  "arange": (lambda t, v: Tensor.arange(v, device=t.device) * 3, lambda x, n: np.arange(n) * 3),
  "arange_expr": (lambda t, v: Tensor.arange(1, v * 2 + 1, device=t.device), lambda x, n: np.arange(1, n * 2 + 1)),
  "ones": (lambda t, v: Tensor.ones(v, 2, device=t.device).sum(0), lambda x, n: np.ones((n, 2)).sum(0)),
  "getitem": (lambda t, v: t[1:3, 1:v] + t[:2, :v - 1], lambda x, n: x[1:3, 1:n] + x[:2, :n - 1]),
  "cat": (lambda t, v: t[:, :v].cat(t[:2, :v] * 2, dim=0), lambda x, n: np.concatenate([x[:, :n], x[:2, :n] * 2])),
  "cumsum": (lambda t, v: t[:, :v].cumsum(1), lambda x, n: x[:, :n].cumsum(1)),
  "flip": (lambda t, v: t[:, :v].flip(1), lambda x, n: x[:, :n][:, ::-1]),
  "argmax": (lambda t, v: t[:, :v].argmax(1), lambda x, n: x[:, :n].argmax(1)),
  "layernorm": (lambda t, v: t[:, :v].layernorm(), lambda x, n: (x[:, :n] - x[:, :n].mean(1, keepdims=True)) /
                np.sqrt(x[:, :n].var(1, keepdims=True) + 1e-5)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_match_numpy_one_compile(device, case):
  Device[device]
  build, reference = CASES[case]
  x = RNG.standard_normal((4, 10)).astype(np.float32)
  t = realized(x, device)
  v = Variable("n", 2, 8)
  counter = CompileCounter()
  for value in (3, 8, 2, 5):
    got = build(t, v.bind(value)).numpy()
    counter.check()
    np.testing.assert_allclose(got, reference(x, value), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_over_a_symbolic_dim(device):
  Device[device]
  a_np, b_np = RNG.standard_normal((3, 9)).astype(np.float32), RNG.standard_normal((9, 4)).astype(np.float32)
  a, b = realized(a_np, device), realized(b_np, device)
  v = Variable("k", 1, 9)
  counter = CompileCounter()
  for value in (4, 9, 1, 6):
    vb = v.bind(value)
    got = (a.shrink((None, (0, vb))) @ b.shrink(((0, vb), None))).numpy()
    counter.check()
    np.testing.assert_allclose(got, a_np[:, :value] @ b_np[:value], rtol=1e-5, atol=1e-5)


def test_symbolic_shape_entries():
  v = Variable("i", 1, 10)
  t = Tensor.ones(4, 10)
  s = t.shrink((None, (0, v.bind(3))))
  assert s.shape[0] == 4 and s.shape[1] is v.bind(3)
  assert s.reshape(4, 3).shape == (4, 3)  # back to ints when the bound values agree
  assert t.shrink((None, (2, v.bind(7)))).pad(((0, 0), (1, 1))).numpy().shape == (4, 7)
  assert Tensor.arange(v.bind(5)).tolist() == [0, 1, 2, 3, 4]
  assert t.shrink(((0, 1), (0, v.bind(1)))).item() == 1.0


def test_gradient_through_a_symbolic_shrink():
  x = RNG.standard_normal((3, 8)).astype(np.float32)
  v = Variable("n", 1, 8)
  for value in (2, 8, 5):
    w = Tensor(x, requires_grad=True)
    (w[:, :v.bind(value)].square() * 3).sum().backward()
    want = np.zeros_like(x)
    want[:, :value] = 6 * x[:, :value]
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-6)


def test_assign_into_a_symbolic_view_and_copy_to_another_device():
  v = Variable("n", 1, 6)
  for value in (1, 4, 6):
    z = Tensor.zeros(2, 6).contiguous().realize()
    z[:, :v.bind(value)].assign(Tensor.ones(2, 6)[:, :v.bind(value)] * 3).realize()
    want = np.zeros((2, 6), np.float32)
    want[:, :value] = 3
    np.testing.assert_allclose(z.numpy(), want)
    moved = (z[:, :v.bind(value)] + 1).to("PYTHON")
    np.testing.assert_allclose(moved.numpy(), want[:, :value] + 1)


def test_realized_symbolic_tensor_is_reused():
  """A realized symbolic tensor lives at the start of a buffer of the largest size; later ops read it there."""
  v = Variable("i", 1, 6)
  x = np.arange(24, dtype=np.float32).reshape(4, 6)
  t = realized(x, "CPU")
  for value in (2, 6, 1):
    part = (t.shrink((None, (0, v.bind(value)))) * 10).realize()
    np.testing.assert_allclose((part + 1).sum(0).numpy(), (x[:, :value] * 10 + 1).sum(0))
    np.testing.assert_allclose(part.numpy(), x[:, :value] * 10)


def test_bad_symbolic_sizes_raise_clearly():
  v = Variable("i", 1, 10)
  t = Tensor.ones(4, 6)
  with pytest.raises(ValueError, match="outside its range"): v.bind(11)
  with pytest.raises(ValueError, match="for some Variable values"): t.shrink((None, (0, v.bind(3))))  # 10 > 6
  with pytest.raises(ValueError, match="out of range"): t.shrink((None, (Variable("j", 1, 6).bind(5), 4)))
  with pytest.raises(ValueError, match="not bound"): t.shrink((None, (0, Variable("j", 1, 6))))
  with pytest.raises(ValueError, match="cannot reshape"): t.reshape(Variable("j", 1, 24).bind(5), 4)
  with pytest.raises(ValueError, match=">= 0"): t.pad(((0, 0), (Variable("j", -2, 2).bind(1), 0)))
  with pytest.raises(ValueError, match="negative"): Tensor.arange(Variable("j", -3, 3).bind(2))
  with pytest.raises(ValueError, match="nonzero int step"): Tensor.arange(0, v.bind(4), 0.5)


@pytest.mark.parametrize("device", DEVICES)
def test_jit_symbolic_inputs_replay_without_scheduling(device):
  """tinygrad's pattern: inputs reshaped with a bound Variable; every replay patches the new value."""
  Device[device]

  @TinyJit
  def matmul(a: Tensor, b: Tensor) -> Tensor: return (a @ b).realize()

  @TinyJit
  def scale(a: Tensor) -> Tensor: return (a * 2 + 1).realize()
  v = Variable("i", 1, 10)
  for call, value in enumerate((2, 3, 5, 10, 1, 7)):
    vi = v.bind(value)
    a_np, b_np = RNG.standard_normal((3, value)).astype(np.float32), RNG.standard_normal((value, 5)).astype(np.float32)
    a, b = realized(a_np, device), realized(b_np, device)
    before = (PlanCacheStats.hits + PlanCacheStats.misses, CodegenStats.compiled)
    product, scaled = matmul(a.reshape(3, vi), b.reshape(vi, 5)), scale(a.reshape(3, vi))
    if call >= 2: assert (PlanCacheStats.hits + PlanCacheStats.misses, CodegenStats.compiled) == before
    assert scaled.shape[1] is vi  # a symbolic output takes this call's value
    np.testing.assert_allclose(product.numpy(), a_np @ b_np, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scaled.numpy(), a_np * 2 + 1, rtol=1e-6)


def test_jit_symbolic_shrink_of_a_fixed_input():
  @TinyJit
  def prefix_sums(x: Tensor, n) -> Tensor: return (x.shrink((None, (0, n))).sum(1) + n).realize()
  x_np = RNG.standard_normal((3, 8)).astype(np.float32)
  x = realized(x_np, "CPU")
  v = Variable("n", 1, 8)
  for value in (1, 4, 8, 2, 6):
    np.testing.assert_allclose(prefix_sums(x, v.bind(value)).numpy(), x_np[:, :value].sum(1) + value, rtol=1e-5)


def test_jit_symbolic_input_with_another_view_raises():
  """The same symbolic shape through another view of its buffer needs other kernels: a clear error, not a replay."""
  jitted = TinyJit(lambda a: (a + 1).realize())
  v = Variable("i", 1, 12)
  for value in (2, 3, 4):
    out = jitted(realized(np.arange(value * 3, dtype=np.float32), "CPU").reshape(v.bind(value), 3))
    np.testing.assert_allclose(out.numpy(), np.arange(value * 3).reshape(value, 3) + 1)
  with pytest.raises(JitError, match="inputs changed"): jitted(realized(np.ones((12, 3), np.float32), "CPU")
                                                              .shrink(((0, v.bind(4)), None)))


@pytest.mark.parametrize("device", ["CPU", "SIM"])
def test_jit_kv_cache_attention(device):
  """A decoder's step: write this position's key into a cache (`cache[pos:pos+1].assign`) and attend over
  `cache[:pos+1]`; one capture serves every position."""
  Device[device]
  dim, length = 8, 12
  cache = Tensor.zeros(length, dim, device=device).contiguous().realize()
  ref_cache = np.zeros((length, dim), np.float32)

  @TinyJit
  def step(x: Tensor, pos) -> Tensor:
    cache[pos:pos + 1].assign(x).realize()
    keys = cache[:pos + 1]
    return ((x @ keys.T) * (1 / np.sqrt(dim))).softmax(-1).matmul(keys).realize()
  v = Variable("pos", 0, length - 1)
  for p in range(length):
    x_np = RNG.standard_normal((1, dim)).astype(np.float32)
    before = CodegenStats.compiled
    out = step(realized(x_np, device), v.bind(p))
    if p >= 2: assert CodegenStats.compiled == before
    ref_cache[p] = x_np[0]
    scores = x_np @ ref_cache[:p + 1].T / np.sqrt(dim)
    weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    np.testing.assert_allclose(out.numpy(), weights @ ref_cache[:p + 1], rtol=1e-5, atol=1e-5)


def test_a_softmax_over_a_symbolic_axis_computes_each_row_reduce_once():
  # the gate of the symbolic output column and of the sum's loop do not reach the max inside the sum: the reduces are
  # per row (2: the max and the exp-sum), not per output element or per sum iteration (a decode step's attention
  # over the cache was cubic in the context: 8 ms a layer for 200 positions)
  from tinycore.schedule import create_schedule
  from tinycore.schedule.keys import graph_key
  from tinycore.uop.ops import Ops
  x_np = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
  x = Tensor(x_np).realize()
  y = x[:, 0:Variable("n", 1, 64).bind(40)].softmax(-1)
  np.testing.assert_allclose(y.numpy(), np.exp(x_np[:, :40]) / np.exp(x_np[:, :40]).sum(1, keepdims=True), rtol=1e-5)
  linear, _ = create_schedule(list(graph_key([y.uop]).graph.src))
  (kernel,) = [call.src[0] for call in linear.src if call.src[0].op is Ops.SINK]
  reduces = [u for u in kernel.toposort() if u.op is Ops.REDUCE]
  assert len(reduces) == 2, len(reduces)  # the max (read by the sum and by the output) and the sum
  (row_max,) = [r for r in reduces if not any(o in r.src[0].toposort() for o in reduces)]
  (exp_sum,) = [r for r in reduces if r is not row_max]
  assert not set(exp_sum.src[1:]) & set(row_max.toposort())  # the max is not computed inside the sum's loop
