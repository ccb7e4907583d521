"""What VIZ remembers of a run: every realized schedule, every kernel's graph after each pass, its source.

`VizRecorder` is the capture listener (`tinycore.uop.capture`) VIZ registers. Each step it keeps links a graph to
the graph it came from (`Step.before -> Step.after`); since UOps are hash-consed, a kernel's history is found by
walking back from its final graph through the steps that produced it. Memory is bounded: at most `MAX_STEPS` steps,
`MAX_KERNELS` rendered kernels and `MAX_REALIZES` distinct schedules are kept (what does not fit is counted, not
stored), and a schedule that runs again (each step of a training loop) is one entry with a count.
"""
from __future__ import annotations
import sys
import threading
from typing import Any, Callable
import attrs
from tinycore.uop.ops import Ops, UOp
from tinycore.viz.naming import matcher_name, rule_name

MAX_STEPS = 4000
MAX_REALIZES = 1000
MAX_KERNELS = 4096  # rendered sources kept
# frames of these modules are the rewrite machinery, not the pass that asked for a rewrite
MACHINERY_MODULES = ("tinycore.uop.pattern", "tinycore.uop.capture", "tinycore.viz.recorder")


@attrs.define
class Step:
  """One pass over one graph: `name` turned `before` into `after`; `rules` are the rules that fired, in the order
  they first fired, with how many times each did."""
  name: str
  before: UOp
  after: UOp
  rules: list[tuple[str, int]] = attrs.field(factory=list)


@attrs.define
class RenderedKernel:
  """A kernel as its device compiled it: the optimized graph, the kernel's name and rendered source."""
  device: str
  optimized: UOp
  name: str
  source: str


@attrs.define
class ScheduleRun:
  """A realized LINEAR and how many realizes ran it (the schedule cache hands out the same one each time)."""
  linear: UOp
  count: int = 1


class VizRecorder:
  """The capture listener: keeps steps, rendered kernels and schedules, bounded (see the module docstring)."""

  def __init__(self, max_steps: int = MAX_STEPS, max_realizes: int = MAX_REALIZES, max_kernels: int = MAX_KERNELS):
    self.lock = threading.Lock()
    self.max_steps, self.max_realizes, self.max_kernels = max_steps, max_realizes, max_kernels
    self.steps_by_after: dict[UOp, Step] = {}
    self.dropped_steps = 0
    self.rendered: dict[UOp, RenderedKernel] = {}
    self.dropped_kernels = 0
    self.schedules: list[ScheduleRun] = []  # in the order each first ran
    self.schedules_by_linear: dict[UOp, ScheduleRun] = {}
    self.dropped_realizes = 0

  # ---------------------------------------------------------------------------- the capture listener's calls
  def rewrite(self, matcher: Any, before: UOp, after: UOp, fired: list[Callable]) -> None:
    # whole graphs only (kernels and tensor graphs are SINKs): not the index expressions passes simplify on the side
    if after is before or before.op is not Ops.SINK: return
    name = f"{matcher_name(matcher)} ({calling_pass()})"
    self.add_step(Step(name, before, after, count_rules(fired)))

  def graph_pass(self, name: str, before: UOp, after: UOp) -> None:
    self.add_step(Step(name, before, after))

  def kernel_rendered(self, device: str, kernel: UOp, optimized: UOp, name: str, source: str) -> None:
    with self.lock:
      if kernel not in self.rendered and len(self.rendered) >= self.max_kernels:
        self.dropped_kernels += 1
        return
      self.rendered[kernel] = RenderedKernel(device, optimized, name, source)
    if optimized is not kernel: self.add_step(Step("optimize", kernel, optimized))

  def schedule_run(self, linear: UOp) -> None:
    with self.lock:
      if (seen := self.schedules_by_linear.get(linear)) is not None: seen.count += 1
      elif len(self.schedules) < self.max_realizes:
        self.schedules.append(run := ScheduleRun(linear))
        self.schedules_by_linear[linear] = run
      else: self.dropped_realizes += 1

  def add_step(self, step: Step) -> None:
    with self.lock:
      if step.after not in self.steps_by_after and len(self.steps_by_after) >= self.max_steps:
        self.dropped_steps += 1
        return
      self.steps_by_after[step.after] = step  # the latest pass to produce a graph is its history

  # ---------------------------------------------------------------------------- reading what was captured
  def history(self, kernel: UOp) -> list[Step]:
    """The steps that made `kernel` (a CALL's kernel SINK) and, once compiled, its optimized form, oldest first."""
    with self.lock:
      end = self.rendered[kernel].optimized if kernel in self.rendered else kernel
      chain: list[Step] = []
      seen: set[UOp] = set()
      while (step := self.steps_by_after.get(end)) is not None and end not in seen:
        seen.add(end)
        chain.append(step)
        end = step.before
    return chain[::-1]

  def schedule_runs(self) -> list[ScheduleRun]:
    with self.lock: return list(self.schedules)

  def rendered_kernel(self, kernel: UOp) -> RenderedKernel | None:
    with self.lock: return self.rendered.get(kernel)


def count_rules(fired: list[Callable]) -> list[tuple[str, int]]:
  """(rule name, times fired), in the order each rule first fired."""
  counts: dict[str, int] = {}
  for fn in fired:
    name = rule_name(fn)
    counts[name] = counts.get(name, 0) + 1
  return list(counts.items())


def calling_pass() -> str:
  """The function that asked for the rewrite being reported: the first frame outside the rewrite machinery."""
  frame = sys._getframe(1)
  while frame is not None and frame.f_globals.get("__name__") in MACHINERY_MODULES: frame = frame.f_back
  return frame.f_code.co_name if frame is not None else "?"
