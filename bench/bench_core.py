"""tinycore vs numpy, side by side in one process: a column per tinycore device, then numpy. Asserts nothing.

    python bench/bench_core.py [--device CPU,CL] [--repeat 5]

--device takes a comma-separated list (default: the default device). `--device CL` runs the OpenCL device
(PoCL with `pip install tiny-cl[pocl]`). Every time includes waiting for the device to finish.
"""
from __future__ import annotations
import argparse
import time
from typing import Callable
import numpy as np
from tinycore import Tensor
from tinycore.device.registry import Device
from timing import median_time

Workload = tuple[str, Callable[[str], Callable[[], object]], Callable[[], object]]


def realized(data: np.ndarray, device: str) -> Tensor:
  return Tensor(data, device=device).realize()


def workloads(rng: np.random.Generator) -> list[Workload]:
  """(name, device -> tinycore thunk, numpy thunk) for each measured computation."""
  n = 16 * 1024 * 1024
  a, b, c, d = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
  m = rng.standard_normal((4096, 4096)).astype(np.float32)
  s = rng.standard_normal((4096, 1024)).astype(np.float32)
  x, y = rng.standard_normal((1024, 1024)).astype(np.float32), rng.standard_normal((1024, 1024)).astype(np.float32)

  def fused(device):
    ta, tb, tc, td = (realized(v, device) for v in (a, b, c, d))
    return lambda: ((ta * tb + tc).relu() * td).sum().realize()

  def axis_sum(axis):
    def make(device):
      tm = realized(m, device)
      return lambda: tm.sum(axis).realize()
    return make

  def softmax(device):
    ts = realized(s, device)
    return lambda: ts.softmax(-1).realize()

  def np_softmax():
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

  def matmul(device):
    tx, ty = realized(x, device), realized(y, device)
    return lambda: (tx @ ty).realize()

  return [("fused ((a*b+c).relu()*d).sum(), 16M f32", fused, lambda: (np.maximum(a * b + c, 0) * d).sum()),
          ("sum over axis 0, 4096x4096 f32", axis_sum(0), lambda: m.sum(0)),
          ("sum over axis 1, 4096x4096 f32", axis_sum(1), lambda: m.sum(1)),
          ("softmax over (4096, 1024) f32", softmax, np_softmax),
          ("matmul 1024x1024 f32", matmul, lambda: x @ y)]


def first_result(device: str, rng: np.random.Generator) -> tuple[float, float]:
  """Seconds to the first result of a kernel this process never saw (a fresh constant makes new source), and to the
  same computation again (everything cached)."""
  salt = float(time.time() % 1000)
  v = realized(rng.standard_normal(1000).astype(np.float32), device)
  times = []
  for _ in range(2):
    start = time.perf_counter()
    (v * salt + 1).exp().sum().realize()
    Device[device].synchronize()
    times.append(time.perf_counter() - start)
  return times[0], times[1]


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--device", default=None, help="comma-separated tinycore devices (default: the default device)")
  parser.add_argument("--repeat", type=int, default=5)
  args = parser.parse_args()
  devices = [Device.canonicalize(d) for d in args.device.split(",")] if args.device else [Device.DEFAULT]
  rng = np.random.default_rng(0)
  table = []
  for name, make, numpy_fn in workloads(rng):
    ours = [median_time(make(device), args.repeat, device) for device in devices]
    table.append((name, ours, median_time(numpy_fn, args.repeat)))
  header = ("".join(f"{d + ' ms':>12s}" for d in devices) + f"{'numpy ms':>10s}" +
            "".join(f"{'np/' + d:>10s}" for d in devices))
  print(f"{'workload':42s}{header}")
  for name, ours, theirs in table:
    print(f"{name:42s}" + "".join(f"{t * 1e3:12.2f}" for t in ours) + f"{theirs * 1e3:10.2f}" +
          "".join(f"{theirs / t:9.2f}x" for t in ours))
  firsts = [first_result(device, rng) for device in devices]
  print(f"{'time to first result, new kernel (ms)':42s}" + "".join(f"{f * 1e3:12.2f}" for f, _ in firsts))
  print(f"{'same computation again, cached (ms)':42s}" + "".join(f"{a * 1e3:12.2f}" for _, a in firsts))


if __name__ == "__main__":
  main()
