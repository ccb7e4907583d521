"""Kernel graph -> nested loops: every node is placed in the innermost loop it depends on, and nothing deeper.

A node depending only on the outer loop is computed once per outer iteration (hoisting falls out of placement);
a REDUCE opens its own loops inside the loop of its deepest free range, with an accumulator declared just before.
"""
from __future__ import annotations
import heapq
from math import prod
from typing import Union
import attrs
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp

INLINE_OPS = frozenset({Ops.CONST, Ops.PARAM, Ops.RANGE, Ops.INDEX, Ops.SINK})
ADDRESS_OPS = frozenset({Ops.ADD, Ops.MUL, Ops.SHL, Ops.SUB})


@attrs.define
class AccUpdate:
  """`acc = acc OP value` for a REDUCE, placed in its innermost loop."""
  reduce: UOp


@attrs.define
class Loop:
  """`for (range = 0; range < size; range++) { body }`; `reduces` get their accumulators declared before it."""
  range: UOp
  body: list[Union[UOp, "Loop", AccUpdate]] = attrs.field(factory=list)
  reduces: list[UOp] = attrs.field(factory=list)


@attrs.define
class LinearKernel:
  """The loop tree of a kernel. `upcast` ranges are not loops of the tree: every node that depends on one (the
  `vector` nodes) is computed for all of its values at once, in a small fully unrolled loop nest."""
  body: list[Union[UOp, Loop, AccUpdate]]
  params: list[UOp]
  ranges: list[UOp]
  upcast: list[UOp] = attrs.field(factory=list)
  vector: set[UOp] = attrs.field(factory=set)

  pieces: list[tuple[UOp, ...]] = attrs.field(factory=list)

  def iterations(self) -> int | None:
    """How many times the innermost statements run in all (the pieces of cut loops add up); None if symbolic."""
    sizes = [r.src[0].arg for r in self.ranges if r.arg[1] != "part"]
    parts = [r.src[0].arg for r in self.ranges if r.arg[1] == "part"]
    if not all(isinstance(size, int) for size in sizes + parts): return None
    return prod(sizes) * (sum(prod(r.src[0].arg for r in chain) for chain in self.pieces) if self.pieces else 1)


def piece_chains(nodes: list[UOp]) -> list[tuple[UOp, ...]]:
  """Each store's part ranges (the pieces of cut loops it writes), outermost first (by id); none without pieces."""
  if not any(n.op is Ops.RANGE and n.arg[1] == "part" for n in nodes): return []
  chains = []
  for store in (n for n in nodes if n.op is Ops.STORE):
    parts = {u for u in store.toposort() if u.op is Ops.RANGE and u.arg[1] == "part"}
    chains.append(tuple(sorted(parts, key=lambda r: r.arg[0])))
  return chains


def value_sources(node: UOp) -> list[UOp]:
  """node's sources, looking through INDEX (rendered inline where it is used) to the values it uses."""
  out = []
  for s in node.src:
    if s.op is Ops.INDEX: out.extend(value_sources(s))
    else: out.append(s)
  return out


def linearize(sink: UOp) -> LinearKernel:
  """The kernel as a loop tree: which loops each node depends on, how the loops nest, then each loop's statements
  in dependency order."""
  nodes = list(sink.toposort())
  free = loop_dependencies(nodes)
  # upcast ranges are unrolled in place, not looped over: placement ignores them
  upcast = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "upcast"), key=lambda r: r.arg[0])
  vector = {n for n in nodes if n.op not in INLINE_OPS and free[n] & frozenset(upcast)}
  if upcast: free = {n: f - frozenset(upcast) for n, f in free.items()}
  nest = LoopNest(nodes, free)
  nest.sink_vector_addresses(nodes, vector)
  body = StatementOrder(nodes, nest, vector).build(None)
  params = sorted((n for n in nodes if n.op is Ops.PARAM), key=lambda p: p.arg)
  return LinearKernel(body, params, [n for n in nodes if n.op is Ops.RANGE], upcast, vector, piece_chains(nodes))


def loop_dependencies(nodes: list[UOp]) -> dict[UOp, frozenset[UOp]]:
  """The ranges each node depends on (a REDUCE closes its own), for nodes in toposort order."""
  free: dict[UOp, frozenset[UOp]] = {}
  for n in nodes:
    if n.op is Ops.RANGE: free[n] = frozenset({n})
    else:
      f = frozenset().union(*(free[s] for s in n.src))
      free[n] = f - frozenset(n.src[1:]) if n.op is Ops.REDUCE else f
  return free


class LoopNest:
  """How the loops nest and where each node goes: output loops in order, each reduce's loops inside the loop of its
  deepest free range. `parent` and `depth` per range, `scope` per node (the innermost loop it needs; None: none)."""

  def __init__(self, nodes: list[UOp], free: dict[UOp, frozenset[UOp]]):
    self.parent: dict[UOp, UOp | None] = {}
    self.depth: dict[UOp | None, int] = {None: 0}
    outputs = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "loop"), key=lambda r: r.arg[0])
    previous: UOp | None = None
    for r in outputs:
      self.parent[r], self.depth[r], previous = previous, self.depth[previous] + 1, r
    # the pieces of loops cut at their gates (codegen.optimize.split_at_gates): sibling loops inside the output loops,
    # each store's pieces nested in the order of their ids (a piece of the rows holds its pieces of the columns)
    for chain in piece_chains(nodes):
      parent = previous
      for r in chain:
        if r not in self.parent: self.parent[r], self.depth[r] = parent, self.depth[parent] + 1
        parent = r
    self.scope: dict[UOp, UOp | None] = {}
    for x in reversed(nodes):  # enclosing reduces come later in toposort, so they are placed first
      if x.op is not Ops.REDUCE: continue
      self.scope[x] = previous = self.deepest(free[x])
      for r in sorted(x.src[1:], key=lambda r: r.arg[0]):
        if r in self.parent: raise AssertionError(f"range {r.arg} belongs to two reduces")
        self.parent[r], self.depth[r], previous = previous, self.depth[previous] + 1, r
    for n in nodes:
      if n not in self.scope: self.scope[n] = self.deepest(free[n]) if n.op is not Ops.RANGE else self.parent.get(n)
    self.ancestors = {r: self.chain(r) for r in self.parent} | {None: [None]}

  def sink_vector_addresses(self, nodes: list[UOp], vector: set[UOp]) -> None:
    """Address arithmetic over the upcast ranges (`row * 256` of a tile) moves to the scope of its users when they
    share one: hoisted above them it would be a value of another block, kept in a per-lane array and read back as an
    indirect index in the hot loop (which compilers do not vectorize); at its use it is an affine expression that
    the C compiler hoists and strength-reduces itself."""
    users: dict[UOp, list[UOp]] = {}
    for n in nodes:
      for s in n.src: users.setdefault(s, []).append(n)
    for n in reversed(nodes):  # users first, so a chain of address arithmetic moves down together
      if n not in vector or n.op not in ADDRESS_OPS or n.dtype is None or not dtypes.is_int(n.dtype): continue
      # the statements using it (an INDEX is rendered inline in its loads and stores)
      using = [u for x in users.get(n, []) for u in (users.get(x, []) if x.op is Ops.INDEX else [x])]
      scopes = {self.scope[u] for u in using}
      if len(scopes) != 1 or (target := scopes.pop()) is self.scope[n]: continue  # (users in its own scope: stays)
      if self.scope[n] in self.ancestors[target]: self.scope[n] = target

  def deepest(self, ranges: frozenset[UOp]) -> UOp | None:
    return max(ranges, key=lambda r: self.depth[r]) if ranges else None

  def chain(self, s: UOp | None) -> list[UOp | None]:
    """s and the loops around it, innermost first, ending with None (the kernel's top level)."""
    out = [s]
    while s is not None:
      s = self.parent[s]
      out.append(s)
    return out

  def innermost(self, reduce: UOp) -> UOp:
    return max(reduce.src[1:], key=lambda r: self.depth[r])

  def outermost(self, reduce: UOp) -> UOp:
    return min(reduce.src[1:], key=lambda r: self.depth[r])

  def item_in(self, s: UOp | None, n: UOp) -> UOp | None:
    """The item of scope s that contains node n: n itself, the child loop holding it, or None if n is outside."""
    if n.op in INLINE_OPS: return None  # INDEX is rendered inline where it is used; its sources are the dependencies
    line = self.ancestors[self.scope[n]]
    if self.scope[n] is s: return n
    if s not in line: return None
    return line[line.index(s) - 1]


class StatementOrder:
  """Each scope's statements (nodes, child loops, accumulator updates), ordered so that every statement comes after
  what it uses; vector (upcast) statements go after the others when both are ready, so they group."""

  def __init__(self, nodes: list[UOp], nest: LoopNest, vector: set[UOp]):
    self.nest, self.vector = nest, vector
    self.position = {n: i for i, n in enumerate(nodes)}
    self.items: dict[UOp | None, list] = {None: []}
    for r in nest.parent: self.items.setdefault(r, [])
    for r, p in nest.parent.items(): self.items[p].append(r)
    self.updates: dict[UOp, AccUpdate] = {}
    for n in nodes:
      if n.op in INLINE_OPS: continue
      self.items[nest.scope[n]].append(n)
      if n.op is Ops.REDUCE:
        self.updates[n] = AccUpdate(n)
        self.items[nest.innermost(n)].append(self.updates[n])
    # every statement inside a loop's subtree, for the loop's dependencies
    self.subtree: dict[UOp, list] = {r: [] for r in nest.parent}
    for n in nodes:
      if n.op in INLINE_OPS: continue
      for anc in nest.ancestors[nest.scope[n]]:
        if anc is not None: self.subtree[anc].append(n)
    for x, update in self.updates.items():
      for anc in nest.ancestors[nest.innermost(x)]:
        if anc is not None: self.subtree[anc].append(update)
    # each loop and the loops inside it: a symbolic loop's bound (its second source) is computed before them
    self.ranges_under: dict[UOp, list] = {r: [q for q in nest.parent if r in nest.ancestors[q]] for r in nest.parent}
    self.reduces_before = {r: [x for x in nest.scope if x.op is Ops.REDUCE and nest.outermost(x) is r]
                           for r in nest.parent}

  def dependencies(self, s: UOp | None, entries: list) -> dict[int, set[int]]:
    """For each entry of scope s (by index), the entries of s it must come after."""
    key_of = {id(e): i for i, e in enumerate(entries)}

    def dep_ids(users: list, exclude: object) -> set[int]:
      found = set()
      for user in users:
        for src in ([user.reduce.src[0]] if isinstance(user, AccUpdate) else value_sources(user)):
          it = self.nest.item_in(s, src)
          if it is not None and it is not exclude and id(it) in key_of: found.add(key_of[id(it)])
      return found

    deps: dict[int, set[int]] = {}
    for i, e in enumerate(entries):
      if isinstance(e, AccUpdate): deps[i] = dep_ids([e], e)
      elif e.op is Ops.RANGE: deps[i] = dep_ids(self.subtree[e] + self.ranges_under[e], e)  # (their bounds)
      else:
        deps[i] = dep_ids([e], e)
        if e.op is Ops.REDUCE: deps[i].add(key_of[id(self.nest.outermost(e))])  # its loops open after it
    return deps

  def sort_key(self, e: Union[UOp, AccUpdate]) -> tuple[bool, int]:
    node = e.reduce if isinstance(e, AccUpdate) else e
    return (node in self.vector, self.position[node])

  def build(self, s: UOp | None) -> list:
    """Scope s's statements in order, child loops built recursively (a topological sort, earliest node first)."""
    entries = self.items[s]
    deps = self.dependencies(s, entries)
    indegree = {i: len(d) for i, d in deps.items()}
    users: dict[int, list[int]] = {i: [] for i in deps}
    for i, d in deps.items():
      for j in d: users[j].append(i)
    ready = [(self.sort_key(entries[i]), i) for i, n in indegree.items() if n == 0]
    heapq.heapify(ready)
    out: list = []
    while ready:
      _, i = heapq.heappop(ready)
      e = entries[i]
      if not isinstance(e, AccUpdate) and e.op is Ops.RANGE: out.append(Loop(e, self.build(e), self.reduces_before[e]))
      else: out.append(e)
      for j in users[i]:
        indegree[j] -= 1
        if indegree[j] == 0: heapq.heappush(ready, (self.sort_key(entries[j]), j))
    if len(out) != len(entries): raise AssertionError("cycle while ordering a kernel's statements")
    return out
