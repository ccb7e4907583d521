"""The COLLECTIVE op's arg: which collective across processes, over how many, on what shape.

`COLLECTIVE(x)` at tensor level is a load across processes, as COPY is one across devices: every process passes its
own `x` and gets the combined value, stored into fresh memory on x's device. The scheduler lowers it as it lowers a
copy (`tinycore.schedule.copies`): into a STORE whose arg is this record, then a `CALL(COLLECTIVE, dst, src)` the
engine runs through the collective backend (`tinycore.device.collective`).
"""
from __future__ import annotations
from typing import NamedTuple

KINDS = ("all_reduce", "all_gather", "broadcast")
REDUCE_OPS = ("sum", "max", "min")


class Collective(NamedTuple):
  """A collective over `world_size` processes on a value of `shape` (the same on every process).

  kind: "all_reduce" (every process gets the elementwise `reduce_op` of all processes' values), "all_gather" (every
    process gets the values stacked in rank order along a new first axis) or "broadcast" (every process gets rank
    `root`'s).
  reduce_op: "sum", "max" or "min" for all_reduce; on an all_gather, the all_reduce it serves (a small one is
    gathered, then reduced by a kernel): messages name the user's all_reduce. None otherwise.
  """
  kind: str
  world_size: int
  shape: tuple[int, ...]
  reduce_op: str | None = None
  root: int = 0

  def output_shape(self) -> tuple[int, ...]:
    """The shape every process gets: the input's, or for all_gather (world_size, *shape)."""
    return (self.world_size, *self.shape) if self.kind == "all_gather" else self.shape

  def describe(self) -> str:
    """One line for messages, VIZ and the profiler: "all_reduce sum (4, 3)"."""
    if self.kind == "all_gather" and self.reduce_op is not None:
      return f"all_reduce {self.reduce_op} {self.shape} (gathered, reduced here)"
    detail = {"all_reduce": f" {self.reduce_op}", "all_gather": "", "broadcast": f" from rank {self.root}"}[self.kind]
    return f"{self.kind}{detail} {self.shape}"


def is_valid_collective(arg: object) -> bool:
  """The arg names a collective the engine can run (the spec checker's rule)."""
  if not isinstance(arg, Collective) or arg.kind not in KINDS or arg.world_size < 1: return False
  if arg.reduce_op not in (*REDUCE_OPS, *((None,) if arg.kind != "all_reduce" else ())): return False
  if arg.kind == "broadcast" and arg.reduce_op is not None: return False
  return 0 <= arg.root < arg.world_size
