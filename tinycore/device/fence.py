"""The host fence: before the host reads or writes device memory, queued work that may use it must finish.

The device layer calls `host_fence()` without knowing how devices queue work; a queue runtime (HCQ2,
`tinycore.hcq.in_flight`) registers its wait here when it is imported, which is before it can queue anything.
"""
from __future__ import annotations
from typing import Callable

_fences: list[Callable[[], None]] = []


def register_host_fence(fence: Callable[[], None]) -> None:
  """Make `host_fence()` call `fence` (once, however often it is registered)."""
  if fence not in _fences: _fences.append(fence)


def host_fence() -> None:
  """Wait until every registered queue runtime finished the work it was given."""
  for fence in _fences: fence()
