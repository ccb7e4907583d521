"""tinycore vs numpy on the CPU, side by side in one process. Prints a table; asserts nothing about speed.

    python bench/bench_core.py [--device CPU] [--repeat 5]

--device runs the tinycore side on any installed device (default: the default device, Device.DEFAULT), e.g.
`--device CL` with tiny-cl (PoCL, or a GPU's OpenCL driver) or `--device CPU:1`; numpy always runs on the host.
Times are wall-clock until realize() returns, which waits for the device to finish (run_linear synchronizes).
"""
from __future__ import annotations
import argparse
import time
import numpy as np
from tinycore import Tensor
from tinycore.device.registry import Device
from timing import median_time


def realized(data: np.ndarray, device: str) -> Tensor:
  return Tensor(data, device=device).realize()


def main() -> None:
  parser = argparse.ArgumentParser(description="tinycore vs numpy, side by side")
  parser.add_argument("--device", default=None, help="the device tinycore runs on, e.g. CPU, CPU:1, CL (default: the "
                      "default device)")
  parser.add_argument("--repeat", type=int, default=5)
  args = parser.parse_args()
  device = Device.canonicalize(args.device) if args.device else Device.DEFAULT
  rng = np.random.default_rng(0)
  rows = []

  n = 16 * 1024 * 1024
  a, b, c, d = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
  ta, tb, tc, td = (realized(x, device) for x in (a, b, c, d))
  rows.append(("fused ((a*b+c).relu()*d).sum(), 16M f32",
               median_time(lambda: ((ta * tb + tc).relu() * td).sum().realize(), args.repeat, device),
               median_time(lambda: (np.maximum(a * b + c, 0) * d).sum(), args.repeat)))

  m = rng.standard_normal((4096, 4096)).astype(np.float32)
  tm = realized(m, device)
  for axis in (0, 1):
    rows.append((f"sum over axis {axis}, 4096x4096 f32", median_time(lambda: tm.sum(axis).realize(), args.repeat, device),
                 median_time(lambda: m.sum(axis), args.repeat)))

  s = rng.standard_normal((4096, 1024)).astype(np.float32)
  ts = realized(s, device)
  def np_softmax():
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  rows.append(("softmax over (4096, 1024) f32", median_time(lambda: ts.softmax(-1).realize(), args.repeat, device), median_time(np_softmax, args.repeat)))

  x, y = rng.standard_normal((1024, 1024)).astype(np.float32), rng.standard_normal((1024, 1024)).astype(np.float32)
  tx, ty = realized(x, device), realized(y, device)
  rows.append(("matmul 1024x1024 f32", median_time(lambda: (tx @ ty).realize(), args.repeat, device), median_time(lambda: x @ y, args.repeat)))

  # time to first result: a kernel this process has never seen (a fresh constant makes the source new)
  salt = float(time.time() % 1000)
  v = realized(rng.standard_normal(1000).astype(np.float32), device)
  start = time.perf_counter()
  (v * salt + 1).exp().sum().realize()
  Device[device].synchronize()
  first = time.perf_counter() - start
  start = time.perf_counter()
  (v * salt + 1).exp().sum().realize()
  Device[device].synchronize()
  again = time.perf_counter() - start

  print(f"device: {device}")
  print(f"{'workload':44s} {'tinycore ms':>12s} {'numpy ms':>10s} {'numpy/tinycore':>15s}")
  for name, ours, theirs in rows:
    print(f"{name:44s} {ours * 1e3:12.2f} {theirs * 1e3:10.2f} {theirs / ours:15.2f}x")
  print(f"{'time to first result, new kernel':44s} {first * 1e3:12.2f}")
  print(f"{'same computation again (cached)':44s} {again * 1e3:12.2f}")


if __name__ == "__main__":
  main()
