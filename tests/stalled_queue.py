"""A queue device whose compute queue waits on a signal nobody writes: the setup of every host-wait timeout test."""
from __future__ import annotations
from typing import Any
from tinycore.hcq.commands import SignalStore, SignalWait
from tinycore.hcq.signal import Signal, signal_pool


def stall_compute_queue(dev: Any) -> Signal:
  """Make `dev`'s compute queue wait on a fresh signal before it reports its next epoch, and return that signal:
  `dev.synchronize()` then sees no progress until the caller sets `signal.value = 1`."""
  dev.synchronize()
  signal = signal_pool.new("never written")
  queue = dev.queues["compute"]
  queue.submit(queue.encode([SignalWait(signal, 1)]), {})
  queue.submit(queue.encode([SignalStore(dev.timeline, dev.epoch + 1)]), {})
  dev.epoch += 1
  return signal
