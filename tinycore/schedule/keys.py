"""Graph keys: a realize's graph with its buffers and Python scalars replaced by numbered placeholders.

Two graphs with the same key are the same computation on other data (another batch, another learning rate): the
engine keeps one plan per key (`tinycore.engine.plan`) and runs it with each call's buffers and scalars. The key
holds the graph with its input buffers and its Python scalars replaced by numbered placeholders, each bound
Variable by its DEFINE_VAR, and each Variable of a symbolic shape by its placeholder (the graph's shape); the
`GraphKey.mapping` binds the placeholders back to this call's values.
"""
from __future__ import annotations
from tinycore.uop.ops import Ops, UOp, toposort_roots
from tinycore.uop.symbolic_shapes import (SYMBOLIC_ARG_OPS, is_shape_placeholder, shape_binds, shape_placeholder,
                                          substitute_with_args)
from tinycore.schedule.scalars import (STEERING_OPS, bound_variables, is_python_scalar, python_scalars,
                                      scalar_placeholder, steering_const)

MAX_PLACEHOLDERS = 4096


class GraphKey:
  """A graph's key: `graph` (SINK of the roots' key nodes) and `mapping` (each placeholder -> this call's buffer,
  scalar CONST or BIND); for a plain graph (no Variables, no symbolic shapes) also `real_of` (key node -> the graph
  node it stands for), so binding a plan's realized nodes needs no substitution."""
  __slots__ = ("graph", "mapping", "real_of", "symbolic")

  def __init__(self, graph: UOp, mapping: dict[UOp, UOp], real_of: dict[UOp, UOp] | None, symbolic: bool):
    self.graph, self.mapping, self.real_of, self.symbolic = graph, mapping, real_of, symbolic


def graph_key(roots: list[UOp]) -> GraphKey:
  """The key of the graph under `roots`, in one pass over its nodes for an eager op's plain graph."""
  return plain_key(roots) or general_key(roots)


def buffer_placeholder(i: int, buf: UOp) -> UOp:
  """Slot i standing in for `buf` in a cache key: same device, size and dtype; negative UNIQUE (never a real one)."""
  key = (i, buf.dtype, buf.src[1], buf.arg)
  if (hit := _placeholders.get(key)) is not None: return hit
  placeholder = UOp(Ops.BUFFER, buf.dtype, (UOp(Ops.UNIQUE, None, (), -(i + 1)), buf.src[1]), buf.arg)
  if len(_placeholders) >= MAX_PLACEHOLDERS: _placeholders.pop(next(iter(_placeholders)))
  _placeholders[key] = placeholder
  return placeholder


_placeholders: dict[tuple, UOp] = {}  # (slot, dtype, DEVICE, size) -> its placeholder (kept: eager ops reuse a few)


def general_key(roots: list[UOp]) -> GraphKey:
  """The key of any graph: placeholders for its buffers and scalars, each bound Variable's DEFINE_VAR, and a
  placeholder for each Variable of a symbolic shape (`bind_realized` puts their values back into the realized
  nodes' shapes)."""
  sink = UOp(Ops.SINK, None, tuple(roots))
  nodes = sink.toposort()
  inputs = [n for n in nodes if n.op is Ops.BUFFER]
  scalars = python_scalars(nodes)
  placeholders = [buffer_placeholder(i, b) for i, b in enumerate(inputs)]
  scalar_slots = [scalar_placeholder(i, c) for i, c in enumerate(scalars)]
  variables = bound_variables(nodes)  # a bound Variable's own DEFINE_VAR is its placeholder
  in_shapes = shape_binds(nodes)      # Variables in symbolic shapes: the key holds a placeholder for each
  if in_shapes: bound_variables([*variables, *in_shapes])  # one value per name
  key = substitute_with_args(sink, dict(zip(inputs, placeholders)) | dict(zip(scalars, scalar_slots)) |
                             {bind: bind.src[0] for bind in variables}, {b: shape_placeholder(b) for b in in_shapes})
  mapping = (dict(zip(placeholders, inputs)) | shape_values(in_shapes, nodes) | dict(zip(scalar_slots, scalars)) |
             {bind.src[0]: bind for bind in variables} | {shape_placeholder(b): b for b in in_shapes})
  return GraphKey(key, mapping, None, bool(in_shapes))


def plain_key(roots: list[UOp]) -> GraphKey | None:
  """The key of a graph without bound Variables and symbolic shapes (an eager op's), made in one pass over its
  nodes; None for any other graph (`general_key`)."""
  nodes = toposort_roots(roots)  # (no SINK of the real roots: it would be one more node made and dropped per call)
  keyed = key_graph(nodes, frozenset())
  if keyed is not None and keyed.steered:  # a divisor or shift count was taken for a scalar: key again, it a literal
    keyed = key_graph(nodes, frozenset(steering_const(n.src[1]) for n in nodes if n.op in STEERING_OPS))
  if keyed is None: return None
  key_of = keyed.key_of
  mapping = {key_of[b]: b for b in keyed.inputs} | {key_of[c]: c for c in keyed.scalars}
  return GraphKey(UOp(Ops.SINK, None, tuple([key_of[r] for r in roots])), mapping, keyed.real_of, False)


class KeyGraph:
  """A plain graph's cache key, node by node: `key_of` (graph node -> key node), `real_of` (the way back), the input
  buffers and Python scalars in graph order (their placeholders are numbered so), and `steered`: whether a constant
  taken for a scalar is a divisor or shift count after all (it must stay a literal: key the graph again; the pass
  stops there, its key unfinished)."""
  __slots__ = ("key_of", "real_of", "inputs", "scalars", "steered")

  def __init__(self) -> None:
    self.key_of: dict[UOp, UOp] = {}
    self.real_of: dict[UOp, UOp] = {}
    self.inputs: list[UOp] = []
    self.scalars: list[UOp] = []
    self.steered = False


def key_graph(nodes: dict[UOp, None], literals: frozenset[UOp]) -> KeyGraph | None:
  """The key of a graph (its nodes sources first) with input buffers and Python scalars (less `literals`) replaced
  by placeholders, as `general_key` makes it; None if the graph has a bound Variable or a symbolic shape."""
  keyed = KeyGraph()
  key_of, real_of, inputs, scalars = keyed.key_of, keyed.real_of, keyed.inputs, keyed.scalars
  # the ops compared per node, read once (an Ops member read costs ~0.1 us on Python 3.11: see uop.ops._infer_shape)
  buffer_op, const_op, bind_op = Ops.BUFFER, Ops.CONST, Ops.BIND
  for node in nodes:
    op = node.op
    if op is buffer_op:
      mapped = buffer_placeholder(len(inputs), node)
      inputs.append(node)
    elif op is const_op and node not in literals and is_python_scalar(node):
      mapped = scalar_placeholder(len(scalars), node)
      scalars.append(node)
    elif not node.src: mapped = node
    else:
      if op is bind_op or (op in SYMBOLIC_ARG_OPS and not _int_arg(node.arg)): return None
      if op in STEERING_OPS and (const := steering_const(node.src[1])).op is const_op and key_of[const] is not const:
        keyed.steered = True  # the caller keys again with the literals: the rest of this pass would be wasted
        return keyed
      src = node.src
      new_src = (key_of[src[0]],) if len(src) == 1 else tuple([key_of[s] for s in src])  # (most have one source)
      mapped = node if new_src == src else UOp(op, node.dtype, new_src, node.arg, node.tag)
    key_of[node] = mapped
    real_of[mapped] = node
  return keyed


def _int_arg(arg: object) -> bool:
  """An op's arg holds ints only (tuples of ints, or of pairs of ints): no symbolic shape entry in it."""
  if not isinstance(arg, tuple): return isinstance(arg, int)
  for a in arg:  # (a loop, not all() over a generator: this runs for every movement op of every eager realize)
    if type(a) is not int and (type(a) is not tuple or any(type(b) is not int for b in a)): return False
  return True


def shape_values(in_shapes: list[UOp], nodes: dict[UOp, None]) -> dict[UOp, UOp]:
  """The values of the Variables in symbolic shapes, by the placeholders a kernel's CALL passes for them: the
  Variable on each device of the graph."""
  if not in_shapes: return {}
  devices = [n for n in nodes if n.op is Ops.DEVICE]
  return {UOp(Ops.DEFINE_VAR, b.dtype, (d,), b.src[0].arg): b for b in in_shapes for d in devices}


def bind_realized(keys: UOp, values: UOp, mapping: dict[UOp, UOp]) -> tuple[UOp, UOp]:
  """SINK(realized nodes), SINK(their buffers) of a plan bound to one call: placeholders replaced, and the symbolic
  shapes of the realized nodes rebound to this call's Variable values (in their args)."""
  in_shapes = {k: v for k, v in mapping.items() if is_shape_placeholder(k)}
  if not in_shapes: return UOp(Ops.SINK, None, (keys, values)).substitute(mapping).src
  return substitute_with_args(UOp(Ops.SINK, None, (keys, values)), mapping, in_shapes).src
