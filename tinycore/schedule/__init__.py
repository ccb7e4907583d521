"""The scheduler: a lazy tensor graph -> LINEAR of CALLs (kernels and copies) plus how live tensors rebind.

    create_schedule(roots) -> (LINEAR(CALL(SINK kernel | COPY, dst, *srcs), ...), becomes)

`becomes` maps every realized node to the buffer view that now holds it, so no tensor recomputes it.
"""
from __future__ import annotations
from tinycore.uop.ops import GroupOp, Ops, UOp, prod
from tinycore.uop.pattern import graph_rewrite
from tinycore.uop.symbolic import symbolic
from tinycore.schedule.context import ScheduleContext
from tinycore.schedule.rangeify import KernelBuilder, NeedsRealize, build_store_kernel, build_value_kernel
from tinycore.uop.spec import check_spec, spec_enabled


class ScheduleError(RuntimeError):
  pass


def _has_identity(u: UOp) -> bool:
  """The value is a whole buffer's elements in order (BUFFER or AFTER behind reshapes)."""
  node = u
  while node.op is Ops.RESHAPE: node = node.src[0]
  while node.op is Ops.AFTER: node = node.src[0]
  return node.op is Ops.BUFFER and prod(u.shape) == node.arg


def _is_buffer_view(u: UOp) -> bool:
  return u.base.op in (Ops.BUFFER, Ops.AFTER)


def _strip_reshapes(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u


def mark_realized(ctx: ScheduleContext, roots: list[UOp], graph: dict[UOp, None]) -> None:
  """The nodes that must be materialized regardless of fusion decisions."""
  for node in graph:
    if node.op is Ops.CONTIGUOUS and not _has_identity(node.src[0]): ctx.realize(node)
    elif node.op is Ops.AFTER: ctx.realize(node)
    elif node.op is Ops.COPY:
      ctx.realize(node)
      # a copy moves bytes: its source is realized on its own device first
      if not _has_identity(node.src[0]): ctx.realize(node.src[0])
  for root in roots:
    if not _is_buffer_view(root) and not (root.op is Ops.CONTIGUOUS and _has_identity(root.src[0])): ctx.realize(root)


class Job:
  """One CALL being built: what it writes (a version node) and what it reads."""
  def __init__(self, writes: UOp, call: UOp, reads: list[UOp], after_prev: UOp | None = None):
    self.writes, self.call, self.reads, self.after_prev = writes, call, reads, after_prev


def build_jobs(ctx: ScheduleContext) -> list[Job]:
  jobs: list[Job] = []
  for node in list(ctx.realized):
    if prod(node.shape) == 0: continue
    if node.op is Ops.COPY:
      src = _strip_reshapes(node.src[0]) if _has_identity(node.src[0]) else node.src[0]
      dst_buf, src_buf = ctx.buffer_for(node), ctx.buffer_for(src)
      callee = UOp(Ops.COPY, node.dtype, (UOp(Ops.PARAM, node.dtype, (), 1),), node.arg)
      jobs.append(Job(node, UOp(Ops.CALL, None, (callee, dst_buf, src_buf)), [src]))
      continue
    if node.op is Ops.AFTER:
      for effect in node.src[1:]:
        if effect.op is not Ops.STORE: raise ScheduleError(f"AFTER effects must be STOREs, got {effect.op}")
        kb = build_store_kernel(ctx, effect, ctx.buffer_for(node))
        check_store_hazard(kb, effect)
        jobs.append(Job(node, kernel_call(kb), kb.reads, after_prev=node.src[0]))
      continue
    kb = build_value_kernel(ctx, node, ctx.buffer_for(node))
    jobs.append(Job(node, kernel_call(kb), kb.reads))
  return jobs


def check_store_hazard(kb: KernelBuilder, store: UOp) -> None:
  """A store whose value reads its destination anywhere but the address being written reads overwritten bytes."""
  address, gate = kb.store_address
  address = graph_rewrite(address, symbolic)
  for offset, _ in kb.loads_of_output:
    if graph_rewrite(offset, symbolic) is not address:
      raise NeedsRealize(store.src[1], "the stored value reads its own destination at other addresses")


def kernel_call(kb: KernelBuilder) -> UOp:
  sink = graph_rewrite(kb.sink, symbolic)
  return UOp(Ops.CALL, None, (sink, *kb.buffers))


def order_jobs(ctx: ScheduleContext, jobs: list[Job]) -> list[Job]:
  """Topological order: producers before readers (RAW), readers of a buffer version before the store that replaces
  it (WAR), and stores to one buffer in graph order (WAW)."""
  producer: dict[UOp, list[int]] = {}
  for i, job in enumerate(jobs): producer.setdefault(job.writes, []).append(i)
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
        raise ScheduleError("a kernel reads a buffer both before and after an assign to it; realize() the earlier read first")
      versions_by_buffer[buf] = r
    if job.after_prev is not None:
      prev = job.after_prev
      deps[i].update(p for p in producer.get(prev, []) if p != i)
      deps[i].update(p for p in readers.get(prev, []) if p != i and jobs[p].writes is not job.writes)
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
  if len(order) != len(jobs): raise ScheduleError("cycle in the schedule: these stores and reads cannot be ordered")
  return order


def create_schedule(roots: list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  sink = UOp(Ops.SINK, None, tuple(roots))
  if spec_enabled(): check_spec(sink, "tensor")
  graph = sink.toposort()
  ctx = ScheduleContext()
  mark_realized(ctx, roots, graph)
  for _ in range(1000):
    try:
      jobs = build_jobs(ctx)
      break
    except NeedsRealize as e:
      if e.node in ctx.realized: raise ScheduleError(f"cannot schedule: {e.reason}") from e
      ctx.realize(e.node)
      ctx.reduce_owner.clear()
  else: raise ScheduleError("scheduling did not converge")
  ordered = order_jobs(ctx, jobs)
  linear = UOp(Ops.LINEAR, None, tuple(job.call for job in ordered))
  if spec_enabled(): check_spec(linear, "linear")
  becomes: dict[UOp, UOp] = {}
  for node in ctx.realized:
    buf = ctx.buffer_for(node)
    becomes[node] = buf if node.shape == (buf.arg,) else buf.reshape(node.shape)
  for root in roots:
    if root.op is Ops.CONTIGUOUS and root not in ctx.realized: becomes[root] = root.src[0]
  return linear, becomes
