"""Lowering a realized tensor value into a kernel: output ranges, index math through movement ops, loads from the
buffers it reads, REDUCE over fresh ranges, and one STORE into its own buffer.

Fusion is the default: everything between two realized buffers lowers into one kernel. A node is realized (gets
its own buffer, and so its own kernel) when it must be: see `NeedsRealize` for the rules this lowering enforces.
"""
from __future__ import annotations
from typing import TYPE_CHECKING
from tinycore.dtype import dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp, identity_element
from tinycore.uop.symbolic_shapes import max_int
from tinycore.schedule.indexing import Index, and_valid, const_index, flat_index, index_size, source_index
from tinycore.schedule.scalars import kernel_parameter

if TYPE_CHECKING:
  from tinycore.schedule.context import ScheduleContext


class NeedsRealize(Exception):
  """Raised while lowering when fusing `node` would be wrong or wasteful; the scheduler realizes it and retries.

  - a reduce read with indices that are not a prefix of the kernel's loops would be recomputed per element;
  - a reduce read by two kernels would be computed twice;
  - a store whose value reads its own destination at other indices would read bytes it already overwrote;
  - a value computed from a reduce (a softmax, a layernorm) read inside another reduction but broadcast along one of
    the kernel's output loops (attention's probabilities @ V: the same row for every output column) would be
    recomputed for each element of that loop (the exps of a softmax, dv times over).
  """
  def __init__(self, node: UOp, reason: str):
    super().__init__(reason)
    self.node, self.reason = node, reason


class KernelBuilder:
  """Builds one kernel: `STORE(INDEX(PARAM 0, offset, gate), value)` wrapped in a SINK, plus its buffer list."""

  def __init__(self, ctx: ScheduleContext, owner: UOp):
    self.ctx, self.owner = ctx, owner
    self.buffers: list[UOp] = []          # BUFFER uops, by param slot
    self.scalar_sources: dict[UOp, UOp] = {}  # scalar parameter (kernel DEFINE_VAR) -> the placeholder it reads
    self.reads: list[UOp] = []            # the value nodes this kernel loads (for ordering)
    self.output_ranges: list[UOp] = []
    self.range_count = 0
    self.memo: dict[tuple, UOp] = {}
    self.loads_of_output: list[tuple[UOp, UOp | None]] = []
    self.enclosing: list[tuple[set[UOp], set[UOp]]] = []  # per reduce being lowered: (its free loops, its own)
    self.holds_reduce: dict[UOp, bool] = {}     # node -> whether it computes a reduce in this kernel

  # --- parameters and ranges
  def param(self, buf: UOp) -> UOp:
    if buf not in self.buffers: self.buffers.append(buf)
    return UOp(Ops.PARAM, buf.dtype, (), self.buffers.index(buf))

  def scalar(self, placeholder: UOp) -> UOp:
    """A Python scalar's placeholder read in this kernel: a scalar parameter."""
    param = kernel_parameter(placeholder)
    self.scalar_sources[param] = placeholder
    return param

  def new_range(self, size: int, kind: str) -> UOp:
    if size == 1: return const_index(0)
    rng = UOp(Ops.RANGE, dtypes.index, (const_index(size),), (self.range_count, kind))
    self.range_count += 1
    return rng

  def sized_range(self, size: int | UOp, kind: str) -> tuple[UOp, UOp | None]:
    """A loop over a dim and the gate its iterations need: none for an int size; a symbolic size (a Variable the
    kernel takes as an argument) loops to its largest value, gated by `index < size`."""
    if not isinstance(size, UOp): return self.new_range(size, kind), None
    bound = index_size(size)
    rng = self.new_range(max_int(size), kind)
    # the bound rides along as the RANGE's second source: a renderer may end the loop there (the gate stays, so one
    # that loops to the largest size is right too)
    if rng.op is Ops.RANGE: rng = rng.replace(src=(*rng.src, bound))
    return rng, UOp(Ops.CMPLT, dtypes.bool, (rng, bound))

  def output_index(self, shape: tuple[int, ...]) -> tuple[Index, UOp | None]:
    """The output loops of a kernel over `shape`, and the gate of its symbolic dims (None when all are ints)."""
    ranges = [self.sized_range(s, "loop") for s in shape]
    idx = tuple(rng for rng, _ in ranges)
    self.output_ranges = [i for i in idx if i.op is Ops.RANGE]
    gate = None
    for _, g in ranges: gate = and_valid(gate, g)
    return idx, gate

  # --- lowering
  def lower(self, u: UOp, idx: Index, valid: UOp | None, top: bool = False) -> UOp:
    key = (u, idx, valid, top)
    if (done := self.memo.get(key)) is not None: return done
    result = self._lower(u, idx, valid, top)
    self.memo[key] = result
    return result

  def _lower(self, u: UOp, idx: Index, valid: UOp | None, top: bool) -> UOp:
    op = u.op
    if op is Ops.BUFFER or (not top and u in self.ctx.realized): return self.load(u, idx, valid)
    if op in GroupOp.Movement:
      src_idx, cond = source_index(u, idx)
      inner = self.lower(u.src[0], src_idx, and_valid(valid, cond))
      return inner if cond is None else UOp(Ops.WHERE, u.dtype, (cond, inner, UOp.const(u.dtype, 0)))
    if op is Ops.CONST: return UOp.const(u.dtype, u.arg)
    if op is Ops.DEFINE_VAR: return self.scalar(u)
    # a scalar placeholder on a device tuple, read by one lane: the same kernel argument on every lane
    if op is Ops.MSELECT and u.src[0].op is Ops.DEFINE_VAR: return self.scalar(u.src[0])
    if op is Ops.ARANGE: return idx[0].cast(u.dtype)
    if op in (Ops.CONTIGUOUS, Ops.DETACH): return self.lower(u.src[0], idx, valid)
    if op is Ops.REDUCE_AXIS: return self.lower_reduce(u, idx, valid)
    if op is Ops.BITCAST and u.dtype.itemsize != u.src[0].dtype.itemsize:
      return self.lower_resizing_bitcast(u, idx, valid)
    if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
      if self.recomputed_per_output(u, idx):
        raise NeedsRealize(u, "a value computed from a reduce, broadcast into another reduction along an output loop, "
                              "would be recomputed for every element of that loop")
      return UOp(op, u.dtype, tuple(self.lower(s, idx, valid) for s in u.src))
    raise NotImplementedError(f"cannot lower {op} into a kernel")

  def recomputed_per_output(self, u: UOp, idx: Index) -> bool:
    """Whether u, computed from a reduce, is read inside the loop of the reduction being lowered at an index that
    leaves out one of the loops that reduction runs in: it would be recomputed for each of that loop's iterations
    (see NeedsRealize)."""
    if not self.enclosing or not self.computes_reduce(u): return False
    free, own = self.enclosing[-1]
    used = ranges_in(idx)
    return bool(used & own) and not free <= used

  def computes_reduce(self, u: UOp) -> bool:
    """Whether u's value, as this kernel computes it, includes a reduction (realized nodes are loads here)."""
    if (known := self.holds_reduce.get(u)) is not None: return known
    if u.op is Ops.BUFFER or u in self.ctx.realized: result = False
    else: result = u.op is Ops.REDUCE_AXIS or any(self.computes_reduce(s) for s in u.src)
    self.holds_reduce[u] = result
    return result

  def load(self, u: UOp, idx: Index, valid: UOp | None) -> UOp:
    buf = self.ctx.buffer_for(u)
    if self.buffers and buf.device != self.buffers[0].device:
      raise RuntimeError(f"all buffers must be on the same device: a kernel on {self.buffers[0].device} "
                         f"reads {buf.device}")
    self.reads.append(u)
    offset = flat_index(idx, u.shape)
    if self.buffers and buf is self.buffers[0]: self.loads_of_output.append((offset, valid))
    index = UOp(Ops.INDEX, u.dtype, (self.param(buf), offset) + ((valid,) if valid is not None else ()))
    return UOp(Ops.LOAD, u.dtype, (index,))

  def lower_reduce(self, u: UOp, idx: Index, valid: UOp | None) -> UOp:
    reduce_op, axes = u.arg
    src = u.src[0]
    used = {r for axis, i in enumerate(idx) if axis not in axes for r in i.toposort() if r.op is Ops.RANGE}
    if u is not self.owner:
      if any(r not in self.output_ranges for r in used):
        raise NeedsRealize(u, "a reduce indexed by another reduce's loop would be recomputed for every iteration")
      if used != set(self.output_ranges[:len(used)]):
        raise NeedsRealize(u, "a reduce broadcast along an outer loop would be recomputed for every element")
      owner = self.ctx.reduce_owner.setdefault(u, self.owner)
      if owner is not self.owner: raise NeedsRealize(u, "a reduce read by two kernels is computed once, in its own")
    new_idx = list(idx)
    reduce_ranges, gate = [], None
    for axis in axes:
      rng, dim_gate = self.sized_range(src.shape[axis], "reduce")
      new_idx[axis], gate = rng, and_valid(gate, dim_gate)
      if rng.op is Ops.RANGE: reduce_ranges.append(rng)
    if any(max_int(src.shape[axis]) == 0 for axis in axes):
      return UOp.const(u.dtype, identity_element(reduce_op, u.dtype))
    self.enclosing.append((used, set(reduce_ranges)))
    try: inner = self.lower(src, tuple(new_idx), and_valid(valid, gate))
    finally: self.enclosing.pop()
    # iterations past a symbolic size add the reduction's identity
    if gate is not None: inner = UOp(Ops.WHERE, u.dtype, (gate, inner, UOp.const(u.dtype, identity_element(reduce_op,
                                                                                                          u.dtype))))
    return UOp(Ops.REDUCE, u.dtype, (inner, *reduce_ranges), reduce_op) if reduce_ranges else inner

  def lower_resizing_bitcast(self, u: UOp, idx: Index, valid: UOp | None) -> UOp:
    """A bitcast that changes the item size, built from shifts of the source's bits (little-endian)."""
    src = u.src[0]
    in_size, out_size = src.dtype.itemsize, u.dtype.itemsize
    in_bits, out_bits = _uint_of(in_size), _uint_of(out_size)
    last = idx[-1]
    if out_size < in_size:
      ratio = in_size // out_size
      src_idx = idx[:-1] + (last // ratio,)
      word = self.lower(src, src_idx, valid)
      word = word if word.dtype is in_bits else UOp(Ops.BITCAST, in_bits, (word,))
      shift = (last % ratio) * (out_size * 8)
      part = UOp(Ops.SHR, in_bits, (word, shift.cast(in_bits)))
      return (UOp(Ops.BITCAST, u.dtype, (UOp(Ops.CAST, out_bits, (part,)),)) if u.dtype is not out_bits
              else UOp(Ops.CAST, out_bits, (part,)))
    ratio = out_size // in_size
    total: UOp | None = None
    for k in range(ratio):
      word = self.lower(src, idx[:-1] + (last * ratio + k,), valid)
      word = word if word.dtype is in_bits else UOp(Ops.BITCAST, in_bits, (word,))
      piece = UOp(Ops.SHL, out_bits, (UOp(Ops.CAST, out_bits, (word,)), UOp.const(out_bits, k * in_size * 8)))
      total = piece if total is None else UOp(Ops.OR, out_bits, (total, piece))
    return total if u.dtype is out_bits else UOp(Ops.BITCAST, u.dtype, (total,))


def ranges_in(idx: Index) -> set[UOp]:
  """The loops an index depends on."""
  return {r for i in idx for r in i.toposort() if r.op is Ops.RANGE}


def _uint_of(size: int):
  return {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[size]


def build_value_kernel(ctx: ScheduleContext, node: UOp, out_buf: UOp) -> KernelBuilder:
  """The kernel computing `node` into `out_buf`, row-major."""
  kb = KernelBuilder(ctx, node)
  kb.param(out_buf)
  idx, gate = kb.output_index(node.shape)
  value = kb.lower(node, idx, gate, top=True)
  store_index = UOp(Ops.INDEX, node.dtype, (kb.param(out_buf), flat_index(idx, node.shape)) +
                    ((gate,) if gate is not None else ()))
  kb.sink = UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (store_index, value)),))
  return kb


def build_store_kernel(ctx: ScheduleContext, store: UOp, out_buf: UOp) -> KernelBuilder:
  """The kernel for STORE(target view, value): value's elements written at the target view's addresses."""
  target, value = store.src
  kb = KernelBuilder(ctx, store)
  kb.param(out_buf)
  idx, shape_gate = kb.output_index(target.shape)
  address, gate = target_address(target, idx)
  gate = and_valid(shape_gate, gate)
  value_uop = kb.lower(value, idx, shape_gate)
  store_index = UOp(Ops.INDEX, target.dtype, (kb.param(out_buf), address) + ((gate,) if gate is not None else ()))
  kb.sink = UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (store_index, value_uop)),))
  kb.store_address = (address, gate)
  return kb


def target_address(view: UOp, idx: Index) -> tuple[UOp, UOp | None]:
  """Follow a movement chain down to its base: the flat address in the base buffer and the in-bounds gate."""
  node, gate = view, None
  while node.op in GroupOp.Movement:
    idx, cond = source_index(node, idx)
    gate = and_valid(gate, cond)
    node = node.src[0]
  return flat_index(idx, node.shape), gate
