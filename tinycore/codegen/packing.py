"""Operand panels packed into a kernel-local buffer, for renderers whose kernels have memory to spare (a CPU stack).

In a register-tiled reduction (matmul, conv) a load that does not depend on some loop around the reduce reads the
same values on every iteration of that loop, the panel's *reuse loop*: a matmul reads B's column panel once per row
block. When the panel is strided in memory (rows N floats apart, which alias in the caches' sets: a 1024-wide B
panel of 32 columns misses L2 on every pass) or gated (the padding masks of a conv), copying it once, just before
the reuse loop, into a small contiguous buffer makes every later read contiguous and unmasked. `find_panels` picks
such loads from a linearized kernel; the renderer writes the copy loop (`Panel.ranges` are its loops) and reads the
buffer instead of memory.
"""
from __future__ import annotations
from math import prod
import attrs
from tinycore.codegen.linearize import AccUpdate, LinearKernel, Loop
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.symbolic import affine_terms

# ops an address or gate may hold for the copy loop to recompute it (no loads: a gather is not a panel)
ADDRESS_OPS = GroupOp.ALU | {Ops.CONST, Ops.RANGE, Ops.DEFINE_VAR, Ops.CAST}
# a panel whose rows are at least this many elements apart is worth packing (below, rows share cache lines and
# pages, and the hardware prefetcher follows them)
MIN_ROW_STRIDE = 256


@attrs.frozen(eq=False)
class Panel:
  """`load` read from a local buffer filled just before the loop `reuse`: the buffer's dims are `ranges` (the loops
  between `reuse` and the load, outermost first, then the upcast ranges the load depends on); `outer` are the
  ranges of the loops around `reuse`, whose variables the copy loop may use as they are."""
  load: UOp
  reuse: Loop
  ranges: tuple[UOp, ...]
  outer: frozenset[UOp]

  @property
  def nbytes(self) -> int: return prod(r.src[0].arg for r in self.ranges) * self.load.dtype.itemsize


def find_panels(kernel: LinearKernel, budget_bytes: int) -> list[Panel]:
  """The loads of `kernel`'s unrolled (register-tile) blocks worth packing, all panels together at most
  `budget_bytes` (the renderer's buffers live on the stack of the thread running the kernel)."""
  found: list[Panel] = []
  if not kernel.upcast or budget_bytes <= 0: return found

  loads: list[tuple[UOp, list[Loop]]] = []
  written: set[UOp] = set()

  def visit(body: list, chain: list[Loop]) -> None:
    for item in body:
      if isinstance(item, Loop): visit(item.body, chain + [item])
      elif isinstance(item, AccUpdate): continue
      elif item.op is Ops.STORE: written.add(item.src[0].src[0])
      elif item.op is Ops.LOAD and item in kernel.vector: loads.append((item, chain))
  visit(kernel.body, [])
  for load, chain in loads:
    if load.src[0].src[0] in written: continue  # a copy taken early would miss the kernel's own stores
    if (panel := panel_of(load, chain, kernel.upcast)) is not None and panel.nbytes <= budget_bytes:
      found.append(panel)
      budget_bytes -= panel.nbytes
  return found


def panel_of(load: UOp, chain: list[Loop], upcast: list[UOp]) -> Panel | None:
  """The panel of `load` (inside the loops `chain`, outermost first), or None when it has no reuse loop, is not in a
  reduction, is not strided or gated, or its address cannot be recomputed."""
  index = load.src[0]
  address_nodes = [u for s in index.src[1:] for u in s.toposort()]
  if any(u.op not in ADDRESS_OPS for u in address_nodes): return None
  depends = {u for u in address_nodes if u.op is Ops.RANGE}
  inner = len(chain)
  while inner > 0 and chain[inner - 1].range in depends: inner -= 1
  if inner == 0 or inner == len(chain): return None  # read on every iteration of every loop, or of none inside
  # the copy goes before the outermost of the loops just outside the panel's own that the load does not use
  reuse = inner - 1
  while reuse > 0 and chain[reuse - 1].range not in depends: reuse -= 1
  loops = [loop.range for loop in chain[inner:]]
  # reused only if those loops run more than once together (a tile's one-iteration row-block loop, as a 7-wide
  # image's single block of 7 rows, sits inside the 7 image rows that reuse the panel)
  reuses = prod(loop.range.src[0].arg for loop in chain[reuse:inner])
  if not any(r.arg[1] == "reduce" for r in loops) or reuses < 2: return None
  if any(len(r.src) > 1 for r in loops): return None  # a symbolic bound: the buffer's size is not known
  coefficients, _ = affine_terms(index.src[1])
  # a tile's vector of columns read with a stride (a gather), rows far apart in the caches, or a padding mask
  columns = upcast[-1] if upcast else None
  gathered = columns in depends and coefficients.get(columns) != 1
  if not (gathered or len(index.src) > 2 or abs(coefficients.get(loops[-1], 0)) >= MIN_ROW_STRIDE): return None
  ranges = tuple(loops) + tuple(r for r in upcast if r in depends)
  return Panel(load, chain[reuse], ranges, frozenset(loop.range for loop in chain[:reuse]))
