"""Kernels with many arguments: a device takes any number of buffers and scalars per kernel (through an argument
table where a fixed-size entry runs out, or by the scheduler splitting what the device cannot pass), so a model's
fused kernels and an optimizer step over hundreds of parameters run everywhere."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.nn import optim
from tinycore.testing.helpers import assert_close, random_array


@pytest.mark.parametrize("count", [40, 200])
def test_stack_of_many_realized_tensors(rng, count):
  arrays = [random_array(rng, (3, 5), "float32") for _ in range(count)]
  tensors = [Tensor(a).realize() for a in arrays]
  assert_close(Tensor.stack(*tensors), np.stack(arrays), dtype=dtypes.float32)


def test_sum_of_many_realized_tensors(rng):
  arrays = [random_array(rng, (17,), "float32") for _ in range(200)]
  total = Tensor(arrays[0]).realize()
  rest = [Tensor(a).realize() for a in arrays[1:]]
  for t in rest: total = total + t
  assert_close(total, np.sum(np.stack(arrays), axis=0, dtype=np.float32), atol=1e-4, rtol=1e-5)


def test_many_python_scalars_in_one_kernel(rng):
  x = random_array(rng, (9,), "float32")
  scalars = [1.5 + 0.25 * i for i in range(60)]
  out, expected = Tensor(x).realize(), x.copy()
  for i, s in enumerate(scalars):
    if i % 2: out, expected = out * s, expected * np.float32(s)
    else: out, expected = out + s, expected + np.float32(s)
  assert_close(out, expected, atol=1e-3, rtol=1e-5)


def test_sgd_step_over_300_parameters(rng):
  values = [random_array(rng, (4,), "float32") for _ in range(300)]
  params = [Tensor(v, requires_grad=True) for v in values]
  opt = optim.SGD(params, lr=0.1, momentum=0.9)
  with Tensor.train():
    for _ in range(2):
      opt.zero_grad()
      loss = sum((p * p).sum() * (i + 1) for i, p in enumerate(params))
      loss.backward()
      opt.step()
  # momentum SGD on sum_i (i+1) * p_i^2 (gradient 2 (i+1) p): two steps in closed form
  for i in (0, 150, 299):
    g = 2 * (i + 1)
    p0 = values[i]
    b1 = g * p0
    p1 = p0 - 0.1 * b1
    b2 = 0.9 * b1 + g * p1
    assert_close(params[i], p1 - 0.1 * b2, atol=1e-4, rtol=1e-4)


def test_adam_step_over_300_parameters(rng):
  values = [random_array(rng, (3,), "float32") for _ in range(300)]
  params = [Tensor(v, requires_grad=True) for v in values]
  opt = optim.Adam(params, lr=0.01)
  with Tensor.train():
    opt.zero_grad()
    loss = sum((p * Tensor(np.full(3, i + 1, np.float32))).sum() for i, p in enumerate(params))
    loss.backward()
    opt.step()
  # one Adam step with a constant gradient g moves every element by lr * g / (|g| + eps): lr * sign(g)
  for i in (0, 123, 299): assert_close(params[i], values[i] - 0.01, atol=1e-5, rtol=1e-5)
