"""Realize: schedule tensors into a LINEAR, run its calls, and rebind every live tensor to the produced buffers."""
from __future__ import annotations
from typing import TYPE_CHECKING
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.scalars import call_buffers, call_scalars, scalar_value, scalar_word
from tinycore.hcq.runtime import holding_runtime_lock
from tinycore.engine.buffers import buffer_of, linear_buffers
from tinycore.engine.jit import is_capturing, record_linear
from tinycore.schedule.cache import cached_schedule, schedule_template
from tinycore.schedule.copies import is_storage_only, storage_root

if TYPE_CHECKING:
  from tinycore.tensor import Tensor


class GlobalCounters:
  """Process-wide counters, as in tinygrad: `kernel_count` counts executed calls (kernels and copies)."""
  kernel_count: int = 0
  copy_count: int = 0
  time_sum_s: float = 0.0

  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count = GlobalCounters.copy_count = 0
    GlobalCounters.time_sum_s = 0.0


@holding_runtime_lock
def run_linear(linear: UOp, wait: bool = False, count: bool = True) -> None:
  """Execute each CALL of a LINEAR in order: kernels through their device's Program (buffers, then the CALL's scalar
  arguments as 64-bit words), copies through the copy path,
  and calls on queue devices (HCQ2) as compiled command batches that run while Python goes on. When it returns,
  every non-queue device it wrote to is synchronized (so a write to DISK is durable). `count=False` leaves
  GlobalCounters alone (runtime copies such as Buffer.copy_from)."""
  from tinycore.codegen import compile_kernel
  from tinycore.engine.copy import run_copy
  from tinycore.device.registry import Device
  from tinycore.hcq.device import is_hcq_device
  from tinycore.hcq.runtime import call_is_hcq, compile_linear, uses_queues, wait_for_queues
  if any(uses_queues(call) for call in linear.src):
    linear = compile_linear(linear, input_uops=linear_buffers(linear))
  written: dict[str, None] = {}
  for call in linear.src:
    callee, buffer_uops, scalars = call.src[0], call_buffers(call), call_scalars(call)
    buffers = [buffer_of(b) for b in buffer_uops]
    if call_is_hcq(call):
      callee.arg.run(buffers, callee.arg.scalar_values(scalars))
      if count: GlobalCounters.kernel_count += callee.arg.commands
      continue
    written[buffer_uops[0].device] = None
    if callee.op is Ops.COPY:
      wait_for_queues()
      run_copy(buffers[0], buffers[1])
      if count: GlobalCounters.copy_count += 1
    elif callee.op is Ops.SINK:
      kernel = compile_kernel(buffers[0].device, callee)
      handles = [b.ensure_allocated()._buf for b in buffers]
      words = tuple(scalar_word(scalar_value(s), s.dtype) for s in scalars)
      elapsed = kernel(*handles, vals=words, wait=wait)
      if elapsed and count: GlobalCounters.time_sum_s += elapsed
    else: raise RuntimeError(f"cannot run a call to {callee.op}")
    if count: GlobalCounters.kernel_count += 1
  for device in written:
    if not is_hcq_device(Device[device]): Device[device].synchronize()
  if wait: wait_for_queues()


@holding_runtime_lock
def schedule_tensors(tensors: list[Tensor]) -> tuple[UOp, dict[UOp, UOp]]:
  return cached_schedule([t.uop for t in tensors])


@holding_runtime_lock
def realize_tensors(tensors: list[Tensor]) -> None:
  """Schedule (cached by graph shape), compile queue batches once per cached schedule, bind this call's buffers
  (one substitution), run, and rebind the live tensors."""
  from tinycore.hcq.runtime import compile_template
  template, mapping = schedule_template([t.uop for t in tensors])
  linear, keys, values = template.src
  if is_capturing(): record_linear(linear.substitute(mapping))  # TinyJit replays it later
  bound = UOp(Ops.SINK, None, (compile_template(linear), keys, values)).substitute(mapping)
  if bound.src[0].src: run_linear(bound.src[0])
  apply_becomes(dict(zip(bound.src[1].src, bound.src[2].src)))


def apply_becomes(becomes: dict[UOp, UOp]) -> None:
  """Every live tensor whose graph mentions a realized node now reads that node's buffer instead."""
  from tinycore.tensor import _all_tensors
  if not becomes: return
  for ref in list(_all_tensors):
    t = ref()
    if t is None: continue
    u = t.uop
    if u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER): continue
    if u in becomes: t.uop = becomes[u]
    elif any(n in becomes for n in u.toposort(gate=lambda n: n.op is not Ops.BUFFER)): t.uop = u.substitute(becomes)


@holding_runtime_lock
def assign_tensor(target: Tensor, value: Tensor) -> None:
  """target.assign(value): a STORE of value into target's view of its buffer, behind an AFTER that every view of
  that buffer now reads. The buffer never moves."""
  if value.shape != target.shape:
    if not _broadcastable(value.shape, target.shape):
      raise ValueError(f"assign shape mismatch: cannot assign shape {value.shape} into shape {target.shape}")
    value = value._broadcast_to(target.shape)
  if value.dtype is not target.dtype:
    raise TypeError(f"assign dtype mismatch: cannot assign {value.dtype.name} into {target.dtype.name}")
  if value.device != target.device and not is_storage_only(target.device):
    # the value is copied to the target's device and stored there; the target never moves. (A copy to a storage
    # device such as DISK is a store into its buffer: no COPY.) The copy rules drop this COPY again when the target
    # is a whole buffer.
    value = value.to(target.device)
  if storage_root(target.uop).op not in (Ops.BUFFER, Ops.AFTER):
    owner = _storage_owner(target)
    if owner is None:
      target.uop = value.uop  # nothing else sees this tensor's storage: it simply becomes the value
      return
    owner.realize()  # rebinds target too: it is a view of owner
    if storage_root(target.uop).op not in (Ops.BUFFER, Ops.AFTER):
      raise RuntimeError(f"cannot assign into a view of {storage_root(target.uop).op.name}: it has no storage")
  store_target, stored = bitcast_to_source(target.uop, value.uop)
  base = storage_root(store_target)
  after = UOp(Ops.AFTER, base.dtype, (base, UOp(Ops.STORE, None, (store_target, stored))))
  # every view of this buffer (the target itself included) now reads the stored value
  for t in _live_tensors():
    if storage_root(t.uop) is base: t.uop = t.uop.substitute({base: after})


def bitcast_to_source(target: UOp, value: UOp) -> tuple[UOp, UOp]:
  """A store into a bitcast view stores the value bitcast back to the buffer's dtype into the view below it (moving
  a destination bitcast to the source). Reshapes above the bitcast are undone on the value first."""
  node, moved = target, value
  while node.op in (Ops.RESHAPE, Ops.BITCAST):
    moved = (moved.reshape(node.src[0].shape) if node.op is Ops.RESHAPE
             else UOp(Ops.BITCAST, node.src[0].dtype, (moved,)))
    node = node.src[0]
  if not any(n.op is Ops.BITCAST for n in target.toposort(gate=lambda n: n is not node)): return target, value
  if storage_root(node) is not node.base:
    raise RuntimeError("cannot assign through a bitcast below a permute, pad or flip")
  return node, moved


def _live_tensors():
  from tinycore.tensor import _all_tensors
  for ref in list(_all_tensors):
    if (t := ref()) is not None: yield t


def _storage_owner(target: Tensor) -> Tensor | None:
  """The live tensor that the target is a view of, nearest first (None if the target is no view)."""
  by_uop: dict[UOp, Tensor] = {}
  for t in _live_tensors():
    if t is not target: by_uop.setdefault(t.uop, t)
  node = target.uop
  while node.op in GroupOp.Movement or node.op is Ops.BITCAST:
    node = node.src[0]
    if node in by_uop: return by_uop[node]
  return None


def _broadcastable(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
  if len(src) > len(dst): return False
  padded = (1,) * (len(dst) - len(src)) + tuple(src)
  return all(s == d or s == 1 for s, d in zip(padded, dst))
