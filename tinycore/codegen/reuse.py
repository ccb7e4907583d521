"""Values a reduction loop computes per element that a later sibling loop computes again, kept in a row buffer.

Softmax reads its row three times: a max loop, a sum loop over e = exp(x - max), and an output loop writing e / sum.
The graph holds e twice (once over the sum's range, once over the output's), so both loops compute the exp. When
two loops of one scope run over the same constant number of elements and the later one holds the earlier
reduction's value expression (or a costly part of it) with only the loop variable changed, the reduction loop can
write each element's value into a small buffer (a row of 1024 floats is 4 KB: it stays in L1) and the later loop
read it back: the same expression, computed once, so the results are bit for bit the same. `find_reused_values`
picks such values from a linearized kernel; a renderer declares the buffer, writes it beside the value and reads it
in place of the copy (`CStyleRenderer.scratch_bytes` turns this on).
"""
from __future__ import annotations
from typing import Callable
import attrs
from tinycore.codegen.linearize import AccUpdate, LinearKernel, Loop, value_sources
from tinycore.dtype import DType
from tinycore.uop.ops import Ops, UOp

# a shared expression is worth a buffer only if it holds one of these: writing the buffer costs a store per element,
# more than recomputing a subtraction or a product from a row already in L1 (a layernorm keeping x - mean took
# 0.82-0.88 ms with gcc instead of 0.66-0.80, and no less with clang, for (4096, 1024) on one core)
COSTLY_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.FDIV, Ops.RECIPROCAL})


@attrs.define(eq=False)
class ReusedValue:
  """`value`, computed in the reduction loop `source` for every value of its range, written to a row buffer there;
  each later sibling loop of `readers` reads it back in place of its own copy (the same expression over its range)."""
  value: UOp
  source: Loop
  readers: list[tuple[Loop, UOp]] = attrs.field(factory=list)

  @property
  def size(self) -> int: return self.source.range.src[0].arg


@attrs.frozen
class ReusePlan:
  """What a renderer does: the buffers (`values`), the copies read from them (`replaced`: node -> its buffer's
  value) and the nodes of the reading loops that nothing needs any more (`unused`: not written at all)."""
  values: list[ReusedValue]
  replaced: dict[UOp, ReusedValue]
  unused: frozenset[UOp]


def find_reused_values(kernel: LinearKernel, budget_bytes: int, element_bytes: Callable[[DType], int]) -> ReusePlan:
  """The reduction values of `kernel` worth keeping for a later sibling loop, their buffers together at most
  `budget_bytes` (`element_bytes(dtype)`: one element of a buffer, as the renderer declares it)."""
  if budget_bytes <= 0: return ReusePlan([], {}, frozenset())
  search = ReuseSearch(kernel, budget_bytes, element_bytes)
  search.visit(kernel.body)
  return ReusePlan(search.values, search.replaced, frozenset(search.unused))


class ReuseSearch:
  """Walks a kernel's loop tree; in each scope, pairs every flat loop with the earlier flat reduction loops over the
  same number of elements, earliest first, so that a loop's own copies are settled before it is a source."""

  def __init__(self, kernel: LinearKernel, budget_bytes: int, element_bytes: Callable[[DType], int]):
    self.kernel, self.budget, self.element_bytes = kernel, budget_bytes, element_bytes
    self.written = {item.src[0].src[0] for item in all_statements(kernel.body)
                    if isinstance(item, UOp) and item.op is Ops.STORE}
    self.values: list[ReusedValue] = []
    self.replaced: dict[UOp, ReusedValue] = {}
    self.unused: set[UOp] = set()

  def visit(self, body: list) -> None:
    loops = [item for item in body if isinstance(item, Loop)]
    for loop in loops:
      if not is_flat(loop, self.kernel): self.visit(loop.body)
    flat = [loop for loop in loops if is_flat(loop, self.kernel)]
    for j, reader in enumerate(flat):
      for source in flat[:j]:
        if source.range.src[0].arg == reader.range.src[0].arg: self.match(source, reader)
      self.unused.update(unneeded_nodes(reader, self.replaced))

  def match(self, source: Loop, reader: Loop) -> None:
    """Records the largest parts of `source`'s reduction values that `reader` computes again (and are worth it)."""
    in_reader = {item for item in reader.body if isinstance(item, UOp)}
    in_source = {item for item in source.body if isinstance(item, UOp)}
    swap = {source.range: reader.range}

    def search(node: UOp) -> None:
      if node not in in_source or node in self.replaced or node in self.unused: return  # not computed here
      copy = node.substitute(swap)
      if copy in in_reader and copy not in self.replaced and worth_keeping(node, in_source, self.written):
        if (reused := self.buffer_for(node, source)) is not None:
          reused.readers.append((reader, copy))
          self.replaced[copy] = reused
          return
      for s in value_sources(node): search(s)

    for update in source.body:
      if isinstance(update, AccUpdate): search(update.reduce.src[0])

  def buffer_for(self, node: UOp, source: Loop) -> ReusedValue | None:
    """node's buffer: the one it has, a new one if the budget allows, else None."""
    if (existing := next((v for v in self.values if v.value is node), None)) is not None: return existing
    nbytes = source.range.src[0].arg * self.element_bytes(node.dtype)
    if nbytes > self.budget: return None
    self.budget -= nbytes
    self.values.append(ReusedValue(node, source))
    return self.values[-1]


def all_statements(body: list) -> list:
  out: list = []
  for item in body: out.extend(all_statements(item.body) if isinstance(item, Loop) else [item])
  return out


def is_flat(loop: Loop, kernel: LinearKernel) -> bool:
  """An innermost loop over a constant range with no unrolled (vector) statements: one value per element."""
  return (len(loop.range.src) == 1 and not any(isinstance(item, Loop) for item in loop.body) and
          not any(isinstance(item, UOp) and item in kernel.vector for item in loop.body) and
          not any(isinstance(item, AccUpdate) and item.reduce in kernel.vector for item in loop.body))


def worth_keeping(node: UOp, per_element: set[UOp], written: set[UOp]) -> bool:
  """A value computing a costly op per element (of the nodes `per_element`, the source loop's; a costly op outside
  the loop runs once per row either way), reading no buffer the kernel also writes (a later loop reading it again
  could see new values)."""
  nodes = node.toposort()
  if not any(u.op in COSTLY_OPS and u in per_element for u in nodes): return False
  return not any(u.op is Ops.LOAD and u.src[0].src[0] in written for u in nodes)


def unneeded_nodes(loop: Loop, replaced: dict[UOp, ReusedValue]) -> set[UOp]:
  """The nodes of `loop` that only fed copies now read from a buffer (walking its statements from the last)."""
  needed: set[UOp] = {item.reduce.src[0] for item in loop.body if isinstance(item, AccUpdate)}
  unused: set[UOp] = set()
  for item in reversed(loop.body):
    if isinstance(item, AccUpdate) or item in replaced: continue
    if item.op is Ops.STORE or item in needed: needed.update(value_sources(item))
    else: unused.add(item)
  return unused

