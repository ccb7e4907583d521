"""tinycore vs numpy, torch and tinygrad, side by side in one process. Asserts nothing.

    python bench/bench_core.py [--compiler gcc|clang] [--device CPU] [--repeat 5]

Each row is one workload; each library's column is its time divided by numpy's (lower is better; numpy's own
column is milliseconds). torch and tinygrad are measured when importable (`pip install tinycore[bench]`).
`--compiler` picks the C compiler of the CPU device (it sets $CC before the device opens); the header names the
compiler used. Every time includes waiting for the device to finish, and is the minimum over at least `--repeat`
runs and half a second after a warm-up (on a shared machine the minimum is the least noisy statistic). Besides the
kernels: the time to the first result of a kernel no process compiled before, and the per-iteration time of an eager
loop of tiny ops (torch runs each op at once: it has no realize), as absolute times.

The memory-bound rows (fused chain, sums) follow the machine's memory bandwidth, which on a shared VM moves between
states: on the 2-core CI VM a hand-written 2-thread C sum of 64 MB (AVX-512, huge pages) took 0.39 ms in its fast
state and 0.89-0.95 ms in its slow one, flipping within minutes, while numpy's single-thread column sum (1.6-1.9 ms)
hardly moves. Our column-sum kernel alone takes 0.54 ms and 0.85-0.95 ms in those states (a realize adds ~0.1-0.2 ms
of Python, slower after a big kernel has flushed the caches), so "sum over axis 0" reads 0.35-0.41x in a fast state
and 0.56-0.66x in a slow one. Compare rows of one run only.
"""
from __future__ import annotations
import argparse
import functools
import importlib
import os
import time
from typing import Any, Callable
import numpy as np

Thunk = Callable[[], object]


def timed(fn: Thunk, sync: Callable[[], None]) -> float:
  start = time.perf_counter()
  fn(); sync()
  return time.perf_counter() - start


def best_time(fn: Thunk, sync: Callable[[], None], repeat: int, budget_s: float = 0.5) -> float:
  """The minimum wall time of fn() then sync() after a warm-up run (compiles, allocates), over at least `repeat` runs
  and `budget_s` seconds (at most 1000 runs): on a shared machine the minimum is the least noisy statistic, and a
  short workload needs many runs to find it. Each library runs its own block of runs: taking turns run by run made
  OpenBLAS's spinning threads and the device's threads slow each other down (numpy's matmul 256 took 14 ms)."""
  fn(); sync()
  best, runs, start = float("inf"), 0, time.perf_counter()
  while runs < repeat or (time.perf_counter() - start < budget_s and runs < 1000):
    best = min(best, timed(fn, sync))
    runs += 1
  return best


def numpy_conv2d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  """3x3 convolution, stride 1, padding 1, through a sliding window view and one tensordot (BLAS)."""
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (n, cin, h, w, 3, 3)
  return np.tensordot(windows, w, axes=((1, 4, 5), (1, 2, 3))).transpose(0, 3, 1, 2)


def numpy_softmax(s: np.ndarray) -> np.ndarray:
  e = np.exp(s - s.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


class Workload:
  """A computation on numpy inputs: `tensor_fn` for the tinygrad-style Tensor API (tinycore and tinygrad), `torch_fn`
  for torch, `numpy_fn` for numpy; each takes the inputs in its library's array type."""

  def __init__(self, name: str, inputs: list[np.ndarray], numpy_fn: Callable, tensor_fn: Callable,
               torch_fn: Callable | None = None):
    self.name, self.inputs, self.numpy_fn, self.tensor_fn = name, inputs, numpy_fn, tensor_fn
    self.torch_fn = torch_fn or tensor_fn


def workloads(rng: np.random.Generator) -> list[Workload]:
  def normal(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)
  n = 16 * 1024 * 1024
  m, s = normal(4096, 4096), normal(4096, 1024)
  rows = [Workload("fused ((a*b+c).relu()*d).sum(), 16M", [normal(n) for _ in range(4)],
                   lambda a, b, c, d: (np.maximum(a * b + c, 0) * d).sum(),
                   lambda a, b, c, d: ((a * b + c).relu() * d).sum()),
          Workload("sum over axis 0, 4096x4096", [m], lambda x: x.sum(0), lambda x: x.sum(0)),
          Workload("sum over axis 1, 4096x4096", [m], lambda x: x.sum(1), lambda x: x.sum(1)),
          Workload("sum to one value, 4096x4096", [m], lambda x: x.sum(), lambda x: x.sum()),
          Workload("softmax (4096, 1024)", [s], numpy_softmax, lambda x: x.softmax(-1))]
  for size in (256, 1024, 2048):
    rows.append(Workload(f"matmul {size}", [normal(size, size), normal(size, size)], lambda x, y: x @ y,
                         lambda x, y: x @ y))
  rows.append(Workload("batched matmul 16x(256x256)", [normal(16, 256, 256), normal(16, 256, 256)],
                       lambda x, y: x @ y, lambda x, y: x @ y))
  def torch_conv(x, w):
    import torch.nn.functional as F
    return F.conv2d(x, w, padding=1)
  rows.append(Workload("conv2d 3x3 (8,64,28,28) -> 64", [normal(8, 64, 28, 28), normal(64, 64, 3, 3)],
                       numpy_conv2d, lambda x, w: x.conv2d(w, padding=1), torch_conv))
  return rows


class Library:
  """One column: how to make arrays, realize a result and wait for the device."""

  def __init__(self, name: str, to_array: Callable[[np.ndarray], Any], realize: Callable[[Any], Any],
               sync: Callable[[], None], fn_of: Callable[[Workload], Callable]):
    self.name, self.to_array, self.realize, self.sync, self.fn_of = name, to_array, realize, sync, fn_of

  def thunk(self, workload: Workload) -> Thunk:
    arrays = [self.to_array(x) for x in workload.inputs]
    fn = self.fn_of(workload)
    return lambda: self.realize(fn(*arrays))


def tinycore_library(device: str) -> Library:
  from tinycore import Tensor
  from tinycore.device.registry import Device
  return Library("tinycore", lambda x: Tensor(x, device=device).realize(), lambda t: t.realize(),
                 lambda: Device[device].synchronize(), lambda w: w.tensor_fn)


def optional_libraries() -> list[Library]:
  """torch and tinygrad, each when it imports."""
  found = []
  try:
    torch = importlib.import_module("torch")
    found.append(Library(f"torch {torch.__version__.split('+')[0]}", torch.from_numpy, lambda t: t, lambda: None,
                         lambda w: w.torch_fn))
  except ImportError: pass
  try:
    tinygrad = importlib.import_module("tinygrad")
    def sync() -> None: tinygrad.Device[tinygrad.Device.DEFAULT].synchronize()
    found.append(Library("tinygrad", lambda x: tinygrad.Tensor(x).realize(), lambda t: t.realize(), sync,
                         lambda w: w.tensor_fn))
  except ImportError: pass
  return found


def first_result_seconds(library: Library, rng: np.random.Generator) -> float | None:
  """Seconds to the first result of a kernel no process compiled before: a random length makes new source (a new
  constant would not: constants are kernel parameters). None for a library that compiles nothing (torch)."""
  if library.name.startswith("torch"): return None
  length = int(np.random.default_rng().integers(1000, 1_000_000))  # unseeded: a length no earlier run compiled
  v = library.to_array(rng.standard_normal(length).astype(np.float32))
  library.sync()
  start = time.perf_counter()
  library.realize((v * 3 + 1).exp().sum())
  library.sync()
  return time.perf_counter() - start


def eager_loop_seconds(library: Library, iterations: int, chained: int) -> float:
  """Per iteration of `x = x + 1` `chained` times, then realize, on 16 elements (the fixed cost of an op); torch
  runs each op at once (it has no realize)."""
  x = library.to_array(np.zeros(16, np.float32))
  def loop(count: int) -> Any:
    nonlocal x
    for _ in range(count):
      for _ in range(chained): x = x + 1
      x = library.realize(x)
    library.sync()
  loop(10)  # warm-up: compiles and caches the schedule
  best = float("inf")
  for _ in range(3):  # the best of a few runs: the least disturbed by other processes
    start = time.perf_counter()
    loop(iterations)
    best = min(best, (time.perf_counter() - start) / iterations)
  return best


def print_table(columns: list[str], rows: list[tuple[str, list[float | None]]]) -> None:
  """numpy's column in ms, the others as time / numpy's time."""
  print(f"{'workload':40s}{'numpy ms':>10s}" + "".join(f"{c:>22s}" for c in columns[1:]))
  for name, times in rows:
    numpy_time = times[0]
    cells = "".join(f"{'-':>22s}" if t is None else f"{t / numpy_time:21.2f}x" for t in times[1:])
    print(f"{name:40s}{numpy_time * 1e3:10.2f}" + cells)


def print_latency_row(name: str, values: list[float | None]) -> None:
  """A row of absolute values (no numpy column), one per library."""
  print(f"{name:40s}{'':10s}" + "".join(f"{'-':>22s}" if v is None else f"{v:22.1f}" for v in values))


def measured(library: Library, what: str, fn: Callable[[], float | None]) -> float | None:
  try: return fn()
  except Exception as error:  # a library without the op gets a dash, not a crash
    print(f"# {library.name}: {what}: {type(error).__name__}: {error}")
    return None


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--compiler", choices=("gcc", "clang"), help="the CPU device's C compiler (sets $CC)")
  parser.add_argument("--device", default=None, help="the tinycore device (default: the default device)")
  parser.add_argument("--repeat", type=int, default=5)
  args = parser.parse_args()
  if args.compiler: os.environ["CC"] = args.compiler
  from tinycore.device.registry import Device
  device = Device.canonicalize(args.device) if args.device else Device.DEFAULT
  compiler = Device[device].capabilities().get("compiler")
  ours = tinycore_library(device)
  ours.name = f"tinycore {device}" + (f" ({compiler})" if compiler else "")
  others = optional_libraries()
  rng = np.random.default_rng(0)
  rows = []
  for workload in workloads(rng):
    times: list[float | None] = [best_time(lambda: workload.numpy_fn(*workload.inputs), lambda: None, args.repeat)]
    for library in [ours, *others]:
      try: times.append(best_time(library.thunk(workload), library.sync, args.repeat))
      except Exception as error:  # a library without the op gets a dash, not a crash
        print(f"# {library.name}: {workload.name}: {type(error).__name__}: {error}")
        times.append(None)
    rows.append((workload.name, times))
  print_table(["numpy", ours.name, *(library.name for library in others)], rows)
  libraries = [ours, *others]
  first = [measured(lib, "first result", functools.partial(first_result_seconds, lib, rng)) for lib in libraries]
  print_latency_row("first result of a new kernel (ms)", [None if t is None else t * 1e3 for t in first])
  for name, iterations, chained in (("eager (x + 1).realize(), 16 elements (us)", 300, 1),
                                    ("10 chained x + 1, one realize (us)", 100, 10)):
    times = [measured(lib, name, functools.partial(eager_loop_seconds, lib, iterations, chained)) for lib in libraries]
    print_latency_row(name, [None if t is None else t * 1e6 for t in times])


if __name__ == "__main__":
  main()
