"""COPY is an anonymous store: the rules that lower device copies before kernels are built.

A copy between devices moves bytes and computes nothing. So a COPY either disappears into the STORE that consumes
it (a store into another device's buffer *is* a copy) or becomes a store into a fresh buffer on the target device,
and every cross-device store runs as a `CALL(COPY, dst, src)` between two contiguous regions of memory.

A COLLECTIVE (a load across processes) is lowered the same way: into a STORE through the collective (the STORE's
arg), which runs as a `CALL(COLLECTIVE, dst, src)` between two contiguous regions.
"""
from __future__ import annotations
from typing import Callable
import attrs
from tinycore.uop.ops import GroupOp, Ops, UOp, prod
from tinycore.uop.symbolic_shapes import max_numel, view_in_buffer
from tinycore.uop.pattern import PatternMatcher, UPat, graph_rewrite_map


@attrs.frozen
class CopyTraits:
  """What the copy rules need to know about a device: whether it runs kernels, and whether a copy off it moves
  below permute, flip, pad and expand (the storage-only rule). Declared by the device's DeviceSpec."""
  computes: bool
  copies_below_movement: bool


# the device layer installs the lookup (device name -> CopyTraits), so the scheduler never names a device
_traits_of: list[Callable[[str], CopyTraits]] = []


def install_device_traits(lookup: Callable[[str], CopyTraits]) -> None:
  """Called once by the device registry: how the scheduler learns a device's CopyTraits from its name."""
  _traits_of[:] = [lookup]


def device_traits(device: object) -> CopyTraits:
  """The CopyTraits of a device name; a multi-device tuple computes and keeps its movement ops."""
  if not isinstance(device, str): return CopyTraits(computes=True, copies_below_movement=False)
  if not _traits_of: raise RuntimeError("no device registry installed its device traits (import tinycore.device)")
  return _traits_of[0](device)


def is_storage_only(device: object) -> bool:
  """A device that stores bytes and runs no kernels (DISK, NPY): every store into it is a copy."""
  return not device_traits(device).computes


def is_cross_device_store(store: UOp) -> bool:
  """A store whose value lives on another device, or into a storage device (which never computes): a copy."""
  target, value = store.src
  return value.device != target.device or is_storage_only(target.device)


def is_transfer_store(store: UOp) -> bool:
  """A store that moves bytes and computes nothing: a copy across devices, or a store through a collective (across
  processes). Its value is realized first and it runs as a call between two contiguous regions."""
  return store.arg is not None or is_cross_device_store(store)


def has_buffer_identity(u: UOp) -> bool:
  """u's elements are exactly a whole buffer's, in order: a BUFFER (or a pending AFTER on it) behind reshapes."""
  node = u
  while node.op is Ops.RESHAPE: node = node.src[0]
  while node.op is Ops.AFTER: node = node.src[0].base if node.src[0].op is Ops.RESHAPE else node.src[0]
  return node.op is Ops.BUFFER and prod(u.shape) == node.arg


def storage_root(u: UOp) -> UOp:
  """What a view reads from: u without movement ops and bitcasts on top."""
  while u.op in GroupOp.Movement or u.op is Ops.BITCAST: u = u.src[0]
  return u


def _drop_same_device_copy(c: UOp, x: UOp) -> UOp | None:
  return x if x.device == c.arg else None


def _store_drops_copy(store: UOp, dst: UOp, c: UOp, x: UOp) -> UOp | None:
  if dst.device != c.arg or not has_buffer_identity(dst): return None
  return store.replace(src=(dst, x))


def _copy_below_movement(c: UOp, mv: UOp) -> UOp | None:
  if not device_traits(mv.device).copies_below_movement: return None
  return mv.replace(src=(c.replace(src=(mv.src[0],)),))


def copy_to_anonymous_store(c: UOp, x: UOp) -> UOp:
  """COPY(x) -> AFTER(STORE(b, x)) on a fresh buffer b on the target device, viewed in the copy's shape."""
  buf = UOp.new_buffer(c.arg, max_numel(c.shape), c.dtype)
  target = view_in_buffer(buf, c.shape)
  return view_in_buffer(UOp(Ops.AFTER, c.dtype, (buf, UOp(Ops.STORE, None, (target, x)))), c.shape)


def _store_through_collective(store: UOp, dst: UOp, c: UOp, x: UOp) -> UOp | None:
  if dst.device != x.device or not has_buffer_identity(dst): return None
  return UOp(Ops.STORE, None, (dst, x), c.arg)


def collective_to_anonymous_store(c: UOp, x: UOp) -> UOp:
  """COLLECTIVE(x) -> AFTER(STORE(b, x) through the collective) on a fresh buffer b on x's device."""
  buf = UOp.new_buffer(x.device, max_numel(c.shape), c.dtype)
  target = view_in_buffer(buf, c.shape)
  return view_in_buffer(UOp(Ops.AFTER, c.dtype, (buf, UOp(Ops.STORE, None, (target, x), c.arg))), c.shape)


copy_rules = PatternMatcher([
  # a COPY to the device its source is already on is nothing
  (UPat(Ops.COPY, src=(UPat.var("x"),), name="c"), _drop_same_device_copy),
  # a COPY off a storage device (DISK) moves below permute, flip, pad and expand: those run on the target
  (UPat(Ops.COPY, src=(UPat((Ops.PERMUTE, Ops.FLIP, Ops.PAD, Ops.EXPAND), name="mv"),), name="c"),
   _copy_below_movement),
  # a STORE into a whole buffer on the copy's device drops the COPY: a store into another device's buffer is the copy
  (UPat(Ops.STORE, src=(UPat.var("dst"), UPat(Ops.COPY, src=(UPat.var("x"),), name="c")), name="store"),
   _store_drops_copy),
  # a STORE of a COLLECTIVE into a whole buffer on its device stores through the collective (in place when x is it)
  (UPat(Ops.STORE, src=(UPat.var("dst"), UPat(Ops.COLLECTIVE, src=(UPat.var("x"),), name="c")), name="store"),
   _store_through_collective),
])

anonymous_store_rules = PatternMatcher([
  # a bare COPY is an anonymous store into a fresh buffer on the target device (like CONTIGUOUS)
  (UPat(Ops.COPY, src=(UPat.var("x"),), name="c"), copy_to_anonymous_store),
  # a bare COLLECTIVE is an anonymous store through the collective into a fresh buffer on its device
  (UPat(Ops.COLLECTIVE, src=(UPat.var("x"),), name="c"), collective_to_anonymous_store),
])


def lower_copies(sink: UOp) -> dict[UOp, UOp]:
  """Apply the COPY rules (STORE-dropping first, parent before child, then bare COPYs); what every node became."""
  nodes = sink.toposort()
  if not any(n.op in (Ops.COPY, Ops.COLLECTIVE) for n in nodes): return {n: n for n in nodes}
  first = graph_rewrite_map(sink, copy_rules)
  second = graph_rewrite_map(first[sink], anonymous_store_rules)
  return {node: second.get(mid, mid) for node, mid in first.items()}


@attrs.frozen
class Region:
  """A contiguous run of memory: `size` elements of `dtype` at `byte_offset` in the storage of `version`."""
  version: UOp
  byte_offset: int
  size: int
  dtype: object


def contiguous_region(u: UOp, realized: dict[UOp, None]) -> Region | None:
  """The memory u's elements occupy, in order, when that is one contiguous run of one buffer (through reshapes,
  contiguous shrinks and bitcasts); None otherwise. A symbolic size counts as its largest (a copy moves the largest
  prefix: the symbolic shape is padded to the max shape and shrunk back)."""
  if u.op in (Ops.BUFFER, Ops.AFTER) or u in realized: return Region(u, 0, max_numel(u.shape), u.dtype)
  if u.op is Ops.RESHAPE:
    inner = contiguous_region(u.src[0], realized)
    return inner if inner is None else attrs.evolve(inner, size=max_numel(u.shape))
  if u.op is Ops.BITCAST:
    inner = contiguous_region(u.src[0], realized)
    if inner is None or (inner.size * inner.dtype.itemsize) % u.dtype.itemsize: return None
    return Region(inner.version, inner.byte_offset, inner.size * inner.dtype.itemsize // u.dtype.itemsize, u.dtype)
  if u.op is Ops.SHRINK:
    inner = contiguous_region(u.src[0], realized)
    offset = _contiguous_shrink_offset(u.src[0].shape, u.arg)
    if inner is None or not isinstance(offset, int): return None
    return Region(inner.version, inner.byte_offset + offset * u.dtype.itemsize, max_numel(u.shape), u.dtype)
  if u.op in (Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.FLIP) and prod(u.shape) == prod(u.src[0].shape) and \
      _is_identity_movement(u):
    return contiguous_region(u.src[0], realized)
  return None


def _contiguous_shrink_offset(shape: tuple[int, ...], bounds: tuple[tuple[int, int], ...]) -> int | None:
  """The element offset of a shrink that selects one contiguous run of a row-major shape, else None: every dim
  inside the innermost partial one is whole, and every dim outside it selects a single index."""
  partial = [i for i in range(len(shape)) if bounds[i] != (0, shape[i])]
  if not partial: return 0
  innermost = partial[-1]
  if any(bounds[i][1] - bounds[i][0] != 1 for i in range(innermost)): return None
  offset, stride = 0, 1
  for i in reversed(range(len(shape))):
    offset += bounds[i][0] * stride
    stride *= shape[i]
  return offset


def _is_identity_movement(u: UOp) -> bool:
  if u.op is Ops.PERMUTE:
    return [a for a in u.arg if u.src[0].shape[a] != 1] == sorted(a for a in u.arg if u.src[0].shape[a] != 1)
  if u.op is Ops.PAD: return all(p == (0, 0) for p in u.arg)
  if u.op is Ops.FLIP: return all(not f or s == 1 for f, s in zip(u.arg, u.src[0].shape))
  if u.op is Ops.EXPAND: return u.shape == u.src[0].shape
  return False


def region_uop(region: Region, buffer: UOp) -> UOp:
  """The CALL argument for a region: the buffer itself, or a BUFFER_VIEW of it."""
  if region.byte_offset == 0 and region.size == buffer.arg and region.dtype is buffer.dtype: return buffer
  return UOp(Ops.BUFFER_VIEW, region.dtype, (buffer,), (region.size, region.byte_offset))
