"""What a careless user does, and what must happen instead of a silent wrong result: masked classes in a loss, Python
ints a tensor's dtype cannot hold, numpy scalars as operands, an argmax past int32's positions, settings with bad
values, and the rules whose mistakes only a value check can see (gradients, integer division in the simplifier)."""
import os
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.dtype import DType
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.pattern import graph_rewrite
from tinycore.uop.symbolic import symbolic


# ---------------------------------------------------------------------------- losses over masked classes
MASKED_LOGITS = [[0.0, 0.0, -float("inf")], [1.0, -float("inf"), 0.0]]


@pytest.mark.parametrize("loss", ["cross_entropy", "sparse_categorical_crossentropy"])
def test_a_masked_class_does_not_make_the_loss_nan(loss):
  # log(2) and log(1 + e), as torch.nn.functional.cross_entropy gives (no 0 * -inf at the masked classes)
  logits = Tensor(MASKED_LOGITS, requires_grad=True)
  value = getattr(logits, loss)(Tensor([0, 2]))
  expected = (np.log(2) + np.log(1 + np.e)) / 2
  np.testing.assert_allclose(value.item(), expected, rtol=1e-6)
  value.backward()
  grad = logits.grad.numpy()
  assert np.isfinite(grad).all() and grad[0, 2] == 0 and grad[1, 1] == 0
  np.testing.assert_allclose(grad[0], [-0.25, 0.25, 0], rtol=1e-6)


def test_label_smoothing_over_a_masked_class_is_infinite_as_torch():
  # the smoothing term averages every class's log-probability, -inf at a masked one: torch gives inf too
  assert Tensor(MASKED_LOGITS).cross_entropy(Tensor([0, 2]), label_smoothing=0.1).item() == float("inf")


# ---------------------------------------------------------------------------- Python numbers meeting a tensor
@pytest.mark.parametrize("dtype, value", [(dtypes.int32, 2**40), (dtypes.int32, -2**31 - 1), (dtypes.int8, 300),
                                          (dtypes.uint8, -1), (dtypes.uint32, 2**32), (dtypes.int64, 2**63)])
def test_a_python_int_the_dtype_cannot_hold_raises_naming_both(dtype: DType, value: int):
  # numpy 2's rule (tinygrad and torch wrap the int silently into the dtype)
  t = Tensor([1], dtype=dtype)
  for op in (lambda: t + value, lambda: value * t, lambda: t - value, lambda: t.where(t, value)):
    with pytest.raises(OverflowError, match=f"{value}.*{dtype.name}"): op()


def test_python_ints_in_range_and_comparisons_beyond_it_still_work():
  t = Tensor([1, 100], dtype=dtypes.int8)
  np.testing.assert_equal((t + 27).numpy(), [28, 127])
  np.testing.assert_equal((t < 1000).numpy(), [True, True])  # a comparison compares by value
  np.testing.assert_equal(t.maximum(-1000).numpy(), [1, 100])
  np.testing.assert_equal((Tensor([1.0]) + 2**40).numpy(), [2.0**40])  # a float tensor takes any int


def test_numpy_scalars_are_operands_like_python_numbers():
  t = Tensor([1.0, 2.0])
  np.testing.assert_equal((t * np.float32(2)).numpy(), [2, 4])
  np.testing.assert_equal((np.float32(2) * t).numpy(), [2, 4])  # numpy defers to the Tensor's operator
  np.testing.assert_equal((np.int64(3) - Tensor([1, 2])).numpy(), [2, 1])
  assert (Tensor([1, 2], dtype=dtypes.int16) + np.int64(3)).dtype is dtypes.int16  # a weak scalar, as a Python int
  np.testing.assert_equal((Tensor([1, 2]) < np.int64(2)).numpy(), [True, False])
  with pytest.raises(TypeError, match="ndarray.*make it a Tensor"): Tensor([1.0]) + np.ones(1)


# ---------------------------------------------------------------------------- argmax positions past int32
def test_argmax_over_more_than_2_to_the_31_elements_gives_int64_positions():
  n = 2**31 + 5  # a lazy mask (nothing of this size is stored): the reduction counts positions in int64
  mask = Tensor.arange(n, dtype=dtypes.int64) == 2**31 + 3
  position = mask.argmax()
  assert position.dtype is dtypes.int64 and position.item() == 2**31 + 3
  assert Tensor([3, 9, 9]).argmax().dtype is dtypes.int32  # tinygrad's dtype while it fits


# ---------------------------------------------------------------------------- settings with bad values
BAD_SETTING = """
from tinycore import Device
try: print("opened", Device.DEFAULT)
except Exception as error: print(type(error).__name__, error)
"""


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_a_bad_thread_count_is_an_error_naming_the_setting_not_another_default_device(run_scenario, value):
  env = {"TINYCORE_CPU_THREADS": value}
  result = run_scenario(BAD_SETTING, env={**env, "TINYCORE_DEVICE": ""})
  assert "SettingError" in result.stdout and f"TINYCORE_CPU_THREADS={value!r}" in result.stdout, result.stdout + \
    result.stderr[-2000:]


def test_a_thread_count_past_the_cores_is_capped_with_a_warning(run_scenario):
  script = ("import warnings\nwarnings.simplefilter('always')\nfrom tinycore import Device, Tensor\n"
            "print('threads', Device['CPU'].renderer.threads, (Tensor.ones(1 << 20) * 2).sum().item())")
  result = run_scenario(script, env={"TINYCORE_CPU_THREADS": "100000"}, timeout=120)
  cores = len(os.sched_getaffinity(0))
  assert result.returncode == 0 and f"threads {cores} 2097152.0" in result.stdout, result.stdout + result.stderr
  assert "TINYCORE_CPU_THREADS=100000 is more than" in result.stderr


# ---------------------------------------------------------------------------- gradient rules, by value
def test_the_gradient_of_a_quotient_with_respect_to_the_divisor_is_minus_x_over_y_squared():
  x, y = Tensor([2.0, 3.0, -1.5], requires_grad=True), Tensor([4.0, -5.0, 0.5], requires_grad=True)
  (x / y).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [0.25, -0.2, 2.0], rtol=1e-6)
  np.testing.assert_allclose(y.grad.numpy(), [-0.125, -0.12, 6.0], rtol=1e-6)


def test_tied_maxima_share_the_gradient_as_torch_amax():
  x = Tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [5.0, 0.0, 1.0]], requires_grad=True)
  (x.max(axis=1) * Tensor([1.0, 3.0, 2.0])).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1, 1, 1], [2, 0, 0]], rtol=1e-6)
  y = Tensor([4.0, -1.0, 4.0, 4.0], requires_grad=True)
  y.min().backward()  # one minimum: all of it
  np.testing.assert_allclose(y.grad.numpy(), [0, 1, 0, 0])
  z = Tensor([4.0, -1.0, 4.0, 4.0], requires_grad=True)
  z.max().backward()
  np.testing.assert_allclose(z.grad.numpy(), [1 / 3, 0, 1 / 3, 1 / 3], rtol=1e-6)


# ---------------------------------------------------------------------------- integer division in the simplifier
def _c_quotient(a: int, b: int) -> int: return int(a / b)  # C's division truncates toward zero


@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD])
@pytest.mark.parametrize("offset, divisor", [(-8, 4), (-7, 4), (-3, 2), (5, 4), (-12, 3)])
def test_division_of_a_possibly_negative_sum_keeps_c_semantics(op, offset, divisor):
  # (r - 8) // 4 is not r // 4 - 2 where r - 8 < 0 (floor vs truncation): the rewrite must give every value of r
  r = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("r", 0, 15))
  expr = UOp(op, dtypes.index, (r + offset, UOp.const(dtypes.index, divisor)))
  simplified = graph_rewrite(expr, symbolic)
  for value in range(16):
    got = graph_rewrite(simplified.substitute({r: UOp.const(dtypes.index, value)}), symbolic)
    quotient = _c_quotient(value + offset, divisor)
    want = quotient if op is Ops.IDIV else value + offset - quotient * divisor
    assert got.op is Ops.CONST and got.arg == want, (value, simplified)


LISTS = [[1, 2, 3], [1.5, 2], [True, False], [True, 2], [[1, 2], [3, 4]], [2 ** 31, 1], [-2 ** 31 - 1], [],
         [[0.1] * 3] * 2, [float("nan"), float("inf"), -0.0], (1, 2), [[True]], [300, -5]]


@pytest.mark.parametrize("dtype", [None, dtypes.float16, dtypes.float64, dtypes.int8, dtypes.uint8, dtypes.int64,
                                   dtypes.bool, dtypes.bfloat16])
def test_a_nested_list_read_by_numpy_gives_what_the_element_walk_gives(monkeypatch, dtype):
  """Tensor(nested list) reads plain numbers through numpy (a 256 x 1024 list of floats: 470 -> 9 ms); every dtype,
  shape and value is the one the element-by-element path gives, errors included."""
  import tinycore.tensor as tensor_module
  def made(data):
    try:
      t = Tensor(data, dtype=dtype)
      return t.dtype, t.shape, t.numpy().tobytes()
    except Exception as e: return type(e).__name__
  with np.errstate(over="ignore"):
    fast = [made(data) for data in LISTS]
    monkeypatch.setattr(tensor_module, "_numbers_array", lambda data, dtype: None)
    assert fast == [made(data) for data in LISTS]
