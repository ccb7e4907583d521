"""The CPU device: host memory from anonymous mmaps, kernels loaded as shared objects and called through ctypes."""
from __future__ import annotations
import ctypes
import hashlib
import os
import tempfile
import threading
import time
from typing import Any, Sequence
from tinycore.plugin import (HCQDevice, HostAllocator, HostMemory, Signal, count_setting, keep_in_flight_memory,
                             queue_timeout_s, trusted_cache_dir)
from tiny_cpu.compiler import CPUCompiler


class CPUAllocator(HostAllocator):
  """Page-aligned, zero-filled host memory from anonymous mmaps: the core's host allocator, used as is, so CPU
  buffers and the core's PYTHON buffers are the same kind of memory."""


def load_shared_object(lib: bytes) -> ctypes.CDLL:
  """Load shared-object bytes: written to a fresh private file (mkstemp: mode 0600, an unpredictable name) in the
  trusted cache directory's so/ (else the temporary directory), dlopen'ed, and unlinked at once (the library stays
  mapped). No path that another user could write or replace is ever loaded."""
  prefix = hashlib.sha256(lib).hexdigest()[:16] + "-"
  directories: list[str | None] = [None]
  try:
    so_dir = trusted_cache_dir() / "so"
    so_dir.mkdir(mode=0o700, exist_ok=True)
    directories.insert(0, str(so_dir))
  except OSError: pass
  for directory in directories:
    try: fd, path = tempfile.mkstemp(prefix=prefix, suffix=".so", dir=directory)
    except OSError:
      continue
    try:
      with os.fdopen(fd, "wb") as f: f.write(lib)
      return ctypes.CDLL(path)
    except OSError:
      if directory is directories[-1]: raise  # a directory mounted noexec: try the next one
    finally: os.unlink(path)
  raise OSError("no directory to write a shared object to")


class CPUProgram:
  """A compiled kernel: ``CPUProgram(name, lib)`` loads the shared object and finds the kernel's entry point
  (``<name>_args``, `renderer.ENTRY_SUFFIX`), which takes a pointer to its argument words.

  Called as ``program(*handles, global_size=..., local_size=..., vals=(), wait=False)``: the entry point gets a
  table of each handle's address, then each value as a 64-bit word, then the share to run (all of the work). The
  kernel loops over its whole range itself, so the launch sizes are not used. With ``wait=True`` it returns the
  seconds the call took.
  """

  def __init__(self, name: str, lib: bytes):
    from tiny_cpu.renderer import ENTRY_SUFFIX
    self.name = name
    self.library = load_shared_object(lib)
    try:
      self.function = getattr(self.library, name + ENTRY_SUFFIX)
    except AttributeError as error:
      raise RuntimeError(f"the compiled CPU program has no entry point named {name + ENTRY_SUFFIX!r}") from error
    self.function.restype = None
    self.function.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    self.address = ctypes.cast(self.function, ctypes.c_void_p).value  # what a queue entry calls

  def __call__(self, *bufs: HostMemory, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    start = time.perf_counter()
    self.run_words([buf.addr for buf in bufs] + list(vals))
    return time.perf_counter() - start if wait else None

  def run_words(self, words: Sequence[int]) -> None:
    """Run the kernel on this calling thread with its argument table: buffer addresses, then scalar words."""
    table = (ctypes.c_uint64 * max(1, len(words)))(*[w & 0xFFFFFFFFFFFFFFFF for w in words])
    self.function(table, 0, 1)  # one share: all of the work


class CPUDevice(HCQDevice):
  """A CPU device ("CPU", "CPU:1", ...) on HCQ2: kernels run on a worker thread fed through a ring, so Python
  returns before they finish. Each name has its own allocator and worker. There is no copy queue: copies use the
  allocator (memmove), after the queues finished."""

  def __init__(self, name: str = "CPU"):
    # the renderer pulls in tinycore's code generator: import it only when a device is opened
    from tiny_cpu.renderer import CPURenderer
    from tiny_cpu.queue import CPUQueue, WorkerLibrary, HOST_WAIT_FUTEX_AFTER_NS
    compiler = CPUCompiler()
    threads = cpu_threads()
    super().__init__(name, CPUAllocator(), CPURenderer(threads), compiler, CPUProgram)
    self.worker = WorkerLibrary.get(compiler)
    self.queues = {"compute": CPUQueue(self, "compute", self.worker, threads)}
    self.futex_after_ns = HOST_WAIT_FUTEX_AFTER_NS  # how long host_wait_signal polls before it sleeps until woken
    compiler.start_standby()  # a new kernel's compile then skips the compiler's start-up

  def host_wait_signal(self, signal: Signal, value: int, timeout_s: float) -> bool:
    """Wait in C (the GIL released) until `signal` >= `value`: short sleeps at a low timer slack, then (past
    HOST_WAIT_FUTEX_AFTER_NS) asleep until the worker's signal store wakes the host."""
    return bool(self.worker.lib.tc_host_wait(signal.addr, value, max(0, int(timeout_s * 1e9)), self.futex_after_ns))

  def capabilities(self) -> dict[str, Any]:
    caps = super().capabilities()
    caps["compiler"] = self.compiler.name if isinstance(self.compiler, CPUCompiler) else None
    caps["queues"] = sorted(self.queues)
    target = self.renderer.kernel_target  # what the optimizer shapes register tiles and reduction strips for
    caps.update(cores=target.cores, vector_lanes=target.vector_lanes, vector_registers=target.vector_registers,
                panel_bytes=target.panel_bytes)
    return caps

  def finalize(self) -> None:
    """At exit: each worker stops after the entry it is running (queued work is dropped: nothing can read it any
    more), waited for up to TINYCORE_QUEUE_TIMEOUT. A worker still busy after that is left running, and the memory
    its work may touch is never freed, so it cannot fault while the interpreter shuts down."""
    timeout = queue_timeout_s()
    stopped = [queue.close(timeout) for queue in self.queues.values()]
    if not all(stopped): keep_in_flight_memory(self)

  def restart_after_fork(self) -> None:
    """In a forked child: new worker threads on the parent's (drained) rings; buffers are the child's copies."""
    self.allocator.lock = threading.RLock()
    for queue in self.queues.values(): queue.restart_after_fork()


def cpu_threads() -> int:
  """Threads a large kernel is split across: TINYCORE_CPU_THREADS (at most the cores this process may use: more only
  contend for them), else those cores. A value that is not a positive whole number is a SettingError."""
  try: cores = max(1, len(os.sched_getaffinity(0)))
  except AttributeError: cores = max(1, os.cpu_count() or 1)
  return count_setting("TINYCORE_CPU_THREADS", cores, most=cores)

