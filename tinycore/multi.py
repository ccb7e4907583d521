"""Multi-device tensors at the tensor layer: `Tensor.shard` and moving a tensor onto or off a device tuple.

A tensor on a device tuple holds `UNSHARD(MSTACK(lane_0, ..., lane_N-1), axis)`: lane i is an ordinary tensor graph
on device i, holding the i-th even slice of `axis` (or everything, replicated, when axis is None). Every other op
builds the ordinary logical graph on top; the scheduler lowers it lane by lane (`tinycore.schedule.multi`).
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Sequence
from tinycore.uop.ops import Ops, UOp, prod
from tinycore.device.registry import Device
from tinycore.schedule.multi import MultiError, lane_bounds, multi_value

if TYPE_CHECKING:
  from tinycore.tensor import Tensor


def canonical_devices(devices: Sequence[str]) -> str | tuple[str, ...]:
  """The canonical device tuple (a 1-tuple is its device); each must be a device that computes."""
  if isinstance(devices, str): devices = (devices,)
  canonical = Device.canonicalize(tuple(devices))
  if isinstance(canonical, tuple) and len(set(canonical)) != len(canonical):
    raise MultiError(f"a device tuple names a device twice: {canonical}")
  for name in (canonical,) if isinstance(canonical, str) else canonical:
    if not Device.spec_for(name).compute:
      raise MultiError(f"cannot shard onto {name}: it stores bytes and runs no kernels")
  return canonical


def shard(t: Tensor, devices: Sequence[str], axis: int | None = None) -> Tensor:
  """t split evenly along `axis` over `devices` (lane i holds the i-th slice), or replicated when axis is None."""
  target = canonical_devices(devices)
  if isinstance(target, str): return t.to(target)
  if axis is not None:
    if not -t.ndim <= axis < t.ndim: raise IndexError(f"shard axis {axis} out of range for {t.ndim} dims")
    axis = axis % t.ndim
    if t.shape[axis] % len(target):
      raise MultiError(f"multi axis uneven: axis {axis} of size {t.shape[axis]} does not split over "
                       f"{len(target)} devices")
  if isinstance(t.device, tuple):
    if t.device == target and t.uop.arg == axis: return t
    t = t.to(t.device[0])  # gathered, then split afresh
  lanes = []
  for i, device in enumerate(target):
    part = t.uop
    if axis is not None:
      lo, hi = lane_bounds(t.shape[axis], len(target), i)
      part = part.shrink(tuple((lo, hi) if d == axis else (0, s) for d, s in enumerate(t.shape)))
    lanes.append(stored_on(device, part))
  return t._apply(multi_value(lanes, axis))


def stored_on(device: str, value: UOp) -> UOp:
  """value stored into fresh storage on `device` (a copy when it lives elsewhere): every lane owns its buffer."""
  buf = UOp.new_buffer(device, prod(value.shape), value.dtype)
  view = buf.reshape(value.shape)
  source = value if value.device == device else UOp(Ops.COPY, value.dtype, (value,), device)
  return UOp(Ops.AFTER, buf.dtype, (buf, UOp(Ops.STORE, None, (view, source)))).reshape(value.shape)


def to_devices(t: Tensor, device: str | tuple[str, ...]) -> Tensor:
  """t on a device tuple (replicated) or, from a tuple, gathered onto one device (a lazy COPY the scheduler lowers)."""
  if isinstance(device, tuple): return shard(t, device, None)
  Device[device]
  return t._apply(UOp(Ops.COPY, t.dtype, (t.uop,), device))
