"""Variable: a bound symbolic int is a kernel argument, so every value runs the same compiled program, eagerly and in
TinyJit (whose replays patch the new value); binding checks the range."""
import numpy as np
import pytest
from tinycore import Device, Tensor, TinyJit, Variable, dtypes
from tinycore.codegen import CodegenStats
from tinycore.jit import JitError
from tinycore.engine.plan import PlanCacheStats

DEVICES = ["CPU", "SIM", "PYTHON"]


def realized(value: np.ndarray, device: str) -> Tensor: return Tensor(value, device=device).realize()


def test_variable_and_bind():
  v = Variable("i", 1, 10)
  assert v.expr == "i" and (v.vmin, v.vmax) == (1, 10) and v.dtype is dtypes.int32
  bound = v.bind(3)
  assert bound.unbind() == (v, 3) and bound.expr == "i"
  assert Variable("big", 0, 2**40).dtype is dtypes.int64


@pytest.mark.parametrize("value", [0, 11, -5])
def test_bind_outside_range_names_the_variable(value):
  with pytest.raises(ValueError, match=r"'i'.*\[1, 10\]"): Variable("i", 1, 10).bind(value)


@pytest.mark.parametrize("args, error", [(("i", 5, 1), ValueError), (("scalar0", 0, 1), ValueError),
                                         (("2x", 0, 1), ValueError), (("i", 0.5, 1), TypeError)])
def test_bad_variables_raise(args, error):
  with pytest.raises(error): Variable(*args)


def test_bind_takes_an_int():
  with pytest.raises(TypeError, match="'i' takes an int"): Variable("i", 1, 10).bind(2.5)


def test_unbound_variable_in_arithmetic_raises():
  with pytest.raises(ValueError, match="'i' is not bound"): Tensor([1.0, 2.0]) * Variable("i", 1, 10)


@pytest.mark.parametrize("device", DEVICES)
def test_eager_values_one_program(device):
  """t * v, v + t, t - v and an int tensor + v, for several values: right values, compiled once."""
  Device[device]
  v = Variable("n", -100, 100)
  x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
  xi = np.arange(6, dtype=np.int32) * 7
  t, ti = realized(x, device), realized(xi, device)
  compiled = None
  for value in (3, -7, 42, 3, 100):
    vb = v.bind(value)
    outs = (t * vb, vb + t, t - vb, ti + vb, vb * ti, (t * vb).sum())
    want = (x * value, value + x, x - value, xi + value, value * xi, (x * value).sum())
    got = [o.numpy() for o in outs]
    if compiled is None: compiled = CodegenStats.compiled
    else: assert CodegenStats.compiled == compiled, f"value {value} compiled a new program"
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-6)
      assert g.dtype == w.dtype
  assert Tensor(v.bind(9), device=device).item() == 9


def test_one_schedule_for_all_values():
  v = Variable("k", 0, 1000)
  t = realized(np.ones(4, np.float32), "CPU")
  (t * v.bind(2)).tolist()
  misses = PlanCacheStats.misses
  for value in (5, 17, 999):
    assert (t * v.bind(value)).tolist() == [value] * 4
  assert PlanCacheStats.misses == misses  # all from the schedule cache


def test_two_variables_and_a_python_scalar():
  a, b = Variable("a", 0, 50), Variable("b", 0, 50)
  t = realized(np.arange(4, dtype=np.float32), "CPU")
  for va, vb in ((1, 2), (10, 3), (50, 0)):
    out = (t * a.bind(va) + b.bind(vb)) * 0.5
    np.testing.assert_allclose(out.numpy(), (np.arange(4) * va + vb) * 0.5)


def test_one_variable_bound_twice_in_a_realize_raises():
  v = Variable("i", 0, 9)
  t = Tensor([1.0, 2.0], device="CPU")
  with pytest.raises(ValueError, match="'i' is bound to two values"): (t * v.bind(2) + v.bind(3)).realize()


@pytest.mark.parametrize("device", DEVICES)
def test_jit_replays_with_new_values(device):
  Device[device]

  def fn(x: Tensor, scale) -> Tensor: return (x * scale + 1).sum(0).realize()
  jitted = TinyJit(fn)
  v = Variable("s", 1, 64)
  x_np = np.arange(12, dtype=np.float32).reshape(3, 4)
  x = realized(x_np, device)
  compiled = None
  for call, value in enumerate((2, 5, 9, 64, 1, 9)):
    before = PlanCacheStats.hits + PlanCacheStats.misses
    out = jitted(x, v.bind(value))
    if call >= 2:  # replays: neither scheduled nor compiled, and the new value is used
      assert PlanCacheStats.hits + PlanCacheStats.misses == before
      assert CodegenStats.compiled == compiled
    compiled = CodegenStats.compiled
    np.testing.assert_allclose(out.numpy(), (x_np * value + 1).sum(0), rtol=1e-6)


def test_jit_variable_with_an_optimizer_like_update():
  """A Variable as a step count in a jitted in-place update (several kernels, a realized state buffer)."""
  state = realized(np.zeros(3, np.float32), "CPU")

  @TinyJit
  def step(x: Tensor, n) -> Tensor:
    state.assign(state + x * n).realize()
    return (state * 2).realize()
  v = Variable("n", 0, 10)
  total = np.zeros(3, np.float32)
  x = realized(np.array([1, 2, 3], np.float32), "CPU")
  for value in (1, 2, 3, 4, 5):
    out = step(x, v.bind(value))
    total += np.array([1, 2, 3], np.float32) * value
    np.testing.assert_allclose(out.numpy(), total * 2)


def test_jit_variables_must_stay_the_same():
  jitted = TinyJit(lambda x, n: (x * n).realize())
  x = realized(np.ones(2, np.float32), "CPU")
  v = Variable("n", 0, 10)
  for value in (1, 2, 3): jitted(x, v.bind(value))
  with pytest.raises(JitError, match="Variables changed"): jitted(x, Variable("m", 0, 10).bind(1))


def test_more_variables_than_kernel_arguments():
  """Past MAX_KERNEL_ARGS the schedule bakes the last Variables in as literals (cached per value): still right."""
  variables = [Variable(f"v{i}", 0, 100) for i in range(30)]
  t = realized(np.ones(3, np.float32), "CPU")
  for shift in (1, 2, 5):
    out = t
    for i, v in enumerate(variables): out = out + v.bind(i + shift)
    np.testing.assert_allclose(out.numpy(), np.full(3, 1 + sum(range(shift, 30 + shift)), np.float32))


def test_int64_variable_full_range():
  v = Variable("big", -2**40, 2**40)
  t = realized(np.array([1, -1], np.int64), "CPU")
  for value in (2**40, -2**40, 12345):
    assert (t * v.bind(value)).tolist() == [value, -value]


def test_comparisons_of_variables_are_decided_by_their_range_or_raise():
  from tinycore import Variable
  v = Variable("start_pos", 1, 100).bind(3)
  assert (v > 0) and (v >= 1) and (v < 101) and not (v <= 0)  # true (false) for every value of the range
  kept = [i for i in range(3) if v > i - 5]
  assert kept == [0, 1, 2]
  with pytest.raises(TypeError, match=r"Variables \['start_pos'\] is true for some of their values"):
    if v > 5: pass  # 3 now, but not for every value: an `if` on it would be a guess
  assert v.unbind()[1] > 2  # the bound value, compared as a Python int
