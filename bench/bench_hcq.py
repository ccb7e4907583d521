"""HCQ2 launch overhead on the CPU: a chain of 1,000 tiny kernels, microseconds per kernel, three ways in one run.

    python bench/bench_hcq.py [--kernels 1000] [--repeat 5]

- direct: each kernel's compiled function called from Python, one after another (the path before HCQ2);
- eager: realize() of the chain: schedule (cached) + compile the batch (template) + submit + wait;
- replayed: the compiled LINEAR run again: patch input addresses, write the ring, wait for the worker.
"""
from __future__ import annotations
import argparse
from tinycore import Tensor
from tinycore.device.kernels import compile_kernel
from tinycore.device.registry import Device
from tinycore.device.buffers import buffer_of
from tinycore.engine.realize import run_linear
from tinycore.hcq.runtime import compile_linear
from tinycore.uop.scalars import call_buffers
from timing import median_time


def chain(n: int) -> Tensor:
  x = Tensor.zeros(16).contiguous().realize()
  for _ in range(n): x = (x + 1).contiguous()
  return x


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--kernels", type=int, default=1000)
  parser.add_argument("--repeat", type=int, default=5)
  args = parser.parse_args()
  n, cpu = args.kernels, Device["CPU"]
  linear = chain(n).schedule_linear()
  calls = [(compile_kernel("CPU", c.src[0]), [buffer_of(b).ensure_allocated()._buf for b in call_buffers(c)])
           for c in linear.src]

  def direct():
    for kernel, handles in calls: kernel.program(*handles)

  def eager():
    chain(n).realize()
    cpu.synchronize()

  compiled = compile_linear(linear)  # every address baked, as a JIT would

  def replayed():
    run_linear(compiled)
    cpu.synchronize()

  rows = [("direct call per kernel", median_time(direct, args.repeat)),
          ("eager realize (HCQ2)", median_time(eager, args.repeat)),
          ("replayed compiled LINEAR (HCQ2)", median_time(replayed, args.repeat))]
  print(f"{n} tiny kernels (16 floats each) on CPU")
  print(f"{'path':34s} {'total ms':>10s} {'us/kernel':>10s} {'vs direct':>10s}")
  for name, seconds in rows:
    print(f"{name:34s} {seconds * 1e3:10.2f} {seconds / n * 1e6:10.2f} {rows[0][1] / seconds:9.2f}x")


if __name__ == "__main__":
  main()
