"""The scheduler: a lazy tensor graph -> LINEAR of CALLs (kernels and copies) plus how live tensors rebind.

    create_schedule(roots) -> (LINEAR(CALL(SINK kernel | COPY, dst, *srcs, *scalars), ...), becomes)

`becomes` maps every realized node to the buffer view that now holds it, so no tensor recomputes it.
"""
from __future__ import annotations
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.scalars import kernel_scalars
from tinycore.uop.symbolic_shapes import max_numel, view_in_buffer
from tinycore.uop.pattern import graph_rewrite
from tinycore.uop.symbolic import symbolic
from tinycore.uop.capture import report_pass
from tinycore.schedule.context import ScheduleContext
from tinycore.schedule.split_reduce import split_reductions
from tinycore.schedule.scalars import ScalarBindings, bind_kernel_scalars
from tinycore.schedule.rangeify import KernelBuilder, NeedsRealize, build_store_kernel, build_value_kernel
from tinycore.uop.spec import check_spec, spec_enabled
from tinycore.schedule.copies import (contiguous_region, has_buffer_identity, is_storage_only, lower_copies,
                                     region_uop, storage_root)
from tinycore.schedule.snapshots import snapshot_crossed_reads
from tinycore.schedule.multi import (MultiLowering, is_multi, lane_roots, lanes_of, lower_multi, multi_value,
                                    stacked_call)


class ScheduleError(RuntimeError):
  pass


class StoreCycleError(ScheduleError):
  """Stores realized together that each read a buffer the other replaces: no order of the jobs works."""


def _is_buffer_view(u: UOp) -> bool:
  """A view of stored data (movement ops and bitcasts over a buffer): realizing it computes nothing."""
  return storage_root(u).op in (Ops.BUFFER, Ops.AFTER)


def _strip_reshapes(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u


def is_cross_device_store(store: UOp) -> bool:
  """A store whose value lives on another device, or into a storage device (which never computes): a copy."""
  target, value = store.src
  return value.device != target.device or is_storage_only(target.device)


def mark_realized(ctx: ScheduleContext, roots: list[UOp], graph: dict[UOp, None]) -> None:
  """The nodes that must be materialized regardless of fusion decisions."""
  for node in graph:
    if node.op is Ops.CONTIGUOUS and not has_buffer_identity(node.src[0]): ctx.realize(node)
    elif node.op is Ops.AFTER: ctx.realize(node)
  for root in roots:
    # (a reshape of a node realized anyway reads that node's buffer: it is not stored twice)
    if not _is_buffer_view(root) and not (root.op is Ops.CONTIGUOUS and has_buffer_identity(root.src[0])) and \
        not (root.op is Ops.RESHAPE and _strip_reshapes(root) in ctx.realized):
      ctx.realize(root)
  # the source of a cross-device store is realized on its own device first, so the store only moves bytes
  for node in graph:
    if node.op is Ops.STORE and is_cross_device_store(node) and contiguous_region(node.src[1], ctx.realized) is None:
      value = node.src[1]
      if is_storage_only(value.device) and _is_buffer_view(value):
        raise ScheduleError(f"non-contiguous view is not supported: {value.device} cannot compute, so a view of it "
                            "must be one contiguous range (shrink, reshape, bitcast)")
      if is_storage_only(value.device):
        raise ScheduleError(f"{value.device} cannot compute (it only stores bytes): move the tensor to a compute "
                            "device first, e.g. .to(Device.DEFAULT)")
      ctx.realize(value)


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


def build_jobs(ctx: ScheduleContext) -> list[Job]:
  jobs: list[Job] = []
  for node in list(ctx.realized):
    if max_numel(node.shape) == 0: continue
    if node.op is Ops.AFTER:
      for effect in node.src[1:]:
        if effect.op is not Ops.STORE: raise ScheduleError(f"AFTER effects must be STOREs, got {effect.op}")
        if is_cross_device_store(effect):
          jobs.append(copy_job(ctx, node, effect))
          continue
        kb = build_store_kernel(ctx, effect, ctx.buffer_for(node))
        report_pass("rangeify", effect, kb.sink)
        check_store_hazard(kb, effect)
        jobs.append(Job(node, kernel_call(kb, ctx.scalars), kb.reads, after_prev=node.src[0]))
      continue
    kb = build_value_kernel(ctx, node, ctx.buffer_for(node))
    report_pass("rangeify", node, kb.sink)
    jobs.append(Job(node, kernel_call(kb, ctx.scalars), kb.reads))
  return jobs


def copy_job(ctx: ScheduleContext, after: UOp, store: UOp) -> Job:
  """A store across devices (or into DISK) between contiguous regions is one CALL(COPY, dst, src)."""
  target, value = store.src
  dst = contiguous_region(target, {})
  if dst is None:
    raise ScheduleError(f"non-contiguous view is not supported: a store into {target.device} must target one "
                        "contiguous range of its buffer (shrink, reshape, bitcast)")
  src = contiguous_region(value, ctx.realized)
  assert src is not None, "the source of a cross-device store was realized on its own device"
  dst_arg = region_uop(dst, ctx.buffer_for(dst.version))
  src_arg = region_uop(src, ctx.buffer_for(src.version))
  if dst_arg.dtype.itemsize * dst_arg.shape[0] != src_arg.dtype.itemsize * src_arg.shape[0]:
    raise ScheduleError(f"copy between regions of different sizes: {src_arg.shape} -> {dst_arg.shape}")
  callee = UOp(Ops.COPY, dst_arg.dtype, (UOp(Ops.PARAM, src_arg.dtype, (), 1),), dst_arg.device)
  return Job(after, UOp(Ops.CALL, None, (callee, dst_arg, src_arg)), [src.version], after_prev=after.src[0])


def check_store_hazard(kb: KernelBuilder, store: UOp) -> None:
  """A store whose value reads its destination anywhere but the address being written reads overwritten bytes."""
  address, gate = kb.store_address
  address = graph_rewrite(address, symbolic)
  for offset, _ in kb.loads_of_output:
    if graph_rewrite(offset, symbolic) is not address:
      raise NeedsRealize(store.src[1], "the stored value reads its own destination at other addresses")


def kernel_call(kb: KernelBuilder, scalars: ScalarBindings) -> UOp:
  """CALL(kernel, *buffers, *scalars). Simplification can remove every load of a buffer (the empty side of a cat):
  such buffers leave the call and the remaining parameters are renumbered, so slots and buffers always line up.
  The scalars are the placeholders of the Python scalars the kernel takes as arguments."""
  sink = graph_rewrite(kb.sink, symbolic)
  used = sorted({u.arg for u in sink.toposort() if u.op is Ops.PARAM})
  buffers = kb.buffers
  if used != list(range(len(kb.buffers))):
    renumber = {UOp(Ops.PARAM, kb.buffers[slot].dtype, (), slot): UOp(Ops.PARAM, kb.buffers[slot].dtype, (), i)
                for i, slot in enumerate(used)}
    renumbered, buffers = sink.substitute(renumber), [kb.buffers[slot] for slot in used]
    report_pass("renumber parameters", sink, renumbered)
    sink = renumbered
  bound, placeholders = bind_kernel_scalars(sink, shape_parameters(sink, buffers[0].device) | kb.scalar_sources,
                                            len(buffers), scalars)
  report_pass("bind scalars", sink, bound)
  if bound is not sink: sink = graph_rewrite(bound, symbolic)  # baked-in literals may fold
  return UOp(Ops.CALL, None, (sink, *buffers, *placeholders))


def shape_parameters(sink: UOp, device: str) -> dict[UOp, UOp]:
  """The kernel's Variables that come from symbolic shapes (loop bounds, strides), each with the placeholder its CALL
  passes: the Variable on the kernel's device, as for a Variable used as a value."""
  return {u: UOp(Ops.DEFINE_VAR, u.dtype, (UOp(Ops.DEVICE, None, (), device),), u.arg) for u in kernel_scalars(sink)}


def order_jobs(ctx: ScheduleContext, jobs: list[Job]) -> list[Job]:
  """Topological order: producers before readers (RAW), readers of a buffer version before the store that replaces
  it (WAR), and stores to one buffer in graph order (WAW)."""
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
  # Kahn's algorithm, lowest index first, so independent jobs keep graph order
  import heapq
  indegree = [len(d) for d in deps]
  users: list[list[int]] = [[] for _ in jobs]
  for i, d in enumerate(deps):
    for p in d: users[p].append(i)
  ready = [i for i, n in enumerate(indegree) if n == 0]
  heapq.heapify(ready)
  order = []
  while ready:
    i = heapq.heappop(ready)
    order.append(jobs[i])
    for u in users[i]:
      indegree[u] -= 1
      if indegree[u] == 0: heapq.heappush(ready, u)
  if len(order) != len(jobs): raise StoreCycleError("cycle in the schedule: these stores and reads cannot be ordered")
  return order


def create_schedule(original_roots: list[UOp], scalars: ScalarBindings | None = None) -> tuple[UOp, dict[UOp, UOp]]:
  """Schedule the roots. Python scalars replaced by placeholders (the schedule cache does that) become kernel
  arguments; `scalars` holds their values in case a kernel has too many arguments and bakes some in."""
  try:
    return schedule_graph(original_roots, scalars)
  except StoreCycleError:
    # stores that read each other's old values: they read snapshots taken first instead
    roots, rewritten = snapshot_crossed_reads(original_roots)
    if not rewritten: raise
    linear, becomes = schedule_graph(roots, scalars)
    for old, new in rewritten.items():
      if new in becomes: becomes[old] = becomes[new]
    return linear, becomes


def schedule_graph(original_roots: list[UOp], scalars: ScalarBindings | None = None) -> tuple[UOp, dict[UOp, UOp]]:
  """create_schedule without the store-cycle fallback."""
  original = UOp(Ops.SINK, None, tuple(original_roots))
  if spec_enabled(): check_spec(original, "tensor")
  multi = lower_multi(original)
  lane_sink = UOp(Ops.SINK, None, tuple(lane_roots(multi.nodes[original])))
  lowered = lower_copies(lane_sink)
  split = split_reductions(lowered[lane_sink])
  lowered = {node: split.get(low, low) for node, low in lowered.items()}
  sink = lowered[lane_sink]
  roots = list(sink.src)
  graph = sink.toposort()
  ctx = ScheduleContext(scalars)
  mark_realized(ctx, roots, graph)
  for _ in range(1000):
    try:
      ctx.scalars.baked.clear()  # what an abandoned attempt baked in does not count
      jobs = build_jobs(ctx)
      break
    except NeedsRealize as e:
      if e.node in ctx.realized: raise ScheduleError(f"cannot schedule: {e.reason}") from e
      ctx.realize(e.node)
      ctx.reduce_owner.clear()
  else: raise ScheduleError("scheduling did not converge")
  jobs = stack_lane_jobs(jobs, [tuple(lowered.get(lane, lane) for lane in g) for g in multi.groups])
  ordered = order_jobs(ctx, jobs)
  linear = UOp(Ops.LINEAR, None, tuple(job.call for job in ordered))
  if spec_enabled(): check_spec(linear, "linear")
  becomes: dict[UOp, UOp] = {}
  for node in ctx.realized:
    buf = ctx.buffer_for(node)
    becomes[node] = view_in_buffer(buf, node.shape)
  for root in roots:
    # a CONTIGUOUS of stored data is that data (in the buffers this schedule gives it)
    if root.op is Ops.CONTIGUOUS and root not in ctx.realized: becomes[root] = root.src[0].substitute(becomes)
  # the tensors hold the original graph: map its nodes through what the copy rules made of them
  for node, lowered_node in lowered.items():
    if lowered_node is not node and lowered_node in becomes: becomes[node] = becomes[lowered_node]
    elif lowered_node is not node and lowered_node.op is Ops.RESHAPE and lowered_node.src[0] in becomes:
      becomes[node] = becomes[lowered_node.src[0]].reshape(node.shape)
  map_logical_nodes(multi, becomes)
  return linear, becomes


def _became(lane: UOp, becomes: dict[UOp, UOp]) -> UOp:
  """What a lane became: its buffer, or a reshape of its realized source's buffer (a stored lane's view)."""
  if lane in becomes: return becomes[lane]
  if lane.op is Ops.RESHAPE and lane.src[0] in becomes: return becomes[lane.src[0]].reshape(lane.shape)
  return lane


def map_logical_nodes(multi: MultiLowering, becomes: dict[UOp, UOp]) -> None:
  """What each node of the logical (multi-device) graph became: the stack of its lanes' buffers."""
  for node, low in multi.nodes.items():
    if low is node or node in becomes: continue
    if not is_multi(low):
      if low in becomes: becomes[node] = becomes[low]
      continue
    lanes = [_became(lane, becomes) for lane in lanes_of(low)]
    if all(_is_buffer_view(lane) for lane in lanes) and lanes != list(lanes_of(low)):
      becomes[node] = multi_value(lanes, low.arg)
