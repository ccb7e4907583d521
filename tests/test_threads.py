"""Thread safety: tensors built and realized from several Python threads, on one device and on several, give numpy's
answers. Each scenario runs in a subprocess with a timeout, since the failure modes are a crash or a stalled device."""
from __future__ import annotations
import importlib.util
import pytest

pytest.importorskip("tiny_cpu", reason="tiny-cpu is not installed")

THREADS_SCRIPT = r"""
import sys, threading
import numpy as np
from tinycore import Tensor

devices, rounds = sys.argv[1].split(","), int(sys.argv[2])
failures = []

def compute(kind, rng, i, step, device):
  a = rng.standard_normal((7 + i, 5 + step % 3)).astype(np.float32)
  b = rng.standard_normal((5 + step % 3, 3 + step % 4)).astype(np.float32)
  if kind == 0:  # matmul, relu and a reduction: several kernels and a copy
    return ((Tensor(a, device=device) @ Tensor(b, device=device)).relu() + i).sum(axis=1).numpy(), \
           (np.maximum(a @ b, 0) + i).sum(axis=1)
  if kind == 1:  # an elementwise chain whose shape is the same in every thread (one shared cached schedule)
    x = rng.standard_normal((16, 16)).astype(np.float32)
    return (Tensor(x, device=device) * 2 - step).exp().numpy(), np.exp(x * 2 - step)
  x = rng.integers(-100, 100, (9, 11)).astype(np.int32)
  return Tensor(x, device=device).max(axis=0).numpy() + i, x.max(axis=0) + i

def work(i):
  rng = np.random.default_rng(i)
  try:
    for step in range(rounds):
      got, want = compute((i + step) % 3, rng, i, step, devices[i % len(devices)])
      if not np.allclose(got, want, rtol=1e-4, atol=1e-4): failures.append(f"thread {i} step {step}: {got} != {want}")
  except Exception as error:
    failures.append(f"thread {i}: {type(error).__name__}: {error}")

threads = [threading.Thread(target=work, args=(i,)) for i in range(int(sys.argv[3]))]
for t in threads: t.start()
for t in threads: t.join()
print("\n".join(failures) or "all threads agree with numpy")
sys.exit(1 if failures else 0)
"""


needs_sim = pytest.mark.skipif(importlib.util.find_spec("hcq_sim") is None, reason="tinycore-hcq-sim not installed")


@pytest.mark.parametrize("devices", ["CPU", "CPU,CPU:1", pytest.param("CPU,SIM", marks=needs_sim)])
def test_threads_realizing_at_once_agree_with_numpy(devices, run_scenario):
  result = run_scenario(THREADS_SCRIPT, devices, "12", "4")
  assert result.returncode == 0, f"exit status {result.returncode}:\n{result.stdout}\n{result.stderr[-3000:]}"
  assert "all threads agree with numpy" in result.stdout


HOST_COPIES_SCRIPT = r"""
import threading
import numpy as np
from tinycore import Tensor

failures = []

def work(i):
  rng = np.random.default_rng(i)
  for step in range(40):
    x = rng.standard_normal((64, 64)).astype(np.float32)
    if not np.allclose(got := (Tensor(x, device="SIM") + 1).numpy(), x + 1): failures.append(f"thread {i} step {step}: {got}")

threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print("\n".join(failures) or "every copy read back its own data")
"""


@needs_sim
def test_host_copies_of_a_private_memory_device_from_many_threads(run_scenario):
  # SIM's copy-in/out run on its copy queue: each waits for its own submission, not for whichever finishes next (it
  # once read a bounce buffer before its copy ran, or freed one a queued copy still read: zeros, or a heap crash)
  result = run_scenario(HOST_COPIES_SCRIPT)
  assert result.returncode == 0, f"exit status {result.returncode}:\n{result.stdout}\n{result.stderr[-3000:]}"
  assert "every copy read back its own data" in result.stdout


def test_uop_hash_consing_gives_one_node_across_threads():
  # two threads building the same graph at once must get the very same nodes (equality is identity)
  import threading
  from tinycore.dtype import dtypes
  from tinycore.uop.ops import Ops, UOp
  built: list[list[UOp]] = [[], []]
  barrier = threading.Barrier(2)

  def build(slot: int) -> None:
    barrier.wait()
    built[slot] = [UOp(Ops.CONST, dtypes.int32, (), 10_000_000 + i) for i in range(20_000)]

  threads = [threading.Thread(target=build, args=(slot,)) for slot in (0, 1)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert len(built[0]) == len(built[1]) == 20_000
  assert all(a is b for a, b in zip(*built))
