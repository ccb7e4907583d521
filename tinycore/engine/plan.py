"""The run plan: the one owner of what a realize runs, from a schedule's LINEAR to device queues and host calls.

    plan = RunPlan(linear)           # lanes split, queue calls compiled into batches, host kernels compiled
    plan.run(Binding(mapping))       # with one call's buffers and scalars

`RunPlan` takes a LINEAR whose arguments may be placeholders (a cached schedule's) and turns it into steps once:
the calls of a tuple device split into one call per lane (here, and nowhere else), each run of consecutive calls
that queues run compiled into a command batch (`tinycore.hcq.runtime.compile_linear`: each placeholder's address a
run-time patch), kernels of devices without queues compiled, copies that the host runs noted. A `Binding` says what
the placeholders are in one run. The compiled steps depend on the profiler (timestamps around each command) and on
what a batch bakes in (the devices' host_devs, the staging ring), so they are kept per those and remade only when
they change.

Eager realizes go through one cache (`plan_for`): the graph is keyed once (`tinycore.schedule.keys`), and its key
maps to a `SchedulePlan`, the schedule built for that key together with its RunPlan. A repeated graph (each step of a
training loop, each call of a model's forward) binds the placeholders to its buffers and scalars and runs: it
neither schedules nor compiles (`PlanCacheStats` counts the hits and misses).
"""
from __future__ import annotations
import time
from typing import Any, Callable, Iterable, Sequence
import tinycore.profiler as profiler
from tinycore.helpers import BEAM
from tinycore.caches import BoundedCache
from tinycore.uop.ops import GroupOp, Ops, UOp, substitute_all
from tinycore.uop.scalars import call_buffers, call_scalars, scalar_value, scalar_word
from tinycore.codegen.estimates import estimated_ops
from tinycore.device.allocator import MemoryCounters
from tinycore.device.buffers import buffer_of, linear_buffers
from tinycore.device.copy import run_copy
from tinycore.device.collective import run_collective
from tinycore.device.kernels import CompiledKernel, compile_kernel, compile_kernels
from tinycore.device.registry import Device
from tinycore.schedule import create_schedule
from tinycore.schedule.keys import GraphKey, bind_realized, graph_key
from tinycore.schedule.multi import allreduce_settings, split_lanes
from tinycore.hcq.device import is_hcq_device
from tinycore.hcq.in_flight import wait_for_queues
from tinycore.hcq.runtime import call_is_hcq, compile_linear, queue_settings, uses_queues
from tinycore.engine.memory import plan_memory
from tinycore.engine.search import search_linear


class _MemoryCountersView(type):
  """GlobalCounters' memory figures, read from the allocators' MemoryCounters."""
  @property
  def mem_used(cls) -> int: return MemoryCounters.used
  @property
  def mem_peak(cls) -> int: return MemoryCounters.peak


class GlobalCounters(metaclass=_MemoryCountersView):
  """Process-wide counters, as in tinygrad: `kernel_count` counts executed calls (kernels and copies, once per
  device lane; a queue batch counts the kernels and copies in it), `copy_count` the copies the host ran,
  `global_ops` the arithmetic operations the kernels ran (`tinycore.codegen.estimates`), `global_mem` the bytes of
  the buffers the kernels and copies touched, `mem_used` the bytes of device memory buffers hold now and
  `mem_peak` the most they held since the last `reset()`."""
  kernel_count: int = 0
  copy_count: int = 0
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0

  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count = GlobalCounters.copy_count = GlobalCounters.global_ops = 0
    GlobalCounters.global_mem = 0
    GlobalCounters.time_sum_s = 0.0
    MemoryCounters.reset_peak()


class Binding:
  """What a plan's placeholders are in one run: `uops` maps a placeholder to this call's BUFFER, CONST or BIND (a
  cached schedule's binding), `buffers` a BUFFER straight to a Buffer (TinyJit's inputs), and `var_vals` gives
  Variables new values by name (TinyJit's replays). Anything not bound is itself."""
  __slots__ = ("uops", "buffers", "var_vals")

  def __init__(self, uops: dict[UOp, UOp] | None = None, buffers: dict[UOp, Any] | None = None,
               var_vals: dict[str, int] | None = None):
    self.uops, self.buffers, self.var_vals = uops or {}, buffers or {}, var_vals or {}

  def buffer(self, u: UOp) -> Any:
    """The Buffer of a call's buffer argument (a BUFFER_VIEW: that view of its buffer's)."""
    if u.op is Ops.BUFFER_VIEW:
      size, byte_offset = u.arg
      return self.buffer(u.src[0]).view(size, u.dtype, byte_offset)
    if (buf := self.buffers.get(u)) is not None: return buf
    return buffer_of(self.uops.get(u, u))

  def word(self, s: UOp) -> int:
    """The 64-bit word of a call's scalar argument."""
    bound = self.uops.get(s, s)
    if bound.op is Ops.BIND and self.var_vals and (name := bound.src[0].arg[0]) in self.var_vals:
      return scalar_word(self.var_vals[name], s.dtype)
    return scalar_word(scalar_value(bound), s.dtype)


class BatchStep:
  """Queue work: a compiled command batch, its buffer slots and its scalar arguments."""
  __slots__ = ("batch", "buffers", "scalars")

  def __init__(self, call: UOp):
    self.batch, self.buffers, self.scalars = call.src[0].arg, call_buffers(call), call_scalars(call)

  def run(self, binding: Binding, count: bool) -> None:
    batch = self.batch
    get_buffer, word = binding.buffer, binding.word
    batch.run([get_buffer(b) for b in self.buffers], dict(zip(batch.scalar_names, [word(s) for s in self.scalars])))
    if count:
      GlobalCounters.kernel_count += batch.commands
      GlobalCounters.global_ops += batch.estimated_ops
      GlobalCounters.global_mem += batch.bytes_touched


class CopyStep:
  """A copy the host runs (through the devices' allocators), after the queues finished what they were given."""
  __slots__ = ("dst", "src", "device")

  def __init__(self, call: UOp):
    self.dst, self.src = call_buffers(call)[:2]
    self.device = self.dst.device

  def run(self, binding: Binding, count: bool) -> None:
    dst, src = binding.buffer(self.dst), binding.buffer(self.src)
    wait_for_queues()
    if profiler.enabled: timed_host_copy(dst, src)
    else: run_copy(dst, src)
    if count:
      GlobalCounters.copy_count += 1
      GlobalCounters.kernel_count += 1
      GlobalCounters.global_mem += dst.nbytes


class CollectiveStep:
  """A collective across processes (`tinycore.device.collective`), run by the host after the queues finished what
  they were given; recorded by the profiler on the device's own "collective" track."""
  __slots__ = ("dst", "src", "device", "collective")

  def __init__(self, call: UOp):
    self.dst, self.src = call_buffers(call)[:2]
    self.device, self.collective = self.dst.device, call.src[0].arg

  def run(self, binding: Binding, count: bool) -> None:
    dst, src = binding.buffer(self.dst), binding.buffer(self.src)
    wait_for_queues()
    if profiler.enabled: timed_collective(self.collective, dst, src)
    else: run_collective(self.collective, dst, src)
    if count: GlobalCounters.kernel_count += 1


class KernelStep:
  """A kernel of a device without queues, called by the host."""
  __slots__ = ("kernel", "sink", "buffers", "scalars", "device", "estimated_ops")

  def __init__(self, call: UOp):
    self.sink, self.buffers, self.scalars = call.src[0], call_buffers(call), call_scalars(call)
    self.device = self.buffers[0].device
    self.kernel: CompiledKernel = compile_kernel(self.device, self.sink)
    self.estimated_ops = estimated_ops(self.sink)

  def run(self, binding: Binding, count: bool, wait: bool = False) -> None:
    buffers = [binding.buffer(b) for b in self.buffers]
    handles = [b.ensure_allocated()._buf for b in buffers]
    words = tuple([binding.word(s) for s in self.scalars])
    if profiler.enabled: elapsed = timed_host_kernel(self.kernel, self.sink, buffers, handles, words)
    else: elapsed = self.kernel(*handles, vals=words, wait=wait)
    if count:
      if elapsed: GlobalCounters.time_sum_s += elapsed
      GlobalCounters.kernel_count += 1
      GlobalCounters.global_ops += self.estimated_ops
      GlobalCounters.global_mem += sum(b.nbytes for b in buffers)


Step = BatchStep | CopyStep | CollectiveStep | KernelStep


def host_step(call: UOp) -> CopyStep | CollectiveStep | KernelStep:
  if call.src[0].op is Ops.COPY: return CopyStep(call)
  if call.src[0].op is Ops.COLLECTIVE: return CollectiveStep(call)
  if call.src[0].op is Ops.SINK: return KernelStep(call)
  raise RuntimeError(f"cannot run a call to {call.src[0].op}")


class RunPlan:
  """A LINEAR as steps to run. `patched` are the buffers whose addresses a queue batch takes at every run (None:
  all of them, as for a cached schedule's placeholders); a batch writes the others' addresses in when compiled."""

  def __init__(self, linear: UOp, patched: Sequence[UOp] | None = None, search_width: int | None = None):
    self.linear = split_lanes(linear)  # a tuple CALL runs once per lane (and counts once per lane)
    self.patched = list(patched) if patched is not None else None
    self.search_width = search_width  # the kernel search's width (None: the BEAM setting's; 0: no search)
    self.devices = sorted({b.device for call in self.linear.src for b in call_buffers(call)})
    self.queued = any(uses_queues(call) for call in self.linear.src)
    self.compiled: dict[bool, tuple[tuple, list[Step]]] = {}  # profiling on/off -> (the settings, the steps)

  def steps(self, binding: Binding | None = None) -> list[Step]:
    """The plan compiled for the profiler's state and the devices' present settings (made once for each). With a
    kernel search on (BEAM), its new kernels are searched first, run with `binding`'s scalars."""
    profile = profiler.enabled
    width = int(BEAM) if self.search_width is None else self.search_width
    settings = (queue_settings(self.devices) if self.queued else (), width)
    if (hit := self.compiled.get(profile)) is not None and hit[0] == settings: return hit[1]
    linear = self.linear
    if width > 0: linear = search_linear(linear, width, binding or Binding(), call_runner)
    compile_kernels([(call.src[1].device, call.src[0]) for call in linear.src if call.src[0].op is Ops.SINK])
    if self.queued:
      patched = linear_buffers(linear) if self.patched is None else self.patched
      linear = compile_linear(linear, input_uops=patched, profile=profile)
    steps: list[Step] = [BatchStep(call) if call_is_hcq(call) else host_step(call) for call in linear.src]
    self.compiled[profile] = (settings, steps)
    return steps

  def run(self, binding: Binding, count: bool = True, wait: bool = False) -> None:
    """Run every step with `binding`. When it returns, every non-queue device it wrote to is synchronized (so a
    write to DISK is durable); `wait` also waits for the queues. `count=False` leaves GlobalCounters alone."""
    written: dict[str, None] = {}
    for step in self.steps(binding):
      if type(step) is BatchStep: step.run(binding, count)
      else:
        written[step.device] = None
        if type(step) is KernelStep: step.run(binding, count, wait)
        else: step.run(binding, count)  # a copy or a collective
    for device in written:
      if not is_hcq_device(Device[device]): Device[device].synchronize()
    if wait: wait_for_queues()

  @property
  def kernel_count(self) -> int:
    """What one run adds to GlobalCounters.kernel_count."""
    return sum(step.batch.commands if type(step) is BatchStep else 1 for step in self.steps())


def call_runner(call: UOp) -> Callable[[Binding], float]:
  """A function that runs the one CALL `call` with a binding, waits for it, and returns the seconds it took (the
  kernel search's way of timing a candidate as the device runs any kernel)."""
  plan = RunPlan(UOp(Ops.LINEAR, None, (call,)), search_width=0)
  def run(binding: Binding) -> float:
    start = time.perf_counter()
    plan.run(binding, count=False, wait=True)
    return time.perf_counter() - start
  return run


def timed_host_copy(dst: Any, src: Any) -> None:
  """A copy run by the host (not on a queue), recorded on the destination's copy track with host times."""
  start = profiler.clock_ns()
  run_copy(dst, src)
  profiler.record(f"copy {src.device} -> {dst.device}", "copy", dst.device, "copy", start, profiler.clock_ns(),
                  bytes=dst.nbytes, src=src.device, dst=dst.device)


def timed_collective(collective: Any, dst: Any, src: Any) -> None:
  """A collective, recorded on the destination device's collective track with host times."""
  start = profiler.clock_ns()
  run_collective(collective, dst, src)
  profiler.record(f"{collective.kind} {src.dtype.name}[{src.size}]", "collective", dst.device, "collective", start,
                  profiler.clock_ns(), bytes=src.nbytes, collective=collective.describe())


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


# --------------------------------------------------------------------------- the plan cache
class PlanCacheStats:
  """How often a realize found its graph's plan (`hits`) or scheduled and planned a new one (`misses`)."""
  hits = 0
  misses = 0


class SchedulePlan:
  """The schedule of one graph key and its RunPlan. `template` is SINK(LINEAR, SINK(realized nodes), SINK(their
  buffers)) over the key's placeholders; `fresh` the buffers the schedule creates (new storage on every run)."""

  def __init__(self, template: UOp, graph: UOp):
    self.template = template
    self.linear, keys, values = template.src
    self.fresh = tuple(n for n in template.toposort() if n.op is Ops.BUFFER and n.src[0].arg > 0)
    self.run_plan = RunPlan(self.linear)
    # the buffers tensors hold after a run (placeholders) -> that run's RunPlan with the others in arenas
    self.memory_plans: dict[frozenset[UOp], tuple[RunPlan, tuple[UOp, ...]]] = {}
    # what the tensors can hold: the nodes of the key's graph (the scheduler's own lowered nodes never leave it)
    in_graph = graph.toposort()
    self.realized = [(key, value, view_chain(value)) for key, value in zip(keys.src, values.src) if key in in_graph]
    self.keys = UOp(Ops.SINK, None, tuple(key for key, _, _ in self.realized))
    self.values = UOp(Ops.SINK, None, tuple(value for _, value, _ in self.realized))

  def bind(self, key: GraphKey) -> dict[UOp, UOp]:
    """The placeholders bound to this call: the key's values, and fresh storage for every buffer it creates."""
    mapping = dict(key.mapping)
    for f in self.fresh: mapping[f] = UOp.new_buffer(f.device, f.arg, f.dtype)
    return mapping

  def run_plan_keeping(self, held: set[UOp]) -> tuple[RunPlan, tuple[UOp, ...]]:
    """The RunPlan for a run after which only the fresh buffers `held` (placeholders) are still read, by tensors:
    every other fresh buffer shares an arena with those whose lifetimes it does not overlap (`plan_memory`). Also the
    arena placeholders, which the caller binds to fresh storage for each run."""
    key = frozenset(held)
    if (hit := self.memory_plans.get(key)) is None:
      memory = plan_memory(self.linear, self.fresh, held)
      hit = (RunPlan(memory.linear), memory.arenas) if memory is not None else (self.run_plan, ())
      if len(self.memory_plans) >= MAX_MEMORY_PLANS: self.memory_plans.pop(next(iter(self.memory_plans)))
      self.memory_plans[key] = hit
    return hit

  def held_fresh(self, values: Iterable[UOp], mapping: dict[UOp, UOp]) -> set[UOp]:
    """The fresh placeholders whose storage (bound in `mapping`) the realized `values` read."""
    placeholder_of = {mapping[f]: f for f in self.fresh}
    held: set[UOp] = set()
    for value in values:
      chain = view_chain(value)
      for b in (chain[0],) if chain is not None else value.toposort():
        if (f := placeholder_of.get(b)) is not None: held.add(f)
    return held

  def became(self, key: GraphKey, mapping: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """What each realized graph node became (its buffer, viewed in its shape) in the run bound by `mapping`."""
    if key.symbolic:
      keys, values = bind_realized(self.keys, self.values, mapping)
      return dict(zip(keys.src, values.src))
    real_of = key.real_of or {}
    # the realized nodes the key does not name (the scheduler's own, a general key's): one walk over all of them
    others = substitute_all([node for node, _, _ in self.realized if node not in real_of], mapping)
    return {real_of[node] if node in real_of else others[node]: rebind_view(value, chain, mapping)
            for node, value, chain in self.realized}


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


# memory plans kept per schedule, one per set of buffers that tensors hold after the run (a loop's steps share one)
MAX_MEMORY_PLANS = 8
MAX_PLANS = 4096
# (graph key, the multi-device settings its lowering depends on) -> its SchedulePlan
plans: BoundedCache[SchedulePlan] = BoundedCache("schedules and run plans by graph key", MAX_PLANS)


def plan_for(roots: list[UOp]) -> tuple[SchedulePlan, GraphKey]:
  """The plan of the graph under `roots` (scheduled and planned the first time its key is seen) and the key."""
  key = graph_key(roots)
  cache_key = (key.graph, allreduce_settings())
  if (plan := plans.get(cache_key)) is not None:
    PlanCacheStats.hits += 1
    return plan, key
  PlanCacheStats.misses += 1
  linear, becomes = create_schedule(list(key.graph.src))
  template = UOp(Ops.SINK, None, (linear, UOp(Ops.SINK, None, tuple(becomes)), UOp(Ops.SINK, None,
                                                                                  tuple(becomes.values()))))
  return plans.put(cache_key, SchedulePlan(template, key.graph)), key
