"""Process lifetime: exiting with a kernel in flight, and forked children (os.fork, multiprocessing's fork start
method). Each scenario runs in a subprocess with a timeout; a signal (negative exit status) is a failure."""
from __future__ import annotations
import importlib.util
import time
import pytest

pytest.importorskip("tiny_cpu", reason="tiny-cpu is not installed")
needs_sim = pytest.mark.skipif(importlib.util.find_spec("hcq_sim") is None, reason="tinycore-hcq-sim is not installed")

# a matmul long enough (seconds on one thread) to still run when the interpreter shuts down; TINYCORE_LRU=0 frees
# buffers at once, so memory still in use would be unmapped under the running kernel
EXIT_SCRIPT = r"""
import numpy as np
from tinycore import Tensor
def start():
  x = Tensor(np.ones((2500, 2500), np.float32))
  (x @ x).realize()        # returns at once; nothing keeps x or the result alive
start()
print("exiting with a kernel in flight", flush=True)
"""
EXIT_ENV = {"TINYCORE_LRU": "0", "TINYCORE_CPU_THREADS": "1"}


def test_exit_with_a_kernel_in_flight_waits_for_it_and_exits_cleanly(run_scenario):
  result = run_scenario(EXIT_SCRIPT, env=EXIT_ENV)
  assert result.returncode == 0, f"exit status {result.returncode} (negative: killed by a signal)\n{result.stderr}"
  assert "exiting with a kernel in flight" in result.stdout


def test_exit_that_gives_up_waiting_leaves_the_kernel_its_memory(run_scenario):
  start = time.perf_counter()
  result = run_scenario(EXIT_SCRIPT, env={**EXIT_ENV, "TINYCORE_QUEUE_TIMEOUT": "0.2"})
  assert result.returncode == 0, f"exit status {result.returncode} (negative: killed by a signal)\n{result.stderr}"
  assert time.perf_counter() - start < 60


FORK_SCRIPT = r"""
import os, sys, multiprocessing
import numpy as np
from tinycore import Tensor

device = sys.argv[1]
base = np.arange(12, dtype=np.float32).reshape(3, 4)
parent = (Tensor(base, device=device) * 2 + 1).realize()       # realized before the fork
pending = (Tensor(base, device=device) - 5).exp2()             # left lazy: the child computes it

large = np.arange(1 << 18, dtype=np.float32).reshape(512, 512) % 7     # large enough to split across CPU threads

def in_child(k):
  fresh = (Tensor(np.full((3, 4), k, np.float32), device=device) + parent).numpy()
  split = (Tensor(large, device=device) * k).sum(axis=1).numpy().tolist()
  return parent.numpy().tolist(), fresh.tolist(), pending.numpy().tolist(), float((parent.sum() * k).item()), split

def expected(k):
  doubled = base * 2 + 1
  return (doubled.tolist(), (doubled + k).tolist(), np.exp2(base - 5).tolist(), float(doubled.sum() * k),
          (large * k).sum(axis=1).tolist())

pid = os.fork()
if pid == 0:
  try: os._exit(0 if in_child(3) == expected(3) else 3)
  except BaseException as error:
    print(f"child: {type(error).__name__}: {error}", flush=True)
    os._exit(4)
_, status = os.waitpid(pid, 0)
print("os.fork child exit status", os.waitstatus_to_exitcode(status), flush=True)
with multiprocessing.get_context("fork").Pool(2) as pool:
  print("pool agrees" if pool.map(in_child, [1, 2]) == [expected(1), expected(2)] else "pool differs", flush=True)
print("parent agrees" if in_child(5) == expected(5) else "parent differs", flush=True)
"""


def test_forked_children_compute_and_read_the_parents_tensors(run_scenario):
  result = run_scenario(FORK_SCRIPT, "CPU", timeout=120, env={"TINYCORE_CPU_THREADS": "2"})
  assert result.returncode == 0, f"exit status {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
  assert "os.fork child exit status 0" in result.stdout, result.stdout
  assert "pool agrees" in result.stdout and "parent agrees" in result.stdout


@needs_sim
def test_a_device_that_cannot_follow_a_fork_fails_at_once_saying_so(run_scenario):
  # the simulated device's queue threads do not survive a fork and it has no restart_after_fork: the child's first
  # use must fail at once, naming the fork and the remedy, instead of waiting out the queue timeout
  start = time.perf_counter()
  result = run_scenario(FORK_SCRIPT, "SIM", timeout=120, env={"TINYCORE_QUEUE_TIMEOUT": "100"})
  assert time.perf_counter() - start < 60
  assert "os.fork child exit status 4" in result.stdout, result.stdout + result.stderr[-2000:]
  assert "forked" in result.stdout and "spawn" in result.stdout
