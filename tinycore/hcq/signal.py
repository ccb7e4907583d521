"""Signals: 64-bit words in host-visible memory that queues store to and wait on (value >= target)."""
from __future__ import annotations
import ctypes
import mmap
import os
import threading

_PAGE_WORDS = 512  # one 4 KiB page of signals


class Signal:
  """One 64-bit signal word. `addr` is its address for command buffers; `value` reads and writes it."""
  __slots__ = ("addr", "_words", "_index", "name")

  def __init__(self, words: memoryview, index: int, addr: int, name: str = ""):
    self._words, self._index, self.addr, self.name = words, index, addr, name

  @property
  def value(self) -> int: return self._words[self._index]
  @value.setter
  def value(self, v: int) -> None: self._words[self._index] = v & 0xFFFFFFFFFFFFFFFF

  def __repr__(self) -> str: return f"<Signal {self.name or hex(self.addr)} = {self.value}>"


class SignalPool:
  """Hands out signals from pages of anonymous shared memory; signals are never freed (they are few and small)."""

  def __init__(self) -> None:
    self._lock = threading.Lock()
    self._pages: list[mmap.mmap] = []
    self._next = _PAGE_WORDS

  def new(self, name: str = "", value: int = 0) -> Signal:
    with self._lock:
      if self._next == _PAGE_WORDS:
        # private: a forked child gets its own copy of every signal instead of sharing the parent's
        self._pages.append(mmap.mmap(-1, _PAGE_WORDS * 8, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
        self._next = 0
      page = self._pages[-1]
      index, self._next = self._next, self._next + 1
    words = memoryview(page).cast("Q")
    signal = Signal(words, index, ctypes.addressof(ctypes.c_char.from_buffer(page)) + index * 8, name)
    signal.value = value
    return signal


signal_pool = SignalPool()
# a forked child has only the forking thread: a lock another thread held at the fork would never be released
os.register_at_fork(after_in_child=lambda: setattr(signal_pool, "_lock", threading.Lock()))
