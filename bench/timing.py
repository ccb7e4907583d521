"""Timing shared by the bench scripts (run them from the repo root: `python bench/<name>.py`)."""
from __future__ import annotations
import statistics
import time
from typing import Callable


def median_time(fn: Callable[[], object], repeat: int, device: str | None = None) -> float:
  """Median wall time of fn over `repeat` runs after one warm-up (compiles, allocates), including waiting for
  `device` to finish when given (queue devices return before their kernels do)."""
  def run() -> None:
    fn()
    if device is not None:
      from tinycore.device.registry import Device
      Device[device].synchronize()
  run()
  samples = []
  for _ in range(repeat):
    start = time.perf_counter()
    run()
    samples.append(time.perf_counter() - start)
  return statistics.median(samples)
