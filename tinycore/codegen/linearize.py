"""Kernel graph -> nested loops: every node is placed in the innermost loop it depends on, and nothing deeper.

A node depending only on the outer loop is computed once per outer iteration (hoisting falls out of placement);
a REDUCE opens its own loops inside the loop of its deepest free range, with an accumulator declared just before.
"""
from __future__ import annotations
import heapq
from typing import Union
import attrs
from tinycore.uop.ops import Ops, UOp

INLINE_OPS = frozenset({Ops.CONST, Ops.PARAM, Ops.RANGE, Ops.INDEX, Ops.SINK})


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


def value_sources(node: UOp) -> list[UOp]:
  """node's sources, looking through INDEX (rendered inline where it is used) to the values it uses."""
  out = []
  for s in node.src:
    if s.op is Ops.INDEX: out.extend(value_sources(s))
    else: out.append(s)
  return out


def linearize(sink: UOp) -> LinearKernel:
  nodes = list(sink.toposort())
  position = {n: i for i, n in enumerate(nodes)}

  # the loops each node depends on (a REDUCE closes its own)
  free: dict[UOp, frozenset[UOp]] = {}
  for n in nodes:
    if n.op is Ops.RANGE: free[n] = frozenset({n})
    else:
      f = frozenset().union(*(free[s] for s in n.src))
      free[n] = f - frozenset(n.src[1:]) if n.op is Ops.REDUCE else f

  # upcast ranges are unrolled in place, not looped over: placement ignores them
  upcast = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "upcast"), key=lambda r: r.arg[0])
  vector = {n for n in nodes if n.op not in INLINE_OPS and free[n] & frozenset(upcast)}
  if upcast:
    free = {n: f - frozenset(upcast) for n, f in free.items()}

  # loop nesting: output loops in order, each reduce's loops inside the loop of its deepest free range
  parent: dict[UOp, UOp | None] = {}
  depth: dict[UOp | None, int] = {None: 0}
  outputs = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "loop"), key=lambda r: r.arg[0])
  previous: UOp | None = None
  for r in outputs:
    parent[r], depth[r], previous = previous, depth[previous] + 1, r

  def deepest(ranges: frozenset[UOp]) -> UOp | None:
    return max(ranges, key=lambda r: depth[r]) if ranges else None

  scope: dict[UOp, UOp | None] = {}
  for x in reversed(nodes):  # enclosing reduces come later in toposort, so they are placed first
    if x.op is not Ops.REDUCE: continue
    scope[x] = previous = deepest(free[x])
    for r in sorted(x.src[1:], key=lambda r: r.arg[0]):
      if r in parent: raise AssertionError(f"range {r.arg} belongs to two reduces")
      parent[r], depth[r], previous = previous, depth[previous] + 1, r
  for n in nodes:
    if n not in scope: scope[n] = deepest(free[n]) if n.op is not Ops.RANGE else parent.get(n)

  def chain(s: UOp | None) -> list[UOp | None]:
    out = [s]
    while s is not None:
      s = parent[s]
      out.append(s)
    return out
  ancestors = {r: chain(r) for r in parent} | {None: [None]}

  def item_in(s: UOp | None, n: UOp) -> UOp | None:
    """The item of scope s that contains node n: n itself, the child loop holding it, or None if n is outside."""
    if n.op in INLINE_OPS and n.op is not Ops.INDEX: return None
    if n.op is Ops.INDEX: return None  # rendered inline where it is used; its sources are the real dependencies
    line = ancestors[scope[n]]
    if scope[n] is s: return n
    if s not in line: return None
    return line[line.index(s) - 1]

  # group items per scope
  items: dict[UOp | None, list] = {None: []}
  for r in parent: items.setdefault(r, [])
  for r, p in parent.items(): items[p].append(r)
  updates: dict[UOp, AccUpdate] = {}
  for n in nodes:
    if n.op in INLINE_OPS: continue
    items[scope[n]].append(n)
    if n.op is Ops.REDUCE:
      innermost = max(n.src[1:], key=lambda r: depth[r])
      updates[n] = AccUpdate(n)
      items[innermost].append(updates[n])

  # every node inside a loop's subtree, for the loop's dependencies
  subtree_nodes: dict[UOp, list[UOp]] = {r: [] for r in parent}
  for n in nodes:
    if n.op in INLINE_OPS: continue
    for anc in ancestors[scope[n]]:
      if anc is not None: subtree_nodes[anc].append(n)
  for x, upd in updates.items():
    for anc in ancestors[max(x.src[1:], key=lambda r: depth[r])]:
      if anc is not None: subtree_nodes[anc].append(upd)  # type: ignore[arg-type]

  def build(s: UOp | None) -> list:
    entries = items[s]
    deps: dict[int, set[int]] = {}
    key_of = {id(e): i for i, e in enumerate(entries)}

    def dep_ids(users: list, exclude: object) -> set[int]:
      found = set()
      for user in users:
        srcs = [user.reduce.src[0]] if isinstance(user, AccUpdate) else value_sources(user)
        for src in srcs:
          it = item_in(s, src)
          if it is not None and it is not exclude and id(it) in key_of: found.add(key_of[id(it)])
      return found

    for i, e in enumerate(entries):
      if isinstance(e, AccUpdate): deps[i] = dep_ids([e], e)
      elif e.op is Ops.RANGE: deps[i] = dep_ids(subtree_nodes[e], e)
      else:
        deps[i] = dep_ids([e], e)
        if e.op is Ops.REDUCE:
          first = min(e.src[1:], key=lambda r: depth[r])
          deps[i].add(key_of[id(first)])
    # upcast (vector) statements go after the others when both are ready, so they group into few unrolled nests
    def is_vector(e) -> bool: return (e.reduce if isinstance(e, AccUpdate) else e) in vector
    order_key = [(is_vector(e), position[e.reduce] if isinstance(e, AccUpdate) else position[e]) for e in entries]
    indegree = {i: len(d) for i, d in deps.items()}
    users: dict[int, list[int]] = {i: [] for i in deps}
    for i, d in deps.items():
      for j in d: users[j].append(i)
    ready = [(order_key[i], i) for i, n in indegree.items() if n == 0]
    heapq.heapify(ready)
    out = []
    while ready:
      _, i = heapq.heappop(ready)
      e = entries[i]
      if not isinstance(e, AccUpdate) and e.op is Ops.RANGE:
        loop = Loop(e, build(e),
                    [x for x in scope if x.op is Ops.REDUCE and min(x.src[1:], key=lambda r: depth[r]) is e])
        out.append(loop)
      else: out.append(e)
      for j in users[i]:
        indegree[j] -= 1
        if indegree[j] == 0: heapq.heappush(ready, (order_key[j], j))
    if len(out) != len(entries): raise AssertionError("cycle while ordering a kernel's statements")
    return out

  params = sorted((n for n in nodes if n.op is Ops.PARAM), key=lambda p: p.arg)
  return LinearKernel(build(None), params, [n for n in nodes if n.op is Ops.RANGE], upcast, vector)
