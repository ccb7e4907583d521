"""Bugs found by running tinygrad's own test files against tinycore, each checked against numpy."""
import numpy as np
from tinycore import Tensor, Context, TinyJit
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
