"""Bugs found by running tinygrad's own test files against tinycore, each checked against numpy."""
import numpy as np
from tinycore import Tensor, Context
from tinycore.nn.optim import SGD


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
