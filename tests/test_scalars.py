"""Python scalars are kernel arguments: a new value (a learning rate per step) is a new argument, not a new program.

Checked here on the CPU and on the simulated queue device (SIM: the HCQ2 path, where a replayed batch patches the
new value in): one compile for a loop of distinct values, values exact at the kernel's dtype, the kernel and its
source free of the value, special values still folded, fusion kept, and kernels with too many scalars baking the
rest in. The device-generic version (every plugin runs it) is tinycore/testing/test_scalars.py.
"""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.codegen import CodegenStats
from tinycore.device.kernels import compile_kernel
from tinycore.device.registry import Device
from tinycore.engine.realize import run_linear
from tinycore.hcq.commands import Variable
from tinycore.engine.plan import BatchStep, PlanCacheStats, plan_for, plans
from tinycore.schedule.keys import general_key, plain_key
from tinycore.uop.ops import Ops
from tinycore.uop.scalars import call_scalars, kernel_scalars, scalar_word


def _has(prefix: str) -> bool: return any(spec.prefix == prefix for spec in Device.specs())


DEVICES = ["CPU", pytest.param("SIM", marks=pytest.mark.skipif(not _has("SIM"), reason="tests/hcq_sim not installed"))]


def compiles() -> tuple[int, int]: return CodegenStats.rendered, CodegenStats.compiled


@pytest.mark.parametrize("device", DEVICES)
def test_learning_rate_loop_compiles_one_program(device):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((13, 29)).astype(np.float32)
  xt = Tensor(x, device=device).realize()
  steps = [(float(lr), float(b)) for lr, b in zip(rng.uniform(1e-4, 0.5, 20), rng.uniform(-2, 2, 20))]
  assert len({v for step in steps for v in step}) == 40
  before = compiles()
  for i, (lr, b) in enumerate(steps):
    out = (xt * lr + b).realize()
    if i == 0: after_first = compiles()
    np.testing.assert_array_equal(out.numpy(), x * np.float32(lr) + np.float32(b))
  assert after_first[1] - before[1] <= 1                 # the first step compiles (at most) one program
  assert compiles() == after_first                        # and no later step renders or compiles anything


@pytest.mark.parametrize("device", DEVICES)
def test_integer_scalars_and_a_value_used_twice(device):
  rng = np.random.default_rng(1)
  a, b = rng.integers(-1000, 1000, (7, 11), dtype=np.int32), rng.integers(-1000, 1000, (7, 11), dtype=np.int32)
  at, bt = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
  (at * 2 + bt * 2 + 5).realize()  # warm up with other values
  before = compiles()
  for k, m in zip(range(3, 63, 3), range(-52, 48, 5)):
    out = at * k + bt * k + m      # k is one node: one scalar parameter read twice
    linear = out.schedule_linear()
    assert [len(call_scalars(call)) for call in linear.src] == [2]
    np.testing.assert_array_equal(out.numpy(), a * np.int32(k) + b * np.int32(k) + np.int32(m))
  assert compiles()[1] == before[1]


def test_kernel_and_schedule_do_not_depend_on_the_value():
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  first, second = (x * 0.25 + 3.5).schedule_linear(), (x * 0.75 + -9.5).schedule_linear()
  assert first.src[0].src[0] is second.src[0].src[0]                    # the same kernel AST
  assert [s.arg for s in call_scalars(first.src[0])] == [0.25, 3.5]     # the values are the CALL's arguments
  assert [s.arg for s in call_scalars(second.src[0])] == [0.75, -9.5]
  source = compile_kernel("CPU", first.src[0].src[0]).source
  assert "0.25" not in source and "3.5" not in source and "long long var1" in source
  hits = PlanCacheStats.hits
  plan_for([(x * 0.125 + 1.5).uop])
  assert PlanCacheStats.hits == hits + 1


def test_values_whose_folding_matters_stay_literals():
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  xi = Tensor(np.arange(-6, 6, dtype=np.int32)).realize()
  for out in (x * 1 + 0, x * -1, (x > 0).where(x, 0), x.maximum(-np.inf), Tensor.ones(6) + x, xi // 3, xi % 5,
              xi << 2, xi >> 3):
    assert all(not call_scalars(call) for call in out.schedule_linear().src)  # divisors and shift counts too
  np.testing.assert_array_equal((xi // 3 + xi % 5).numpy(), np.arange(-6, 6) // 3 + np.arange(-6, 6) % 5)
  linear = (Tensor.arange(12).reshape(3, 4)[1:, ::2] * 5 + 7).schedule_linear()
  kernel = linear.src[0].src[0]
  # index math (from movement ops) is folded constants; only the two values are parameters
  assert len(kernel_scalars(kernel)) == 2
  index_math = [u for u in kernel.toposort() if u.op is Ops.INDEX]
  assert all(not any(n.op is Ops.DEFINE_VAR for n in index.toposort()) for index in index_math)
  np.testing.assert_array_equal((Tensor.arange(12).reshape(3, 4)[1:, ::2] * 5 + 7).numpy(),
                                np.arange(12).reshape(3, 4)[1:, ::2] * 5 + 7)


def test_eager_key_matches_the_general_one():
  # the eager path keys a graph in one pass (plain_key); it must make the key general_key makes, bound to the same
  # buffers and scalars: a divisor or shift count stays a literal even after being taken for a scalar, a tensor
  # divisor is an input like any other
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  xi = Tensor(np.arange(-6, 6, dtype=np.int32)).realize()
  di = Tensor(np.arange(1, 13, dtype=np.int32)).realize()
  graphs = [x * 2.5 + 3.5, xi * 7 // 7, (xi + 9) % 9 * 9, xi // di + 4, (xi << 3) * 3, x @ x.reshape(6, 1) * 0.5]
  for out in graphs:
    plain, general = plain_key([out.uop]), general_key([out.uop])
    assert plain is not None and plain.graph is general.graph and plain.mapping == general.mapping
  np.testing.assert_array_equal((xi * 7 // 7).numpy(), np.arange(-6, 6))
  np.testing.assert_array_equal((xi // di + 4).numpy(), np.arange(-6, 6) // np.arange(1, 13) + 4)


def test_fused_kernels_stay_fused():
  x = Tensor(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)).realize()
  out = ((x * 0.3 + 0.7).exp() * 1.7).sum(axis=1) * 0.01
  assert len(out.schedule_linear().src) == 1
  ref = (np.exp(x.numpy().astype(np.float64) * 0.3 + 0.7) * 1.7).sum(axis=1) * 0.01
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


@pytest.mark.parametrize("dtype, value", [(dtypes.float16, 0.1), (dtypes.float16, 70000.0), (dtypes.float64, 1 / 3),
                                          (dtypes.float64, -0.3), (dtypes.int64, 2 ** 40 + 3),
                                          (dtypes.int64, -(2 ** 62) - 7), (dtypes.uint64, 2 ** 63 + 5),
                                          (dtypes.int8, -100), (dtypes.uint32, 2 ** 32 - 2)])
def test_values_are_exact_at_the_kernel_dtype(dtype, value):
  npdt = np.dtype(dtype.name)
  data = (np.arange(5) + 1).astype(npdt)
  out = (Tensor(data) + value).numpy()
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal(out, data + np.array(value).astype(npdt))


def test_bfloat16_scalar_is_rounded_to_bfloat16():
  x = Tensor(np.ones(3, dtype=np.float32)).cast(dtypes.bfloat16)
  out = (x * 1.00390625).cast(dtypes.float32).numpy()  # halfway between two bfloat16s: rounds to even (1.0)
  np.testing.assert_array_equal(out, np.ones(3, np.float32))
  out = (x * 1.01171875).cast(dtypes.float32).numpy()  # halfway, rounds up to even (1.015625)
  np.testing.assert_array_equal(out, np.full(3, 1.015625, np.float32))


def test_scalar_words():
  assert scalar_word(1.5, dtypes.float32) == 0x3FC00000
  assert scalar_word(-2.0, dtypes.float64) == -(1 << 62)  # sign bit set: a negative int64
  assert scalar_word(0.1, dtypes.float16) == 0x2E66
  assert scalar_word(1e10, dtypes.float16) == 0x7C00      # past float16's range: inf, as a store rounds it
  assert scalar_word(1.0, dtypes.bfloat16) == 0x3F80
  assert scalar_word(-5, dtypes.int32) == -5 and scalar_word(2 ** 64 - 1, dtypes.uint64) == -1


@pytest.mark.parametrize("device", DEVICES)
def test_every_scalar_is_an_argument_however_many(device):
  """A kernel takes any number of scalars: none is baked in, so one schedule serves every set of values."""
  x = np.linspace(-1, 1, 17, dtype=np.float32)
  xt = Tensor(x, device=device).realize()

  def poly(coeffs):
    out = xt * 0.0 + coeffs[0]
    for c in coeffs[1:]: out = out * xt + c
    return out

  rng = np.random.default_rng(7)
  steps = [[float(c) for c in rng.uniform(-2, 2, 40).astype(np.float32) + np.float32(2.5)] for _ in range(3)]
  linear = poly(steps[0]).schedule_linear()
  assert max(len(call.src) - 1 for call in linear.src) == 2 + 40   # two buffers, forty scalars
  for i, coeffs in enumerate(steps):
    ref = np.float32(coeffs[0]) + x * np.float32(0.0)
    for c in coeffs[1:]: ref = ref * x + np.float32(c)
    np.testing.assert_allclose(poly(coeffs).numpy(), ref, rtol=1e-5, atol=1e-4)
    if i == 0: misses = PlanCacheStats.misses  # (after the first read-back scheduled its copy)
  assert PlanCacheStats.misses == misses  # new values: the same schedules


@pytest.mark.skipif(not _has("SIM"), reason="tests/hcq_sim not installed")
def test_replayed_batch_patches_the_new_value():
  x = np.arange(10, dtype=np.float32)
  xt = Tensor(x, device="SIM").realize()
  plan, _ = plan_for([(xt * 0.5 + 0.25).uop])
  batch = next(step.batch for step in plan.run_plan.steps() if type(step) is BatchStep)
  assert {ref for ref in batch.patches if isinstance(ref, Variable)} == {Variable("scalar0"), Variable("scalar1")}
  for i, lr in enumerate((0.125, 3.0, -7.5, 11.0)):
    np.testing.assert_array_equal((xt * lr + 0.25).numpy(), x * np.float32(lr) + np.float32(0.25))
    again, _ = plan_for([(xt * lr + 0.25).uop])
    assert again is plan and next(s.batch for s in again.run_plan.steps() if type(s) is BatchStep) is batch  # replayed
    if i == 0: planned = len(plans)  # (after the first read-back planned its copy)
  assert len(plans) == planned


def test_an_unbound_template_is_a_clear_error():
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  plan, _ = plan_for([(x * 0.5).uop])
  with pytest.raises(ValueError, match="scalar0 has no value"):
    run_linear(plan.linear)


def test_schedule_linear_runs_with_its_values():
  x = np.arange(8, dtype=np.float32)
  xt = Tensor(x).realize()
  for lr in (0.3, 0.7):
    out = xt * lr
    run_linear(out.schedule_linear())
    np.testing.assert_array_equal(out.numpy(), x * np.float32(lr))


@pytest.mark.parametrize("device", DEVICES)
def test_scalars_reach_a_kernel_split_across_threads(device):
  x = np.linspace(-3, 3, 1 << 17, dtype=np.float32)
  xt = Tensor(x, device=device).realize()
  for lr in (0.3, -1.7):
    np.testing.assert_array_equal((xt * lr + 2.5).numpy(), x * np.float32(lr) + np.float32(2.5))


@pytest.mark.parametrize("device", DEVICES)
def test_sgd_step_with_a_schedule_of_learning_rates(device):
  rng = np.random.default_rng(3)
  w0, g = rng.standard_normal(50).astype(np.float32), rng.standard_normal(50).astype(np.float32)
  w, gt = Tensor(w0.copy(), device=device).realize(), Tensor(g, device=device).realize()
  ref = w0.copy()
  for step in range(12):
    lr = 0.5 * 0.9 ** step
    w.assign(w - gt * lr).realize()
    if step == 0: first = compiles()
    ref = ref - g * np.float32(lr)
  np.testing.assert_array_equal(w.numpy(), ref)
  assert compiles() == first
