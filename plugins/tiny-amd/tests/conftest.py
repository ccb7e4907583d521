"""Helpers for tiny-amd's tests: kernels collected from representative programs, run on the core's PYTHON device."""
from __future__ import annotations
import numpy as np
import pytest


def collect_kernels() -> list[tuple[str, object]]:
  """(name, kernel SINK) of every kernel a representative set of programs schedules: elementwise ops of every dtype,
  casts, reductions, matmul, softmax, integer division, shifts, where, gated (padded) loads, scalar parameters."""
  from tinycore import Device, Tensor, dtypes
  renderer = Device["PYTHON"].renderer
  found: dict[object, str] = {}
  original = type(renderer).render
  def capture(name, sink):
    found.setdefault(sink, name)
    return original(renderer, name, sink)
  renderer.render = capture
  try:
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 6)).astype(np.float32), device="PYTHON")
    i = Tensor(rng.integers(-50, 50, (4, 6)).astype(np.int32), device="PYTHON")
    programs = [
      (x + 1) * x - x / 3, x.exp2().log2().sin().sqrt(), x.sum(1), x.max(0), (x @ x.T), x.softmax(1),
      x.pad(((1, 1), (2, 0))), x.reshape(6, 4).permute(1, 0).contiguous(), (x < 0).where(x, -x), x * 0.5,
      i // 7, i % 3, i // (i + 51), i << 3, i >> 2, i.maximum(3), x.cast(dtypes.float16) * 3,
      x.cast(dtypes.bfloat16) + 1, x.cast(dtypes.float64).exp2(), x.cast(dtypes.int64) * 3, x.cast(dtypes.uint8),
      x.cast(dtypes.bool), i.cast(dtypes.float16), x.pow(2.5), i.pow(2), x.bitcast(dtypes.int32),
      Tensor.arange(10, device="PYTHON").cumsum(), x.cast(dtypes.float64).sin(),
    ]
    for p in programs: p.realize()
  finally:
    del renderer.render
  return [(name, sink) for sink, name in found.items()]


@pytest.fixture(scope="session")
def kernels() -> list[tuple[str, object]]:
  return collect_kernels()
