"""The spec checker: which UOps are valid at each stage, as UPat allow-lists.

Stages: "tensor" (the lazy graph a Tensor builds), "kernel" (a lowered kernel SINK) and "linear" (a schedule).
A node that matches no rule of its stage is an error naming the node. `TINYCORE_SPEC=1` checks between stages
(the test suites turn it on); otherwise `check_spec` is only called explicitly.
"""
from __future__ import annotations
import os
from typing import Callable
from tinycore.dtype import dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp, pretty
from tinycore.uop.pattern import UPat
from tinycore.uop.collective import is_valid_collective
from tinycore.uop.scalars import kernel_scalars

Predicate = Callable[..., bool]


class SpecError(AssertionError):
  pass


def _same_dtype_alu(x: UOp) -> bool:
  if x.op in GroupOp.Comparison: return x.dtype is dtypes.bool and x.src[0].dtype is x.src[1].dtype
  if x.op is Ops.WHERE: return x.src[0].dtype is dtypes.bool and x.src[1].dtype is x.dtype and x.src[2].dtype is x.dtype
  if x.op in (Ops.SHL, Ops.SHR): return x.src[0].dtype is x.dtype
  return all(s.dtype is x.dtype for s in x.src)


def _is_variable(x: UOp) -> bool:
  """A DEFINE_VAR names a scalar: arg (name, min, max) and a dtype."""
  return x.dtype is not None and isinstance(x.arg, tuple) and len(x.arg) == 3 and isinstance(x.arg[0], str)


def _call_arguments(call: UOp) -> bool:
  """A CALL's arguments are buffers, then (for a kernel) scalars: values (CONST, BIND) or placeholders (DEFINE_VAR)."""
  kinds = [0 if a.op in (Ops.BUFFER, Ops.BUFFER_VIEW) or _is_lane_stack(a)
           else 1 if a.op in (Ops.CONST, Ops.BIND, Ops.DEFINE_VAR) else 2 for a in call.src[1:]]
  if kinds != sorted(kinds) or 2 in kinds: return False
  if call.src[0].op is Ops.SINK: return kinds.count(1) == len(kernel_scalars(call.src[0]))  # one per parameter
  return 1 not in kinds or call.src[0].op is Ops.PROGRAM


def _is_lane_stack(a: UOp) -> bool:
  """A tuple CALL's buffer argument: one buffer (or view) per lane."""
  return a.op is Ops.MSTACK and all(s.op in (Ops.BUFFER, Ops.BUFFER_VIEW) for s in a.src)


def _stores_collective(store: UOp) -> bool:
  target, value = store.src
  return is_valid_collective(store.arg) and store.arg.shape == value.shape and \
    target.shape == store.arg.output_shape() and target.dtype is value.dtype


def _same_shapes(x: UOp) -> bool: return len({s.shape for s in x.src if s.shape is not None}) <= 1


_common: list[tuple[UPat, Predicate]] = [
  (UPat(Ops.DEVICE, name="x"), lambda x: isinstance(x.arg, (str, tuple)) and not x.src),
  (UPat(Ops.UNIQUE, name="x"), lambda x: isinstance(x.arg, int) and not x.src),
  (UPat(Ops.BUFFER, src=(UPat(Ops.UNIQUE), UPat(Ops.DEVICE)), name="x"),
   lambda x: isinstance(x.arg, int) and x.arg >= 0 and x.dtype is not None),
  (UPat(Ops.CAST, name="x"), lambda x: len(x.src) == 1 and x.dtype is not None),
  (UPat(Ops.BITCAST, name="x"), lambda x: len(x.src) == 1 and x.dtype is not None),
]

tensor_spec: list[tuple[UPat, Predicate]] = _common + [
  (UPat(Ops.CONST, name="x"), lambda x: x.dtype is not None and len(x.src) <= 1),
  # an arange's length: an int, or a symbolic size
  (UPat(Ops.ARANGE, src=(UPat(Ops.DEVICE),), name="x"),
   lambda x: isinstance(x.arg, UOp) or isinstance(x.arg, int) and x.arg >= 0),
  (UPat(Ops.DEFINE_VAR, src=(UPat(Ops.DEVICE),), name="x"), lambda x: _is_variable(x)),
  # a bound Variable: its value lies in its range
  (UPat(Ops.BIND, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST)), name="x"),
   lambda x: x.dtype is x.src[0].dtype and x.src[0].arg[1] <= x.src[1].arg <= x.src[0].arg[2]),
  (UPat(GroupOp.Movement, name="x"),
   lambda x: len(x.src) == 1 and isinstance(x.arg, tuple) and x.dtype is x.src[0].dtype),
  (UPat(GroupOp.ALU, name="x"), lambda x: _same_dtype_alu(x) and _same_shapes(x)),
  (UPat(Ops.REDUCE_AXIS, name="x"),
   lambda x: x.arg[0] in (Ops.ADD, Ops.MUL, Ops.MAX) and isinstance(x.arg[1], tuple) and x.dtype is x.src[0].dtype),
  (UPat((Ops.CONTIGUOUS, Ops.DETACH), name="x"), lambda x: len(x.src) == 1 and x.dtype is x.src[0].dtype),
  (UPat(Ops.COPY, name="x"), lambda x: len(x.src) == 1 and isinstance(x.arg, (str, tuple))),
  (UPat(Ops.COLLECTIVE, name="x"),
   lambda x: len(x.src) == 1 and is_valid_collective(x.arg) and x.arg.shape == x.src[0].shape),
  # a store; through a collective (arg) the target has the collective's output shape
  (UPat(Ops.STORE, name="x"), lambda x: len(x.src) == 2 and (x.src[0].shape == x.src[1].shape if x.arg is None else
                                                             _stores_collective(x))),
  (UPat(Ops.AFTER, name="x"),
   lambda x: x.src[0].base.op in (Ops.BUFFER, Ops.AFTER, Ops.UNSHARD) and all(s.op is Ops.STORE for s in x.src[1:])),
  # multi-device values: lanes stacked into a tuple value, one lane selected, the logical tensor, a collective
  (UPat(Ops.MSTACK, name="x"), lambda x: len(x.src) >= 1 and all(isinstance(s.device, str) for s in x.src)),
  (UPat(Ops.MSELECT, name="x"), lambda x: len(x.src) == 1 and isinstance(x.arg, int)),
  (UPat(Ops.UNSHARD, src=(UPat(Ops.MSTACK),), name="x"), lambda x: x.arg is None or isinstance(x.arg, int)),
  (UPat(Ops.ALLREDUCE, src=(UPat(Ops.MSTACK),), name="x"), lambda x: x.arg in (Ops.ADD, Ops.MUL, Ops.MAX)),
  (UPat(Ops.SINK), lambda: True),
]

kernel_spec: list[tuple[UPat, Predicate]] = _common + [
  (UPat(Ops.CONST, name="x"), lambda x: x.dtype is not None and not x.src),
  (UPat(Ops.PARAM, name="x"), lambda x: isinstance(x.arg, int) and x.dtype is not None),
  (UPat(Ops.DEFINE_VAR, src=(), name="x"), lambda x: _is_variable(x)),
  # a loop of a CONST size; a symbolic dim's loop also carries its bound (an index expression of Variables)
  (UPat(Ops.RANGE, name="x"), lambda x: x.dtype is dtypes.index and isinstance(x.arg, tuple) and
   x.arg[1] in ("loop", "reduce") and x.src[0].op is Ops.CONST and len(x.src) <= 2 and
   all(s.dtype is dtypes.index for s in x.src[1:])),
  (UPat(Ops.INDEX, name="x"), lambda x: x.src[0].op is Ops.PARAM and x.src[1].dtype is dtypes.index and
   (len(x.src) == 2 or (len(x.src) == 3 and x.src[2].dtype is dtypes.bool))),
  (UPat(Ops.LOAD, src=(UPat(Ops.INDEX),), name="x"), lambda x: x.dtype is x.src[0].dtype),
  (UPat(Ops.STORE, src=(UPat(Ops.INDEX), UPat()), name="x"), lambda x: x.src[1].dtype is x.src[0].dtype),
  (UPat(Ops.REDUCE, name="x"),
   lambda x: x.arg in (Ops.ADD, Ops.MUL, Ops.MAX) and all(r.op is Ops.RANGE for r in x.src[1:])),
  (UPat(GroupOp.ALU, name="x"), _same_dtype_alu),
  (UPat(Ops.SINK, name="x"), lambda x: all(s.op is Ops.STORE for s in x.src)),
]

linear_spec: list[tuple[UPat, Predicate]] = [
  (UPat(Ops.LINEAR, name="x"), lambda x: all(s.op is Ops.CALL for s in x.src)),
  (UPat(Ops.CALL, name="x"),
   lambda x: x.src[0].op in (Ops.SINK, Ops.COPY, Ops.COLLECTIVE, Ops.PROGRAM) and _call_arguments(x)),
]

SPECS = {"tensor": tensor_spec, "kernel": kernel_spec, "linear": linear_spec}


def check_spec(root: UOp, stage: str) -> None:
  """Raise SpecError for the first node under root that the stage's spec does not allow."""
  rules = SPECS[stage]
  nodes = [root] if stage == "linear" else root.toposort()
  if stage == "linear":
    nodes = [root, *root.src]
  for node in nodes:
    for pat, predicate in rules:
      bindings: dict[str, UOp] = {}
      if pat.match(node, bindings):
        if not predicate(**bindings):
          raise SpecError(f"invalid {node.op.name} in the {stage} graph:\n{pretty(node, 12)}")
        break
    else: raise SpecError(f"{node.op.name} is not allowed in the {stage} graph:\n{pretty(node, 12)}")
  if stage == "linear":
    for call in root.src:
      if call.src[0].op is Ops.SINK: check_spec(call.src[0], "kernel")


def spec_enabled() -> bool: return os.environ.get("TINYCORE_SPEC", "0") == "1"
