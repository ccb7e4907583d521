"""Symbolic shapes: a shape entry (or a shrink/pad bound, an arange length) may be a bound Variable or an integer
expression of bound Variables (`v`, `v + 1`, `v * 2`) instead of an int.

In the tensor graph such an entry is a device-less UOp expression over BINDs and sits in the movement op's `arg`
(it is not a source: shapes are not values). The schedule cache swaps each BIND in the args for its DEFINE_VAR, so
the key, the schedule and the compiled kernels are the same for every value, and lowering reads the value as a
kernel argument. A realized node of symbolic shape gets a buffer of its largest size (`max_int`).
"""
from __future__ import annotations
from typing import Any, Callable, Iterator
from tinycore.uop.ops import Ops, UOp, prod, simplify_size
from tinycore.uop.symbolic import exec_alu

# the tensor-level ops whose arg may hold symbolic entries
SYMBOLIC_ARG_OPS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.SHRINK, Ops.PAD, Ops.ARANGE})
_SHAPE_ALU = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.NEG, Ops.CAST})


def is_symbolic(x: Any) -> bool:
  """A shape entry that is an expression of Variables (a UOp), not an int."""
  return isinstance(x, UOp)


def arg_uops(arg: Any) -> Iterator[UOp]:
  """The UOps inside an arg (nested tuples of ints and UOps)."""
  if isinstance(arg, UOp): yield arg
  elif isinstance(arg, tuple):
    for a in arg: yield from arg_uops(a)


def map_arg(arg: Any, fn: Callable[[UOp], Any]) -> Any:
  """The arg with every UOp in it replaced by fn(uop)."""
  if isinstance(arg, UOp): return fn(arg)
  if isinstance(arg, tuple): return tuple(map_arg(a, fn) for a in arg)
  return arg


def has_symbolic_arg(u: UOp) -> bool:
  return u.op in SYMBOLIC_ARG_OPS and any(True for _ in arg_uops(u.arg))


def shape_binds(nodes: Any) -> list[UOp]:
  """The bound Variables (BINDs) in the symbolic args of these graph nodes, each once, in order."""
  found: dict[UOp, None] = {}
  for node in nodes:
    if node.op not in SYMBOLIC_ARG_OPS: continue
    for expr in arg_uops(node.arg):
      for leaf in expr.toposort():
        if leaf.op is Ops.BIND: found[leaf] = None
  return list(found)


def substitute_with_args(root: UOp, mapping: dict[UOp, UOp], arg_mapping: dict[UOp, UOp]) -> UOp:
  """root with the keys of `mapping` replaced in its graph (as `UOp.substitute`) and the keys of `arg_mapping`
  replaced inside the symbolic args of its nodes."""
  if not arg_mapping: return root.substitute(mapping)
  done: dict[UOp, UOp] = {}
  for node in root.toposort():
    if (mapped := mapping.get(node)) is not None:
      done[node] = mapped
      continue
    new_src = tuple(done[s] for s in node.src)
    new_arg = map_arg(node.arg, lambda e: e.substitute(arg_mapping)) if has_symbolic_arg(node) else node.arg
    same = new_src == node.src and new_arg is node.arg
    done[node] = node if same else UOp(node.op, node.dtype, new_src, new_arg, node.tag)
  return done[root]


def shape_placeholder(bind: UOp) -> UOp:
  """What stands for a bound Variable of a symbolic shape in a schedule cache key: its DEFINE_VAR under a NOOP
  marker (never a kernel parameter or a CALL argument, so binding a schedule rebinds only shapes with it)."""
  var = bind.src[0]
  return UOp(Ops.DEFINE_VAR, var.dtype, (UOp(Ops.NOOP),), var.arg)


def is_shape_placeholder(u: UOp) -> bool:
  return u.op is Ops.DEFINE_VAR and len(u.src) == 1 and u.src[0].op is Ops.NOOP


def evaluate(x: int | UOp) -> int:
  """The value of a shape entry with its Variables at their bound values."""
  if not isinstance(x, UOp): return x
  if x.op is Ops.CONST: return x.arg
  if x.op is Ops.BIND: return x.src[1].arg
  if x.op is Ops.DEFINE_VAR: raise ValueError(f"Variable {x.arg[0]!r} in a shape is not bound: use .bind(value)")
  if x.op not in _SHAPE_ALU: raise ValueError(f"{x.op} is not allowed in a symbolic shape")
  if x.op is Ops.CAST: return evaluate(x.src[0])
  return exec_alu(x.op, x.dtype, [evaluate(s) for s in x.src])


def evaluate_shape(shape: tuple) -> tuple[int, ...]:
  return tuple(evaluate(s) for s in shape)


def max_int(x: int | UOp) -> int:
  """The largest value a shape entry can take over its Variables' ranges."""
  return x if not isinstance(x, UOp) else int(x.vmax)


def min_int(x: int | UOp) -> int:
  return x if not isinstance(x, UOp) else int(x.vmin)


def max_numel(shape: tuple) -> int:
  """The most elements a tensor of this shape can hold (the size of a buffer for it)."""
  return prod(max_int(s) for s in shape)


def check_shape_expr(x: Any, what: str) -> None:
  """A symbolic shape entry must be an integer expression of bound Variables."""
  for leaf in x.toposort(gate=lambda n: n.op is not Ops.BIND):
    if leaf.op is Ops.BIND and leaf.src[0].src: raise ValueError(f"{what}: a Variable on a device is not a size")
    if leaf.op is Ops.DEFINE_VAR and not leaf.src:
      raise ValueError(f"{what}: Variable {leaf.arg[0]!r} is not bound: use .bind(value)")
    if leaf.op not in _SHAPE_ALU | {Ops.CONST, Ops.BIND, Ops.DEFINE_VAR} or leaf.src and leaf.src[0].op is Ops.DEVICE:
      raise ValueError(f"{what}: a symbolic size must be an int expression of bound Variables, got {leaf.op}")


def view_in_buffer(buf: UOp, shape: tuple) -> UOp:
  """The first elements of buffer `buf` seen in `shape` (row-major): a reshape, behind a shrink to the symbolic
  element count when the shape is symbolic (the buffer holds the largest size)."""
  if all(not isinstance(s, UOp) for s in shape): return buf if shape == (buf.arg,) else buf.reshape(shape)
  return buf.shrink(((0, simplify_size(prod(shape))),)).reshape(shape)
