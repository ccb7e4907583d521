"""The engine side of TinyJit: capture the LINEARs a function's realizes run, and replay them with new inputs.

While `capturing()` is active, every realize also records the LINEAR it ran, bound to its real buffers. A
`ReplayPlan` joins the captured LINEARs into one, compiles it once (queue devices: one set of command batches in
which only the JIT's input buffers are patched per run; other devices: their kernels compiled up front) and runs it
again with new input Buffers: no scheduling, no graph rewriting, no compiling.
"""
from __future__ import annotations
import contextlib
from typing import Any, Iterator, Sequence
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.scalars import call_buffers, call_scalars
from tinycore.device.buffer import Buffer
from tinycore.device.buffers import buffer_of
from tinycore.helpers import JITBEAM
from tinycore.engine.plan import Binding, RunPlan

_captured: list[list[UOp]] = []   # a stack: the LINEARs recorded by each active capture
_random_draws: list[list[int]] = []  # a stack: the sizes of the random draws made during each active capture
_last_random_draws: list[int] = []   # those of the capture that ended last


class JitError(RuntimeError):
  """A call that a captured TinyJit cannot replay faithfully."""


@contextlib.contextmanager
def capturing() -> Iterator[list[UOp]]:
  """Record the bound LINEAR of every realize in the block (appended to the yielded list, in run order)."""
  linears: list[UOp] = []
  _captured.append(linears)
  _random_draws.append([])
  try: yield linears
  finally:
    _captured.pop()
    _last_random_draws[:] = _random_draws.pop()


def is_capturing() -> bool: return bool(_captured)


def random_draw_name(index: int) -> str:
  """The Variable that carries the counter of a capture's index-th random draw into its kernels."""
  return f"rng_draw{index}"


def record_random_draw(count: int) -> str:
  """Called by a random draw of `count` numbers while capturing: its counter becomes a Variable (named by the
  returned name) that each replay sets to a fresh value, so replays draw new numbers."""
  _random_draws[-1].append(count)
  return random_draw_name(len(_random_draws[-1]) - 1)


def captured_random_draws() -> list[int]:
  """The sizes of the random draws of the capture that ended last, in draw order."""
  return list(_last_random_draws)


def record_linear(linear: UOp) -> None:
  """Called by realize with each LINEAR it runs (a no-op unless capturing)."""
  if _captured and linear.src: _captured[-1].append(linear)


def written_and_taken_buffers(call: UOp) -> tuple[list[UOp], list[UOp]]:
  """(the buffers a captured CALL writes, every buffer it takes): a copy or a collective writes its destination, a
  kernel the parameters its stores target."""
  buffers = list(call_buffers(call))
  if call.src[0].op in (Ops.COPY, Ops.COLLECTIVE): return buffers[:1], buffers
  slots = {p.arg for store in call.src[0].toposort() if store.op is Ops.STORE
           for p in store.src[0].toposort() if p.op is Ops.PARAM}
  return [buffers[i] for i in sorted(slots) if isinstance(i, int) and i < len(buffers)], buffers


def base_buffer(buf: UOp) -> UOp: return buf.src[0] if buf.op is Ops.BUFFER_VIEW else buf


def prune_onetime_calls(linear: UOp, input_uops: Sequence[UOp]) -> UOp:
  """TinyJit(prune=True): the captured calls without those whose results cannot change between replays (they take
  no input and no Variable, and no replayed call writes a buffer they read or write). They ran at capture; a replay
  keeps their results. A collective is always replayed: the other processes' values change."""
  calls = list(linear.src)
  # by base buffer: views of one buffer (the memory planner's arena) may share bytes
  info = [tuple([base_buffer(b) for b in bufs] for bufs in written_and_taken_buffers(call)) for call in calls]
  replayed = [any(s.op in (Ops.BIND, Ops.DEFINE_VAR) for s in call.src[1:]) or any(b in input_uops for b in bufs)
              or call.src[0].op is Ops.COLLECTIVE for call, (_, bufs) in zip(calls, info)]
  changed = True
  while changed:  # a call that reads or writes a buffer some replayed call writes is replayed too
    written = {b for keep, (out, _) in zip(replayed, info) if keep for b in out}
    changed = False
    for i, (_, bufs) in enumerate(info):
      if not replayed[i] and any(b in written for b in bufs): replayed[i] = changed = True
  return UOp(Ops.LINEAR, None, tuple(call for call, keep in zip(calls, replayed) if keep))


class ReplayPlan:
  """The captured LINEARs as one run plan (`tinycore.engine.plan.RunPlan`); `run(inputs)` replays it with these input
  Buffers. Queue batches take only the inputs' addresses at each run (every other address is written in when
  compiled), host kernels are compiled up front; while profiling, a second compiled form with device timestamps
  around each command replays instead (made at its first use)."""

  def __init__(self, linears: Sequence[UOp], input_uops: Sequence[UOp], prune: bool = False):
    linear = UOp(Ops.LINEAR, None, tuple(call for lin in linears for call in lin.src))
    if prune: linear = prune_onetime_calls(linear, input_uops)
    self.linear, self.input_uops = linear, list(input_uops)
    # JITBEAM=N searches the captured kernels (0: BEAM's setting decides)
    self.plan = RunPlan(linear, patched=self.input_uops, search_width=int(JITBEAM) or None)
    self.kernel_count = self.plan.kernel_count  # (compiles the plan now, at capture)
    # the buffers a replay writes, and those of them it does not take as inputs (outputs, intermediates)
    self.written = {base_buffer(b) for call in linear.src for b in written_and_taken_buffers(call)[0]}
    self._own_written = {id(buffer_of(b)) for b in self.written - set(self.input_uops)}
    # the Variables the captured kernels take, by name: (min, max)
    self.variables = {s.src[0].arg[0]: s.src[0].arg[1:] for call in linear.src for s in call_scalars(call)
                      if s.op is Ops.BIND}

  def unaliased(self, buffer: Any) -> Any:
    """An input Buffer to replay with: a copy of it when it is one of the buffers the replay itself writes (an
    earlier call's output fed back, `f(f(x))`), so no kernel reads the buffer it is writing."""
    if id(buffer.base) not in self._own_written: return buffer
    return Buffer(buffer.device, buffer.size, buffer.dtype).ensure_allocated().copy_from(buffer)

  def run(self, inputs: Sequence[Any], var_vals: dict[str, int] | None = None) -> None:
    """Replay with these input Buffers and Variable values (by name; a Variable not given keeps its captured
    value)."""
    var_vals = var_vals or {}
    for name, value in var_vals.items():
      if name not in self.variables: continue
      lo, hi = self.variables[name]
      if not lo <= value <= hi: raise ValueError(f"Variable {name!r} = {value} is outside its range [{lo}, {hi}]")
    self.plan.run(Binding(buffers=dict(zip(self.input_uops, inputs)), var_vals=var_vals))
