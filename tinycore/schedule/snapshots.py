"""Snapshots that break store cycles: stores realized together that read each other's old values.

`a.assign(f(b)); b.assign(g(a))` realized in one schedule (an optimizer step whose gradients fuse into the update
kernels, say) needs a's store to run before b's (it reads old b) and after it (b's store reads old a): no order
works. The fix copies each buffer that one store reads and another store replaces into a scratch buffer first, and
the stores read the copy: the built jobs are redirected (a kernel's buffer argument replaced), nothing is lowered
again. The scheduler does this only when ordering the jobs found no order.
"""
from __future__ import annotations
from tinycore.uop.ops import Ops, UOp
from tinycore.schedule.context import ScheduleContext
from tinycore.schedule.jobs import Job, kernel_call
from tinycore.schedule.rangeify import build_store_kernel
from tinycore.schedule.realize_points import stored_buffer


def snapshot_job(ctx: ScheduleContext, buffer: UOp) -> Job:
  """A job copying `buffer`'s current value into a fresh scratch buffer (the snapshot's version node)."""
  scratch = UOp.new_buffer(buffer.src[1].arg, buffer.arg, buffer.dtype)
  store = UOp(Ops.STORE, None, (scratch, buffer))
  snapshot = UOp(Ops.AFTER, scratch.dtype, (scratch, store))
  kb = build_store_kernel(ctx, store, scratch)
  return Job(snapshot, kernel_call(kb, ctx.simplified), kb.reads, after_prev=scratch)


def redirected(job: Job, buffer: UOp, snapshot: Job) -> Job:
  """The job reading the snapshot's scratch buffer where it read `buffer`."""
  scratch = snapshot.call.src[1]
  call = job.call.replace(src=tuple(scratch if a is buffer else a for a in job.call.src))
  reads = [snapshot.writes if r is buffer else r for r in job.reads]
  return Job(job.writes, call, reads, job.after_prev)


def snapshot_crossed_reads(ctx: ScheduleContext, jobs: list[Job]) -> list[Job]:
  """The jobs with every store reading a snapshot instead of the old value of a buffer another store replaces; the
  snapshot jobs come first."""
  stored = {buf for job in jobs if job.writes.op is Ops.AFTER and (buf := stored_buffer(job.writes)) is not None
            and isinstance(buf.src[1].arg, str)}
  snapshots: dict[UOp, Job] = {}
  out: list[Job] = []
  for job in jobs:
    if job.writes.op is Ops.AFTER and job.lanes == [job] and job.call.src[0].op is Ops.SINK:
      own = stored_buffer(job.writes)
      # only reads of the buffer itself (its value before any store here); a job that also reads a newer version
      # keeps its reads (one argument cannot be both)
      for buffer in dict.fromkeys(r for r in job.reads if r in stored and r is not own):
        if any(r is not buffer and stored_buffer(r) is buffer for r in job.reads): continue
        if buffer not in snapshots: snapshots[buffer] = snapshot_job(ctx, buffer)
        job = redirected(job, buffer, snapshots[buffer])
    out.append(job)
  return list(snapshots.values()) + out
