"""The profiler's cost: an eager loop of small ops and a jitted training-like step, with profiling off and on.
Asserts nothing.

    python bench/bench_profiler.py [--device CPU] [--iterations 200] [--rounds 9]

Off and on alternate round by round (so machine noise hits both alike); each row is the minimum over rounds of the
mean time per iteration (on a shared machine the least noisy statistic), waiting for the device at the end of each
round. "on" includes recording every event and, on queue devices, the device timestamps around each kernel and
copy; the trace itself is built once per round (`tinycore.profiler.trace()`, which also reads back the timestamps)
and counted. To see what the hooks cost when
off, run this script once on this tree and once on a tree without the profiler and compare the "off" rows.

Measured on the shared 2-core CI machine (noisy; minimum over 9 rounds of 200 iterations, three alternating runs):
on CPU, off 192-202 us/it eager and 133-258 jitted vs 197-204 and 213-242 on the tree before the profiler (no
difference beyond the noise); on costs +11 to +17% eager (3 events/it) and +9 to +38% jitted (17 events/it). On
SIM: off 269 eager, 226 jitted (before: 259, 217); on +7% and +34%.
"""
from __future__ import annotations
import argparse
import time
from typing import Callable
import numpy as np


def eager_loop(device: str, iterations: int) -> Callable[[], None]:
  """x = relu(x * w + b) realized each iteration: one schedule-cache hit, one kernel per iteration."""
  from tinycore import Tensor
  rng = np.random.default_rng(0)
  w, b = (Tensor(rng.standard_normal(1024).astype(np.float32), device=device).realize() for _ in range(2))
  start = Tensor(rng.standard_normal(1024).astype(np.float32), device=device).realize()

  def run() -> None:
    x = start
    for _ in range(iterations): x = (x * w + b).relu().realize()
  return run


def jitted_step(device: str, iterations: int) -> Callable[[], None]:
  """A jitted step of a two-layer MLP's forward, backward and SGD update on a batch of 32."""
  from tinycore import Tensor, TinyJit, nn
  from tinycore.nn import optim
  from tinycore.nn.state import get_parameters
  Tensor.manual_seed(0)
  layers = [nn.Linear(64, 64), nn.Linear(64, 10)]
  for weight in get_parameters(layers): weight.replace(weight.to(device).realize())
  opt = optim.SGD(get_parameters(layers), lr=0.01)
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((32, 64)).astype(np.float32), device=device).realize()
  y = Tensor(rng.integers(0, 10, 32).astype(np.int32), device=device).realize()

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
    loss.backward()
    Tensor.realize(loss, *opt.schedule_step())
    return loss

  def run() -> None:
    with Tensor.train():
      for _ in range(iterations): step(x, y)
  return run


def profiler_module():
  """tinycore.profiler, or None on a tree without it (to time the same loops there)."""
  import tinycore
  if not hasattr(tinycore, "profile"): return None  # checked on the package: an editable install may lend the module
  from tinycore import profiler
  return profiler


def timed_round(run: Callable[[], None], device: str, iterations: int, profile: bool) -> float:
  """Mean seconds per iteration of one round, with the profiler on or off."""
  from tinycore import Device
  profiler = profiler_module()
  if profiler is not None: profiler.enable() if profile else profiler.disable()
  start = time.perf_counter()
  run()
  Device[device].synchronize()
  if profile and profiler is not None: profiler.trace()
  elapsed = time.perf_counter() - start
  if profiler is not None:
    profiler.disable()
    profiler.clear()
  return elapsed / iterations


def measure(name: str, run: Callable[[], None], device: str, iterations: int, rounds: int) -> None:
  profiler = profiler_module()
  variants = (False, True) if profiler is not None else (False,)
  for profile in variants: timed_round(run, device, iterations, profile)  # warm-up: compile both variants
  samples: dict[bool, list[float]] = {profile: [] for profile in variants}
  for _ in range(rounds):
    for profile in variants: samples[profile].append(timed_round(run, device, iterations, profile))
  off = min(samples[False])
  if profiler is None:
    print(f"{name:<28} {off * 1e6:10.1f} {'-':>10} {'-':>10} {'-':>10}")
    return
  on = min(samples[True])
  profiler.enable()
  run()
  events = sum(1 for e in profiler.trace()["traceEvents"] if e["ph"] == "X")
  profiler.disable()
  profiler.clear()
  print(f"{name:<28} {off * 1e6:10.1f} {on * 1e6:10.1f} {(on / off - 1) * 100:+9.1f}% {events / iterations:10.1f}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--device", default=None, help="device to run on (default: tinycore's default device)")
  parser.add_argument("--iterations", type=int, default=200)
  parser.add_argument("--rounds", type=int, default=9)
  args = parser.parse_args()
  import tinycore
  from tinycore import Device
  device = Device.canonicalize(args.device or Device.DEFAULT)
  print(f"tinycore from {tinycore.__file__}, device {device}, {args.iterations} iterations x {args.rounds} rounds")
  print(f"{'workload':<28} {'off us/it':>10} {'on us/it':>10} {'on cost':>10} {'events/it':>10}")
  measure("eager x=relu(x*w+b)", eager_loop(device, args.iterations), device, args.iterations, args.rounds)
  measure("jitted MLP train step", jitted_step(device, args.iterations), device, args.iterations, args.rounds)


if __name__ == "__main__":
  main()
