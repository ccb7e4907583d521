"""Codegen: kernel SINK -> optimized kernel (`optimize`) -> linear loop tree (`linearize`) -> source (a renderer:
`c_style`, `listing`). Compiling the source and loading it is the device layer's (`tinycore.device.kernels`).
"""
from __future__ import annotations
from tinycore.uop.ops import Ops, UOp
from tinycore.codegen.optimize import DEFAULT_TARGET, KernelTarget, optimize_kernel

__all__ = ["CodegenStats", "DEFAULT_TARGET", "KernelTarget", "kernel_name", "optimize_kernel"]


class CodegenStats:
  """How many kernels were rendered and compiled in this process (for tests and benchmarks)."""
  rendered = 0
  compiled = 0


def kernel_name(sink: UOp) -> str:
  ranges = sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  kind = "r" if any(u.op is Ops.REDUCE for u in sink.toposort()) else "E"
  sizes = [str(r.src[0].arg) for r in ranges if r.arg[1] != "part"]
  if parts := [r.src[0].arg for r in ranges if r.arg[1] == "part"]: sizes.append(str(sum(parts)))  # one loop, cut
  return f"{kind}_{'_'.join(sizes) or '1'}"
