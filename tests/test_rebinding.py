"""After a realize, live tensors that read realized nodes are rebound to their buffers (tensor_assign.Rebinding). Only
tensors that may hold a graph are visited: a realized tensor leaves the registry, and an assign (or anything else that
gives a tensor a graph again) puts it back, so its next realize rebinds it too."""
import numpy as np
from tinycore import Tensor
from tinycore.tensor import lazy_tensors


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
