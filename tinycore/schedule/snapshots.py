"""Snapshots that break store cycles: stores realized together that read each other's old values.

`a.assign(f(b)); b.assign(g(a))` realized in one schedule (an optimizer step whose gradients fuse into the update
kernels, say) needs a's store to run before b's (it reads old b) and after it (b's store reads old a): no order
works. The fix copies each buffer that one store reads and another store replaces into a scratch buffer first, and
the stores read the copy. The scheduler tries this only when ordering the jobs found a cycle.
"""
from __future__ import annotations
from tinycore.uop.ops import Ops, UOp
from tinycore.schedule.copies import storage_root


def stored_buffers(graph: dict[UOp, None]) -> set[UOp]:
  """Every BUFFER that a store in the graph replaces (the bottom of each AFTER chain)."""
  buffers = set()
  for node in graph:
    if node.op is not Ops.AFTER: continue
    base = node.src[0]
    while base.op is Ops.AFTER: base = base.src[0]
    if base.op is Ops.BUFFER: buffers.add(base)
  return buffers


def snapshot_of(buffer: UOp) -> UOp:
  """A fresh scratch buffer holding a copy of `buffer`'s current value."""
  scratch = UOp.new_buffer(buffer.src[1].arg, buffer.arg, buffer.dtype)
  return UOp(Ops.AFTER, scratch.dtype, (scratch, UOp(Ops.STORE, None, (scratch, buffer))))


def rebuild(u: UOp, reads: dict[UOp, UOp], versions: dict[UOp, UOp]) -> UOp:
  """u with the buffers in `reads` replaced by their snapshots and each AFTER (a stored version, not walked into)
  replaced by its rewritten form in `versions`."""
  done: dict[UOp, UOp] = {}
  for node in u.toposort(gate=lambda n: n.op is not Ops.AFTER):
    if node.op is Ops.AFTER: done[node] = versions.get(node, node)
    elif node in reads: done[node] = reads[node]
    elif not node.src: done[node] = node
    else:
      new_src = tuple([done[s] for s in node.src])
      done[node] = node if new_src == node.src else UOp(node.op, node.dtype, new_src, node.arg, node.tag)
  return done[u]


def snapshot_crossed_reads(roots: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp]]:
  """The roots with every store's value reading a snapshot instead of another stored buffer's old value, and each
  rewritten node mapped from its original (the stores and the roots)."""
  graph = UOp(Ops.SINK, None, tuple(roots)).toposort()
  snapshots = {b: snapshot_of(b) for b in stored_buffers(graph) if isinstance(b.src[1].arg, str)}
  versions: dict[UOp, UOp] = {}
  for node in graph:
    if node.op is not Ops.AFTER or len(node.src) != 2 or node.src[1].op is not Ops.STORE: continue
    target, value = node.src[1].src
    own = storage_root(target)
    while own.op is Ops.AFTER: own = own.src[0]
    reads = {b: s for b, s in snapshots.items() if b is not own}
    store = UOp(Ops.STORE, None, (rebuild(target, {}, versions), rebuild(value, reads, versions)))
    versions[node] = UOp(node.op, node.dtype, (rebuild(node.src[0], {}, versions), store), node.arg, node.tag)
  new_roots = [rebuild(r, {}, versions) for r in roots]
  changed = {old: new for old, new in versions.items() if new is not old}
  changed.update({old: new for old, new in zip(roots, new_roots) if new is not old})
  return new_roots, changed
