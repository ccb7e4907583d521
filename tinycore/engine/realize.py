"""Realize: tensor graphs to their run plans, run (the tensor layer then rebinds tensors to the results).

`realize_roots` looks up the graph's plan (`tinycore.engine.plan.plan_for`: scheduled and planned the first time
its key is seen), binds it to this call's buffers and scalars and runs it; `run_linear` runs any LINEAR once.
"""
from __future__ import annotations
import functools
import gc
import sys
from typing import Any, Callable, Iterable, TypeVar
import tinycore.profiler as profiler
from tinycore.uop.ops import UOp
from tinycore.uop import capture
from tinycore.hcq.lock import holding_runtime_lock
from tinycore.engine.jit import is_capturing, record_linear
from tinycore.engine.memory import NO_MEMORY_PLANNER
from tinycore.engine.plan import Binding, GlobalCounters, PlanCacheStats, RunPlan, SchedulePlan, plan_for
from tinycore.schedule.keys import GraphKey

__all__ = ["GlobalCounters", "realize_roots", "run_linear", "schedule_roots"]


@holding_runtime_lock
def run_linear(linear: UOp, wait: bool = False, count: bool = True) -> None:
  """Run each CALL of a LINEAR (bound to real buffers and scalar values) in order: kernels through their device's
  Program, copies through the copy path, and calls on queue devices (HCQ2) as command batches that run while Python
  goes on. When it returns, every non-queue device it wrote to is synchronized (so a write to DISK is durable);
  `wait` also waits for the queues. `count=False` leaves GlobalCounters alone (runtime copies such as
  Buffer.copy_from)."""
  RunPlan(linear).run(Binding(), count=count, wait=wait)


# The scheduler and code generator walk a graph recursively (about three frames per op of a chain), so a lazy chain
# of a few hundred ops would pass Python's default limit of 1000 frames. 20000 frames (chains of ~3000 ops) stays
# well inside an 8 MiB thread stack: a 10000-op chain crashed the interpreter only with the limit above ~60000.
GRAPH_RECURSION_LIMIT = 20000
Result = TypeVar("Result")


def without_collector_pauses(fn: Callable[..., Result]) -> Callable[..., Result]:
  """Run fn with Python's cyclic garbage collector held off (a collection that was due runs once after it). A realize
  makes and drops many short-lived graph nodes, freed by their reference counts; left on, the collector walks every
  live object (a model's whole graph) each time enough of them were made: at 24 layers a fifth of a forward's time,
  and more the larger the model."""
  @functools.wraps(fn)
  def run(*args: Any, **kwargs: Any) -> Result:
    if not gc.isenabled(): return fn(*args, **kwargs)
    gc.disable()
    try: return fn(*args, **kwargs)
    finally: gc.enable()
  return run


def with_graph_recursion_limit(fn: Callable[..., Result]) -> Callable[..., Result]:
  """Run fn with the recursion limit raised to GRAPH_RECURSION_LIMIT; a graph deeper still is a RecursionError
  that says what to do."""
  @functools.wraps(fn)
  def run(*args: Any, **kwargs: Any) -> Result:
    previous = sys.getrecursionlimit()
    if previous < GRAPH_RECURSION_LIMIT: sys.setrecursionlimit(GRAPH_RECURSION_LIMIT)
    try: return fn(*args, **kwargs)
    except RecursionError as e:
      raise RecursionError("this tensor graph is too deep to schedule (a chain of thousands of lazy ops): realize() "
                           "an intermediate result every thousand ops or so") from e
    finally: sys.setrecursionlimit(previous)
  return run


@with_graph_recursion_limit
@without_collector_pauses
@holding_runtime_lock
def schedule_roots(roots: list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  """The LINEAR that would realize these tensor graphs (bound to their buffers), and what each realized node
  becomes."""
  plan, key = plan_for(roots)
  mapping = plan.bind(key)
  return plan.linear.substitute(mapping), plan.became(key, mapping)


@with_graph_recursion_limit
@without_collector_pauses
@holding_runtime_lock
def realize_roots(roots: list[UOp], still_read: Callable[[dict[UOp, UOp]], Iterable[UOp]] | None = None
                  ) -> dict[UOp, UOp]:
  """Look up the graph's plan (scheduled and planned once per graph key), bind it to this call's buffers and
  scalars, and run it. Returns what each realized node became (its buffer): the tensor layer rebinds the live
  tensors to them. `still_read(becomes)`, given, names the realized nodes that something still reads after the run
  (the tensor layer's live tensors): the buffers of the others may share memory (`tinycore.engine.memory`)."""
  plan, key = timed_plan_for(roots) if profiler.enabled else plan_for(roots)
  mapping = plan.bind(key)
  becomes = plan.became(key, mapping)
  run_plan = plan.run_plan
  read = still_read(becomes) if still_read is not None else None
  if read is not None and len(plan.fresh) > 1 and not NO_MEMORY_PLANNER:  # (one fresh buffer shares with nothing)
    run_plan, arenas = plan.run_plan_keeping(plan.held_fresh([becomes[node] for node in read], mapping))
    for arena in arenas: mapping[arena] = UOp.new_buffer(arena.device, arena.arg, arena.dtype)
  if is_capturing(): record_linear(run_plan.linear.substitute(mapping))  # TinyJit replays it later
  if capture.listener is not None: capture.listener.schedule_run(run_plan.linear)
  if run_plan.linear.src: run_plan.run(Binding(mapping))
  return becomes


def timed_plan_for(roots: list[UOp]) -> tuple[SchedulePlan, GraphKey]:
  """`plan_for`, recorded as a span on the host's schedule track (a plan found, or a new schedule)."""
  start, misses = profiler.clock_ns(), PlanCacheStats.misses
  plan, key = plan_for(roots)
  hit = PlanCacheStats.misses == misses
  profiler.record("schedule (cached)" if hit else "schedule", "schedule", profiler.HOST_PROCESS, "schedule", start,
                  profiler.clock_ns(), cache="hit" if hit else "miss", calls=len(plan.linear.src))
  return plan, key
