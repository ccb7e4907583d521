"""HCQ2's side of the profiler: device timestamps around every kernel and copy of a batch compiled while profiling.

A batch compiled with `profile=True` puts a `Timestamp` command before and after each of its kernels and copies,
writing into a pair of signals per command (one pair per signal set, as a batch may be in flight twice). After a
run, the batch registers it here (`PendingRun`); once the device's timeline shows the run finished (checked at the
next profiled run, before a signal set is reused, and when a trace is built), the timestamps become trace events on
the device's queue tracks. A device's clock is mapped to the host's once, at its first profiled run: the host times
a lone Timestamp command a few times and keeps the offset of the fastest round trip.
"""
from __future__ import annotations
import atexit
import threading
import time
from typing import Any, Sequence
import attrs
import tinycore.profiler as profiler
from tinycore.hcq.commands import Copy, Exec, Timestamp
from tinycore.hcq.device import HCQDevice, HCQTimeoutError
from tinycore.hcq.signal import Signal, signal_pool

CALIBRATION_ROUNDS = 5


@attrs.frozen
class TimedCommand:
  """What the trace says about one kernel or copy of a batch: its name, category, queue and event args."""
  name: str
  category: str
  device: HCQDevice
  queue: str
  args: dict


def describe(command: Any, device: HCQDevice, queue: str, nbytes: int, ops: int | None) -> TimedCommand:
  """A kernel (Exec) or copy (Copy) command as the trace names it."""
  if isinstance(command, Exec):
    args = {"bytes": nbytes, "estimated_ops": ops, "global_size": list(command.global_size),
            "local_size": list(command.local_size)}
    return TimedCommand(command.program.name, "kernel", device, queue, args)
  assert isinstance(command, Copy), "only kernels and copies are timed"
  return TimedCommand(f"copy {command.nbytes} bytes", "copy", device, queue, {"bytes": command.nbytes})


def timer_signals(count: int) -> list[tuple[Signal, Signal]]:
  """A (start, end) pair of timestamp signals for each of `count` commands."""
  return [(signal_pool.new("profiler start"), signal_pool.new("profiler end")) for _ in range(count)]


@attrs.define
class PendingRun:
  """A profiled run in flight: its commands, their timestamp signals and the epochs that mark it finished."""
  commands: Sequence[TimedCommand]
  timers: Sequence[tuple[Signal, Signal]]
  epochs: dict[HCQDevice, int]

  @property
  def finished(self) -> bool: return all(dev.timeline.value >= epoch for dev, epoch in self.epochs.items())


pending: list[PendingRun] = []
pending_lock = threading.RLock()  # runs are added by submitting threads and collected by whoever builds a trace
clock_offsets: dict[HCQDevice, int] = {}  # device clock - host clock, in nanoseconds


def calibrate(dev: HCQDevice) -> int:
  """The offset of `dev`'s Timestamp clock (in ns) from the host clock, measured once per device: the device is
  drained, then a lone Timestamp is timed from the host; the fastest of a few round trips sets the offset
  (device time minus the host's midpoint). Its round trip is the offset's uncertainty, noted in the trace."""
  if (known := clock_offsets.get(dev)) is not None: return known
  if not clock_offsets: atexit.register(drain)  # runs before the devices' own exit handlers stop their queues
  dev.synchronize()
  queue = dev.queues["compute"] if "compute" in dev.queues else next(iter(dev.queues.values()))
  signal = signal_pool.new(f"{dev.device} profiler clock")
  best_round_trip, offset = None, 0
  for _ in range(CALIBRATION_ROUNDS):
    signal.value = 0
    before = profiler.clock_ns()
    queue.submit(queue.encode([Timestamp(signal)]), {})
    wait_for_timestamp(dev, signal)
    after = profiler.clock_ns()
    if best_round_trip is None or after - before < best_round_trip:
      best_round_trip, offset = after - before, device_ns(dev, signal.value) - (before + after) // 2
  clock_offsets[dev] = offset
  profiler.record_device_clock(dev.device, offset, best_round_trip or 0)
  return offset


def device_ns(dev: HCQDevice, value: int) -> int:
  """A Timestamp value of `dev` in nanoseconds of its clock."""
  return round(value * dev.timestamp_period_ns)


def wait_for_timestamp(dev: HCQDevice, signal: Signal) -> None:
  deadline = time.perf_counter() + dev.wait_timeout_ms / 1000
  while signal.value == 0:
    if time.perf_counter() > deadline:
      raise HCQTimeoutError(f"{dev.device}: the profiler's clock calibration timestamp never arrived")
    time.sleep(0.00002)


def add_pending(commands: Sequence[TimedCommand], timers: Sequence[tuple[Signal, Signal]],
                epochs: dict[HCQDevice, int]) -> None:
  """Register a profiled run just submitted; its events are recorded once it finished."""
  with pending_lock: pending.append(PendingRun(commands, timers, epochs))


def record_run(run: PendingRun) -> None:
  """The finished run's timestamps as events on its devices' queue tracks, on the host clock."""
  for command, (start, end) in zip(run.commands, run.timers):
    dev, offset = command.device, clock_offsets[command.device]
    profiler.record(command.name, command.category, dev.device, command.queue, device_ns(dev, start.value) - offset,
                    device_ns(dev, end.value) - offset, clock="device", **command.args)


def collect_finished() -> None:
  """Record the runs that finished (their signals may be reused after this)."""
  if not pending: return
  with pending_lock:
    finished = [(run, run.finished) for run in pending]  # read once: a run may finish while this looks
    pending[:] = [run for run, done in finished if not done]
  for run, done in finished:
    if done: record_run(run)


def drain() -> None:
  """Wait for every profiled run still in flight and record it (before a trace is built, and at exit)."""
  with pending_lock: runs = list(pending)
  for run in runs:
    for dev, epoch in run.epochs.items():
      if dev.timeline.value < epoch: dev.synchronize()
  collect_finished()


profiler.register_flush(drain)
