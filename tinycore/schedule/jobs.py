"""Jobs: the CALLs of a schedule as they are built, one per realized node (a kernel lowered once, or a copy), and
their order.

A job records what it writes (a version node) and what it reads, so `order_jobs` can sort the calls by their
read-after-write, write-after-read and write-after-write edges; the lanes of a tuple value that run the same kernel
become one job (`stack_lane_jobs`).
"""
from __future__ import annotations
import heapq
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.symbolic_shapes import max_numel
from tinycore.uop.pattern import graph_rewrite
from tinycore.uop.symbolic import symbolic
from tinycore.uop.capture import report_pass
from tinycore.schedule.context import ScheduleContext, ScheduleError
from tinycore.schedule.rangeify import KernelBuilder, build_store_kernel, build_value_kernel
from tinycore.schedule.copies import contiguous_region, is_transfer_store, region_uop
from tinycore.schedule.multi import stacked_call


class Job:
  """One CALL being built: what it writes (a version node) and what it reads."""
  def __init__(self, writes: UOp, call: UOp, reads: list[UOp], after_prev: UOp | None = None):
    self.writes, self.call, self.reads, self.after_prev = writes, call, reads, after_prev
    self.lanes: list[Job] = [self]  # a tuple CALL: the per-lane jobs it runs


def stack_lane_jobs(jobs: list[Job], groups: list[tuple[UOp, ...]]) -> list[Job]:
  """The jobs computing the lanes of one tuple value with the same kernel become one job: a CALL whose buffer
  arguments are MSTACKs of the lanes' buffers (one CALL, run once per lane)."""
  by_writes: dict[UOp, list[Job]] = {}
  for job in jobs: by_writes.setdefault(job.writes, []).append(job)
  merged: dict[int, Job] = {}  # id of a lane job -> its tuple job
  for group in groups:
    lane_jobs = [by_writes.get(lane, []) for lane in group]
    if any(len(js) != 1 for js in lane_jobs) or len({id(js[0]) for js in lane_jobs}) != len(group): continue
    lanes = [js[0] for js in lane_jobs]
    if any(id(j) in merged for j in lanes) or (call := stacked_call([j.call for j in lanes])) is None: continue
    stacked = Job(lanes[0].writes, call, [r for j in lanes for r in j.reads], lanes[0].after_prev)
    stacked.lanes = lanes
    for j in lanes: merged[id(j)] = stacked
  out: list[Job] = []
  for job in jobs:
    if id(job) not in merged: out.append(job)
    elif merged[id(job)].lanes[0] is job: out.append(merged[id(job)])
  return out


class LoweringStats:
  """Process-wide: how many kernels the scheduler lowered (each kernel of a schedule exactly once)."""
  kernels = 0


def lower_kernels(ctx: ScheduleContext) -> list[Job]:
  """One job per realized node, each kernel lowered once (its realize points are decided): a kernel computing the
  node, or for an AFTER one kernel or copy per store."""
  jobs: list[Job] = []
  for node in ctx.realized:
    if max_numel(node.shape) == 0: continue
    if node.op is not Ops.AFTER:
      kb = build_value_kernel(ctx, node, ctx.buffer_for(node))
      report_pass("rangeify", node, kb.sink)
      jobs.append(Job(node, kernel_call(kb, ctx.simplified), kb.reads))
      continue
    for effect in node.src[1:]:
      if effect.op is not Ops.STORE: raise ScheduleError(f"AFTER effects must be STOREs, got {effect.op}")
      if is_transfer_store(effect):
        jobs.append(transfer_job(ctx, node, effect))
        continue
      kb = build_store_kernel(ctx, effect, ctx.buffer_for(node))
      report_pass("rangeify", effect, kb.sink)
      jobs.append(Job(node, kernel_call(kb, ctx.simplified), kb.reads, after_prev=node.src[0]))
  return jobs


def transfer_job(ctx: ScheduleContext, after: UOp, store: UOp) -> Job:
  """A store across devices (or into DISK) between contiguous regions is one CALL(COPY, dst, src); a store through a
  collective (across processes) one CALL(COLLECTIVE, dst, src), the collective its callee's arg."""
  target, value = store.src
  dst = contiguous_region(target, {})
  if dst is None:
    raise ScheduleError(f"non-contiguous view is not supported: a store into {target.device} must target one "
                        "contiguous range of its buffer (shrink, reshape, bitcast)")
  src = contiguous_region(value, ctx.realized)
  assert src is not None, "the source of a transfer store was realized on its own device"
  dst_arg = region_uop(dst, ctx.buffer_for(dst.version))
  src_arg = region_uop(src, ctx.buffer_for(src.version))
  dst_bytes, src_bytes = dst_arg.dtype.itemsize * dst_arg.shape[0], src_arg.dtype.itemsize * src_arg.shape[0]
  expected = src_bytes * (store.arg.world_size if store.arg is not None and store.arg.kind == "all_gather" else 1)
  if dst_bytes != expected:
    raise ScheduleError(f"copy between regions of different sizes: {src_arg.shape} -> {dst_arg.shape}")
  param = UOp(Ops.PARAM, src_arg.dtype, (), 1)
  callee = UOp(Ops.COPY, dst_arg.dtype, (param,), dst_arg.device) if store.arg is None else \
    UOp(Ops.COLLECTIVE, dst_arg.dtype, (param,), store.arg)
  return Job(after, UOp(Ops.CALL, None, (callee, dst_arg, src_arg)), [src.version], after_prev=after.src[0])


def kernel_call(kb: KernelBuilder, simplified: dict[UOp, SimplifiedKernel]) -> UOp:
  """CALL(kernel, *buffers, *scalars) of a lowered kernel. Simplification can remove every load of a buffer (the
  empty side of a cat): such buffers leave the call and the remaining parameters are renumbered, so slots and buffers
  always line up. The scalars are the placeholders of the Python scalars the kernel takes as arguments. Kernels
  lowered alike (the layers of a model, the updates of same-shaped parameters) are simplified once: `simplified`
  maps a lowered kernel to its simplified form."""
  LoweringStats.kernels += 1
  if (done := simplified.get(kb.sink)) is None: done = simplified[kb.sink] = SimplifiedKernel(kb.sink)
  buffers = [kb.buffers[slot] for slot in done.slots]
  device = buffers[0].device
  # each scalar parameter's placeholder: a Python scalar's, or a symbolic shape's Variable on the kernel's device
  placeholders = [kb.scalar_sources.get(p) or UOp(Ops.DEFINE_VAR, p.dtype, (UOp(Ops.DEVICE, None, (), device),), p.arg)
                  for p in done.scalars]
  return UOp(Ops.CALL, None, (done.sink, *buffers, *placeholders))


class SimplifiedKernel:
  """A lowered kernel simplified (`sink`), its parameters renumbered to the buffer `slots` it still reads, and its
  scalar parameters renamed by their place in the kernel (so kernels alike but for which scalars they read, the
  layers of a model, are one kernel to compile); `scalars` are the parameters as lowered, in argument order."""
  __slots__ = ("sink", "slots", "scalars")

  def __init__(self, lowered: UOp):
    sink = graph_rewrite(lowered, symbolic)
    params = {u.arg: u for u in sink.toposort() if u.op is Ops.PARAM}
    self.slots = sorted(params)
    if self.slots != list(range(len(self.slots))):
      renumbered = sink.substitute({params[slot]: UOp(Ops.PARAM, params[slot].dtype, (), i)
                                    for i, slot in enumerate(self.slots)})
      report_pass("renumber parameters", sink, renumbered)
      sink = renumbered
    # the scalar parameters in the order the kernel first reads them, named so that name order is that order
    self.scalars = [u for u in sink.toposort() if u.op is Ops.DEFINE_VAR and not u.src]
    if self.scalars:
      named = sink.substitute({p: UOp(Ops.DEFINE_VAR, p.dtype, (), (f"arg{i:04d}", *p.arg[1:]))
                               for i, p in enumerate(self.scalars)})
      report_pass("name scalar parameters", sink, named)
      sink = named
    self.sink = sink


def order_jobs(ctx: ScheduleContext, jobs: list[Job]) -> list[Job] | None:
  """Topological order: producers before readers (RAW), readers of a buffer version before the store that replaces
  it (WAR), and stores to one buffer in graph order (WAW). None when no order exists (stores that read each
  other's old values)."""
  producer: dict[UOp, list[int]] = {}
  for i, job in enumerate(jobs):
    for lane in job.lanes: producer.setdefault(lane.writes, []).append(i)
  readers: dict[UOp, list[int]] = {}
  for i, job in enumerate(jobs):
    for r in job.reads: readers.setdefault(r, []).append(i)
  deps: list[set[int]] = [set() for _ in jobs]
  for i, job in enumerate(jobs):
    versions_by_buffer: dict[UOp, UOp] = {}
    for r in job.reads:
      deps[i].update(p for p in producer.get(r, []) if p != i)
      buf = ctx.buffer_for(r)
      if buf in versions_by_buffer and versions_by_buffer[buf] is not r and job.writes.op is not Ops.AFTER:
        raise ScheduleError("a kernel reads a buffer both before and after an assign to it; "
                            "realize() the earlier read first")
      versions_by_buffer[buf] = r
    for lane in job.lanes:
      if (prev := lane.after_prev) is None: continue
      deps[i].update(p for p in producer.get(prev, []) if p != i)
      deps[i].update(p for p in readers.get(prev, [])
                     if p != i and lane.writes not in {x.writes for x in jobs[p].lanes})
  # Kahn's algorithm, lowest index first, so independent jobs keep graph order. Collectives run in groups: one waits
  # until no other job is ready, then every ready collective runs, so the collectives of a step leave the device
  # queues together (one host stall for all of them)
  indegree = [len(d) for d in deps]
  users: list[list[int]] = [[] for _ in jobs]
  for i, d in enumerate(deps):
    for p in d: users[p].append(i)
  collective = [job.call.src[0].op is Ops.COLLECTIVE for job in jobs]
  ready: tuple[list[int], list[int]] = ([], [])  # (other jobs, collectives)
  for i, n in enumerate(indegree):
    if n == 0: heapq.heappush(ready[collective[i]], i)
  order: list[Job] = []
  while ready[0] or ready[1]:
    in_a_group = order and order[-1].call.src[0].op is Ops.COLLECTIVE and ready[1]
    i = heapq.heappop(ready[1] if in_a_group or not ready[0] else ready[0])
    order.append(jobs[i])
    for u in users[i]:
      indegree[u] -= 1
      if indegree[u] == 0: heapq.heappush(ready[collective[u]], u)
  return order if len(order) == len(jobs) else None
