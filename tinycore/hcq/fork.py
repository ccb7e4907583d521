"""Queue devices across os.fork: the parent's queues are drained before the fork (so the child's copy of memory is
complete), and the child restarts what did not survive it (worker threads), or marks a device unusable with the
reason and the remedy."""
from __future__ import annotations
import os
from tinycore.device.registry import Device
from tinycore.hcq.device import HCQDevice, is_hcq_device
from tinycore.hcq.in_flight import release_finished
from tinycore.hcq.lock import runtime_lock

_fork_failure: str | None = None


def opened_queue_devices() -> list[HCQDevice]:
  return [dev for dev in Device.opened().values() if is_hcq_device(dev)]


def before_fork() -> None:
  global _fork_failure
  runtime_lock.acquire()
  _fork_failure = None
  try:
    for dev in opened_queue_devices(): dev.synchronize()
    release_finished()
  except Exception as error:  # the child learns why when it uses the device; the parent goes on
    _fork_failure = f"its queues were still busy when the process forked ({error})"


def after_fork_in_parent() -> None: runtime_lock.release()


def after_fork_in_child() -> None:
  runtime_lock.release()
  for dev in opened_queue_devices():
    reason = _fork_failure
    if reason is None:
      try: dev.restart_after_fork()
      except Exception as error: reason = f"{type(error).__name__}: {error}"
    if reason is not None:
      dev.unusable = (f"{dev.device} was opened before this process was forked and cannot be used in the child: "
                      f"{reason}. Use the 'spawn' or 'forkserver' start method "
                      "(multiprocessing.set_start_method('spawn')), or open the device only in the child")


os.register_at_fork(before=before_fork, after_in_parent=after_fork_in_parent, after_in_child=after_fork_in_child)
