"""Python scalars are kernel arguments, so a new value (a learning rate per step) is not a new program.

The schedule cache keys a realize by its graph with the Python scalars in it replaced by numbered placeholders
(`scalar_placeholder`), as it does with input buffers; lowering turns each placeholder into a scalar parameter of
the kernel that reads it (`tinycore.uop.scalars`), and binding the cached schedule puts the value back in the CALL.
Values whose folding matters stay literals: 0, 1 and -1 (identities and sign flips the simplifier removes), inf
and nan (masks and reduction identities), bools, and integer divisors and shift counts (`x // 4` compiles to a
multiply and folds with index-like math; a shift count is checked when compiled). A kernel takes any number of
scalar arguments (devices pass what does not fit a fixed-size launch through an argument table).
"""
from __future__ import annotations
import math
from typing import Iterable
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.scalars import scalar_bounds


def is_python_scalar(u: UOp) -> bool:
  """A tensor-level constant that becomes a kernel argument: a number whose value does not steer simplification."""
  if u.op is not Ops.CONST or not u.src or not (dtypes.is_float(u.dtype) or dtypes.is_int(u.dtype)): return False
  value = u.arg
  return value not in (0, 1, -1) and not (isinstance(value, float) and not math.isfinite(value))


def python_scalars(nodes: Iterable[UOp]) -> list[UOp]:
  """The Python scalars of a tensor graph (its nodes in order), each once: the constants that become kernel
  arguments, less those used as divisors or shift counts."""
  nodes = list(nodes)
  steering = {steering_const(n.src[1]) for n in nodes if n.op in STEERING_OPS}
  return [n for n in nodes if is_python_scalar(n) and n not in steering]


def bound_variables(nodes: Iterable[UOp]) -> list[UOp]:
  """The bound Variables of a tensor graph (its BINDs; each Variable bound to one value): kernel arguments like the
  Python scalars, under their own names."""
  binds = [n for n in nodes if n.op is Ops.BIND]
  seen: dict[str, UOp] = {}
  for bind in binds:
    name, value = bind.src[0].arg[0], bind.src[1].arg
    if (other := seen.setdefault(name, bind)) is not bind and other.src[0].arg != bind.src[0].arg:
      raise ValueError(f"two Variables named {name!r} with different ranges: {other.src[0].arg[1:]} and "
                       f"{bind.src[0].arg[1:]}")
    if other.src[1].arg != value:
      raise ValueError(f"Variable {name!r} is bound to two values in one realize: {other.src[1].arg} and {value}")
  return binds


STEERING_OPS = frozenset({Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR})  # ops whose second operand is kept a literal


def steering_const(u: UOp) -> UOp:
  """The node under the reshapes, expands and casts that broadcast a scalar."""
  while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.CAST): u = u.src[0]
  return u


def scalar_placeholder(i: int, const: UOp) -> UOp:
  """Slot i standing in for a Python scalar in a cache key: DEFINE_VAR of its dtype on its device."""
  return UOp(Ops.DEFINE_VAR, const.dtype, const.src, (f"scalar{i}", *scalar_bounds(const.dtype)))


def kernel_parameter(placeholder: UOp) -> UOp:
  """The scalar parameter a kernel reads for a placeholder: the same DEFINE_VAR without its device."""
  return UOp(Ops.DEFINE_VAR, placeholder.dtype, (), placeholder.arg)
