"""TinyJit: run a function of tensors eagerly once, capture the kernels and copies its second call runs, and from
then on replay them with the new inputs (no Python graph work, no scheduling, no compiling).

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
      ...                               # tensor code; realize what must persist (an optimizer step does)
      return loss.realize()

The footguns are tinygrad's, and raise JitError where they can be detected: inputs are the Tensor arguments (other
arguments and tensors the function reads from elsewhere are baked in at capture, except bound Variables passed as
arguments, `fn(x, Variable("i", 1, 9).bind(3))`, whose new values each replay patches into its kernels); every call
must pass inputs of the captured shapes, dtypes and devices; the outputs must be Tensors (or a tuple/list of them,
or None), and the returned tensors share their buffers with the next call's outputs; reading tensor data (`item`,
`numpy`) inside the function would freeze those values into the replays. Random draws (`rand`, `dropout`) stay
random: each draw's counter is a Variable that every replay advances, so a jitted function draws exactly the numbers
its eager calls would. Inputs may have symbolic shapes (`x.reshape(3, Variable("i", 1, 9).bind(n))`): the
Variables' values come from the shapes, and a replay patches them (outputs of symbolic shape take the new values).
A view with fixed offsets and strides (`X[i:i+1]`, `x.T`, `x[::-1]`) is passed as a copy in its own buffer, so each
call reads the elements it names (a function that writes into such an input raises); an earlier call's output fed
back in (`f(f(x))`) is copied before the replay writes it. A TinyJit called inside another's capture, and a function
that runs no kernel, raise JitError, as tinygrad's.
"""
from __future__ import annotations
import functools
from typing import Any, Callable, Generic, TypeVar
from tinycore.device.buffers import buffer_of
from tinycore.engine.jit import JitError, ReplayPlan, captured_random_draws, capturing, is_capturing, random_draw_name
from tinycore.schedule.copies import has_buffer_identity
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.symbolic_shapes import has_symbolic_arg, shape_binds, substitute_with_args

ReturnType = TypeVar("ReturnType")
__all__ = ["TinyJit", "JitError"]


def _input_buffers(u: UOp) -> list[UOp]:
  """The BUFFERs an input tensor is: its buffer, or on a device tuple each lane's (None where one is not stored)."""
  if u.op is Ops.UNSHARD:  # a lane with pending stores (an AFTER) is not yet stored
    return [lane.buffer_uop if has_buffer_identity(lane) and lane.base.op is Ops.BUFFER else None
            for lane in u.src[0].src]
  # a view of a realized buffer (a symbolic reshape or shrink of one) computes nothing: the kernels read through it
  return [u.buffer_uop if has_buffer_identity(u) or u.base.op is Ops.BUFFER else None]


def _is_fixed_view(u: UOp) -> bool:
  """u reads a realized buffer through a view with fixed offsets and strides (a slice, a transpose, a flip): its
  kernels bake that view in, so another view of the same buffer must not replay them."""
  return u.op is not Ops.UNSHARD and not has_buffer_identity(u) and u.base.op is Ops.BUFFER and \
    not any(has_symbolic_arg(n) for n in u.toposort())


def _tensor_arguments(args: tuple, kwargs: dict) -> list[Tensor]:
  tensors = [a for a in args if isinstance(a, Tensor)] + [v for _, v in sorted(kwargs.items()) if isinstance(v, Tensor)]
  if len({id(t) for t in tensors}) != len(tensors): raise JitError("the same tensor is passed twice to a TinyJit")
  return tensors


def _realize_lazy(tensors: list[Tensor]) -> None:
  """Realize the inputs that are not yet stored (a lazy value, a view of pending stores)."""
  if lazy := [t for t in tensors if None in _input_buffers(t.uop)]: Tensor.realize(*lazy)


def _prepared_inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict, list[Tensor], set[int]]:
  """(args, kwargs, input tensors, ids of the inputs that are copies) for a capture or a replay. Inputs must be whole
  realized buffers, or views whose Variables a replay patches: a lazy input is realized; a fixed view of a buffer
  (`X[i:i+1]`, `x.T`, `x[::-1]`) is passed as a copy in its own buffer, so each call reads the elements it names."""
  tensors = _tensor_arguments(args, kwargs)
  _realize_lazy(tensors)
  copies = {id(t): t.clone() for t in tensors if _is_fixed_view(t.uop)}
  if copies:
    args = tuple(copies.get(id(a), a) if isinstance(a, Tensor) else a for a in args)
    kwargs = {k: copies.get(id(v), v) if isinstance(v, Tensor) else v for k, v in kwargs.items()}
    tensors = [copies.get(id(t), t) for t in tensors]
    Tensor.realize(*copies.values())
  return args, kwargs, tensors, {id(c) for c in copies.values()}


def _variable_values(args: tuple, kwargs: dict, inputs: list[Tensor] = ()) -> dict[str, int]:
  """The bound Variables among the arguments and in the symbolic shapes of the input tensors, by name: the values a
  replay patches into the kernels."""
  binds = [a for a in [*args, *kwargs.values()] if isinstance(a, UOp) and a.op is Ops.BIND]
  binds += shape_binds(n for t in inputs if t.uop.op is not Ops.BUFFER for n in t.uop.toposort())  # (a buffer: none)
  values: dict[str, int] = {}
  for bind in binds:
    var, value = bind.unbind()
    if values.setdefault(var.expr, value) != value:
      raise JitError(f"Variable {var.expr!r} is passed twice to a TinyJit with different values")
  return values


def _unbound_shape(shape: tuple) -> tuple:
  """A shape with each bound Variable in it replaced by the Variable: what must stay the same between calls."""
  return tuple(s.substitute({b: b.src[0] for b in s.toposort() if b.op is Ops.BIND}) if isinstance(s, UOp) else s
               for s in shape)


def _input_signature(t: Tensor) -> tuple:
  """What must stay the same for an input between calls: its shape with Variables unbound, dtype, device, and
  the view of its buffer it is (a view whose concrete sizes change would need other kernels)."""
  view = t.uop
  if view.op is not Ops.BUFFER and any(has_symbolic_arg(n) for n in view.toposort()):
    binds = shape_binds(view.toposort())
    view = substitute_with_args(view, {view.buffer_uop: UOp(Ops.NOOP)}, {b: b.src[0] for b in binds})
  else: view = None
  return _unbound_shape(t.shape), t.dtype, t.device, view


def _rebind_shapes(u: UOp, var_vals: dict[str, int]) -> UOp:
  """An output graph with the Variables in its symbolic shapes bound to this call's values."""
  binds = [b for b in shape_binds(u.toposort()) if b.expr in var_vals]
  return substitute_with_args(u, {}, {b: b.src[0].bind(var_vals[b.expr]) for b in binds}) if binds else u


def _output_tensors(ret: Any) -> list[Tensor]:
  if ret is None: return []
  items = list(ret) if isinstance(ret, (tuple, list)) else [ret]
  bad = [type(x).__name__ for x in items if not isinstance(x, Tensor)]
  if bad: raise JitError(f"a TinyJit function must return Tensors (or a tuple/list of them, or None), got {bad}: "
                         "other values would be frozen at capture")
  return items


def _realized(ret: Any) -> Any:
  """The first (eager) call's result with its tensors realized, as tinygrad's: otherwise their pending stores (an
  in-place update of a tensor the function closes over) would run again inside the capture, and every replay."""
  items = list(ret) if isinstance(ret, (tuple, list)) else [ret]
  if tensors := [x for x in items if isinstance(x, Tensor)]: Tensor.realize(*tensors)
  return ret


class TinyJit(Generic[ReturnType]):
  """Capture a function's kernels on its second call and replay them from the third on (the first call runs it
  normally: it compiles the kernels and initializes lazy state). `reset()` forgets the capture. With `prune=True`
  (also as `@TinyJit(prune=True)`), kernels whose results cannot change between calls (they read no input) run only
  at capture, as tinygrad's."""

  def __new__(cls, fxn: Callable[..., ReturnType] | None = None, *, prune: bool = False):
    if fxn is None: return functools.partial(cls, prune=prune)  # the decorator form, @TinyJit(prune=True)
    return super().__new__(cls)

  def __init__(self, fxn: Callable[..., ReturnType], *, prune: bool = False):
    self.fxn, self.prune = fxn, prune
    self.reset()

  def reset(self) -> None:
    self.calls, self.plan, self.random_draws = 0, None, []
    self.signature: list[tuple] = []
    self.variable_names: set[str] = set()
    self.outputs: list[Tensor] = []
    self.ret: Any = None

  def __get__(self, obj, objtype=None):  # a jitted method binds its instance, like a function does
    return self if obj is None else (lambda *args, **kwargs: self(obj, *args, **kwargs))

  def __call__(self, *args, **kwargs) -> ReturnType:
    if is_capturing():
      raise JitError(f"TinyJit {getattr(self.fxn, '__name__', self.fxn)!r} is called while another TinyJit captures: "
                     "a TinyJit inside a TinyJit is not supported (jit the outer function only)")
    if self.calls == 0:
      _realize_lazy(_tensor_arguments(args, kwargs))
      self.calls = 1
      return _realized(self.fxn(*args, **kwargs))
    args, kwargs, inputs, copied = _prepared_inputs(args, kwargs)
    if self.calls == 1:
      try: ret = self._capture(inputs, copied, args, kwargs)
      except Exception:
        self.plan = None  # nothing was captured: the next call tries again
        raise
      self.calls = 2
      return ret
    self.calls += 1
    return self._replay(inputs, _variable_values(args, kwargs, inputs))

  def _capture(self, inputs: list[Tensor], copied: set[int], args: tuple, kwargs: dict) -> ReturnType:
    input_uops = [b for t in inputs for b in _input_buffers(t.uop)]
    with capturing() as linears:
      ret = self.fxn(*args, **kwargs)
      self.outputs = _output_tensors(ret)
      if self.outputs: Tensor.realize(*self.outputs)
    if not linears:
      raise JitError(f"TinyJit {getattr(self.fxn, '__name__', self.fxn)!r} ran no kernel or copy: it didn't JIT "
                     "anything (a replay would return its inputs' old values); call the function without TinyJit")
    self.random_draws = captured_random_draws()
    self.plan = ReplayPlan(linears, input_uops, prune=self.prune)
    copied_uops = {b for t in inputs if id(t) in copied for b in _input_buffers(t.uop)}
    if written := [b for b in self.plan.written if b in copied_uops]:
      raise JitError(f"a TinyJit function writes into an input passed as a view of another tensor ({len(written)} "
                     "such input(s)): a replay would write a copy; pass the whole tensor and slice it inside")
    self.signature = [_input_signature(t) for t in inputs]
    self.variable_names = set(_variable_values(args, kwargs, inputs))
    self.output_uops = [t.uop for t in self.outputs]
    self.ret = ret
    return ret

  def _replay(self, inputs: list[Tensor], var_vals: dict[str, int]) -> ReturnType:
    signature = [_input_signature(t) for t in inputs]
    if signature != self.signature:
      raise JitError(f"TinyJit inputs changed: captured {self._describe(self.signature)}, got "
                     f"{self._describe(signature)}; jit a function per input shape (or reset())")
    if set(var_vals) != self.variable_names:
      raise JitError(f"TinyJit Variables changed: captured {sorted(self.variable_names)}, got {sorted(var_vals)}")
    # each random draw of the function starts where the counter is now: fresh numbers on every replay
    draws = {random_draw_name(i): Tensor._next_random_start(count) for i, count in enumerate(self.random_draws)}
    self.plan.run([self.plan.unaliased(buffer_of(b)) for t in inputs for b in _input_buffers(t.uop)], var_vals | draws)
    fresh = iter([Tensor(_rebind_shapes(u, var_vals) if var_vals else u) for u in self.output_uops])
    if isinstance(self.ret, (tuple, list)): return type(self.ret)(next(fresh) for _ in self.ret)
    return next(fresh) if self.outputs else None

  @staticmethod
  def _describe(signature: list[tuple]) -> str:
    return ", ".join(f"{shape} {dtype.name} on {device}" + (" (a symbolic view)" if view is not None else "")
                     for shape, dtype, device, view in signature) or "no tensors"
