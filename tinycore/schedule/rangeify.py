"""Lowering a realized tensor value into a kernel: output ranges, index math through movement ops, loads from the
buffers it reads, REDUCE over fresh ranges, and one STORE into its own buffer.

Everything between two realized nodes lowers into one kernel. Which nodes are realized was decided before any kernel
is built (`tinycore.schedule.realize_points`), so each kernel is lowered once and lowering decides nothing.
"""
from __future__ import annotations
from typing import TYPE_CHECKING
from tinycore.dtype import dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp, identity_element
from tinycore.uop.symbolic_shapes import max_int
from tinycore.schedule.indexing import (Index, KernelLoops, and_valid, flat_index, gate_within, kept_ranges,
                                        resized_bitcast_indices, source_index)
from tinycore.schedule.scalars import kernel_parameter

if TYPE_CHECKING:
  from tinycore.schedule.context import ScheduleContext


class KernelBuilder:
  """Builds one kernel: `STORE(INDEX(PARAM 0, offset, gate), value)` wrapped in a SINK, plus its buffer list."""

  def __init__(self, ctx: ScheduleContext):
    self.ctx = ctx
    self.buffers: list[UOp] = []          # BUFFER uops, by param slot
    self.scalar_sources: dict[UOp, UOp] = {}  # scalar parameter (kernel DEFINE_VAR) -> the placeholder it reads
    self.reads: list[UOp] = []            # the value nodes this kernel loads (for ordering)
    self.loops = KernelLoops()
    self.memo: dict[tuple, UOp] = {}

  # --- parameters
  def param(self, buf: UOp) -> UOp:
    if buf not in self.buffers: self.buffers.append(buf)
    return UOp(Ops.PARAM, buf.dtype, (), self.buffers.index(buf))

  def scalar(self, placeholder: UOp) -> UOp:
    """A Python scalar's placeholder read in this kernel: a scalar parameter."""
    param = kernel_parameter(placeholder)
    self.scalar_sources[param] = placeholder
    return param

  # --- lowering
  def lower(self, u: UOp, idx: Index, valid: UOp | None, top: bool = False) -> UOp:
    # of the gate a reduce is read under, it keeps what concerns the loops it depends on (`gate_within`): read
    # inside another loop's body it is the same node as outside it, computed once
    if u.op is Ops.REDUCE_AXIS and valid is not None: valid = gate_within(valid, kept_ranges(u, idx))
    key = (u, idx, valid, top)
    if (done := self.memo.get(key)) is not None: return done
    result = self._lower(u, idx, valid, top)
    self.memo[key] = result
    return result

  def _lower(self, u: UOp, idx: Index, valid: UOp | None, top: bool) -> UOp:
    op = u.op
    if op is Ops.BUFFER or (not top and u in self.ctx.realized): return self.load(u, idx, valid)
    if op in GroupOp.Movement:
      src_idx, cond = source_index(u, idx, self.ctx.index_memo)
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
      return UOp(op, u.dtype, tuple(self.lower(s, idx, valid) for s in u.src))
    raise NotImplementedError(f"cannot lower {op} into a kernel")

  def load(self, u: UOp, idx: Index, valid: UOp | None) -> UOp:
    buf = self.ctx.buffer_for(u)
    if self.buffers and buf.device != self.buffers[0].device:
      raise RuntimeError(f"all buffers must be on the same device: a kernel on {self.buffers[0].device} "
                         f"reads {buf.device}")
    self.reads.append(u)
    offset = flat_index(idx, u.shape)
    index = UOp(Ops.INDEX, u.dtype, (self.param(buf), offset) + ((valid,) if valid is not None else ()))
    return UOp(Ops.LOAD, u.dtype, (index,))

  def lower_reduce(self, u: UOp, idx: Index, valid: UOp | None) -> UOp:
    reduce_op, axes = u.arg
    if any(max_int(u.src[0].shape[axis]) == 0 for axis in axes):
      return UOp.const(u.dtype, identity_element(reduce_op, u.dtype))
    src_idx, reduce_ranges, gate = self.loops.reduce_index(u, idx)
    inner = self.lower(u.src[0], src_idx, and_valid(valid, gate))
    # iterations past a symbolic size add the reduction's identity
    if gate is not None: inner = UOp(Ops.WHERE, u.dtype, (gate, inner, UOp.const(u.dtype, identity_element(reduce_op,
                                                                                                          u.dtype))))
    return UOp(Ops.REDUCE, u.dtype, (inner, *reduce_ranges), reduce_op) if reduce_ranges else inner

  def lower_resizing_bitcast(self, u: UOp, idx: Index, valid: UOp | None) -> UOp:
    """A bitcast that changes the item size, built from shifts of the source's bits (little-endian)."""
    src = u.src[0]
    in_size, out_size = src.dtype.itemsize, u.dtype.itemsize
    in_bits, out_bits = _uint_of(in_size), _uint_of(out_size)
    words = []
    for src_idx in resized_bitcast_indices(u, idx):
      word = self.lower(src, src_idx, valid)
      words.append(word if word.dtype is in_bits else UOp(Ops.BITCAST, in_bits, (word,)))
    if out_size < in_size:
      shift = (idx[-1] % (in_size // out_size)) * (out_size * 8)
      part = UOp(Ops.SHR, in_bits, (words[0], shift.cast(in_bits)))
      return (UOp(Ops.BITCAST, u.dtype, (UOp(Ops.CAST, out_bits, (part,)),)) if u.dtype is not out_bits
              else UOp(Ops.CAST, out_bits, (part,)))
    total: UOp | None = None
    for k, word in enumerate(words):
      piece = UOp(Ops.SHL, out_bits, (UOp(Ops.CAST, out_bits, (word,)), UOp.const(out_bits, k * in_size * 8)))
      total = piece if total is None else UOp(Ops.OR, out_bits, (total, piece))
    return total if u.dtype is out_bits else UOp(Ops.BITCAST, u.dtype, (total,))


def _uint_of(size: int):
  return {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[size]


def build_value_kernel(ctx: ScheduleContext, node: UOp, out_buf: UOp) -> KernelBuilder:
  """The kernel computing `node` into `out_buf`, row-major."""
  kb = KernelBuilder(ctx)
  kb.param(out_buf)
  idx, gate = kb.loops.output_index(node.shape)
  value = kb.lower(node, idx, gate, top=True)
  store_index = UOp(Ops.INDEX, node.dtype, (kb.param(out_buf), flat_index(idx, node.shape)) +
                    ((gate,) if gate is not None else ()))
  kb.sink = UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (store_index, value)),))
  return kb


def build_store_kernel(ctx: ScheduleContext, store: UOp, out_buf: UOp) -> KernelBuilder:
  """The kernel for STORE(target view, value): value's elements written at the target view's addresses."""
  target, value = store.src
  kb = KernelBuilder(ctx)
  kb.param(out_buf)
  idx, shape_gate = kb.loops.output_index(target.shape)
  address, gate = target_address(target, idx)
  gate = and_valid(shape_gate, gate)
  value_uop = kb.lower(value, idx, shape_gate)
  store_index = UOp(Ops.INDEX, target.dtype, (kb.param(out_buf), address) + ((gate,) if gate is not None else ()))
  kb.sink = UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (store_index, value_uop)),))
  return kb


def target_address(view: UOp, idx: Index) -> tuple[UOp, UOp | None]:
  """Follow a movement chain down to its base: the flat address in the base buffer and the in-bounds gate."""
  node, gate = view, None
  while node.op in GroupOp.Movement:
    idx, cond = source_index(node, idx)
    gate = and_valid(gate, cond)
    node = node.src[0]
  return flat_index(idx, node.shape), gate
