"""Bounded in-memory caches, and `clear_caches()` that empties them all (for tests and benchmarks).

Every process-wide cache of the core (schedules by graph shape, compiled kernels, compiled queue templates) is a
`BoundedCache`: a dict with a size limit that drops its oldest entry when full. This module imports nothing of
tinycore, so every layer may use it.
"""
from __future__ import annotations
import threading
import weakref
from typing import Generic, Hashable, TypeVar

Value = TypeVar("Value")

_all_caches: weakref.WeakSet[BoundedCache] = weakref.WeakSet()


class BoundedCache(Generic[Value]):
  """A dict of at most `max_entries` entries; putting one more drops the oldest (first inserted). `name` says what
  it caches (shown in its repr)."""

  def __init__(self, name: str, max_entries: int):
    if max_entries < 1: raise ValueError(f"cache {name!r} needs room for at least one entry, got {max_entries}")
    self.name, self.max_entries = name, max_entries
    self._entries: dict[Hashable, Value] = {}
    self._lock = threading.Lock()
    _all_caches.add(self)

  def get(self, key: Hashable) -> Value | None:
    return self._entries.get(key)

  def put(self, key: Hashable, value: Value) -> Value:
    """Store `value` under `key` (dropping the oldest entry when full) and return it."""
    with self._lock:
      if key not in self._entries and len(self._entries) >= self.max_entries:
        self._entries.pop(next(iter(self._entries)))
      self._entries[key] = value
    return value

  def clear(self) -> None:
    with self._lock: self._entries.clear()

  def __len__(self) -> int: return len(self._entries)
  def __contains__(self, key: Hashable) -> bool: return key in self._entries
  def __repr__(self) -> str: return f"<BoundedCache {self.name}: {len(self)}/{self.max_entries}>"


def clear_caches() -> None:
  """Empty every BoundedCache of the process, so the next realize schedules, renders and compiles from scratch
  (the on-disk compiler cache is not touched)."""
  for cache in list(_all_caches): cache.clear()
