"""The scheduler: a lazy tensor graph -> LINEAR of CALLs (kernels and copies) plus how live tensors rebind.

    create_schedule(roots) -> (LINEAR(CALL(SINK kernel | COPY, dst, *srcs, *scalars), ...), becomes)

`becomes` maps every realized node to the buffer view that now holds it, so no tensor recomputes it.
"""
from __future__ import annotations
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.symbolic_shapes import view_in_buffer
from tinycore.uop.spec import check_spec, spec_enabled
from tinycore.schedule.context import ScheduleContext, ScheduleError, StoreCycleError
from tinycore.schedule.multi import MultiLowering, is_multi, lane_roots, lanes_of, lower_multi, multi_value
from tinycore.schedule.copies import lower_copies
from tinycore.schedule.split_reduce import split_reductions
from tinycore.schedule.realize_points import (decide_realize_points, forced_realize_points, is_buffer_view,
                                             limit_kernel_arguments)
from tinycore.schedule.jobs import lower_kernels, order_jobs, stack_lane_jobs
from tinycore.schedule.snapshots import snapshot_crossed_reads

__all__ = ["create_schedule", "explain_realize_points", "ScheduleError", "StoreCycleError"]


class PreparedGraph:
  """The graph after the graph passes (1-4 below): the context with every realize point, the single-device SINK,
  what the copy rules and split reductions made of each node, and the multi-device lowering."""
  def __init__(self, ctx: ScheduleContext, sink: UOp, lowered: dict[UOp, UOp], multi: MultiLowering):
    self.ctx, self.sink, self.lowered, self.multi = ctx, sink, lowered, multi


def prepare_graph(original_roots: list[UOp]) -> PreparedGraph:
  """Passes 1-4: everything decided about the graph before any kernel is built."""
  original = UOp(Ops.SINK, None, tuple(original_roots))
  if spec_enabled(): check_spec(original, "tensor")
  # 1. a graph over device tuples becomes one graph per lane (allreduces lowered to copies and sums)
  multi = lower_multi(original)
  lane_sink = UOp(Ops.SINK, None, tuple(lane_roots(multi.nodes[original])))
  # 2. the COPY rules: a copy is an anonymous store, a store of a copy is the copy
  lowered = lower_copies(lane_sink)
  # 3. big reductions to few outputs split into per-core partials
  split = split_reductions(lowered[lane_sink])
  lowered = {node: split.get(low, low) for node, low in lowered.items()}
  sink = lowered[lane_sink]
  graph = sink.toposort()
  # 4. realize points: the forced ones, splits for devices with an argument limit, then the fusion rules (one pass
  # over the graph, consumers first)
  ctx = ScheduleContext()
  forced_realize_points(ctx, list(sink.src), graph)
  limit_kernel_arguments(ctx, graph)
  decide_realize_points(ctx, graph)
  ctx.realized = {node: None for node in graph if node in ctx.realized}  # in graph order: jobs keep it
  return PreparedGraph(ctx, sink, lowered, multi)


def create_schedule(original_roots: list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
  """Schedule the roots: the passes below, each once and in this order. Python scalars replaced by placeholders (the
  schedule cache does that) become kernel arguments."""
  prepared = prepare_graph(original_roots)
  ctx, multi = prepared.ctx, prepared.multi
  # 5. each kernel lowered once; the lanes of a tuple value running one kernel become one CALL
  jobs = lower_kernels(ctx)
  jobs = stack_lane_jobs(jobs, [tuple(prepared.lowered.get(lane, lane) for lane in g) for g in multi.groups])
  # 6. order the calls; stores that read each other's old values read snapshots taken first
  ordered = order_jobs(ctx, jobs)
  if ordered is None: ordered = order_jobs(ctx, snapshot_crossed_reads(ctx, jobs))
  if ordered is None: raise StoreCycleError("cycle in the schedule: these stores and reads cannot be ordered")
  linear = UOp(Ops.LINEAR, None, tuple(job.call for job in ordered))
  if spec_enabled(): check_spec(linear, "linear")
  # 7. what every node of the user's graph became
  return linear, realized_buffers(ctx, list(prepared.sink.src), prepared.lowered, multi)


def explain_realize_points(roots: list[UOp]) -> list[tuple[UOp, str]]:
  """Every node the schedule of `roots` realizes, in graph order, with the rule that realized it (for debugging a
  schedule: why a kernel ends where it does)."""
  ctx = prepare_graph(roots).ctx
  return [(node, ctx.reasons.get(node, "")) for node in ctx.realized]


def realized_buffers(ctx: ScheduleContext, roots: list[UOp], lowered: dict[UOp, UOp],
                     multi: MultiLowering) -> dict[UOp, UOp]:
  """Each realized node (and each node of the original graph that became one) -> the view of the buffer holding
  it, so the tensors rebind to their storage and no tensor recomputes it."""
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
  return becomes


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
    if all(is_buffer_view(lane) for lane in lanes) and lanes != list(lanes_of(low)):
      becomes[node] = multi_value(lanes, low.arg)
