"""The memory planner: intermediate buffers of one run whose lifetimes do not overlap share memory.

A schedule makes a fresh buffer for every value it stores, and a run would hold all of them at once (a training
step: every activation and every gradient). Most are read only by later calls of the same run and by nothing after
it. `plan_memory` gives those an offset in one arena per device, walking the calls in order as an allocator would
(a buffer's block is taken at its first call and given back after its last, best fit among the free blocks), and
rewrites the LINEAR so each planned buffer is a BUFFER_VIEW of its device's arena. Since the views name one base
buffer, the queues' hazard tracking (`tinycore.hcq.runtime.order_commands`) orders every reuse of the same bytes as
it orders any other overlapping access.

Only buffers that kernels alone use are planned, on devices whose allocator makes sub-buffer views (never DISK or a
device without `_offset`); a buffer a tensor holds after the run is never planned (the caller names those: `kept`).
`TINYCORE_NO_MEMORY_PLANNER=1` turns the planner off.
"""
from __future__ import annotations
import bisect
from typing import Iterable
import attrs
from tinycore.dtype import dtypes
from tinycore.helpers import ContextVar
from tinycore.uop.ops import Ops, UOp
from tinycore.device.registry import Device

NO_MEMORY_PLANNER = ContextVar("TINYCORE_NO_MEMORY_PLANNER", 0)
# every planned buffer starts at a multiple of this many bytes: wider than any vector load, and than the sub-buffer
# alignment OpenCL drivers ask for (CL_DEVICE_MEM_BASE_ADDR_ALIGN: 1024 bits on most)
ARENA_ALIGNMENT = 256


@attrs.frozen
class MemoryPlan:
  """A LINEAR with its planned buffers as views of per-device arenas. `arenas` are the arena BUFFERs (fresh storage
  for each run, like the schedule's other fresh buffers); `planned_bytes` is what the planned buffers would take
  one by one, `arena_bytes` what the arenas take."""
  linear: UOp
  arenas: tuple[UOp, ...]
  planned_bytes: int
  arena_bytes: int


def _aligned(nbytes: int) -> int: return -(-nbytes // ARENA_ALIGNMENT) * ARENA_ALIGNMENT


def plannable(buf: UOp) -> bool:
  """Whether a buffer may live in an arena: a single device that computes and makes sub-buffer views, some bytes."""
  if not isinstance(buf.device, str) or buf.arg * buf.dtype.itemsize == 0: return False
  dev = Device[buf.device]
  return dev.can_compute and dev.allocator.supports_offset


def lifetimes(linear: UOp, candidates: set[UOp]) -> dict[UOp, tuple[int, int]]:
  """(first call, last call) of each candidate that only kernels use; a candidate a copy (or anything else) touches,
  or one passed as a view or a lane stack, is left out."""
  spans: dict[UOp, tuple[int, int]] = {}
  excluded: set[UOp] = set()
  for i, call in enumerate(linear.src):
    kernel = call.src[0].op is Ops.SINK
    for arg in call.src[1:]:
      bufs = [arg] if arg.op is Ops.BUFFER else [u for u in arg.toposort() if u.op is Ops.BUFFER]
      for b in bufs:
        if b not in candidates: continue
        if not kernel or arg is not b: excluded.add(b)
        spans[b] = (spans[b][0], i) if b in spans else (i, i)
  return {b: span for b, span in spans.items() if b not in excluded}


class ArenaAllocator:
  """Offsets in one growing arena: best fit among the free blocks (coalesced on free), else at the end."""

  def __init__(self) -> None:
    self.free_blocks: list[tuple[int, int]] = []  # (offset, size), by offset
    self.size = 0

  def take(self, nbytes: int) -> int:
    fits = [(size, offset) for offset, size in self.free_blocks if size >= nbytes]
    if fits:
      size, offset = min(fits)
      at = self.free_blocks.index((offset, size))
      if size == nbytes: del self.free_blocks[at]
      else: self.free_blocks[at] = (offset + nbytes, size - nbytes)
      return offset
    if self.free_blocks and sum(self.free_blocks[-1]) == self.size:  # the last free block grows to fit
      offset, _ = self.free_blocks.pop()
    else: offset = self.size
    self.size = offset + nbytes
    return offset

  def give_back(self, offset: int, nbytes: int) -> None:
    at = bisect.bisect(self.free_blocks, (offset, nbytes))
    if at < len(self.free_blocks) and offset + nbytes == self.free_blocks[at][0]:  # merge with the next block
      nbytes += self.free_blocks.pop(at)[1]
    if at > 0 and sum(self.free_blocks[at - 1]) == offset:  # merge with the previous block
      offset, before = self.free_blocks.pop(at - 1)
      nbytes, at = nbytes + before, at - 1
    self.free_blocks.insert(at, (offset, nbytes))


def plan_memory(linear: UOp, fresh: Iterable[UOp], kept: set[UOp]) -> MemoryPlan | None:
  """The LINEAR with the `fresh` buffers that are not `kept` (and that `lifetimes` admits) placed in arenas, or None
  when there is nothing to share (no two planned buffers on a device)."""
  candidates = {b for b in fresh if b not in kept and plannable(b)}
  spans = lifetimes(linear, candidates)
  starting: dict[int, list[UOp]] = {}
  ending: dict[int, list[UOp]] = {}
  for b, (first, last) in spans.items():
    starting.setdefault(first, []).append(b)
    ending.setdefault(last, []).append(b)
  arenas: dict[str, ArenaAllocator] = {}
  offsets: dict[UOp, int] = {}
  for i in range(len(linear.src)):
    for b in starting.get(i, ()):
      offsets[b] = arenas.setdefault(b.device, ArenaAllocator()).take(_aligned(b.arg * b.dtype.itemsize))
    for b in ending.get(i, ()): arenas[b.device].give_back(offsets[b], _aligned(b.arg * b.dtype.itemsize))
  planned_bytes = sum(b.arg * b.dtype.itemsize for b in offsets)
  arena_bytes = sum(a.size for a in arenas.values())
  if not offsets or arena_bytes >= planned_bytes: return None
  arena_of = {device: UOp.new_buffer(device, a.size, dtypes.uint8) for device, a in arenas.items()}
  views = {b: UOp(Ops.BUFFER_VIEW, b.dtype, (arena_of[b.device],), (b.arg, offset)) for b, offset in offsets.items()}
  calls = tuple(call.replace(src=(call.src[0], *(views.get(a, a) for a in call.src[1:]))) for call in linear.src)
  return MemoryPlan(linear.replace(src=calls), tuple(arena_of.values()), planned_bytes, arena_bytes)
