"""Autograd in the core: the backward graph is an ordinary lazy graph (it fuses and schedules like any other),
backward() fills .grad, training-mode switches (Tensor.train/test, Context(TRAINING=...))."""
import numpy as np
import pytest
from tinycore import Context, GlobalCounters, Tensor
from tinycore.helpers import TRAINING
from tinycore.uop.ops import Ops


def test_backward_graph_is_lazy_and_fused():
  x = Tensor(np.arange(1, 7, dtype=np.float32).reshape(2, 3)).realize()
  (grad,) = (x.exp() * x).sum().gradient(x)
  assert grad.uop.op is not Ops.BUFFER  # nothing ran yet
  kinds = [call.src[0].op for call in grad.schedule_linear().src]
  assert kinds == [Ops.SINK]  # d(x e^x) = e^x (1 + x): one elementwise kernel
  GlobalCounters.reset()
  xs = np.arange(1, 7, dtype=np.float64).reshape(2, 3)
  np.testing.assert_allclose(grad.numpy(), np.exp(xs) * (1 + xs), rtol=1e-5)
  assert GlobalCounters.kernel_count == 1


def test_backward_skips_requires_grad_false_and_ints():
  w = Tensor([1.0, 2.0], requires_grad=True)
  frozen = Tensor([3.0, 4.0]).requires_grad_(False)
  idx = Tensor([1, 0])
  (w * frozen + idx.cast(w.dtype)).sum().backward()
  assert w.grad.tolist() == [3.0, 4.0]
  assert frozen.grad is None and idx.grad is None


def test_backward_through_realized_parameters():
  w = Tensor.ones(3, 2).contiguous().realize()
  x = Tensor([[1.0, 2.0, 3.0]])
  loss = (x @ w).sum()
  loss.backward()
  assert w.grad.tolist() == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
  assert loss.item() == 12.0


def test_backward_with_explicit_gradient():
  x = Tensor([1.0, 2.0, 3.0])
  (x * x).backward(Tensor([1.0, 0.0, 2.0]))
  assert x.grad.tolist() == [2.0, 0.0, 12.0]


def test_backward_of_a_realized_tensor_explains():
  w = Tensor([1.0, 2.0], requires_grad=True)
  loss = (w * w).sum()
  assert loss.item() == 5.0  # reading a value keeps the graph (it reads a copy) ...
  loss.backward()
  assert w.grad.tolist() == [2.0, 4.0]
  loss.realize()  # ... realizing the tensor itself replaces it with its buffer
  with pytest.raises(RuntimeError, match="backward\\(\\) first"):
    loss.backward()


def test_backward_error_without_float_tensors():
  with pytest.raises(RuntimeError, match="float"):
    Tensor([1, 2]).sum().backward()


def test_train_and_test_context_managers():
  assert not TRAINING
  with Tensor.train():
    assert TRAINING and Tensor.training
    with Tensor.test():
      assert not TRAINING and not Tensor.training
    assert TRAINING
  assert not TRAINING and not Tensor.training
  with Context(TRAINING=1):
    assert TRAINING.value == 1 and Tensor.training
  assert TRAINING.value == 0


def test_setting_tensor_training_turns_training_mode_on():
  # classic tinygrad scripts start with `Tensor.training = True`: BatchNorm must then use (and update) batch stats
  from tinycore import nn
  bn = nn.BatchNorm(2)
  x = np.array([[1.0, 2.0], [3.0, 6.0]], dtype=np.float32)
  try:
    Tensor.training = True
    assert TRAINING and Tensor.training
    out = bn(Tensor(x)).numpy()
  finally:
    Tensor.training = False
  assert not TRAINING
  np.testing.assert_allclose(out, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), atol=1e-4)
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), atol=1e-6)


def test_context_decorates_and_rejects_unknown_settings():
  @Context(TRAINING=1)
  def training_value(): return TRAINING.value
  assert training_value() == 1 and TRAINING.value == 0
  with pytest.raises(KeyError, match="NOT_A_SETTING"):
    Context(NOT_A_SETTING=1)


def test_gradient_flows_back_across_devices():
  x = Tensor([1.0, 2.0, 3.0], device="CPU")
  y = (x.to("CPU:1") * Tensor([2.0, 3.0, 4.0], device="CPU:1")).sum()
  (grad,) = y.gradient(x)
  assert grad.device == "CPU" and grad.tolist() == [2.0, 3.0, 4.0]
