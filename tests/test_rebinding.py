"""After a realize, live tensors that read realized nodes are rebound to their buffers (tensor_assign.Rebinding). Only
tensors that may hold a graph are visited: a realized tensor leaves the registry, and an assign (or anything else that
gives a tensor a graph again) puts it back, so its next realize rebinds it too."""
import numpy as np
from tinycore import Tensor
from tinycore.tensor_assign import lazy_tensors


def registered(t: Tensor) -> bool: return t._ref in lazy_tensors


def test_realized_tensors_leave_the_registry_and_lazy_ones_stay():
  a, b = Tensor(np.arange(4, dtype=np.float32)).realize(), Tensor(np.ones(4, np.float32)).realize()
  lazy = a * 3
  (a + b).realize()  # a realize visits the registry: the realized tensors leave it
  assert not registered(a) and not registered(b) and registered(lazy)
  np.testing.assert_array_equal(lazy.numpy(), [0, 3, 6, 9])


def test_an_assigned_tensor_is_rebound_again_after_it_left_the_registry():
  p = Tensor(np.array([1.0, 2.0, 3.0], np.float32)).realize()
  (p * 1).realize()
  assert not registered(p)
  p.assign(p * 10)  # p holds a store again: its next realize must rebind it to the stored buffer
  assert registered(p)
  q = p + 1
  q.realize()
  np.testing.assert_array_equal(q.numpy(), [11, 21, 31])
  # rebound, p reads the stored values; left lazy it would run its store a second time (100, 200, 300)
  np.testing.assert_array_equal(p.numpy(), [10, 20, 30])
  np.testing.assert_array_equal(p.numpy(), [10, 20, 30])


def test_a_view_of_an_assigned_buffer_and_a_replaced_tensor_are_rebound():
  base = Tensor(np.zeros(6, np.float32)).realize()
  view = base[2:4]
  other = Tensor(np.ones(2, np.float32)).realize()
  (view + other).realize()
  base.assign(Tensor(np.arange(6, dtype=np.float32)))
  (view * 2).realize()
  np.testing.assert_array_equal(view.numpy(), [2, 3])
  other.replace(other * 5)
  assert registered(other)
  (other + 1).realize()
  np.testing.assert_array_equal(other.numpy(), [5, 5])


def test_assign_reaches_every_view_of_its_buffer_however_the_view_came_to_read_it():
  a = Tensor(np.arange(6, dtype=np.float32)).realize()
  x = a + 1                      # lazy: its views read a computation, not a buffer
  view = x[1:3]
  Tensor(np.zeros(2, np.float32)).realize().assign(Tensor(np.ones(2, np.float32)))  # (indexes x as a computation)
  x.realize()                    # x and its view are rebound to x's new buffer
  x.assign(Tensor(np.zeros(6, np.float32)))
  np.testing.assert_array_equal(x.numpy(), np.zeros(6, np.float32))  # (the target reads its own store first)
  np.testing.assert_array_equal(view.numpy(), [0, 0])
  later = x[4:6]                 # made after the assign: a view of the pending store
  x.assign(x + 7)
  np.testing.assert_array_equal(later.numpy(), [7, 7])
  np.testing.assert_array_equal(view.numpy(), [7, 7])
  np.testing.assert_array_equal(x.numpy(), np.full(6, 7, np.float32))


def test_an_optimizer_step_over_many_parameters_updates_each_once():
  from tinycore import nn
  params = [Tensor(np.full(3, float(i), np.float32), requires_grad=True) for i in range(300)]
  opt = nn.optim.SGD(params, lr=0.5)
  for p in params: p.grad = Tensor(np.ones(3, np.float32))
  with Tensor.train():
    opt.step()
    opt.step()
  for i, p in enumerate(params[::37]):
    np.testing.assert_array_equal(p.numpy(), np.full(3, 37 * i - 1.0, np.float32))
