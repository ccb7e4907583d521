"""Pattern matching over UOps and `graph_rewrite`, the one mechanism nearly every pass is written in.

A pass is a `PatternMatcher([(UPat(...), fn), ...])`: when a node matches a pattern, `fn(**bindings)` (plus
`ctx=` when it takes one) returns its replacement, or None to leave it. `graph_rewrite` applies the rules bottom-up
until nothing changes.
"""
from __future__ import annotations
import inspect
import itertools
import math
from typing import Any, Callable, Iterable
from tinycore.dtype import DType
from tinycore.uop.ops import Ops, UOp
from tinycore.uop import capture


class UPat:
  """A pattern. op: an Ops, a set of them, or None for any. src: None (any sources), a tuple (matched in order) or a
  list (any order: for commutative ops). name: bind the matched node under this name. arg/dtype: exact constraints.
  `allow_any_len`: the tuple matches a prefix of the sources."""
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "allow_any_len", "custom")

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False, custom: Callable[[UOp], bool] | None = None):
    self.ops = None if op is None else frozenset([op]) if isinstance(op, Ops) else frozenset(op)
    self.dtypes = None if dtype is None else frozenset([dtype]) if isinstance(dtype, DType) else frozenset(dtype)
    self.src = (src,) if isinstance(src, UPat) else src
    self.arg, self.name, self.allow_any_len, self.custom = arg, name, allow_any_len, custom

  @staticmethod
  def var(name: str | None = None, dtype=None) -> UPat: return UPat(None, dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype=None) -> UPat: return UPat(Ops.CONST, dtype, name=name)
  @staticmethod
  def const(value: Any, dtype=None) -> UPat: return UPat(Ops.CONST, dtype, arg=value)

  def match(self, node: UOp, bindings: dict[str, UOp]) -> bool:
    if self.ops is not None and node.op not in self.ops: return False
    if self.dtypes is not None and node.dtype not in self.dtypes: return False
    if self.arg is not None and not same_arg(node.arg, self.arg): return False
    if self.name is not None:
      if (bound := bindings.get(self.name)) is not None and bound is not node: return False
    if self.custom is not None and not self.custom(node): return False
    if self.src is not None:
      if isinstance(self.src, list):
        if len(self.src) != len(node.src): return False
        for order in itertools.permutations(node.src):
          trial = dict(bindings)
          if all(p.match(s, trial) for p, s in zip(self.src, order)):
            bindings.update(trial)
            break
        else: return False
      else:
        if len(self.src) != len(node.src) and not (self.allow_any_len and len(node.src) >= len(self.src)): return False
        for p, s in zip(self.src, node.src):
          if not p.match(s, bindings): return False
    if self.name is not None: bindings[self.name] = node
    return True

  def __repr__(self) -> str:
    ops = "any" if self.ops is None else "|".join(sorted(o.name for o in self.ops))
    return f"UPat({ops}{', name=' + self.name if self.name else ''})"


def same_arg(a: Any, b: Any) -> bool:
  """Whether two args are the same value of the same kind: a constant pattern for True does not match the int 1,
  0 does not match 0.0, +0.0 does not match -0.0 (x + -0.0 is x but x + 0.0 is not), and NaN matches NaN."""
  if isinstance(a, (bool, int, float)) or isinstance(b, (bool, int, float)):
    if type(a) is not type(b): return False
    if isinstance(a, float):
      if math.isnan(a) or math.isnan(b): return math.isnan(a) and math.isnan(b)
      return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
  return a == b


Rule = tuple[UPat, Callable[..., UOp | None]]


class PatternMatcher:
  """An ordered list of rules, indexed by op; the first rule that returns a node wins."""

  def __init__(self, rules: list[Rule]):
    self.rules = rules
    # each entry carries its rule's position, so the list order wins even when one function serves two rules
    positioned: dict[Ops, list[tuple[int, UPat, Callable, bool]]] = {}
    any_op: list[tuple[int, UPat, Callable, bool]] = []
    for position, (pat, fn) in enumerate(rules):
      entry = (position, pat, fn, "ctx" in inspect.signature(fn).parameters)
      if pat.ops is None: any_op.append(entry)
      else:
        for op in pat.ops: positioned.setdefault(op, []).append(entry)
    # a node that matches both an op rule and an any-op rule tries them in list order
    self.by_op: dict[Ops, list[tuple[UPat, Callable, bool]]] = {
      op: [entry[1:] for entry in sorted(positioned.get(op, []) + any_op, key=lambda e: e[0])] for op in Ops}

  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)

  def rewrite(self, node: UOp, ctx: Any = None) -> UOp | None:
    for pat, fn, wants_ctx in self.by_op[node.op]:
      bindings: dict[str, UOp] = {}
      if pat.match(node, bindings):
        result = fn(ctx=ctx, **bindings) if wants_ctx else fn(**bindings)
        if result is not None and result is not node: return result
    return None


def graph_rewrite(root: UOp, matcher: PatternMatcher, ctx: Any = None) -> UOp:
  """Rewrite `root` bottom-up with `matcher` until no rule applies (iteratively: deep graphs don't recurse)."""
  return graph_rewrite_map(root, matcher, ctx)[root]


class RecordingMatcher:
  """A PatternMatcher's rules, tried as `PatternMatcher.rewrite` does, noting the function of every rule that fires
  (used only while a capture listener watches, so the plain path stays as fast as it was)."""

  def __init__(self, matcher: PatternMatcher):
    self.matcher, self.fired = matcher, []

  def rewrite(self, node: UOp, ctx: Any = None) -> UOp | None:
    for pat, fn, wants_ctx in self.matcher.by_op[node.op]:
      bindings: dict[str, UOp] = {}
      if pat.match(node, bindings):
        result = fn(ctx=ctx, **bindings) if wants_ctx else fn(**bindings)
        if result is not None and result is not node:
          self.fired.append(fn)
          return result
    return None


def graph_rewrite_map(root: UOp, matcher: PatternMatcher, ctx: Any = None) -> dict[UOp, UOp]:
  """`graph_rewrite`, returning what every node under root became."""
  if capture.listener is None: return rewrite_bottom_up(root, matcher, ctx)
  recorder = RecordingMatcher(matcher)
  done = rewrite_bottom_up(root, recorder, ctx)
  if capture.listener is not None: capture.listener.rewrite(matcher, root, done[root], recorder.fired)
  return done


def rewrite_bottom_up(root: UOp, matcher: PatternMatcher | RecordingMatcher, ctx: Any = None) -> dict[UOp, UOp]:
  """The rewrite loop of `graph_rewrite_map`: each node after its sources, each replacement rewritten in turn."""
  done: dict[UOp, UOp] = {}
  stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
  while stack:
    node, stage, pending = stack.pop()
    if stage == 0:
      if node in done: continue
      stack.append((node, 1, None))
      stack.extend((s, 0, None) for s in reversed(node.src) if s not in done)
    elif stage == 1:
      if node in done: continue
      new_src = tuple(done[s] for s in node.src)
      current = node if all(a is b for a, b in zip(new_src, node.src)) else node.replace(src=new_src)
      result = matcher.rewrite(current, ctx)
      if result is None: done[node] = current
      elif result in done: done[node] = done[result]
      else:
        stack.append((node, 2, result))
        stack.append((result, 0, None))
    else:  # the replacement has been rewritten: node maps to what it became
      done[node] = done[pending]
  return done
