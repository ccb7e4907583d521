"""Autograd over the UOp graph: the gradient of a node is built from the gradients of its users, as more UOps.

`compute_gradient(root, root_grad, targets)` walks the nodes between root and the targets from the root down and
applies one rule per op (`pm_gradient`: given the upstream gradient `ctx` and the node, the gradient of each source).
The result is an ordinary lazy tensor graph: it fuses and schedules like any other, and nothing runs until realized.
Stores: `AFTER(dest, STORE(view, value))` passes the upstream gradient to `value` seen through the view, and to
`dest` with the overwritten region zeroed (a whole-buffer store cuts `dest` off entirely).
"""
from __future__ import annotations
import math
from typing import Any
from tinycore.dtype import NARROW_FLOATS, dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.pattern import PatternMatcher, UPat


# ---------------------------------------------------------------------------- tensor-level UOp arithmetic
def full_like(like: UOp, value: Any, dtype=None) -> UOp:
  """A constant with like's shape and device (a tensor-level CONST expanded to the shape)."""
  const = UOp.const(dtype or like.dtype, value, like.device)
  shape = like.shape or ()
  return const.reshape((1,) * len(shape)).expand(shape) if shape else const


def _lift(x: UOp | Any, like: UOp) -> UOp: return x if isinstance(x, UOp) else full_like(like, x)
def _add(a: UOp, b: UOp | Any) -> UOp: return a.alu(Ops.ADD, _lift(b, a))
def _sub(a: UOp, b: UOp | Any) -> UOp: return a.alu(Ops.SUB, _lift(b, a))
def _mul(a: UOp, b: UOp | Any) -> UOp: return a.alu(Ops.MUL, _lift(b, a))
def _div(a: UOp, b: UOp | Any) -> UOp: return a.alu(Ops.FDIV, _lift(b, a))
def _neg(a: UOp) -> UOp: return a.alu(Ops.NEG)
def _eq(a: UOp, b: UOp | Any) -> UOp: return a.alu(Ops.CMPEQ, _lift(b, a))
def _lt(a: UOp, b: UOp | Any) -> UOp: return a.alu(Ops.CMPLT, _lift(b, a))
def _where(cond: UOp, a: UOp | Any, b: UOp | Any, like: UOp | None = None) -> UOp:
  ref = a if isinstance(a, UOp) else b if isinstance(b, UOp) else like
  return cond.alu(Ops.WHERE, _lift(a, ref), _lift(b, ref))
def _zeros(like: UOp) -> UOp: return full_like(like, 0)


def _reduce_sum(x: UOp, axes: tuple[int, ...]) -> UOp:
  """Sum over axes, keeping them as size 1; 16-bit floats accumulate in float32."""
  if not axes: return x
  acc = dtypes.float32 if x.dtype in NARROW_FLOATS else x.dtype
  return UOp(Ops.REDUCE_AXIS, acc, (x.cast(acc),), (Ops.ADD, axes)).cast(x.dtype)


def _argsort(order: tuple[int, ...]) -> tuple[int, ...]: return tuple(sorted(range(len(order)), key=order.__getitem__))


# ---------------------------------------------------------------------------- rules that need a few lines
def reduce_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  """Sum: the gradient is spread over the reduced axes. Max: split equally between the elements equal to the max.
  Product: the product of the others (ret / x where x != 0; the product of the other elements for a single zero)."""
  op, axes = ret.arg
  x = ret.src[0]
  spread = ctx.expand(x.shape)
  if op is Ops.ADD: return (spread,)
  if op is Ops.MAX:
    mask = _eq(x, ret.expand(x.shape)).cast(ctx.dtype)
    count = _reduce_sum(mask, axes)
    return (_mul(mask, _div(ctx, count).expand(x.shape)),)
  is_zero = _eq(x, 0)
  safe_x = _where(is_zero, 1, x)
  zeros = _reduce_sum(is_zero.cast(dtypes.int32), axes)
  others = UOp(Ops.REDUCE_AXIS, x.dtype, (safe_x,), (Ops.MUL, axes))
  one_zero = _where(_eq(zeros, 1), others, 0).expand(x.shape)
  return (_mul(spread, _where(is_zero, one_zero, _div(ret.expand(x.shape), safe_x))),)


def pow_gradient(ctx: UOp, ret: UOp, base: UOp, exponent: UOp) -> tuple[UOp, UOp]:
  """d(b**e)/db = e*b**(e-1) (0 where e == 0); d(b**e)/de = b**e*ln(b) (0 at b == 0 unless e < 0: -inf)."""
  d_base = _where(_eq(exponent, 0), 0, _mul(exponent, base.alu(Ops.POW, _sub(exponent, 1))))
  log_base = _mul(base.alu(Ops.LOG2), math.log(2))
  d_exp = _where(_eq(base, 0), _where(_lt(exponent, 0), -math.inf, 0, like=ret), _mul(ret, log_base))
  return (_mul(ctx, d_base), _mul(ctx, d_exp))


def max_gradient(ctx: UOp, x: UOp, y: UOp) -> tuple[UOp, UOp]:
  """The larger operand gets the gradient; a tie splits it in halves (as tinygrad)."""
  half = _where(_eq(x, y), _mul(ctx, 0.5), 0)
  return _where(_lt(y, x), ctx, half), _where(_lt(x, y), ctx, half)


def pad_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (ctx.shrink(tuple((b, b + s) for (b, _), s in zip(ret.arg, ret.src[0].shape))),)


def shrink_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (ctx.pad(tuple((b, s - e) for (b, e), s in zip(ret.arg, ret.src[0].shape))),)


def expand_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  src_shape = ret.src[0].shape
  return (_reduce_sum(ctx, tuple(i for i, (s, o) in enumerate(zip(src_shape, ret.shape)) if s != o)),)


def cast_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None]:
  # only float values carry gradients: a cast from or to integers or bools passes nothing on
  if not (dtypes.is_float(ret.src[0].dtype) and dtypes.is_float(ret.dtype)): return (None,)
  return (ctx.cast(ret.src[0].dtype),)


def copy_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  source_device = ret.src[0].device
  return (ctx if source_device == ctx.device else UOp(Ops.COPY, ctx.dtype, (ctx,), source_device),)


def collective_gradient(ctx: UOp, ret: UOp) -> tuple[UOp]:
  # an all_reduce sum sends every rank's input into every rank's output: its gradient is the sum of the ranks' ones
  arg = ret.arg
  if arg.reduce_op != "sum" or arg.kind == "broadcast":
    raise RuntimeError(f"no gradient through {arg.describe()}: only an all_reduce sum (or mean) has one")
  if arg.kind == "all_gather":  # a small all_reduce, gathered then summed over axis 0: every row's gradient is equal
    ctx = ctx.shrink(((0, 1), *((0, s) for s in arg.shape))).reshape(arg.shape)
  return (UOp(Ops.COLLECTIVE, ctx.dtype, (ctx,), arg._replace(kind="all_reduce")),)


VIEW_OPS = (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP)


def _view_chain(view: UOp, dest: UOp) -> list[UOp] | None:
  """The movement ops from `view` down to `dest` (outermost first), or None when view is not such a view of dest."""
  chain, node = [], view
  while node is not dest and node.op in VIEW_OPS:
    chain.append(node)
    node = node.src[0]
  return chain if node is dest else None


def _through_view(grad: UOp, chain: list[UOp]) -> UOp:
  """The part of dest's gradient the view selects: apply the view's movement ops to it, innermost first."""
  for mop in reversed(chain): grad = mop.replace(src=(grad,))
  return grad


def _back_through_view(grad: UOp, chain: list[UOp]) -> UOp:
  """A gradient in the view's shape pushed back to dest's shape (the view's region; zeros elsewhere)."""
  for mop in chain: grad = pm_gradient.rewrite(mop, ctx=grad)[0]
  return grad


def after_gradient(ctx: UOp, after: UOp) -> tuple[UOp | None, ...]:
  """AFTER(dest, STORE(view, value), ...): each value gets the upstream gradient seen through its view; dest gets
  the upstream gradient with every overwritten region zeroed. A store into another buffer leaves dest unchanged."""
  dest, stores = after.src[0], after.src[1:]
  store_grads: list[UOp | None] = []
  overwritten: UOp | None = None
  whole = False
  for store in stores:
    view = store.src[0]
    if view.buffer_uop is None or view.buffer_uop is not dest.buffer_uop:
      store_grads.append(None)  # this store writes another buffer: dest's value does not depend on it
      continue
    chain = _view_chain(view, dest)
    if chain is None:
      ops = sorted({n.op.name for n in view.toposort(gate=lambda n: n is not dest) if n is not dest})
      raise RuntimeError(f"no gradient through a store into a view made with {', '.join(ops)}: only reshape, shrink, "
                         "permute and flip views of the destination are differentiable")
    store_grads.append(_through_view(ctx, chain))
    whole = whole or all(mop.op is Ops.RESHAPE for mop in chain)
    region = _back_through_view(full_like(view, True, dtypes.bool), chain)
    overwritten = region if overwritten is None else overwritten.alu(Ops.OR, region)
  if overwritten is None: return (ctx, *store_grads)
  if whole: return (None, *store_grads)  # a store into the whole buffer: the old value is gone
  return (_where(overwritten, 0, ctx), *store_grads)


# ctx is the gradient flowing into the node; each rule returns one gradient (or None) per source
pm_gradient = PatternMatcher([
  # casts pass the gradient back in the source's dtype
  (UPat(Ops.CAST, name="ret"), cast_gradient),
  # d(1/x) = -1/x^2
  (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (_mul(_neg(ctx), _mul(ret, ret)),)),
  # d sin x = cos x = sin(pi/2 - x)
  (UPat(Ops.SIN, name="ret"),
   lambda ctx, ret: (_mul(ctx, _sub(full_like(ret.src[0], math.pi / 2), ret.src[0]).alu(Ops.SIN)),)),
  # d log2 x = 1 / (x ln 2)
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (_div(ctx, _mul(ret.src[0], math.log(2))),)),
  # d 2^x = 2^x ln 2
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (_mul(_mul(ctx, ret), math.log(2)),)),
  # d sqrt x = 1 / (2 sqrt x)
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (_div(ctx, _mul(ret, 2)),)),
  (UPat(Ops.NEG), lambda ctx: (_neg(ctx),)),
  # trunc is piecewise constant
  (UPat(Ops.TRUNC), lambda ctx: (_zeros(ctx),)),
  (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),
  (UPat(Ops.SUB), lambda ctx: (ctx, _neg(ctx))),
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (_mul(ctx, ret.src[1]), _mul(ctx, ret.src[0]))),
  # d(x/y) = 1/y dx - x/y^2 dy
  (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (_div(ctx, ret.src[1]), _neg(_div(_mul(ctx, ret), ret.src[1])))),
  (UPat(Ops.MULACC, name="ret"), lambda ctx, ret: (_mul(ctx, ret.src[1]), _mul(ctx, ret.src[0]), ctx)),
  (UPat(Ops.POW, src=(UPat.var("base"), UPat.var("exponent")), name="ret"), pow_gradient),
  (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), max_gradient),
  # comparisons, integer and bitwise ops are piecewise constant (or not differentiable at all)
  (UPat(GroupOp.Comparison | {Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}, name="ret"),
   lambda ret: (None,) * len(ret.src)),
  # where: the chosen side gets the gradient, the condition none
  (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (None, _where(ret.src[0], ctx, 0), _where(ret.src[0], 0, ctx))),
  (UPat(Ops.REDUCE_AXIS, name="ret"), reduce_gradient),
  (UPat(Ops.CONTIGUOUS), lambda ctx: (ctx,)),
  # movement ops: the inverse movement (a broadcast sums back)
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (ctx.reshape(ret.src[0].shape),)),
  (UPat(Ops.EXPAND, name="ret"), expand_gradient),
  (UPat(Ops.PAD, name="ret"), pad_gradient),
  (UPat(Ops.SHRINK, name="ret"), shrink_gradient),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(_argsort(ret.arg)),)),
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
  # a copy sends the gradient back to the source's device
  (UPat(Ops.COPY, name="ret"), copy_gradient),
  # a collective across processes: the same collective of the gradient (all_reduce sum only)
  (UPat(Ops.COLLECTIVE, name="ret"), collective_gradient),
  (UPat(Ops.AFTER, name="after"), after_gradient),
  # a store passes its gradient (already in the view's shape) to the stored value, none to the destination view
  (UPat(Ops.STORE), lambda ctx: (None, ctx)),
  # bit reinterpretation has no gradient
  (UPat(Ops.BITCAST), lambda: (None,)),
])


def after_as_value(after: UOp) -> UOp:
  """AFTER(dest, STORE(view, value), ...) as a pure expression: dest with each stored region replaced by its value
  (pushed back through the view). Stores into other buffers leave dest as it is. Unchanged when a view is not a
  reshape/shrink/permute/flip chain of dest."""
  dest, result = after.src[0], after.src[0]
  for store in after.src[1:]:
    view, value = store.src
    if view.buffer_uop is None or view.buffer_uop is not dest.buffer_uop: continue
    if (chain := _view_chain(view, dest)) is None: return after
    if all(mop.op is Ops.RESHAPE for mop in chain):
      result = _back_through_view(value, chain)
      continue
    region = _back_through_view(full_like(view, True, dtypes.bool), chain)
    result = _where(region, _back_through_view(value, chain), result)
  return result


def functional(root: UOp) -> UOp:
  """root with every AFTER replaced by the value it stands for (after_as_value). A backward graph built from an
  assign chain then reads no buffer versions: the forward values it needs are recomputed from their inputs, so
  one schedule can hold gradients that read several versions of one buffer."""
  nodes = root.toposort()
  if not any(node.op is Ops.AFTER for node in nodes): return root
  done: dict[UOp, UOp] = {}
  for node in nodes:
    if node.op is Ops.AFTER:
      # the stores are matched to dest on the original nodes, then the expression reads the rewritten ones
      done[node] = after_as_value(node).substitute({k: v for k, v in done.items() if k is not v})
      continue
    new_src = tuple(done[s] for s in node.src)
    done[node] = node if all(a is b for a, b in zip(new_src, node.src)) else node.replace(src=new_src)
  return done[root]


# storage and constants: the gradient stops here (a tensor on a device tuple is its lanes' storage)
LEAF_OPS = frozenset({Ops.BUFFER, Ops.BUFFER_VIEW, Ops.CONST, Ops.ARANGE, Ops.DEVICE, Ops.UNIQUE, Ops.UNSHARD})


def _target_path(root: UOp, targets: set[UOp]) -> list[UOp]:
  """The nodes under root that some target is under (or is), sources first; nothing flows through DETACH."""
  on_path: dict[UOp, bool] = {}
  for node in root.toposort():
    on_path[node] = node in targets or (node.op is not Ops.DETACH and any(on_path[s] for s in node.src))
  return [node for node, keep in on_path.items() if keep]


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """The gradient of root with respect to every node between it and the targets (root's gradient is root_grad)."""
  grads: dict[UOp, UOp] = {root: root_grad}
  for node in reversed(_target_path(root, targets)):
    if node not in grads or node.op in LEAF_OPS: continue
    source_grads = pm_gradient.rewrite(node, ctx=grads[node])
    if source_grads is None: raise RuntimeError(f"no gradient rule for {node.op.name}:\n{node!r}")
    for src, grad in zip(node.src, source_grads):
      if grad is None: continue
      if src.shape != grad.shape and src.shape is not None:
        raise RuntimeError(f"gradient of {node.op.name} has shape {grad.shape}, its source {src.shape}")
      grads[src] = _add(grads[src], grad) if src in grads else grad
  return grads
