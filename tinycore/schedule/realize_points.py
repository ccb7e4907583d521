"""Realize points: which nodes of a tensor graph get a buffer (and so a kernel) of their own, decided in one pass
over the graph before any kernel is built.

Fusion is the default: everything between two realized nodes lowers into one kernel. The pass visits the graph
once, consumers before sources, and carries each node's *uses*: the kernel that computes it, the index that kernel
reads it at (the kernel's loops, through the movement ops in between) and the reduction it is read inside, if any.
When a node is reached every use it will ever have is known, so its decision is made once, by these rules (each
names why in `ScheduleContext.reasons`, which `explain_realize_points` lists):

- forced (`forced_realize_points`): the roots, CONTIGUOUS, AFTER, the sources of cross-device and collective stores;
- on a device whose kernels take a limited number of arguments, the sources of a node that would read more
  (`limit_kernel_arguments`, bottom-up before the rest: it splits a sum of hundreds of tensors into several kernels);
- a reduce read by two kernels is computed once, in its own;
- a reduce read at an index that is not a prefix of its kernel's output loops would be recomputed for every
  iteration of a loop it does not depend on (a reduce broadcast along an outer loop, or indexed by another
  reduction's loop);
- a value computed from a reduce read through a pad that at least doubles it (the pieces of a cat, the gradient of
  a chunk) would be computed for every element the pad adds, and discarded there;
- a pad a reduction over its window alone reads through a sliding window (a depthwise convolution's or a pool's
  padded input) is stored padded, so the windows read it without a bounds test per element (depthwise: 5x faster);
- a value computed from a reduce (a softmax, a layernorm), read inside another reduction but broadcast along one
  of that reduction's output loops (attention's probabilities @ V: the same row for every output column), would be
  recomputed for every element of that loop;
- an elementwise value read by more than one kernel that itself reads more than MAX_SHARED_READS buffers (a
  transformer's residual stream) is stored once instead of recomputed, with all it reads, by each reader;
- a store whose value reads the store's own destination at other addresses would read bytes it already
  overwrote: its value is realized first (found when the loads are reached; the value's kernel is the store's,
  unchanged, so nothing decided is undone).

A realized node starts a kernel of its own, so its sources get that kernel's uses. Each distinct use of a node is
visited once: the pass costs what lowering every kernel once costs, and no decision is revisited.
"""
from __future__ import annotations
from math import prod
from typing import Callable
from tinycore.dtype import NARROW_FLOATS, dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.pattern import graph_rewrite
from tinycore.uop.symbolic import symbolic
from tinycore.uop.symbolic_shapes import max_int, max_numel
from tinycore.schedule.context import ScheduleContext, ScheduleError
from tinycore.schedule.copies import (contiguous_region, has_buffer_identity, is_storage_only, is_transfer_store,
                                     storage_root)
from tinycore.schedule.indexing import (Index, KernelLoops, and_valid, flat_index, kept_ranges, ranges_in,
                                        resized_bitcast_indices, source_index)
from tinycore.schedule.rangeify import target_address

# an elementwise value read by several kernels is recomputed by each while it reads at most this many buffers (and
# computes no reduction): a few loads per element cost less than a kernel and a buffer of its own
MAX_SHARED_READS = 3


# the device layer installs the lookup (device name -> the most arguments one kernel takes; None: any number)
_argument_limit_of: list[Callable[[str], int | None]] = []


def install_argument_limit(lookup: Callable[[str], int | None]) -> None:
  """Called once by the device registry: how the scheduler learns a device's kernel argument limit."""
  _argument_limit_of[:] = [lookup]


def argument_limit(device: object) -> int | None:
  if not isinstance(device, str) or not _argument_limit_of: return None
  return _argument_limit_of[0](device)


def limit_kernel_arguments(ctx: ScheduleContext, graph: dict[UOp, None]) -> None:
  """Bottom-up: the arguments each node's kernel would take (the buffers and scalars it reads through nodes not
  realized yet, plus its output); where a node on a device with an argument limit would take more, its sources
  carrying the most are realized (each then one argument) until it fits. Only devices with a limit pay for this."""
  limits = {d: argument_limit(d) for d in {n.src[1].arg for n in graph if n.op is Ops.BUFFER}}
  if not any(limits.values()): return
  args: dict[UOp, frozenset[UOp]] = {}
  for node in graph:
    if node.op in (Ops.BUFFER, Ops.DEFINE_VAR) or node in ctx.realized:
      args[node] = frozenset((node,))
      continue
    limit = limits.get(node.device) if isinstance(node.device, str) else None
    reads = frozenset().union(*(args[s] for s in node.src)) if node.src else frozenset()
    if limit is not None and len(reads) + 1 > limit:
      for src in sorted(dict.fromkeys(node.src), key=lambda s: -len(args[s])):
        if len(args[src]) <= 1 or max_numel(src.shape or ()) == 0: break
        ctx.realize(src, f"a kernel on {node.device} takes at most {limit} arguments")
        args[src] = frozenset((src,))
        reads = frozenset().union(*(args[s] for s in node.src))
        if len(reads) + 1 <= limit: break
    args[node] = reads


class PlannedKernel:
  """A kernel as the pass sees it: its loops, and for a store kernel the buffer it writes and the address it
  writes each element at (to find hazards)."""
  __slots__ = ("loops", "out_buffer", "store_address", "value")

  def __init__(self) -> None:
    self.loops = KernelLoops()
    self.out_buffer: UOp | None = None    # a store kernel's destination buffer
    self.store_address: UOp | None = None
    self.value: UOp | None = None         # a store kernel's value node


class Use:
  """A node read by `kernel` at `idx` (gated by `valid`), inside the reduction `enclosing` describes: (the loops
  its result depends on, its own loops), or None outside any; `masked` when a pad above it adds at least as many
  elements as it has (the kernel computes it for elements it then discards)."""
  __slots__ = ("kernel", "idx", "valid", "enclosing", "masked")

  def __init__(self, kernel: PlannedKernel, idx: Index, valid: UOp | None,
               enclosing: tuple[frozenset[UOp], frozenset[UOp]] | None, masked: bool = False):
    self.kernel, self.idx, self.valid, self.enclosing, self.masked = kernel, idx, valid, enclosing, masked

  def key(self) -> tuple:
    return (id(self.kernel), self.idx, self.valid, self.enclosing, self.masked)


# the largest reduction per output read as a window over a padded input that the input is stored padded for (a 7x7
# depthwise convolution)
MAX_WINDOW = 49
# a pad that makes its source at least this many times larger (the pieces of a cat, a chunk's gradient) leaves most
# of what its source computes unused
MASKING_PAD_RATIO = 2


def expands_below(node: UOp) -> bool:
  """Whether node's value, through the movement ops under it, repeats elements (an EXPAND: the pads that lay out a
  pool's windows side by side pad an expanded view; storing those would store every window)."""
  while node.op in GroupOp.Movement:
    if node.op is Ops.EXPAND: return True
    node = node.src[0]
  return False


def masks_most(pad: UOp) -> bool:
  return max_numel(pad.shape) >= MASKING_PAD_RATIO * max(1, max_numel(pad.src[0].shape))


def stored_buffer(u: UOp) -> UOp | None:
  """The BUFFER a stored version reads from (a BUFFER, or an AFTER chain on one), else None."""
  while u.op is Ops.AFTER: u = u.src[0].base if u.src[0].op is Ops.RESHAPE else u.src[0]
  return u if u.op is Ops.BUFFER else None


def is_buffer_view(u: UOp) -> bool:
  """A view of stored data (movement ops and bitcasts over a buffer): realizing it computes nothing."""
  return storage_root(u).op in (Ops.BUFFER, Ops.AFTER)


def _strip_reshapes(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u


def forced_realize_points(ctx: ScheduleContext, roots: list[UOp], graph: dict[UOp, None]) -> None:
  """The nodes that are materialized whatever fusion would decide: CONTIGUOUS (of anything but a whole buffer),
  every AFTER (a stored version), the roots that are not views of stored data, and the source of each cross-device
  store (realized on its own device first, so the store only moves bytes)."""
  for node in graph:
    if node.op is Ops.CONTIGUOUS and not has_buffer_identity(node.src[0]): ctx.realize(node, "contiguous")
    elif node.op is Ops.AFTER: ctx.realize(node, "a stored version of a buffer")
  for root in roots:
    # (a reshape of a node realized anyway reads that node's buffer: it is not stored twice)
    if not is_buffer_view(root) and not (root.op is Ops.CONTIGUOUS and has_buffer_identity(root.src[0])) and \
        not (root.op is Ops.RESHAPE and _strip_reshapes(root) in ctx.realized):
      ctx.realize(root, "a root of the realize")
  for node in graph:
    if node.op is Ops.STORE and is_transfer_store(node) and contiguous_region(node.src[1], ctx.realized) is None:
      value = node.src[1]
      if is_storage_only(value.device) and is_buffer_view(value):
        raise ScheduleError(f"non-contiguous view is not supported: {value.device} cannot compute, so a view of it "
                            "must be one contiguous range (shrink, reshape, bitcast)")
      if is_storage_only(value.device):
        raise ScheduleError(f"{value.device} cannot compute (it only stores bytes): move the tensor to a compute "
                            "device first, e.g. .to(Device.DEFAULT)")
      ctx.realize(value, "the source of a cross-device (or collective) store is realized on its own device")


class RealizePoints:
  """The pass over one graph (sources before consumers in `graph`); `decide()` fills `ctx.realized`."""

  def __init__(self, ctx: ScheduleContext, graph: dict[UOp, None]):
    self.ctx, self.graph = ctx, graph
    self.uses: dict[UOp, dict[tuple, Use]] = {}
    self.holds_reduce: dict[UOp, bool] = {}
    self.reads: dict[UOp, frozenset[UOp]] = {}

  def decide(self) -> None:
    self.summarize_sources()
    realized = self.ctx.realized
    for node in reversed(self.graph):
      uses = self.uses.pop(node, None)
      if uses and node not in realized and (reason := self.reason_to_realize(node, list(uses.values()))):
        self.ctx.realize(node, reason)
      if node.op is Ops.BUFFER or node in realized:
        if uses: self.check_hazards(node, uses.values())
        if node.op is not Ops.BUFFER and max_numel(node.shape) != 0: self.start_kernels(node)
      elif uses:
        for use in uses.values(): self.propagate(node, use)

  # --- what the rules read about a node's sources (as far as the forced realize points tell)
  def summarize_sources(self) -> None:
    """For every node: whether it computes a reduction in the kernel that reads it, and the buffers it reads
    there (at most MAX_SHARED_READS + 1 of them: only whether there are more matters)."""
    realized = self.ctx.realized
    for node in self.graph:
      if node.op is Ops.BUFFER or node in realized:
        self.holds_reduce[node], self.reads[node] = False, frozenset((node,))
        continue
      self.holds_reduce[node] = node.op is Ops.REDUCE_AXIS or any(self.holds_reduce[s] for s in node.src)
      reads: frozenset[UOp] = frozenset()
      for s in node.src:
        if len(reads) > MAX_SHARED_READS: break
        reads = reads | self.reads[s]
      self.reads[node] = reads

  # --- the rules
  def reason_to_realize(self, node: UOp, uses: list[Use]) -> str | None:
    op = node.op
    if self.holds_reduce[node] and any(use.masked for use in uses):
      return "a reduce read through a pad that discards most of it would be computed for every element of the pad"
    if op is Ops.PAD and not expands_below(node) and any(self.reads_sliding_window(node, use) for use in uses):
      return ("a padded value a reduction reads through a sliding window (a convolution's or a pool's input) is "
              "stored padded once: its windows then read it without a bounds test per element")
    if op is Ops.REDUCE_AXIS:
      for use in uses:
        used, outputs = kept_ranges(node, use.idx), use.kernel.loops.output_ranges
        if any(r not in outputs for r in used):
          return "a reduce indexed by another reduce's loop would be recomputed for every iteration"
        if used != set(outputs[:len(used)]):
          return "a reduce broadcast along an outer loop would be recomputed for every element"
      if len({id(use.kernel) for use in uses}) > 1: return "a reduce read by two kernels is computed once, in its own"
      return None
    if op is Ops.CAST and self.rounds_a_reused_operand(node, uses):
      return ("a value rounded to a 16-bit float that a reduction reads for several outputs (a matmul's operand) is "
              "stored rounded once, not rounded again at every read")
    if op not in GroupOp.ALU and op not in (Ops.CAST, Ops.BITCAST): return None
    if self.holds_reduce[node] and (op is not Ops.BITCAST or node.dtype.itemsize == node.src[0].dtype.itemsize):
      for use in uses:
        if use.enclosing is None: continue
        free, own = use.enclosing
        used = ranges_in(use.idx)
        if used & own and not free <= used:
          return ("a value computed from a reduce, broadcast into another reduction along an output loop, would be "
                  "recomputed for every element of that loop")
    if len(self.reads[node]) > MAX_SHARED_READS and len({id(use.kernel) for use in uses}) > 1:
      return f"an elementwise value reading more than {MAX_SHARED_READS} buffers is stored once, not recomputed by " \
             "each kernel that reads it"
    return None

  @staticmethod
  def rounds_a_reused_operand(cast: UOp, uses: list[Use]) -> bool:
    """Whether `cast` rounds a wider float to a narrow float (float16, bfloat16, 8-bit) and some reduction reads it
    without one of its output loops (each value is read for several outputs: `x.half() @ w.half()` rounded every
    operand again in the register tile, a software rounding per multiply-add)."""
    source = cast.src[0].dtype
    if cast.dtype not in NARROW_FLOATS or not dtypes.is_float(source) or \
        source.itemsize <= cast.dtype.itemsize:
      return False
    return any(use.enclosing is not None and not use.enclosing[0] <= ranges_in(use.idx) for use in uses)

  @staticmethod
  def reads_sliding_window(pad: UOp, use: Use) -> bool:
    """Whether `use` reads a border pad (both sides of a dim: a convolution's padding, not a scan's filler at the end)
    inside a small reduction (at most MAX_WINDOW elements per output: a depthwise convolution's or a pool's kh x kw
    window) whose windows overlap: the kernel makes at least one output per two
    padded elements, so it reads each one several times. A convolution also summing input channels has a larger
    reduction: its register tiles' packed panels apply the padding once per panel, faster than a padded copy; a
    stride-2 pool reads each element about once."""
    if use.enclosing is None or not any(before > 0 and after > 0 for before, after in pad.arg): return False
    window = prod(max_int(r.src[0]) for r in use.enclosing[1])
    outputs = prod(max_int(r.src[0]) for r in use.kernel.loops.output_ranges)
    return window <= MAX_WINDOW and 2 * outputs >= max_numel(pad.shape)

  def check_hazards(self, node: UOp, uses) -> None:
    """Loads of a store kernel's own destination at other addresses than it writes: realize the stored value."""
    buffer = stored_buffer(node)
    if buffer is None: return
    for use in uses:
      kernel = use.kernel
      if kernel.out_buffer is not buffer: continue
      if graph_rewrite(flat_index(use.idx, node.shape), symbolic) is kernel.store_address: continue
      value = kernel.value
      self.ctx.realize(value, "the stored value reads its own destination at other addresses")
      # the store's kernel now computes the value into its own buffer: same loops, no destination to guard
      kernel.out_buffer = kernel.store_address = kernel.value = None

  # --- kernels and uses
  def start_kernels(self, node: UOp) -> None:
    """The kernels a realized node runs: one per store of an AFTER (copies run none), else one computing it."""
    if node.op is not Ops.AFTER:
      kernel = PlannedKernel()
      idx, gate = kernel.loops.output_index(node.shape)
      self.propagate(node, Use(kernel, idx, gate, None))
      return
    for effect in node.src[1:]:
      if effect.op is not Ops.STORE or is_transfer_store(effect): continue
      target, value = effect.src
      kernel = PlannedKernel()
      idx, gate = kernel.loops.output_index(target.shape)
      address, _ = target_address(target, idx)
      kernel.out_buffer, kernel.value = stored_buffer(node), value
      kernel.store_address = graph_rewrite(address, symbolic)
      self.add_use(value, Use(kernel, idx, gate, None))

  def add_use(self, node: UOp, use: Use) -> None:
    self.uses.setdefault(node, {}).setdefault(use.key(), use)

  def propagate(self, node: UOp, use: Use) -> None:
    """The uses of node's sources when the kernel of `use` computes node (the index math of lowering)."""
    op, kernel, idx, valid = node.op, use.kernel, use.idx, use.valid
    if op in GroupOp.Movement:
      src_idx, cond = source_index(node, idx, self.ctx.index_memo)
      masked = use.masked or (op is Ops.PAD and cond is not None and masks_most(node))
      self.add_use(node.src[0], Use(kernel, src_idx, and_valid(valid, cond), use.enclosing, masked))
    elif op in (Ops.CONTIGUOUS, Ops.DETACH): self.add_use(node.src[0], use)
    elif op is Ops.REDUCE_AXIS:
      if any(max_int(node.src[0].shape[axis]) == 0 for axis in node.arg[1]): return
      src_idx, reduce_ranges, gate = kernel.loops.reduce_index(node, idx)
      enclosing = (frozenset(kept_ranges(node, idx)), frozenset(reduce_ranges))
      self.add_use(node.src[0], Use(kernel, src_idx, and_valid(valid, gate), enclosing))
    elif op is Ops.BITCAST and node.dtype.itemsize != node.src[0].dtype.itemsize:
      for src_idx in resized_bitcast_indices(node, idx):
        self.add_use(node.src[0], Use(kernel, src_idx, valid, use.enclosing, use.masked))
    elif op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
      for s in node.src: self.add_use(s, use)


def decide_realize_points(ctx: ScheduleContext, graph: dict[UOp, None]) -> None:
  """Add every realize point the fusion rules above find to `ctx.realized` (which holds the forced ones)."""
  RealizePoints(ctx, graph).decide()
