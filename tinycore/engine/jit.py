"""The engine side of TinyJit: capture the LINEARs a function's realizes run, and replay them with new inputs.

While `capturing()` is active, every realize also records the LINEAR it ran, bound to its real buffers. A
`ReplayPlan` joins the captured LINEARs into one, compiles it once (queue devices: one set of command batches in
which only the JIT's input buffers are patched per run; other devices: their kernels compiled up front) and runs it
again with new input Buffers: no scheduling, no graph rewriting, no compiling.
"""
from __future__ import annotations
import contextlib
from typing import Any, Iterator, Sequence
import tinycore.profiler as profiler
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.scalars import call_buffers, call_scalars, scalar_value, scalar_word

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


class ReplayStep:
  """One call of the plan: what runs it and its buffers, where `inputs[i]` marks the JIT's i-th input (as a
  (index, view) pair: view is None for the whole buffer, else (size, dtype, byte offset) of a BUFFER_VIEW)."""

  def __init__(self, call: UOp, input_slots: dict[UOp, int]):
    from tinycore.device.buffers import buffer_of
    from tinycore.hcq.runtime import call_is_hcq
    self.callee = call.src[0]
    self.kind = "batch" if call_is_hcq(call) else "copy" if self.callee.op is Ops.COPY else "kernel"
    self.buffers: list[Any] = []
    self.inputs: list[tuple[int, int, tuple | None]] = []   # (position, input index, view)
    for pos, b in enumerate(call_buffers(call)):
      base = b.src[0] if b.op is Ops.BUFFER_VIEW else b
      if base in input_slots:
        self.inputs.append((pos, input_slots[base], (b.arg[0], b.dtype, b.arg[1]) if b is not base else None))
        self.buffers.append(None)
      else: self.buffers.append(buffer_of(b))
    self.device = call.src[1].device
    # the kernels' scalar arguments are the values captured (a Python scalar in a jitted function is a constant),
    # except bound Variables (BINDs): each replay passes their values
    scalars = call_scalars(call)
    self.scalar_words = tuple(scalar_word(scalar_value(s), s.dtype) for s in scalars)
    self.variables = [(i, s.src[0].arg[0], s.dtype) for i, s in enumerate(scalars) if s.op is Ops.BIND]
    self.var_vals = self.callee.arg.scalar_values(scalars) if self.kind == "batch" else {}
    if self.kind == "kernel":
      from tinycore.device.kernels import compile_kernel
      self.kernel = compile_kernel(self.device, self.callee)

  def words(self, var_vals: dict[str, int]) -> tuple[int, ...]:
    """The scalar arguments' 64-bit words for a run with these Variable values (by name)."""
    if not self.variables: return self.scalar_words
    words = list(self.scalar_words)
    for i, name, dtype in self.variables:
      if name in var_vals: words[i] = scalar_word(var_vals[name], dtype)
    return tuple(words)

  def batch_values(self, var_vals: dict[str, int]) -> dict[str, int]:
    """A compiled batch's variable values (by its names) for a run with these Variable values."""
    if not self.variables: return self.var_vals
    return dict(zip(self.callee.arg.scalar_names, self.words(var_vals)))

  def bind(self, inputs: Sequence[Any]) -> list[Any]:
    buffers = list(self.buffers)
    for pos, index, view in self.inputs:
      buffers[pos] = inputs[index] if view is None else inputs[index].view(view[0], view[1], view[2])
    return buffers


def written_and_taken_buffers(call: UOp) -> tuple[list[UOp], list[UOp]]:
  """(the buffers a captured CALL writes, every buffer it takes): a copy writes its destination, a kernel the
  parameters its stores target."""
  buffers = list(call_buffers(call))
  if call.src[0].op is Ops.COPY: return buffers[:1], buffers
  slots = {p.arg for store in call.src[0].toposort() if store.op is Ops.STORE
           for p in store.src[0].toposort() if p.op is Ops.PARAM}
  return [buffers[i] for i in sorted(slots) if isinstance(i, int) and i < len(buffers)], buffers


def prune_onetime_calls(linear: UOp, input_uops: Sequence[UOp]) -> UOp:
  """TinyJit(prune=True): the captured calls without those whose results cannot change between replays (they take
  no input and no Variable, and no replayed call writes a buffer they read or write). They ran at capture; a replay
  keeps their results."""
  calls = list(linear.src)
  info = [written_and_taken_buffers(call) for call in calls]
  replayed = [any(s.op in (Ops.BIND, Ops.DEFINE_VAR) for s in call.src[1:]) or any(b in input_uops for b in bufs)
              for call, (_, bufs) in zip(calls, info)]
  changed = True
  while changed:  # a call that reads or writes a buffer some replayed call writes is replayed too
    written = {b for keep, (out, _) in zip(replayed, info) if keep for b in out}
    changed = False
    for i, (_, bufs) in enumerate(info):
      if not replayed[i] and any(b in written for b in bufs): replayed[i] = changed = True
  return UOp(Ops.LINEAR, None, tuple(call for call, keep in zip(calls, replayed) if keep))


class ReplayPlan:
  """The captured LINEARs as one compiled plan; `run(inputs)` replays it with these input Buffers. While profiling,
  a second compiled form with device timestamps around each command replays instead (made at its first use)."""

  def __init__(self, linears: Sequence[UOp], input_uops: Sequence[UOp], prune: bool = False):
    linear = UOp(Ops.LINEAR, None, tuple(call for lin in linears for call in lin.src))
    if prune: linear = prune_onetime_calls(linear, input_uops)
    self.linear, self.input_uops = linear, list(input_uops)
    self.compiled: dict[bool, list[ReplayStep]] = {}  # by profiling on/off
    self.steps = self.compiled_steps(profiler.enabled)
    self.kernel_count = sum(s.callee.arg.commands if s.kind == "batch" else 1 for s in self.steps)
    # the Variables the captured kernels take, by name: (min, max)
    self.variables = {s.src[0].arg[0]: s.src[0].arg[1:] for call in linear.src for s in call_scalars(call)
                      if s.op is Ops.BIND}

  def compiled_steps(self, profile: bool) -> list[ReplayStep]:
    """The plan's steps; queue devices' calls compiled once (with timestamps when `profile`), so only the input
    buffers' addresses are patched on each run."""
    if (steps := self.compiled.get(profile)) is not None: return steps
    from tinycore.hcq.runtime import compile_linear, uses_queues
    linear = self.linear
    if any(uses_queues(call) for call in linear.src):
      linear = compile_linear(linear, input_uops=self.input_uops, profile=profile)
    slots = {u: i for i, u in enumerate(self.input_uops)}
    steps = self.compiled[profile] = [ReplayStep(call, slots) for call in linear.src]
    return steps

  def run(self, inputs: Sequence[Any], var_vals: dict[str, int] | None = None) -> None:
    """Replay with these input Buffers and Variable values (by name; a Variable not given keeps its captured
    value)."""
    from tinycore.device.registry import Device
    from tinycore.device.copy import run_copy
    from tinycore.engine.realize import GlobalCounters
    from tinycore.hcq.device import is_hcq_device
    from tinycore.hcq.runtime import wait_for_queues
    var_vals = var_vals or {}
    for name, value in var_vals.items():
      if name not in self.variables: continue
      lo, hi = self.variables[name]
      if not lo <= value <= hi: raise ValueError(f"Variable {name!r} = {value} is outside its range [{lo}, {hi}]")
    written: dict[str, None] = {}
    for step in self.compiled_steps(profiler.enabled):
      buffers = step.bind(inputs)
      if step.kind == "batch":
        step.callee.arg.run(buffers, step.batch_values(var_vals))
        continue
      written[step.device] = None
      if profiler.enabled: self.run_timed_step(step, buffers, var_vals)
      elif step.kind == "copy":
        wait_for_queues()
        run_copy(buffers[0], buffers[1])
      else: step.kernel(*[b.ensure_allocated()._buf for b in buffers], vals=step.words(var_vals))
    for device in written:
      if not is_hcq_device(Device[device]): Device[device].synchronize()
    GlobalCounters.kernel_count += self.kernel_count

  @staticmethod
  def run_timed_step(step: ReplayStep, buffers: list[Any], var_vals: dict[str, int]) -> None:
    """A host-run copy or kernel of the plan while profiling: recorded with host times, as eager calls are."""
    from tinycore.engine.realize import timed_host_copy, timed_host_kernel
    from tinycore.hcq.runtime import wait_for_queues
    if step.kind == "copy":
      wait_for_queues()
      timed_host_copy(buffers[0], buffers[1])
    else: timed_host_kernel(step.kernel, step.callee, buffers, [b.ensure_allocated()._buf for b in buffers],
                            step.words(var_vals))
