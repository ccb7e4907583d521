"""Gradients through stores: AFTER(dest, STORE(view, value)) built with the UOp builders (`t.uop`, `uop.store`,
`uop.after`, `Tensor(uop)`) and by view assigns. The value gets the upstream gradient seen through the view; dest
gets it with the overwritten region zeroed (a whole-buffer store cuts dest off)."""
import numpy as np
import pytest
from tinycore import Tensor


def test_ordered_writes_run_in_order():
  x = Tensor([0.]).realize().uop
  first = x.after(x.store(1))
  second = first.after(first.store(2))
  assert Tensor(second).tolist() == [2.]


def test_disjoint_writes_in_one_after():
  x = Tensor([0., 0.]).realize()
  assert Tensor(x.uop.after(x[:1].uop.store(1), x[1:].uop.store(2))).tolist() == [1., 2.]


def test_read_modify_write_chain():
  x = Tensor([2.]).clone()
  x.assign(x + 1)
  x.assign(x * 2)
  assert x.tolist() == [6.]


def test_shared_state_readers():
  x = Tensor([2.]).clone()
  x.assign(x + 1)
  a, b = x + 1, x * 2
  a.realize(b)
  assert (a.tolist(), b.tolist()) == ([4.], [6.])


def test_overwrite_cuts_gradient():
  x = Tensor([2.])
  y = x.clone()
  y.assign(3)  # the whole buffer is overwritten with a constant: y no longer depends on x
  assert y.sum().gradient(x)[0].tolist() == [0.]


def test_assign_passes_gradient_to_the_value():
  x = Tensor([2., -1.])
  y = x.clone()
  y.assign(y * x)
  assert y.sum().gradient(x)[0].tolist() == [4., -2.]


def test_partial_store_gradient():
  x = Tensor([2., 3.]).realize()
  y = Tensor(x.uop.after(x[:1].uop.store(4)))
  # y = [4, x[1]]: only the untouched element depends on x
  assert y.sum().gradient(x)[0].tolist() == [0., 1.]
  assert y.tolist() == [4., 3.]


def test_partial_store_source_gradient():
  x = Tensor([4.])
  y = Tensor([2., 3.]).realize()
  z = Tensor(y.uop.after(y[:1].uop.store(x.uop)))
  # the stored x counts once, not twice
  assert z.sum().gradient(x)[0].tolist() == [1.]


def test_unrelated_store_gradient():
  x = Tensor([2.]).realize()
  y = x.clone()
  z = Tensor(x.uop.after(y.uop.store(0)))
  # zeroing y does not change x
  assert z.sum().gradient(x)[0].tolist() == [1.]


def test_after_dependency_gradient():
  x = Tensor([2., 3.])
  y = x.clone()
  y[:1].assign(0)
  # a view assign is an AFTER on a partial STORE: only the untouched element depends on x
  assert y.sum().gradient(x)[0].tolist() == [0., 1.]


def test_disjoint_stores_gradient():
  x = Tensor([1., 2., 3., 4.]).realize()
  v = Tensor([5.])
  y = Tensor(x.uop.after(x[:1].uop.store(v.uop), x[2:].uop.store(0)))
  gx, gv = (y * Tensor([1., 2., 3., 4.])).sum().gradient(x, v)
  assert gx.tolist() == [0., 2., 0., 0.] and gv.tolist() == [1.]


@pytest.mark.parametrize("view, expected", [
  (lambda t: t.reshape(3, 2)[1:], [[1., 1., 0.], [0., 0., 0.]]),
  (lambda t: t.permute(1, 0)[1:], [[1., 0., 0.], [1., 0., 0.]]),
  (lambda t: t.flip((0, 1))[:1], [[1., 1., 1.], [0., 0., 0.]]),
], ids=["reshape-shrink", "permute-shrink", "flip-shrink"])
def test_view_assign_gradient(view, expected):
  x = Tensor([[1., 2., 3.], [4., 5., 6.]])
  y = x.clone()
  v = Tensor.full(view(y).shape, 7.)
  view(y).assign(v)
  gx, gv = y.sum().gradient(x, v)
  assert gx.tolist() == expected
  assert gv.tolist() == Tensor.ones(*v.shape).tolist()


def test_view_assign_gradient_weighted():
  # the value's gradient is the upstream gradient seen through the view, not just ones
  x = Tensor([[1., 2., 3.], [4., 5., 6.]])
  y = x.clone()
  v = Tensor([[7., 8.]])
  y.permute(1, 0)[1:].reshape(1, 4)[:, 1:3].reshape(1, 2).assign(v)
  weight = Tensor([[1., 2., 3.], [4., 5., 6.]])
  gx, gv = (y * weight).sum().gradient(x, v)
  # the view is y.T[1:] = [[2, 5], [3, 6]] flattened, elements 1..2: y[1, 1] and y[0, 2]
  assert gv.tolist() == [[5., 3.]]
  assert gx.tolist() == [[1., 2., 0.], [4., 0., 6.]]


def test_strided_view_assign_gradient():
  # [::2] is a reshape and a shrink of the buffer
  x = Tensor([1., 2., 3., 4.])
  y = x.clone()
  v = Tensor([5., 6.])
  y[::2].assign(v * x[1::2])
  gx, gv = (y * Tensor([1., 2., 3., 4.])).sum().gradient(x, v)
  assert y.tolist() == [10., 2., 24., 4.]
  assert gv.tolist() == [2., 12.] and gx.tolist() == [0., 2. + 5., 0., 4. + 18.]


def test_chained_square_assign_gradient():
  # the backward pass needs y before and after the second assign: it reads them as expressions of x (the seed
  # leaves this one open: two versions of one buffer in one schedule)
  x = Tensor([2.0])
  y = x.clone()
  y.assign(y * y)
  y.assign(y * y)
  # y = x**4, so dy/dx = 4*x**3
  assert y.sum().gradient(x)[0].tolist() == [32.]


def test_assign_chain_gradient_matches_central_differences():
  weight = np.array([1.0, -2.0, 0.5])

  def reference(v: np.ndarray) -> float:
    y = v.copy()
    y[:2] = y[:2] * y[1:]  # a partial store reading the old values
    y = y * y
    return float((y * weight).sum())
  x0 = np.array([1.5, -0.5, 2.0])
  numeric = [(reference(x0 + d) - reference(x0 - d)) / 2e-6 for d in np.eye(3) * 1e-6]
  x = Tensor(x0.astype(np.float32))
  y = x.clone()
  y[:2].assign(y[:2] * y[1:])
  y.assign(y * y)
  (grad,) = (y * Tensor(weight.astype(np.float32))).sum().gradient(x)
  np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-4, atol=1e-4)
