"""The profiler: what ran where and when, as a Chrome trace that Perfetto (https://ui.perfetto.dev) and
chrome://tracing open.

    TINYCORE_PROFILE=trace.json python train.py        # whole run, written at exit
    with tinycore.profile("step.json"): step()         # one block

The trace has a process per device with a track per queue ("compute", "copy"; "collective" for collectives across
processes, tinycore.distributed) and a "host" process with the schedule, compile and submit tracks. Every kernel and
copy is one complete ("X") event with its name, device, bytes or estimated ops, and `clock`: "device" when its times
come from the device's own timestamps (HCQ2 `Timestamp` commands, converted to the host timebase with a per-device
offset), "host" when the host timed the call.

This module sits at the bottom of the layers and imports nothing of tinycore: realize (scheduling), the compile path,
HCQ2 and the engine call into it, each behind one check of `enabled`, so profiling off costs one attribute read per
hook. Layers above that hold events back (HCQ2's device timestamps, readable once the queues ran) register a flush
(`register_flush`) that `trace()` calls first.
"""
from __future__ import annotations
import atexit
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

PROFILE_ENV = "TINYCORE_PROFILE"
HOST_PROCESS = "host"
CATEGORIES = ("kernel", "copy", "collective", "schedule", "compile", "submit")
# thread ids of the tracks: the same number for the same track in every process, so traces line up
TRACK_IDS = {"compute": 1, "copy": 2, "schedule": 3, "compile": 4, "submit": 5, "collective": 6}

enabled = False  # the one flag every hook checks; change it with enable()/disable()/profile()


class Recording:
  """The events recorded so far, and the process and track ids they use."""

  def __init__(self) -> None:
    self.lock = threading.Lock()
    self.events: list[dict[str, Any]] = []
    self.processes: dict[str, int] = {HOST_PROCESS: 1}
    self.tracks: dict[tuple[int, str], int] = {}
    self.device_clocks: dict[str, dict[str, float]] = {}
    self.cleared = 0  # bumped by clear(), so a profile() block knows its start index is stale

  def track(self, process: str, track: str) -> tuple[int, int]:
    """(pid, tid) of a process's track, named the first time it is used."""
    with self.lock:
      pid = self.processes.setdefault(process, len(self.processes) + 1)
      tid = self.tracks.setdefault((pid, track), TRACK_IDS.get(track, len(TRACK_IDS) + 1 + len(self.tracks)))
    return pid, tid


recording = Recording()
flushes: list[Callable[[], None]] = []
ORIGIN_NS = time.perf_counter_ns()  # the trace's time zero


def clock_ns() -> int:
  """The host clock every event is placed on (nanoseconds, `time.perf_counter_ns`)."""
  return time.perf_counter_ns()


def is_enabled() -> bool:
  """Whether events are being recorded."""
  return enabled


def enable() -> None:
  """Start recording (events add to what was recorded before; `clear()` forgets it)."""
  global enabled
  enabled = True


def disable() -> None:
  """Stop recording; what was recorded stays until `clear()`."""
  global enabled
  enabled = False


def clear() -> None:
  """Forget every event recorded so far."""
  run_flushes()  # device events still held back would otherwise land after the clear
  with recording.lock:
    recording.events.clear()
    recording.cleared += 1


def register_flush(flush: Callable[[], None]) -> None:
  """`flush()` is called before a trace is built: it records the events its layer held back (device timestamps that
  can be read only once the queues finished)."""
  if flush not in flushes: flushes.append(flush)


def run_flushes() -> None:
  for flush in flushes: flush()


def record(name: str, category: str, process: str, track: str, start_ns: int, end_ns: int, clock: str = "host",
           **args: Any) -> None:
  """One complete event on `process`'s `track`, from `start_ns` to `end_ns` on the host clock (`clock_ns`).
  `clock` says whose clock measured it ("device" or "host"); `args` (device, bytes, estimated ops, ...) are shown
  with the event."""
  if category not in CATEGORIES: raise ValueError(f"unknown profiler category {category!r}: one of {CATEGORIES}")
  pid, tid = recording.track(process, track)
  # held in integer nanoseconds (exact nesting checks); trace() writes microseconds
  event = {"name": name, "cat": category, "ph": "X", "pid": pid, "tid": tid, "ts": start_ns - ORIGIN_NS,
           "dur": max(0, end_ns - start_ns), "args": {"device": process, "clock": clock, **args}}
  with recording.lock: recording.events.append(event)


def record_device_clock(device: str, offset_ns: int, round_trip_ns: int) -> None:
  """Note how `device`'s timestamps map to the host clock: host = device - offset_ns, known to within
  `round_trip_ns` (shown in the trace's otherData)."""
  recording.device_clocks[device] = {"offset_ns": offset_ns, "uncertainty_ns": round_trip_ns}


def metadata_events() -> list[dict[str, Any]]:
  """The "M" events naming every process and track in use (host first)."""
  out: list[dict[str, Any]] = []
  with recording.lock: processes, tracks = dict(recording.processes), dict(recording.tracks)
  for name, pid in processes.items():
    out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
    out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
  for (pid, track), tid in tracks.items():
    out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": track}})
    out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
  return out


def nest_slices(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """The events (times in ns) sorted by start, with slices on one track properly nested, as Perfetto needs (it
  drops a slice that starts inside another and ends after it). Such a partial overlap only comes from two clocks on
  one track (a copy the host timed beside copies the device timed, within the clock offset's uncertainty) or from
  host threads recording on one track: the earlier slice is cut where the later one starts, and says by how much
  (`trimmed_us`)."""
  ordered = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
  open_slices: dict[tuple[int, int], list[dict[str, Any]]] = {}
  for event in ordered:
    stack = open_slices.setdefault((event["pid"], event["tid"]), [])
    end = event["ts"] + event["dur"]
    while stack:
      outer = stack[-1]
      outer_end = outer["ts"] + outer["dur"]
      if outer_end <= event["ts"]: stack.pop()
      elif outer_end < end:  # a partial overlap: cut the outer slice where this one starts
        outer["args"]["trimmed_us"] = (outer_end - event["ts"]) / 1000
        outer["dur"] = event["ts"] - outer["ts"]
        stack.pop()
      else: break
    stack.append(event)
  return ordered


def trace(since: int = 0) -> dict[str, Any]:
  """Everything recorded so far (from event index `since`) as a Chrome trace: {"traceEvents": [...],
  "displayTimeUnit": "ms", "otherData": {...}}. Device events still held back are flushed first."""
  run_flushes()
  with recording.lock: events = nest_slices([{**e, "args": dict(e["args"])} for e in recording.events[since:]])
  for event in events: event["ts"], event["dur"] = event["ts"] / 1000, event["dur"] / 1000
  return {"traceEvents": metadata_events() + events, "displayTimeUnit": "ms",
          "otherData": {"producer": "tinycore", "clock": "host perf_counter, microseconds since the profiler loaded",
                        "device_clocks": dict(recording.device_clocks)}}


def write_trace(path: str, since: int = 0) -> str:
  """Write `trace(since)` as JSON to `path`; returns the path."""
  data = trace(since)
  with open(path, "w") as f: json.dump(data, f)
  return path


@contextlib.contextmanager
def profile(path: str | None = None) -> Iterator[None]:
  """Record while inside the block; on exit write the events recorded in it to `path` (when given) as a Chrome
  trace. Blocks nest: recording stays on until the outermost one ends (or as it was before it)."""
  run_flushes()  # work submitted before the block lands before it, not in it
  was_enabled, cleared = enabled, recording.cleared
  with recording.lock: start = len(recording.events)
  enable()
  try: yield
  finally:
    run_flushes()  # events of work submitted inside the block land before the block's trace is cut
    if not was_enabled: disable()
    if path is not None: write_trace(path, start if recording.cleared == cleared else 0)


def write_at_exit(path: str) -> None:
  """At exit: write the whole trace to `path` and say where it went (on stderr)."""
  try:
    write_trace(path)
    print(f"tinycore: profile written to {path} (open it in https://ui.perfetto.dev or chrome://tracing)",
          file=sys.stderr)
  except Exception as error:  # at exit a failure can only be reported
    print(f"tinycore: could not write the profile to {path}: {error}", file=sys.stderr)


if (_env_path := os.environ.get(PROFILE_ENV)):
  enable()
  atexit.register(write_at_exit, _env_path)
