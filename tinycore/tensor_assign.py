"""Tensors and their storage: rebinding live tensors to the buffers a realize produced, and assign.

A realize returns what each realized graph node became (`engine.realize.realize_roots`); a `Rebinding` points every
live tensor that mentions such a node at its buffer (and tells the realize, before it runs, which buffers tensors
will read: the memory planner shares the others' memory). `assign_tensor` stores into a tensor's buffer behind an AFTER
that every view of that buffer then reads. Both run under the runtime lock, so threads see whole updates.
"""
from __future__ import annotations
import weakref
from typing import TYPE_CHECKING, Iterator
from tinycore.uop.ops import GroupOp, Ops, UOp, substitute_all
from tinycore.dtype import FLOATS
from tinycore.errors import DTypeError
from tinycore.hcq.lock import holding_runtime_lock
from tinycore.schedule.copies import is_storage_only, storage_root

if TYPE_CHECKING:
  from tinycore.tensor import Tensor


class StorageIndex:
  """Live tensors by the storage their graph views (`storage_root_under_detach` of their uop): an assign finds the
  views of a buffer without visiting every live tensor (an optimizer step assigns every parameter: with all of them
  visited per assign it took time quadratic in the parameters). A tensor made or given a new uop since the last
  lookup (`uop_changed`) is indexed at the next one."""

  def __init__(self) -> None:
    self.by_root: dict[UOp, dict[weakref.ref, None]] = {}
    self.root_of: dict[weakref.ref, UOp] = {}
    self.pending: dict[weakref.ref, None] = {}

  def forget(self, ref: weakref.ref) -> None:
    self.pending.pop(ref, None)
    if (root := self.root_of.pop(ref, None)) is not None:
      bucket = self.by_root[root]
      del bucket[ref]
      if not bucket: del self.by_root[root]

  def views_of(self, base: UOp) -> list[Tensor]:
    """The live tensors whose uop is a view (through movement ops, bitcasts, detaches) of `base`."""
    for ref in list(self.pending):
      if (t := ref()) is None: continue
      self.forget(ref)
      root = self.root_of[ref] = storage_root_under_detach(t.uop)
      self.by_root.setdefault(root, {})[ref] = None
    self.pending.clear()
    return [t for ref in list(self.by_root.get(base, ())) if (t := ref()) is not None]


# every live Tensor (weakly); those that may hold a graph (a realize rebinds them to the buffers it produced: a tensor
# found realized leaves this registry, and whatever gives a tensor a new uop puts it back, `uop_changed`); and the
# live tensors by the storage they view
all_tensors: dict[weakref.ref, None] = {}
lazy_tensors: dict[weakref.ref, None] = {}
storage_index = StorageIndex()


def forget_tensor(ref: weakref.ref) -> None:
  all_tensors.pop(ref, None)
  lazy_tensors.pop(ref, None)
  storage_index.forget(ref)


def register_tensor(t: Tensor) -> None:
  """A new tensor, registered: realizes rebind it, assigns find it when it views their buffer."""
  t._ref = ref = weakref.ref(t, forget_tensor)
  all_tensors[ref] = lazy_tensors[ref] = storage_index.pending[ref] = None


def uop_changed(t: Tensor) -> None:
  """`t` holds a new uop (assign, replace, a rebase, a realize's rebinding): registered again for both."""
  lazy_tensors[t._ref] = storage_index.pending[t._ref] = None


class Rebinding:
  """How the live tensors come to read a realize's results, in two steps around the run: `find` (before it) walks the
  union of the live tensors' graphs once (a graph shared by many tensors is walked once) and says which realized
  nodes they read, so the buffers of the others may share memory; `apply` (after it) points the tensors at the
  buffers."""

  def __init__(self) -> None:
    self.becomes: dict[UOp, UOp] = {}
    self.cut: list[tuple[Tensor, UOp]] = []  # tensors that keep a graph for backward, with it before this realize
    self.lazy: list[tuple[Tensor, bool]] = []  # tensors with a graph to rebind, and whether they kept one already
    self.new_uops: dict[UOp, UOp] = {}

  def find(self, becomes: dict[UOp, UOp]) -> set[UOp]:
    """The realized nodes that live tensors read (their own values, and nodes inside their graphs)."""
    self.becomes = becomes
    if not becomes: return set()
    buffer_op, reshape_op = Ops.BUFFER, Ops.RESHAPE  # read once: an Ops member read is slow on Python 3.11
    for ref in list(lazy_tensors):
      if (t := ref()) is None: continue
      u, kept = t.uop, t.forward_graph
      if kept is not None:
        if kept[0] is u: self.cut.append((t, kept[1]))
        else: t.forward_graph = None  # the tensor holds another value since
      if u.op is buffer_op or (u.op is reshape_op and u.src[0].op is buffer_op):
        if kept is None: del lazy_tensors[ref]  # realized: nothing to rebind until it gets a graph again
        continue
      self.lazy.append((t, kept is not None))
    read = {t.uop for t, _ in self.lazy if t.uop in becomes}
    self.new_uops = substitute_all([t.uop for t, _ in self.lazy if t.uop not in becomes], becomes, read)
    return read

  def apply(self) -> None:
    becomes, cut = self.becomes, self.cut
    tensor_nodes: set[UOp] = set()  # realized nodes that are a tensor's own value
    for t, had_kept in self.lazy:
      u = t.uop
      if u in becomes:
        t.uop = becomes[u]
        storage_index.pending[t._ref] = None  # (a buffer now: a later assign may store into it)
        tensor_nodes.add(u)
      elif (new := self.new_uops[u]) is not u:
        t.uop = new
        storage_index.pending[t._ref] = None
        if not had_kept and t.requires_grad is not False and t.dtype in FLOATS: cut.append((t, u))
    if cut: keep_forward_graphs(cut, {node: becomes[node] for node in tensor_nodes})


def keep_forward_graphs(cut: list[tuple[Tensor, UOp]], tensor_becomes: dict[UOp, UOp]) -> None:
  """A realize stores nodes inside a tensor's graph that no tensor holds (a fused kernel's intermediates); the tensor
  then reads their buffers, which cuts the path backward() differentiates. Such a tensor keeps its graph with only
  the tensors' own realized values substituted (`Tensor.forward_graph`), for backward and gradient."""
  graphs = substitute_all([graph for _, graph in cut], tensor_becomes)
  for t, graph in cut:
    realized = t.uop.op is Ops.BUFFER or (t.uop.op is Ops.RESHAPE and t.uop.src[0].op is Ops.BUFFER)
    t.forward_graph = None if realized else (t.uop, graphs[graph])


@holding_runtime_lock
def assign_tensor(target: Tensor, value: Tensor) -> None:
  """target.assign(value): a STORE of value into target's view of its buffer, behind an AFTER that every view of
  that buffer now reads. The buffer never moves."""
  if value.shape != target.shape:
    if not broadcastable(value.shape, target.shape):
      raise ValueError(f"assign shape mismatch: cannot assign shape {value.shape} into shape {target.shape}")
    value = value._broadcast_to(target.shape)
  if value.dtype is not target.dtype:
    raise DTypeError(f"assign dtype mismatch: cannot assign {value.dtype.name} into {target.dtype.name}")
  if value.device != target.device and not is_storage_only(target.device):
    # the value is copied to the target's device and stored there; the target never moves. (A copy to a storage
    # device such as DISK is a store into its buffer: no COPY.) The copy rules drop this COPY again when the target
    # is a whole buffer.
    value = value.to(target.device)
  target_uop = without_detach(target.uop)  # a detached tensor shares its source's storage: stores reach it
  if not has_storage(target_uop):
    # the tensor whose storage this is a view of: tracked per tensor (Tensor.view_of), not by graph, since two
    # tensors built alike (two Tensor.zeros(4)) are one graph node yet separate storage
    owner = target.view_of
    if owner is None:
      target.uop = value.uop  # nothing else sees this tensor's storage: it simply becomes the value
      uop_changed(target)
      return
    if not has_storage(owner.uop): give_own_storage(owner)
    target_uop = without_detach(target.uop)
    if not has_storage(target_uop):
      raise RuntimeError(f"cannot assign into a view of {storage_root(target_uop).op.name}: it has no storage")
  store_target, stored = bitcast_to_source(target_uop, value.uop)
  base = storage_root(store_target)
  after = UOp(Ops.AFTER, base.dtype, (base, UOp(Ops.STORE, None, (store_target, stored))))
  # every view of this buffer (the target itself included) now reads the stored value
  for t in storage_index.views_of(base):
    t.uop = t.uop.substitute({base: after})
    uop_changed(t)


def without_detach(u: UOp) -> UOp:
  """A view chain (movement ops, bitcasts) with the DETACHes in it left out: the view of storage it is."""
  if u.op is Ops.DETACH: return without_detach(u.src[0])
  if u.op in GroupOp.Movement or u.op is Ops.BITCAST:
    below = without_detach(u.src[0])
    return u if below is u.src[0] else u.replace(src=(below, *u.src[1:]))
  return u


def storage_root_under_detach(u: UOp) -> UOp:
  """storage_root, seeing through DETACH too (what a detached view reads from)."""
  while u.op in GroupOp.Movement or u.op is Ops.BITCAST or u.op is Ops.DETACH: u = u.src[0]
  return u


def has_storage(u: UOp) -> bool:
  """u is a view of stored data: a buffer (or a pending AFTER), or on a device tuple every lane's buffer."""
  root = storage_root(u)
  if root.op is Ops.UNSHARD: return all(storage_root(lane).op in (Ops.BUFFER, Ops.AFTER) for lane in root.src[0].src)
  return root.op in (Ops.BUFFER, Ops.AFTER)


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


def live_tensors() -> Iterator[Tensor]:
  """Every Tensor alive now."""
  for ref in list(all_tensors):
    if (t := ref()) is not None: yield t


def give_own_storage(owner: Tensor) -> None:
  """A lazy tensor about to be written through a view gets a buffer of its own holding its value, and every view of
  it is rebased onto that buffer. Realizing the shared graph instead would make every tensor built alike (and every
  view of those) read the same buffer, so the write would reach them too."""
  from tinycore.tensor import Tensor
  storage = Tensor.empty(*owner.shape, dtype=owner.dtype, device=owner.device)
  base = storage_root(storage.uop)
  stored = UOp(Ops.AFTER, base.dtype, (base, UOp(Ops.STORE, None, (storage.uop, owner.uop))))
  new_value = stored.reshape(owner.shape) if stored.shape != owner.shape else stored
  old_value = owner.uop
  for t in live_tensors():
    if t is owner or t.view_of is owner:
      t.uop = t.uop.substitute({old_value: new_value})
      uop_changed(t)


def broadcastable(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
  if len(src) > len(dst): return False
  padded = (1,) * (len(dst) - len(src)) + tuple(src)
  return all(s == d or s == 1 for s, d in zip(padded, dst))
