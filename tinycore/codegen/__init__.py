"""Codegen: kernel SINK -> optimized kernel (`optimize`) -> linear loop tree (`linearize`) -> source (a renderer:
`c_style`, `listing`). Compiling the source and loading it is the device layer's (`tinycore.device.kernels`).
"""
from __future__ import annotations
from tinycore.uop.ops import Ops, UOp
from tinycore.codegen.linearize import piece_chains
from tinycore.codegen.optimize import DEFAULT_TARGET, KernelTarget, optimize_kernel

__all__ = ["CodegenStats", "DEFAULT_TARGET", "KernelTarget", "kernel_name", "optimize_kernel"]


class CodegenStats:
  """How many kernels were rendered and compiled in this process (for tests and benchmarks)."""
  rendered = 0
  compiled = 0


def kernel_name(sink: UOp) -> str:
  """`r_` (a reduction) or `E_` (elementwise) and the loop sizes in order; a loop cut into pieces counts whole."""
  nodes = sink.toposort()
  ranges = sorted((u for u in nodes if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  kind = "r" if any(u.op is Ops.REDUCE for u in nodes) else "E"
  sizes = [str(r.src[0].arg) for r in ranges if r.arg[1] != "part"]
  if chains := piece_chains(nodes):  # each cut loop's size: its pieces along the first store's chain add up
    for depth in range(len(chains[0])):
      siblings = {chain[depth] for chain in chains if len(chain) > depth and chain[:depth] == chains[0][:depth]}
      sizes.append(str(sum(r.src[0].arg for r in siblings)))
  return f"{kind}_{'_'.join(sizes) or '1'}"
