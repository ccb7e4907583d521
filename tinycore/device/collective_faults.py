"""How a job of several processes ends when one of them fails, instead of hanging.

- A process that raises an exception nobody catches prints it, says which rank failed and ends every process of the
  job (`CollectiveBackend.abort`), from its `sys.excepthook`.
- The watch, a daemon thread per process: while this process waits inside a collective longer than
  TINYCORE_DIST_TIMEOUT seconds (default 300) it says which collective and ends the job; and as soon as another
  process of the job on this machine exits before the job ended (killed, crashed, `os._exit`), it names that rank
  and ends the job. Processes on other machines are seen through the timeout (and their launcher, which usually
  ends the job itself).
- At exit every process exchanges one more header, "exiting": a process that exits while another still calls
  collectives is named by the header mismatch (on both sides) instead of leaving the other waiting.
"""
from __future__ import annotations
import atexit
import os
import select
import socket
import struct
import sys
import threading
import time
import traceback
import zlib
from typing import Any, Callable
from tinycore.dtype import dtypes
from tinycore.device.compiled import seconds_setting
from tinycore.device.collective import (CollectiveBackend, CollectiveGroup, CollectiveMismatch, forget_group,
                                        start_group)

TIMEOUT_ENV = "TINYCORE_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
# the watch looks at the clock at least this often (and at most 20 times per timeout)
WATCH_INTERVAL_S = 0.5
FAILED_STATUS = 1


# how long a failing process waits between printing why and ending the job: a launcher that ends the job drops what
# is still in its processes' output pipes (a launcher lost the traceback without it)
OUTPUT_GRACE_S = 0.5


def end_job(backend: CollectiveBackend, code: int) -> None:
  """End every process of the job, once what this process printed had time to reach the launcher."""
  for stream in (sys.stdout, sys.stderr):
    try: stream.flush()
    except (OSError, ValueError): pass
  time.sleep(OUTPUT_GRACE_S)
  backend.abort(code)


def timeout_s() -> float:
  """How long a process may wait inside one collective: $TINYCORE_DIST_TIMEOUT seconds (default 300)."""
  return seconds_setting(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)


def say(message: str) -> None:
  """One line on stderr, written at once (several processes share the terminal)."""
  try:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
  except (OSError, ValueError): pass  # stderr closed: the exit status still tells


def machine_id() -> int:
  """This machine (and pid namespace) as a number: processes with equal ids can see each other's pids."""
  try: boot = open("/proc/sys/kernel/random/boot_id").read().strip()
  except OSError: boot = ""
  try: namespace = os.stat("/proc/self/ns/pid").st_ino
  except OSError: namespace = 0
  return zlib.crc32(f"{socket.gethostname()}|{boot}|{namespace}".encode())


class Watch:
  """The watch thread of one process (see the module docstring). `entering`/`left` bracket every wait inside the
  backend (two attribute stores: what the wait is, `describe()`, is worded only when it timed out); the thread reads
  them."""

  def __init__(self, rank: int, world_size: int, limit_s: float, end_job: Callable[[int], None]):
    self.rank, self.world_size, self.limit_s, self.end_job = rank, world_size, limit_s, end_job
    self.waiting: tuple[float, Callable[[], str]] | None = None
    self.peers: dict[int, tuple[int, int]] = {}  # rank -> (pid, pidfd or -1) of the other processes on this machine
    self.stopped = threading.Event()
    self.thread: threading.Thread | None = None

  def entering(self, describe: Callable[[], str]) -> None: self.waiting = (time.monotonic(), describe)
  def left(self) -> None: self.waiting = None

  def watch_peers(self, peers: dict[int, int]) -> None:
    """Watch these processes (rank -> pid, on this machine) and start the thread."""
    for rank, pid in peers.items():
      try: fd = os.pidfd_open(pid)
      except (AttributeError, OSError): fd = -1  # no pidfd (old kernel): polled with kill(pid, 0)
      self.peers[rank] = (pid, fd)
    self.thread = threading.Thread(target=self.run, name="tinycore-collective-watch", daemon=True)
    self.thread.start()

  def stop(self) -> None:
    self.stopped.set()
    for _, fd in self.peers.values():
      if fd >= 0: os.close(fd)
    self.peers = {}

  def run(self) -> None:
    interval = min(WATCH_INTERVAL_S, self.limit_s / 20)
    while not self.stopped.is_set():
      ready = self.wait_for_exits(interval)
      if self.stopped.is_set(): return
      if (gone := self.exited_peer(ready)) is not None:
        rank, pid = gone
        self.fail(f"rank {rank} (pid {pid} on this machine) exited before the job ended (killed, crashed or "
                  f"os._exit): ending the job")
      if (waiting := self.waiting) is not None and time.monotonic() - waiting[0] > self.limit_s:
        self.fail(f"rank {self.rank} waited more than {self.limit_s:g} s inside {waiting[1]()}: another rank did not "
                  f"reach it (it hangs, or runs other code); ending the job (allow more time with "
                  f"{TIMEOUT_ENV}=<seconds>)")

  def wait_for_exits(self, interval: float) -> list[int]:
    """Up to `interval` seconds: the pidfds of peers that exited meanwhile (a pidfd is readable once it has)."""
    fds = [fd for _, fd in self.peers.values() if fd >= 0]
    if not fds:
      self.stopped.wait(interval)
      return []
    try: return select.select(fds, [], [], interval)[0]
    except (OSError, ValueError): return []  # a descriptor closed by stop() meanwhile

  def exited_peer(self, ready: list[int]) -> tuple[int, int] | None:
    for rank, (pid, fd) in self.peers.items():
      if fd in ready or (fd < 0 and not process_alive(pid)): return rank, pid
    return None

  def fail(self, message: str) -> None:
    say(f"tinycore.distributed: {message}")
    self.stopped.set()
    self.end_job(FAILED_STATUS)


def process_alive(pid: int) -> bool:
  try: os.kill(pid, 0)
  except ProcessLookupError: return False
  except PermissionError: return True
  return True


IDENTITY_FORMAT = "<qq48s"  # pid, machine id, host name
IDENTITY_BYTES = struct.calcsize(IDENTITY_FORMAT)
# the rank table rank 0 prints at the start, up to this many ranks (a launcher that kills the job names a pid)
LISTED_RANKS = 64


def host_name(packed: bytes) -> str: return packed.rstrip(b"\0").decode(errors="replace")


def start_with_faults(backend: CollectiveBackend) -> CollectiveGroup:
  """Start the group of `backend` with its watch, the exception hook and the exit exchange (see the module
  docstring). The first exchange ("starting") tells each process which peers share its machine (their pids), and
  rank 0 prints which pid on which host each rank is (a launcher that ends the job names the pid that died)."""
  watch = Watch(backend.rank, backend.world_size, timeout_s(), lambda code: end_job(backend, code))
  group = start_group(backend, watch)
  group.exchange("start")
  group.number = 0  # (the user's collectives count from 1)
  host = socket.gethostname()
  identities = memoryview(bytearray(IDENTITY_BYTES * backend.world_size))
  mine = struct.pack(IDENTITY_FORMAT, os.getpid(), machine_id(), host.encode()[:48])
  watch.entering(lambda: "tinycore.distributed.init")
  try: backend.all_gather(memoryview(mine), identities, dtypes.uint8)
  finally: watch.left()
  rows = [struct.unpack_from(IDENTITY_FORMAT, identities, IDENTITY_BYTES * i) for i in range(backend.world_size)]
  here = rows[backend.rank][1]
  watch.watch_peers({rank: pid for rank, (pid, machine, _) in enumerate(rows)
                     if machine == here and rank != backend.rank})
  if backend.rank == 0 and backend.world_size > 1:
    listed = ", ".join(f"{rank}: pid {pid} on {host_name(name)}"
                       for rank, (pid, _, name) in enumerate(rows[:LISTED_RANKS]))
    more = f", ... ({backend.world_size} ranks)" if backend.world_size > LISTED_RANKS else ""
    say(f"tinycore.distributed: {backend.name} started {backend.world_size} ranks (rank: process) {listed}{more}")
  install_exception_hook(group)
  atexit.register(exit_exchange, group)
  return group


def end_group(group: CollectiveGroup) -> None:
  """End the group before the process exits: the exit exchange now (every process agrees to stop), then the
  exception hook and the exit handler are removed and no group is started any more."""
  atexit.unregister(exit_exchange)
  if sys.excepthook is group.exception_hook: sys.excepthook = group.previous_excepthook
  exit_exchange(group)
  forget_group()


def install_exception_hook(group: CollectiveGroup) -> None:
  """An exception nobody catches ends every process of the job, naming this rank (after the usual traceback)."""
  previous = group.previous_excepthook = sys.excepthook

  def end_job_on_exception(kind: type[BaseException], error: BaseException, trace: Any) -> None:
    previous(kind, error, trace)
    if group.world_size > 1:
      what = "".join(traceback.format_exception_only(kind, error)).strip().splitlines()[-1]
      say(f"tinycore.distributed: rank {group.rank} of {group.world_size} failed ({what}): ending the job")
      group.watch.stop()
      end_job(group.backend, FAILED_STATUS)

  sys.excepthook = group.exception_hook = end_job_on_exception


def exit_exchange(group: CollectiveGroup) -> None:
  """At exit: one more header exchange, so a process exiting while another still calls collectives is named on both
  sides; then the watch stops (the others may exit now) and the backend is released."""
  try: group.exchange("exit")
  except CollectiveMismatch as error:
    say(f"tinycore.distributed: rank {group.rank} of {group.world_size} exits, but {error}: ending the job")
    group.watch.stop()
    end_job(group.backend, FAILED_STATUS)
  group.watch.stop()
  group.backend.finalize()
