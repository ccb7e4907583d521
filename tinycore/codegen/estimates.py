"""What a kernel does, estimated for the profiler: arithmetic operations counted on the kernel SINK.

Each ALU op counts once per iteration of the loops (RANGEs) it sits in; a REDUCE counts one combining op per
iteration of its value's loops, and the loops it closes do not multiply what uses its result. Index arithmetic
(what feeds an INDEX's offset or gate) is address computation, not work, and is left out. A loop of symbolic size
counts at its largest value. A sum that picks one element by an index (t[idx]: a one-hot compare over a range) is
counted as the gather the code generator makes of it (`codegen.optimize.gathers`), one read, not a compare per
element of the range.
"""
from __future__ import annotations
from tinycore.caches import BoundedCache
from tinycore.codegen.optimize import gathers
from tinycore.uop.pattern import graph_rewrite
from tinycore.uop.ops import GroupOp, Ops, UOp, prod

MAX_CACHED_ESTIMATES = 4096
estimates: BoundedCache[int] = BoundedCache("estimated ops by kernel", MAX_CACHED_ESTIMATES)


def loop_size(rng: UOp) -> int:
  """Iterations of a RANGE: its constant size, or the largest value of a symbolic one."""
  size = rng.src[0]
  return int(size.arg) if size.op is Ops.CONST else int(size.vmax)


def address_nodes(nodes: list[UOp]) -> set[UOp]:
  """The nodes that only compute addresses: everything feeding an INDEX's offset or gate."""
  address: set[UOp] = set()
  for node in nodes:
    if node.op is Ops.INDEX:
      for src in node.src[1:]: address.update(src.toposort())
  return address


def estimated_ops(kernel: UOp) -> int:
  """The arithmetic operations one run of the kernel SINK performs (see the module docstring); cached by kernel."""
  if (known := estimates.get(kernel)) is not None: return known
  nodes = list(graph_rewrite(kernel, gathers).toposort())
  address = address_nodes(nodes)
  open_loops: dict[UOp, frozenset[UOp]] = {}
  total = 0
  for node in nodes:
    inner = frozenset().union(*(open_loops[src] for src in node.src)) if node.src else frozenset()
    if node.op is Ops.RANGE: inner = inner | {node}
    if node.op is Ops.REDUCE:
      total += prod(loop_size(r) for r in inner)  # one combine per iteration, the reduced loops included
      inner = inner - set(node.src[1:])
    elif node.op in GroupOp.ALU and node not in address: total += prod(loop_size(r) for r in inner)
    open_loops[node] = inner
  return estimates.put(kernel, total)
