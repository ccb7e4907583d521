"""Multi-device tensors: lowering a logical graph over device tuples into one graph per lane, and allreduce.

A sharded tensor is `UNSHARD(MSTACK(lane_0, ..., lane_N-1), axis)`: lane i lives on device i and holds the i-th
slice of `axis` (or the whole tensor when axis is None: replicated). `lower_multi` pushes UNSHARD up through every
op, so each op runs lane-wise on single-device values; a reduce over the sharded axis becomes a local reduce plus
ALLREDUCE, which `allreduce_rules` lowers to copies and per-lane sums (naive, ring or all2all, see
`allreduce_lanes`). The scheduler then schedules the lanes as ordinary single-device graphs; `LaneGroups` remembers
which lanes form one tuple value, so identical per-lane kernels become one CALL over MSTACK arguments that
`split_lanes` runs once per lane.
"""
from __future__ import annotations
import functools
import itertools
from typing import Callable
from tinycore.dtype import dtypes
from tinycore.helpers import ALL2ALL, ALLREDUCE_CAST, RING, getenv
from tinycore.uop.ops import GroupOp, Ops, UOp, install_sharding_axis, prod
from tinycore.uop.pattern import PatternMatcher, UPat, graph_rewrite_map


class MultiError(ValueError):
  """An operation that multi-device tensors do not support as written (the message says why and what to do)."""


# ---------------------------------------------------------------------------- tuple values
def multi_value(lanes: list[UOp] | tuple[UOp, ...], axis: int | None) -> UOp:
  """The logical tensor over these lanes, sharded on `axis` (None: every lane holds all of it)."""
  stack = UOp(Ops.MSTACK, lanes[0].dtype, tuple(lanes))
  return UOp(Ops.UNSHARD, lanes[0].dtype, (stack,), axis)


def is_multi(u: UOp) -> bool: return u.op is Ops.UNSHARD
def lanes_of(u: UOp) -> tuple[UOp, ...]: return u.src[0].src
def devices_of(u: UOp) -> tuple[str, ...]: return u.src[0].device


def lane_bounds(size: int, count: int, lane: int) -> tuple[int, int]:
  """The slice of an axis of `size` elements that lane `lane` of `count` holds."""
  if size % count: raise MultiError(f"multi axis uneven: an axis of size {size} does not split over {count} devices")
  step = size // count
  return lane * step, (lane + 1) * step


def _lane_slice(u: UOp, axis: int, lane: int, count: int) -> UOp:
  """A replicated lane cut down to what lane `lane` holds of `axis` (to meet an operand sharded on it)."""
  lo, hi = lane_bounds(u.shape[axis], count, lane)
  return u.shrink(tuple((lo, hi) if i == axis else (0, s) for i, s in enumerate(u.shape)))


def _concat(pieces: list[UOp], axis: int, offsets: list[int], size: int) -> UOp:
  """Pieces on one device placed at their offsets along axis into a tensor of `size` there (pad and add)."""
  total = None
  for piece, offset in zip(pieces, offsets):
    padding = tuple((offset, size - offset - piece.shape[axis]) if i == axis else (0, 0)
                    for i in range(len(piece.shape)))
    padded = piece.pad(padding)
    total = padded if total is None else total.alu(Ops.OR if piece.dtype is dtypes.bool else Ops.ADD, padded)
  return total


def _copy(u: UOp, device: str) -> UOp: return u if u.device == device else UOp(Ops.COPY, u.dtype, (u,), device)


def gather(u: UOp, device: str) -> UOp:
  """A multi value as one tensor on `device`: lane 0 when replicated, else every shard copied there and joined."""
  lanes, axis = lanes_of(u), u.arg
  if axis is None: return _copy(lanes[0], device)
  step = lanes[0].shape[axis]
  return _concat([_copy(lane, device) for lane in lanes], axis, [i * step for i in range(len(lanes))], u.shape[axis])


# ---------------------------------------------------------------------------- lowering, op by op
def _check_devices(node: UOp, multis: list[UOp]) -> tuple[str, ...]:
  devices = {devices_of(m) for m in multis}
  if len(devices) != 1: raise MultiError(f"{node.op.name} of tensors on different device tuples: {sorted(devices)}")
  return devices.pop()


def _narrowed_allreduce(node: UOp, src: UOp) -> UOp | None:
  """A cast to float16/bfloat16 of an allreduced float32 value (a 16-bit sum accumulates in float32): with
  ALLREDUCE_CAST the lanes are cast down before the allreduce, so its copies move 16-bit data."""
  if not ALLREDUCE_CAST.value or node.op is not Ops.CAST or node.dtype not in (dtypes.float16, dtypes.bfloat16):
    return None
  lane = lanes_of(src)[0]
  selected = lane.src[0] if lane.op is Ops.RESHAPE else lane  # (a reduce without keepdim reshapes its result)
  if selected.op is not Ops.MSELECT or selected.src[0].op is not Ops.ALLREDUCE: return None
  combined = selected.src[0]
  narrow = UOp(Ops.MSTACK, node.dtype, tuple(x.cast(node.dtype) for x in combined.src[0].src))
  narrowed = UOp(Ops.ALLREDUCE, node.dtype, (narrow,), combined.arg)
  return multi_value([UOp(Ops.MSELECT, node.dtype, (narrowed,), i).reshape(lane.shape)
                      for i in range(len(narrow.src))], None)


def _is_materialized(lane: UOp) -> bool:
  """A lane that the schedule stores anyway, behind reshapes: a CONTIGUOUS, or a lane of an allreduce's result."""
  while lane.op is Ops.RESHAPE: lane = lane.src[0]
  return lane.op is Ops.CONTIGUOUS or (lane.op is Ops.MSELECT and lane.src[0].op is Ops.ALLREDUCE)


def _lower_elementwise(node: UOp, srcs: list[UOp]) -> UOp:
  """An elementwise op over sharded operands runs lane-wise; a replicated operand is cut to each lane's slice."""
  if (narrowed := _narrowed_allreduce(node, srcs[0])) is not None: return narrowed
  if node.op is Ops.CONTIGUOUS and is_multi(srcs[0]) and all(_is_materialized(lane) for lane in lanes_of(srcs[0])):
    return srcs[0]  # the lanes are stored already (an allreduce's results): nothing to copy
  multis = [s for s in srcs if is_multi(s)]
  devices = _check_devices(node, multis)
  single = [s for s in srcs if not is_multi(s) and s.device is not None]
  if single: raise MultiError(f"{node.op.name} of a tensor on {devices} and one on {single[0].device}: move one first")
  # the first sharded operand's axis wins; an operand sharded on another axis is resharded (gathered onto each device)
  axis = next((m.arg for m in multis if m.arg is not None), None)
  srcs = [multi_value([gather(s, d) for d in devices], None) if is_multi(s) and s.arg not in (None, axis) else s
          for s in srcs]
  n = len(devices)
  lanes = []
  for i in range(n):
    lane_srcs = []
    for s in srcs:
      if not is_multi(s): lane_srcs.append(s)
      elif s.arg is None and axis is not None: lane_srcs.append(_lane_slice(lanes_of(s)[i], axis, i, n))
      else: lane_srcs.append(lanes_of(s)[i])
    lanes.append(node.replace(src=tuple(lane_srcs)))
  return multi_value(lanes, axis)


def _lower_reduce(node: UOp, src: UOp) -> UOp:
  """A reduce runs lane-wise; over the sharded axis the lanes' partial results are then combined (ALLREDUCE)."""
  lanes = [node.replace(src=(lane,)) for lane in lanes_of(src)]
  if src.arg is None or src.arg not in node.arg[1]: return multi_value(lanes, src.arg)
  combined = UOp(Ops.ALLREDUCE, node.dtype, (UOp(Ops.MSTACK, node.dtype, tuple(lanes)),), node.arg[0])
  return multi_value([UOp(Ops.MSELECT, node.dtype, (combined,), i) for i in range(len(lanes))], None)


def reshaped_axis(old: tuple[int, ...], new: tuple[int, ...], axis: int, count: int) -> int:
  """Where a sharded axis lands in a reshape: the dim that starts after the same elements as the old one and still
  splits evenly; a reshape that would move elements between lanes has none and is an error."""
  before = prod(old[:axis])
  for i, size in enumerate(new):
    if prod(new[:i]) == before and size % count == 0 and size > 0: return i
  raise MultiError(f"reshape {old} -> {new} would move elements across shards of axis {axis} (over {count} devices)")


def _lower_movement(node: UOp, src: UOp) -> UOp:
  """Movement ops run lane-wise on the lanes' shapes; the sharded axis follows (a shrink or flip of it moves data)."""
  lanes, axis, n = lanes_of(src), src.arg, len(devices_of(src))
  if axis is None: return multi_value([node.replace(src=(lane,)) for lane in lanes], None)
  op, arg = node.op, node.arg
  if op is Ops.RESHAPE:
    new_axis = reshaped_axis(src.shape, arg, axis, n)
    shape = tuple(s // n if i == new_axis else s for i, s in enumerate(arg))
    return multi_value([lane.reshape(shape) for lane in lanes], new_axis)
  if op is Ops.PERMUTE: return multi_value([lane.permute(arg) for lane in lanes], arg.index(axis))
  if op is Ops.EXPAND:
    shape = tuple(lanes[0].shape[i] if i == axis else s for i, s in enumerate(arg))
    return multi_value([lane.expand(shape) for lane in lanes], axis)
  if op is Ops.PAD:
    if arg[axis] == (0, 0): return multi_value([lane.pad(arg) for lane in lanes], axis)
    # the padded axis no longer splits into the same shards: every lane gets the whole tensor, padded
    return multi_value([gather(src, d).pad(arg) for d in devices_of(src)], None)
  if op is Ops.SHRINK:
    if arg[axis] == (0, src.shape[axis]):
      bounds = tuple((0, lanes[0].shape[axis]) if i == axis else b for i, b in enumerate(arg))
      return multi_value([lane.shrink(bounds) for lane in lanes], axis)
    return _shrink_sharded_axis(src, arg, axis)
  if op is Ops.FLIP:
    if not arg[axis]: return multi_value([lane.flip(arg) for lane in lanes], axis)
    devices = devices_of(src)
    return multi_value([_copy(lanes[n - 1 - i], devices[i]).flip(arg) for i in range(n)], axis)
  raise MultiError(f"cannot lower {op.name} of a multi-device tensor")


def _shrink_sharded_axis(src: UOp, bounds: tuple[tuple[int, int], ...], axis: int) -> UOp:
  """A shrink across the sharded axis drops the axis: the selected elements are copied to every lane (replicated)."""
  lanes, devices = lanes_of(src), devices_of(src)
  step, (lo, hi) = lanes[0].shape[axis], bounds[axis]
  pieces, offsets = [], []
  for j, lane in enumerate(lanes):
    start, end = max(lo, j * step), min(hi, (j + 1) * step)
    if start >= end: continue
    local = tuple((start - j * step, end - j * step) if i == axis else b for i, b in enumerate(bounds))
    pieces.append(lane.shrink(local))
    offsets.append(start - lo)
  if not pieces: return multi_value([lanes[0].shrink(tuple((0, 0) if i == axis else b for i, b in enumerate(bounds)))
                                     for _ in lanes], None)
  return multi_value([_concat([_copy(p, d) for p in pieces], axis, offsets, hi - lo) for d in devices], None)


def _lower_copy(node: UOp, src: UOp) -> UOp:
  """A copy off a device tuple gathers (to one device) or gathers onto each device of another tuple."""
  if isinstance(node.arg, str): return gather(src, node.arg)
  if node.arg == devices_of(src): return src
  return multi_value([gather(src, d) for d in node.arg], None)


def _lower_store(node: UOp, target: UOp, value: UOp) -> UOp:
  """A store into a sharded view stores each lane's part of the value into that lane (a replicated value is cut to
  each lane's slice; a single-device value was copied to the tuple by assign)."""
  if not is_multi(target): raise MultiError("a store of a multi-device value into a single-device tensor: gather first")
  if not is_multi(value): raise MultiError(f"store of a value on {value.device} into a tensor on {devices_of(target)}")
  devices, n, axis = _check_devices(node, [target, value]), len(devices_of(target)), target.arg
  if value.arg is not None and value.arg != axis:  # resharded onto the target's axis (gathered onto each device)
    value = multi_value([gather(value, d) for d in devices], None)
  stores = []
  for i in range(len(devices)):
    lane_value = lanes_of(value)[i]
    if value.arg is None and axis is not None: lane_value = _lane_slice(lane_value, axis, i, n)
    stores.append(UOp(Ops.STORE, None, (lanes_of(target)[i], lane_value)))
  return UOp(Ops.MSTACK, None, tuple(stores), axis)


def _lower_after(node: UOp, srcs: list[UOp]) -> UOp:
  """Each lane's buffer after that lane's stores. The AFTER sits on the buffer itself (below the lane's reshape),
  as on one device, so the schedule orders the stores after every read of the buffer's previous value."""
  base, effects = srcs[0], srcs[1:]
  lanes = []
  for i, lane in enumerate(lanes_of(base)):
    storage = lane
    while storage.op is Ops.RESHAPE: storage = storage.src[0]
    after = UOp(Ops.AFTER, storage.dtype, (storage, *(e.src[i] for e in effects)))
    lanes.append(after.reshape(lane.shape))
  return multi_value(lanes, base.arg)


def _lower_collective(node: UOp, src: UOp) -> UOp:
  """A collective across processes of a tuple value crosses once per process (hierarchical): the lanes are gathered
  onto the first lane's device (a replicated value is lane 0 itself: when it is a local allreduce's result, that
  reduces the lanes first), one collective runs there, and its result is copied back out to every lane (an
  all_reduce or broadcast keeps the input's sharding; an all_gather's result is replicated)."""
  devices, axis = devices_of(src), src.arg
  crossed = node.replace(src=(gather(src, devices[0]),))
  if node.arg.kind == "all_gather" or axis is None: return multi_value([_copy(crossed, d) for d in devices], None)
  n = len(devices)
  return multi_value([_lane_slice(crossed, axis, i, n) if i == 0 else _copy(_lane_slice(crossed, axis, i, n), d)
                      for i, d in enumerate(devices)], axis)


def _lower_tuple_source(node: UOp) -> UOp:
  """A constant, arange or scalar placeholder on a device tuple is the same value on every lane. A placeholder
  stays one node (its value is bound once per call): each lane reads it through MSELECT."""
  devices = node.src[0].arg
  if node.op is Ops.DEFINE_VAR:
    return multi_value([UOp(Ops.MSELECT, node.dtype, (node,), i) for i in range(len(devices))], None)
  return multi_value([node.replace(src=(UOp(Ops.DEVICE, None, (), d),)) for d in devices], None)


def lower_multi_node(node: UOp, srcs: list[UOp]) -> UOp:
  """What one node of the logical graph becomes, given what its sources became."""
  if node.op in (Ops.CONST, Ops.ARANGE, Ops.DEFINE_VAR) and node.src and isinstance(node.src[0].arg, tuple):
    return _lower_tuple_source(node)
  changed = node if all(a is b for a, b in zip(srcs, node.src)) else node.replace(src=tuple(srcs))
  if node.op in (Ops.UNSHARD, Ops.MSTACK, Ops.SINK): return changed
  if node.op is Ops.COPY and isinstance(node.arg, tuple) and not any(is_multi(s) for s in srcs):
    return multi_value([_copy(srcs[0], d) for d in node.arg], None)  # one device to a tuple: replicate
  if not any(is_multi(s) or s.op is Ops.MSTACK for s in srcs): return changed
  op = node.op
  if op in GroupOp.Elementwise or op in (Ops.CONTIGUOUS, Ops.DETACH): return _lower_elementwise(node, srcs)
  if op is Ops.REDUCE_AXIS: return _lower_reduce(node, srcs[0])
  if op in GroupOp.Movement: return _lower_movement(node, srcs[0])
  if op is Ops.COPY: return _lower_copy(node, srcs[0])
  if op is Ops.STORE: return _lower_store(node, srcs[0], srcs[1])
  if op is Ops.AFTER: return _lower_after(node, srcs)
  if op is Ops.COLLECTIVE: return _lower_collective(node, srcs[0])
  raise MultiError(f"{op.name} is not supported on multi-device tensors")


class MultiLowering:
  """What `lower_multi` made: `nodes` maps every logical node to its lowered form (UNSHARD(MSTACK(lanes), axis) for a
  value on a device tuple, the node itself with lowered sources otherwise); `groups` lists the lanes of every tuple
  value, whose identical kernels run as one CALL."""
  def __init__(self, nodes: dict[UOp, UOp], groups: list[tuple[UOp, ...]]):
    self.nodes, self.groups = nodes, groups


def on_a_device_tuple(u: UOp) -> bool:
  """Whether a node names a device tuple (its DEVICE, a copy onto one) or is a multi-device op."""
  return (u.op in (Ops.DEVICE, Ops.COPY) and isinstance(u.arg, tuple)) or \
    u.op in (Ops.UNSHARD, Ops.MSTACK, Ops.MSELECT, Ops.ALLREDUCE)


def lower_multi(sink: UOp) -> MultiLowering:
  """Lower the logical graph under sink to per-lane graphs (ALLREDUCEs included); a graph on single devices only is
  its own lowering."""
  nodes = sink.toposort()
  if not any(on_a_device_tuple(n) for n in nodes): return MultiLowering({n: n for n in nodes}, [])
  done: dict[UOp, UOp] = {}
  for node in nodes:
    done[node] = lower_multi_node(node, [done[s] for s in node.src])
  groups: list[tuple[UOp, ...]] = []
  if any(n.op is Ops.ALLREDUCE for n in done[sink].toposort()):
    rewritten = graph_rewrite_map(done[sink], allreduce_rules, groups)
    done = {node: rewritten.get(mid, mid) for node, mid in done.items()}
  stacks = {n.src: None for n in done[sink].toposort() if n.op is Ops.MSTACK and n.dtype is not None}
  return MultiLowering(done, list(stacks) + groups)


def sharding_axis(u: UOp) -> int | None:
  """The axis u is sharded along once lowered (None: replicated, or not on a device tuple): `UOp.axis`."""
  if not any(on_a_device_tuple(n) for n in u.toposort()): return None
  lowered = lower_multi(UOp(Ops.SINK, None, (u,))).nodes[u]
  return lowered.arg if is_multi(lowered) else None


install_sharding_axis(sharding_axis)


def lane_roots(sink: UOp) -> list[UOp]:
  """The single-device roots of a lowered SINK: each multi root contributes its lanes."""
  return [lane for root in sink.src for lane in (lanes_of(root) if is_multi(root) else (root,))]


# ---------------------------------------------------------------------------- allreduce
# ring and all2all pay off only past this many elements on more than two devices (tinygrad's empirical rule)
RING_THRESHOLD = getenv("RING_ALLREDUCE_THRESHOLD", 256_000)


def allreduce_kind(count: int, numel: int) -> str:
  """naive, ring or all2all, as tinygrad chooses: RING>=2 (ALL2ALL>=2) forces it, >=1 allows it when worth it."""
  worth_it = count > 2 and numel > RING_THRESHOLD
  if ALL2ALL.value >= 2 or (ALL2ALL.value >= 1 and worth_it): return "all2all"
  if RING.value >= 2 or (RING.value >= 1 and worth_it): return "ring"
  return "naive"


def allreduce_settings() -> tuple[int, int, int]:
  """The settings an allreduce's lowering depends on (part of the schedule cache key)."""
  return (int(RING.value), int(ALL2ALL.value), int(ALLREDUCE_CAST.value))


def chunk_bounds(numel: int, count: int) -> list[tuple[int, int]]:
  """`count` chunks of a flat buffer, each a multiple of the largest of 32, 16, 8, 4, 2 that divides numel."""
  factor = next((f for f in (32, 16, 8, 4, 2) if numel % f == 0), 1)
  base, left = divmod(numel // factor, count)
  sizes = [(base + 1) * factor] * left + [base * factor] * (count - left)
  return list(itertools.pairwise(itertools.accumulate(sizes, initial=0)))


def allreduce_lanes(reduce_op: Ops, lanes: tuple[UOp, ...], groups: list[tuple[UOp, ...]]) -> list[UOp]:
  """Every lane gets all lanes combined with reduce_op. The inputs are made contiguous first, so copies read views
  of them; each result is materialized (a collective ends in stored buffers, as a call would). The lanes of both
  are appended to `groups`."""
  devices = [lane.device for lane in lanes]
  shape, dtype, numel = lanes[0].shape, lanes[0].dtype, prod(lanes[0].shape)
  # 16-bit floats are summed in float32; ALLREDUCE_CAST keeps them 16-bit while they are copied
  wide = dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype
  wire = dtype if ALLREDUCE_CAST.value else wide
  inputs = [UOp(Ops.CONTIGUOUS, wire, (lane.cast(wire),)) for lane in lanes]
  flat = [x.reshape((numel,)) for x in inputs]

  def combine(a: UOp, b: UOp) -> UOp: return a.cast(wide).alu(reduce_op, b.cast(wide)).cast(wire)

  kind = allreduce_kind(len(lanes), numel)
  if kind == "naive":
    summed = [functools.reduce(combine, [_copy(f, d) for f in flat]) for d in devices]
  else:
    chunks = chunk_bounds(numel, len(lanes))
    step = ring_chunks if kind == "ring" else all2all_chunks
    pieces = step(combine, flat, devices, chunks)  # pieces[d][c]: chunk c, reduced, on device d
    summed = [_concat(pieces[d], 0, [s for s, _ in chunks], numel) for d in range(len(devices))]
  results = [UOp(Ops.CONTIGUOUS, dtype, (s.cast(dtype).reshape(shape),)) for s in summed]
  groups.extend([tuple(inputs), tuple(results)])
  return results


def ring_chunks(combine: Callable, flat: list[UOp], devices: list[str], chunks) -> list[list[UOp]]:
  """Ring: chunk c travels c -> c+1 -> ... accumulating each lane's part (reduce-scatter), then the reduced chunk
  travels on around the ring to every lane (allgather). Every copy goes from lane i to lane i+1."""
  n = len(devices)
  pieces: list[list[UOp]] = [[None] * len(chunks) for _ in devices]  # type: ignore[list-item]
  for c, (s, e) in enumerate(chunks):
    acc = flat[c].shrink(((s, e),))
    for step in range(n - 1):
      dst = (c + step + 1) % n
      acc = combine(_copy(acc, devices[dst]), flat[dst].shrink(((s, e),)))
    owner = (c + n - 1) % n
    pieces[owner][c] = acc
    for step in range(n - 1):
      dst = (owner + step + 1) % n
      acc = pieces[dst][c] = _copy(acc, devices[dst])
  return pieces


def all2all_chunks(combine: Callable, flat: list[UOp], devices: list[str], chunks) -> list[list[UOp]]:
  """All-to-all: lane c gathers chunk c from every lane and reduces it, then sends it to every other lane."""
  pieces: list[list[UOp]] = [[None] * len(chunks) for _ in devices]  # type: ignore[list-item]
  for c, (s, e) in enumerate(chunks):
    reduced = functools.reduce(combine, [_copy(f.shrink(((s, e),)), devices[c]) for f in flat])
    for d, device in enumerate(devices): pieces[d][c] = _copy(reduced, device)
  return pieces


def _lower_allreduce(ctx: list[tuple[UOp, ...]], ar: UOp) -> UOp:
  return UOp(Ops.MSTACK, ar.dtype, tuple(allreduce_lanes(ar.arg, ar.src[0].src, ctx)))


allreduce_rules = PatternMatcher([
  # an ALLREDUCE of stacked lanes is the stack of each lane's combined value (naive, ring or all2all copies)
  (UPat(Ops.ALLREDUCE, src=(UPat(Ops.MSTACK),), name="ar"), _lower_allreduce),
  # selecting lane i of a stack is that lane's value
  (UPat(Ops.MSELECT, src=(UPat(Ops.MSTACK, name="stack"),), name="sel"), lambda sel, stack: stack.src[sel.arg]),
])


# ---------------------------------------------------------------------------- tuple calls
def stacked_call(calls: list[UOp]) -> UOp | None:
  """One CALL for the same kernel on every lane: each buffer argument an MSTACK of the lanes' buffers. None when
  the lanes' kernels or scalar arguments differ."""
  first = calls[0]
  if first.src[0].op is not Ops.SINK: return None
  if any(c.src[0] is not first.src[0] or len(c.src) != len(first.src) for c in calls): return None
  args = []
  for position in range(1, len(first.src)):
    column = [c.src[position] for c in calls]
    if column[0].op in (Ops.BUFFER, Ops.BUFFER_VIEW): args.append(UOp(Ops.MSTACK, column[0].dtype, tuple(column)))
    elif all(a is column[0] for a in column): args.append(column[0])
    else: return None
  return UOp(Ops.CALL, None, (first.src[0], *args))


def split_lanes(linear: UOp) -> UOp:
  """The LINEAR with every tuple CALL (MSTACK arguments) replaced by one CALL per lane, in lane order."""
  if not any(a.op is Ops.MSTACK for call in linear.src for a in call.src[1:]): return linear
  calls = []
  for call in linear.src:
    stacked = [a for a in call.src[1:] if a.op is Ops.MSTACK]
    if not stacked:
      calls.append(call)
      continue
    for lane in range(len(stacked[0].src)):
      calls.append(call.replace(src=(call.src[0], *(a.src[lane] if a.op is Ops.MSTACK else a for a in call.src[1:]))))
  return UOp(Ops.LINEAR, None, tuple(calls))
