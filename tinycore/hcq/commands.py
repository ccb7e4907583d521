"""The abstract commands an HCQ2 queue runs, before a device encodes them into its own format.

Arguments that are addresses or integers are `Value`s: either known when the batch is compiled (an int) or patched
in at each run (`InputAddress`: the address of input buffer `slot` plus a byte offset; `Variable`: a symbolic int).
"""
from __future__ import annotations
from typing import Any, Union
import attrs
from tinycore.hcq.signal import Signal


@attrs.frozen(cache_hash=True)  # (a key of every submission's patch values: hashed a few times per run)
class InputAddress:
  """The address of input buffer `slot` (+ `offset` bytes) as `device`'s queues see it, written at run time."""
  slot: int
  device: str
  offset: int = 0


@attrs.frozen(cache_hash=True)
class Variable:
  """The value of a variable (a kernel's scalar parameter, see `tinycore.uop.scalars`), written at run time as one
  64-bit word."""
  name: str


Value = Union[int, InputAddress, Variable]


@attrs.frozen
class Exec:
  """Run `program` (a compiled kernel) with buffer addresses `buffers` and its scalar parameters `vals` (64-bit
  words), passed after the buffers."""
  program: Any
  buffers: tuple[Value, ...]
  vals: tuple[Value, ...] = ()
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] = (1, 1, 1)


@attrs.frozen
class Copy:
  """Copy `nbytes` from address `src` to address `dst`."""
  dst: Value
  src: Value
  nbytes: int


@attrs.frozen
class SignalStore:
  """signal := value, once everything before it on the queue finished."""
  signal: Signal
  value: int


@attrs.frozen
class SignalWait:
  """Wait until signal >= value before running anything after it on the queue."""
  signal: Signal
  value: int


@attrs.frozen
class Timestamp:
  """Write the device clock (nanoseconds, or ticks of the device's `timestamp_period_ns`) into the signal."""
  signal: Signal


@attrs.frozen
class Barrier:
  """Make the effects of everything before it visible to everything after it (caches, memory ordering)."""


Command = Union[Exec, Copy, SignalStore, SignalWait, Timestamp, Barrier]
