"""A careless user's long lazy chains: thousands of ops before the first realize."""
import sys
import numpy as np
import pytest
from tinycore import Tensor, dtypes


def chain(t: Tensor, n: int) -> Tensor:
  for _ in range(n): t = t * 1.0001 + 0.0001
  return t


def test_a_chain_of_thousands_of_lazy_ops_computes():
  limit = sys.getrecursionlimit()
  start = np.array([1.0, -2.0, 0.5], np.float32)
  expected = start.copy()
  for _ in range(2500): expected = expected * np.float32(1.0001) + np.float32(0.0001)
  np.testing.assert_allclose(chain(Tensor(start), 2500).numpy(), expected, rtol=1e-5)
  assert sys.getrecursionlimit() == limit  # raised only while scheduling


def test_a_graph_too_deep_to_schedule_says_what_to_do():
  with pytest.raises(RecursionError, match=r"realize\(\) an intermediate result"):
    chain(Tensor([1.0, 2.0]), 12000).numpy()
  # realizing along the way works
  t = Tensor([1.0, 2.0])
  for _ in range(6): t = chain(t, 2000).realize()
  expected = np.array([1.0, 2.0], np.float32)
  for _ in range(12000): expected = expected * np.float32(1.0001) + np.float32(0.0001)
  np.testing.assert_allclose(t.numpy(), expected, rtol=1e-4)


def test_an_index_from_a_chain_that_reuses_its_values_schedules():
  """Each step reads v three times (2**40 paths through 40 steps, a DAG of about 160 nodes): ordering the terms of an
  index sum walked every path, so this never finished; the order key is now cached per node."""
  table = np.arange(10, dtype=np.float32) * 10
  start = np.array([3.7, -1.2, 5.5, 8.25], np.float32)
  v, expected = Tensor(start), start.copy()
  for _ in range(40):
    v = (v < 4).where(v + 0.5, v - 0.25)
    expected = np.where(expected < 4, expected + np.float32(0.5), expected - np.float32(0.25)).astype(np.float32)
  index = v.cast(dtypes.int32).clip(0, 9)
  picked = Tensor(table).reshape(1, 10).expand(4, 10).gather(1, index.reshape(4, 1)).reshape(4)
  np.testing.assert_array_equal(picked.numpy(), table[np.clip(expected.astype(np.int32), 0, 9)])
