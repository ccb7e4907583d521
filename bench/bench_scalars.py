"""A learning-rate loop: `(x * lr + b).realize()` with new Python floats every step. Prints the median time per step
and how many programs the loop compiled (one: the values are kernel arguments). Asserts nothing.

    python bench/bench_scalars.py [--device CPU] [--steps 50] [--size 1024]

Before Python scalars became kernel arguments, every step rendered, compiled and loaded a new program (about 80 ms
per step on the CPU device, and the compile cache grew by a shared object per step).
"""
from __future__ import annotations
import argparse
import statistics
import time
import numpy as np
from tinycore import Tensor
from tinycore.codegen import CodegenStats


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--device", default=None)
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--size", type=int, default=1024)
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal(args.size).astype(np.float32), device=args.device).realize()
  compiled, samples = CodegenStats.compiled, []
  for step in range(args.steps):
    lr, bias = 0.1 / (step + 1) + 1e-4 * float(rng.random()), float(rng.uniform(-1, 1))
    start = time.perf_counter()
    (x * lr + bias).realize().numpy()
    samples.append(time.perf_counter() - start)
  print(f"{x.device}: {args.steps} steps, {CodegenStats.compiled - compiled} program(s) compiled, "
        f"first step {samples[0] * 1e3:.1f} ms, median step {statistics.median(samples[1:]) * 1e3:.3f} ms")


if __name__ == "__main__":
  main()
