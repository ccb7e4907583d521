"""The workloads of bench_core.py in torch on a CUDA GPU, to read beside `bench_core.py --device NV` (scripts/
gpu-check.sh runs both). Prints one line per workload; exits quietly when torch or CUDA is missing. Asserts nothing.

    python bench/bench_torch_cuda.py [--repeat 5]
"""
from __future__ import annotations
import argparse
import statistics
import time
from typing import Callable


def torch_time(fn: Callable[[], object], repeat: int) -> float:
  """Median seconds of fn, each run waited for (torch.cuda.synchronize), after one warm-up."""
  import torch
  fn()
  torch.cuda.synchronize()
  samples = []
  for _ in range(repeat):
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    samples.append(time.perf_counter() - start)
  return statistics.median(samples)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--repeat", type=int, default=5)
  args = parser.parse_args()
  try:
    import torch
  except ImportError:
    print("torch is not importable: no torch column")
    return
  if not torch.cuda.is_available():
    print("torch has no CUDA device: no torch column")
    return
  gen = torch.Generator(device="cuda").manual_seed(0)
  n = 16 * 1024 * 1024
  a, b, c, d = (torch.randn(n, device="cuda", generator=gen) for _ in range(4))
  m = torch.randn(4096, 4096, device="cuda", generator=gen)
  s = torch.randn(4096, 1024, device="cuda", generator=gen)
  x, y = torch.randn(1024, 1024, device="cuda", generator=gen), torch.randn(1024, 1024, device="cuda", generator=gen)
  torch.backends.cuda.matmul.allow_tf32 = False  # full float32, like tinycore's kernels
  workloads = [("fused ((a*b+c).relu()*d).sum(), 16M f32", lambda: ((a * b + c).relu() * d).sum()),
               ("sum over axis 0, 4096x4096 f32", lambda: m.sum(0)),
               ("sum over axis 1, 4096x4096 f32", lambda: m.sum(1)),
               ("softmax over (4096, 1024) f32", lambda: s.softmax(-1)),
               ("matmul 1024x1024 f32", lambda: x @ y)]
  print(f"{'workload':42s}{'torch cuda ms':>14s}   ({torch.cuda.get_device_name()}, torch {torch.__version__})")
  for name, fn in workloads: print(f"{name:42s}{torch_time(fn, args.repeat) * 1e3:14.3f}")


if __name__ == "__main__":
  main()
