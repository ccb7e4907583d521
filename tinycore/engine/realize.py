"""Realize: schedule tensor graphs into a LINEAR and run its calls (the tensor layer rebinds tensors to the results)."""
from __future__ import annotations
import functools
import sys
from typing import Any, Callable, Sequence, TypeVar
import tinycore.profiler as profiler
from tinycore.caches import BoundedCache
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop import capture
from tinycore.codegen.estimates import estimated_ops
from tinycore.schedule.cache import bind_template
from tinycore.uop.scalars import call_buffers, call_scalars, scalar_value, scalar_word
from tinycore.hcq.runtime import compile_settings, compile_template, holding_runtime_lock
from tinycore.device.buffers import buffer_of, linear_buffers
from tinycore.engine.jit import is_capturing, record_linear
from tinycore.schedule.cache import cached_schedule, plain_template, schedule_template
from tinycore.schedule.multi import split_lanes


class GlobalCounters:
  """Process-wide counters, as in tinygrad: `kernel_count` counts executed calls (kernels and copies)."""
  kernel_count: int = 0
  copy_count: int = 0
  time_sum_s: float = 0.0

  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count = GlobalCounters.copy_count = 0
    GlobalCounters.time_sum_s = 0.0


@holding_runtime_lock
def run_linear(linear: UOp, wait: bool = False, count: bool = True) -> None:
  """Execute each CALL of a LINEAR in order: kernels through their device's Program (buffers, then the CALL's scalar
  arguments as 64-bit words), copies through the copy path,
  and calls on queue devices (HCQ2) as compiled command batches that run while Python goes on. When it returns,
  every non-queue device it wrote to is synchronized (so a write to DISK is durable). `count=False` leaves
  GlobalCounters alone (runtime copies such as Buffer.copy_from)."""
  from tinycore.device.kernels import compile_kernel
  from tinycore.device.copy import run_copy
  from tinycore.device.registry import Device
  from tinycore.hcq.device import is_hcq_device
  from tinycore.hcq.runtime import call_is_hcq, compile_linear, uses_queues, wait_for_queues
  linear = split_lanes(linear)  # a tuple CALL runs once per lane (and counts once per lane)
  if any(uses_queues(call) for call in linear.src):
    linear = compile_linear(linear, input_uops=linear_buffers(linear), profile=profiler.enabled)
  written: dict[str, None] = {}
  for call in linear.src:
    callee, buffer_uops, scalars = call.src[0], call_buffers(call), call_scalars(call)
    buffers = [buffer_of(b) for b in buffer_uops]
    if call_is_hcq(call):
      callee.arg.run(buffers, callee.arg.scalar_values(scalars))
      if count: GlobalCounters.kernel_count += callee.arg.commands
      continue
    written[buffer_uops[0].device] = None
    if callee.op is Ops.COPY:
      wait_for_queues()
      if profiler.enabled: timed_host_copy(buffers[0], buffers[1])
      else: run_copy(buffers[0], buffers[1])
      if count: GlobalCounters.copy_count += 1
    elif callee.op is Ops.SINK:
      kernel = compile_kernel(buffers[0].device, callee)
      handles = [b.ensure_allocated()._buf for b in buffers]
      words = tuple(scalar_word(scalar_value(s), s.dtype) for s in scalars)
      if profiler.enabled: elapsed = timed_host_kernel(kernel, callee, buffers, handles, words)
      else: elapsed = kernel(*handles, vals=words, wait=wait)
      if elapsed and count: GlobalCounters.time_sum_s += elapsed
    else: raise RuntimeError(f"cannot run a call to {callee.op}")
    if count: GlobalCounters.kernel_count += 1
  for device in written:
    if not is_hcq_device(Device[device]): Device[device].synchronize()
  if wait: wait_for_queues()


def timed_host_copy(dst: Any, src: Any) -> None:
  """A copy run by the host (not on a queue), recorded on the destination's copy track with host times."""
  from tinycore.device.copy import run_copy
  start = profiler.clock_ns()
  run_copy(dst, src)
  profiler.record(f"copy {src.device} -> {dst.device}", "copy", dst.device, "copy", start, profiler.clock_ns(),
                  bytes=dst.nbytes, src=src.device, dst=dst.device)


def timed_host_kernel(kernel: Any, sink: UOp, buffers: Sequence[Any], handles: Sequence[Any],
                      words: tuple[int, ...]) -> float | None:
  """A kernel on a device without queues, recorded with host times on its compute track. It is waited for, so the
  event spans the kernel's run; a device that measures the kernel itself (OpenCL's profiling events) adds that."""
  start = profiler.clock_ns()
  elapsed = kernel(*handles, vals=words, wait=True)
  args: dict[str, Any] = {"bytes": sum(b.nbytes for b in buffers), "estimated_ops": estimated_ops(sink)}
  if elapsed: args["device_time_us"] = elapsed * 1e6
  profiler.record(kernel.name, "kernel", buffers[0].device, "compute", start, profiler.clock_ns(), **args)
  return elapsed


# The scheduler and code generator walk a graph recursively (about three frames per op of a chain), so a lazy chain
# of a few hundred ops would pass Python's default limit of 1000 frames. 20000 frames (chains of ~3000 ops) stays
# well inside an 8 MiB thread stack: a 10000-op chain crashed the interpreter only with the limit above ~60000.
GRAPH_RECURSION_LIMIT = 20000
Result = TypeVar("Result")


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
@holding_runtime_lock
def schedule_roots(roots: list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  """The LINEAR that would realize these tensor graphs, and what each realized node becomes."""
  return cached_schedule(roots)


@with_graph_recursion_limit
@holding_runtime_lock
def realize_roots(roots: list[UOp]) -> dict[UOp, UOp]:
  """Schedule (cached by graph shape), compile queue batches once per cached schedule, bind this call's buffers
  (one substitution) and run. Returns what each realized node became (its buffer): the tensor layer rebinds the
  live tensors to them."""
  # the eager fast path skips what JIT capture, the profiler and VIZ record, so it runs only with all three off
  observed = is_capturing() or profiler.enabled or capture.listener is not None
  plain = None if observed else plain_template(roots)
  if plain is not None and (plan := direct_plan(plain[0])) is not None: return plan.run(*plain[1:])
  if plain is not None: template, mapping = plain[:2]
  elif profiler.enabled: template, mapping = timed_schedule_template(roots)
  else: template, mapping = schedule_template(roots)
  linear, keys, values = template.src
  linear = split_lanes(linear)
  if is_capturing(): record_linear(linear.substitute(mapping))  # TinyJit replays it later
  if capture.listener is not None: capture.listener.schedule_run(linear)
  bound_linear, keys, values = bind_template(UOp(Ops.SINK, None, (compile_template(linear), keys, values)), mapping)
  if bound_linear.src: run_linear(bound_linear)
  return dict(zip(keys.src, values.src))


def timed_schedule_template(roots: list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  """`schedule_template`, recorded as a span on the host's schedule track (a cache hit or a new schedule)."""
  from tinycore.schedule.cache import ScheduleCacheStats
  start, misses = profiler.clock_ns(), ScheduleCacheStats.misses
  template, mapping = schedule_template(roots)
  hit = ScheduleCacheStats.misses == misses
  profiler.record("schedule (cached)" if hit else "schedule", "schedule", profiler.HOST_PROCESS, "schedule", start,
                  profiler.clock_ns(), cache="hit" if hit else "miss", calls=len(template.src[0].src))
  return template, mapping


class DirectPlan:
  """A cached schedule whose compiled form is only queue batches over whole buffers (an eager op's, usually): run
  by handing each batch this call's buffers and scalars straight from the binding, with no bound LINEAR built."""

  def __init__(self, template: UOp, batches: list[tuple[UOp, tuple[UOp, ...], tuple[UOp, ...]]]):
    self.batches = batches  # (PROGRAM of a CompiledBatch, its buffer slots, its scalar arguments)
    _, keys, values = template.src
    self.becomes = [(key, value, view_chain(value)) for key, value in zip(keys.src, values.src)]

  def run(self, mapping: dict[UOp, UOp], real_of: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """Run with the placeholders bound by `mapping`; returns what each realized graph node (`real_of` a key node)
    became."""
    get = mapping.get
    for program, slots, scalars in self.batches:
      batch = program.arg
      batch.run([buffer_of(get(s, s)) for s in slots], batch.scalar_values([get(s, s) for s in scalars]))
      GlobalCounters.kernel_count += batch.commands
    return {real_of[key] if key in real_of else key.substitute(mapping): rebind_view(value, chain, mapping)
            for key, value, chain in self.becomes}


def view_chain(value: UOp) -> tuple[UOp, list[UOp]] | None:
  """(buffer, the movement ops over it from the bottom up) when `value` is a view of one buffer (what a realized node
  becomes, usually), else None."""
  views = []
  while value.op in GroupOp.Movement and len(value.src) == 1:
    views.append(value)
    value = value.src[0]
  return (value, views[::-1]) if value.op is Ops.BUFFER else None


def rebind_view(value: UOp, chain: tuple[UOp, list[UOp]] | None, mapping: dict[UOp, UOp]) -> UOp:
  """`value.substitute(mapping)`, rebuilt straight from its `view_chain` when it has one (no graph walk)."""
  if chain is None: return mapping.get(value) or value.substitute(mapping)
  buffer, views = chain
  node = mapping.get(buffer, buffer)
  for view in views: node = UOp(view.op, view.dtype, (node,), view.arg, view.tag)
  return node


MAX_DIRECT_PLANS = 4096
# template -> (the compile settings it was made under, its DirectPlan or None when it has none)
direct_plans: BoundedCache[tuple[tuple, DirectPlan | None]] = BoundedCache("direct plans by schedule template",
                                                                          MAX_DIRECT_PLANS)


def direct_plan(template: UOp) -> DirectPlan | None:
  """The DirectPlan of a schedule template, or None when its compiled LINEAR has a host call or an argument that is
  not a whole buffer or a scalar (those run through `run_linear` on a bound LINEAR)."""
  settings = compile_settings(template.src[0])  # what compile_template's result depends on
  if (hit := direct_plans.get(template)) is not None and hit[0] == settings: return hit[1]
  batches = [batch_arguments(call) for call in compile_template(split_lanes(template.src[0])).src]
  plan = DirectPlan(template, batches) if all(batches) else None  # type: ignore[arg-type]
  return direct_plans.put(template, (settings, plan))[1]


def batch_arguments(call: UOp) -> tuple[UOp, tuple[UOp, ...], tuple[UOp, ...]] | None:
  """(PROGRAM, buffers, scalars) of a CALL of a compiled batch on whole buffers; None for any other call."""
  from tinycore.hcq.runtime import call_is_hcq
  buffers = call_buffers(call)
  if not call_is_hcq(call) or any(b.op is not Ops.BUFFER for b in buffers): return None
  return call.src[0], buffers, call_scalars(call)
