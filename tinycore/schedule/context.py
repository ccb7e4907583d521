"""What the scheduler knows about one realize: which nodes get buffers, and which buffer each one gets."""
from __future__ import annotations
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.symbolic_shapes import max_numel


class ScheduleError(RuntimeError):
  """A graph that cannot be scheduled as written (the message says why and what to do)."""


class StoreCycleError(ScheduleError):
  """Stores realized together that each read a buffer the other replaces: no order of the jobs works."""


class ScheduleContext:
  def __init__(self) -> None:
    self.realized: dict[UOp, None] = {}      # nodes materialized into a buffer of their own (ordered set)
    self.reasons: dict[UOp, str] = {}        # realized node -> the rule that realized it
    self.buffers: dict[UOp, UOp] = {}        # realized node -> the BUFFER uop that holds it
    self.simplified: dict[UOp, object] = {}  # lowered kernel -> its SimplifiedKernel (kernels lowered alike)
    self.index_memo: dict = {}  # (movement op, arg, source shape, index) -> the source's index and its gate

  def realize(self, node: UOp, reason: str) -> None:
    """Give `node` a buffer of its own; `reason` names the rule (see `explain_realize_points`)."""
    if node not in self.realized: self.reasons[node] = reason
    self.realized[node] = None

  def buffer_for(self, node: UOp) -> UOp:
    """The BUFFER holding `node`'s value: itself for a BUFFER, the stored-to buffer for an AFTER, else a new one."""
    while node.op is Ops.AFTER or (node.op is Ops.RESHAPE and node not in self.realized):
      node = node.src[0]
    if node.op is Ops.BUFFER: return node
    if (buf := self.buffers.get(node)) is None:
      buf = self.buffers[node] = UOp.new_buffer(node.device, max_numel(node.shape), node.dtype)
    return buf
