"""Work in flight on queue devices: which buffers a submitted batch still uses, until its devices reach the epochs
that mark it finished; and the host's fence that waits for it.

A batch's buffers stay referenced here until the batch finished, so a tensor freed meanwhile never frees memory a
queue still reads or writes. Host calls (copies through the allocator, host kernels) wait for everything in flight
first (`wait_for_queues`, also registered as the device layer's host fence).
"""
from __future__ import annotations
import ctypes
from typing import Any, Sequence
from tinycore.device.fence import register_host_fence
from tinycore.hcq.lock import holding_runtime_lock
from tinycore.hcq.signal import signal_pool

# (the epoch each device must reach, the buffers kept alive until then)
in_flight: list[tuple[dict[Any, int], list[Any]]] = []


def reached(epochs: dict[Any, int]) -> bool:
  """Whether every device's timeline reached its epoch."""
  for dev, epoch in epochs.items():
    if dev.timeline.value < epoch: return False
  return True


@holding_runtime_lock
def track_in_flight(epochs: dict[Any, int], buffers: Sequence[Any]) -> None:
  """Keep `buffers` alive until every device of `epochs` reached its epoch (nothing to do if they already did)."""
  if not reached(epochs): in_flight.append((epochs, list(buffers)))


@holding_runtime_lock
def release_finished() -> None:
  """Drop the references that kept buffers alive while queues still used them."""
  in_flight[:] = [entry for entry in in_flight if not reached(entry[0])]


def devices_in_flight() -> list[Any]:
  """The devices that still run work the host submitted."""
  return list(dict.fromkeys(dev for epochs, _ in in_flight for dev in epochs))


@holding_runtime_lock
def wait_for_queues() -> None:
  """Host calls run after every queue device finished what it was given (a simple, safe fence)."""
  for epochs, _ in list(in_flight):
    for dev in epochs: dev.synchronize()
  release_finished()


def wait_if_in_flight() -> None:
  """The host fence (`tinycore.device.fence`): wait for the queues, only when something is in flight."""
  if in_flight: wait_for_queues()


register_host_fence(wait_if_in_flight)


def keep_in_flight_memory(*owners: Any) -> None:
  """At exit, for a queue whose worker could not be stopped in time: the buffers of the work in flight, every signal
  and `owners` (say, the device with its allocator's cached memory) are never freed, so the kernel still running
  never touches unmapped memory while the interpreter shuts down. The process's exit releases them."""
  for owner in (in_flight, signal_pool, *owners): ctypes.pythonapi.Py_IncRef(ctypes.py_object(owner))
