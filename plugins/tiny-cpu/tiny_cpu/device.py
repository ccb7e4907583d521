"""The CPU device: host memory from anonymous mmaps, kernels loaded as shared objects and called through ctypes."""
from __future__ import annotations
import ctypes
import hashlib
import os
import tempfile
import time
from typing import Any, Sequence
from tinycore.plugin import HCQDevice, HostAllocator, HostMemory, cache_dir
from tiny_cpu.compiler import CPUCompiler


class CPUAllocator(HostAllocator):
  """Page-aligned, zero-filled host memory from anonymous mmaps: the core's host allocator, used as is, so CPU
  buffers and the core's PYTHON buffers are the same kind of memory."""


def load_shared_object(lib: bytes) -> ctypes.CDLL:
  """Load shared-object bytes: stored as <cache_dir>/so/<sha256>.so (written once, by atomic rename) and dlopen'ed.
  Falls back to a temporary file when the cache directory is not writable."""
  digest = hashlib.sha256(lib).hexdigest()
  path = cache_dir() / "so" / f"{digest}.so"
  if not path.exists():
    try:
      path.parent.mkdir(parents=True, exist_ok=True)
      with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".so.tmp", delete=False) as temporary:
        temporary.write(lib)
      os.replace(temporary.name, path)
    except OSError:
      return _load_from_temporary_file(lib)
  return ctypes.CDLL(str(path))


def _load_from_temporary_file(lib: bytes) -> ctypes.CDLL:
  with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as temporary:
    temporary.write(lib)
  try:
    return ctypes.CDLL(temporary.name)
  finally:
    os.unlink(temporary.name)  # the loaded library stays mapped


class CPUProgram:
  """A compiled kernel: ``CPUProgram(name, lib)`` loads the shared object and finds the C function ``name``.

  Called as ``program(*handles, global_size=..., local_size=..., vals=(), wait=False)``: the function receives each
  handle's address (``T* restrict dataN``), then each value as a 64-bit integer (``long long varN``). The kernel
  loops over its whole range itself, so the launch sizes are not used. With ``wait=True`` it returns the seconds the
  call took.
  """

  def __init__(self, name: str, lib: bytes):
    self.name = name
    self.library = load_shared_object(lib)
    try:
      self.function = getattr(self.library, name)
    except AttributeError as error:
      raise RuntimeError(f"the compiled CPU program has no function named {name!r}") from error
    self.function.restype = None
    self.address = ctypes.cast(self.function, ctypes.c_void_p).value  # what a queue entry calls
    self._argument_counts: tuple[int, int] | None = None

  def __call__(self, *bufs: HostMemory, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    if global_size[0] > 1: vals = (*vals, 0, 1)  # a threaded kernel called directly: one share, all of the work
    if self._argument_counts != (len(bufs), len(vals)):
      # set once per program (it is the same every call); ctypes then converts plain ints quickly
      self.function.argtypes = [ctypes.c_void_p] * len(bufs) + [ctypes.c_int64] * len(vals)
      self._argument_counts = (len(bufs), len(vals))
    start = time.perf_counter()
    self.function(*[buf.addr for buf in bufs], *vals)
    return time.perf_counter() - start if wait else None


class CPUDevice(HCQDevice):
  """A CPU device ("CPU", "CPU:1", ...) on HCQ2: kernels run on a worker thread fed through a ring, so Python
  returns before they finish. Each name has its own allocator and worker. There is no copy queue: copies use the
  allocator (memmove), after the queues finished."""

  def __init__(self, name: str = "CPU"):
    # the renderer pulls in tinycore's code generator: import it only when a device is opened
    from tiny_cpu.renderer import CPURenderer
    from tiny_cpu.queue import CPUQueue, WorkerLibrary
    compiler = CPUCompiler()
    threads = cpu_threads()
    super().__init__(name, CPUAllocator(), CPURenderer(threads), compiler, CPUProgram)
    self.queues = {"compute": CPUQueue(self, "compute", WorkerLibrary.get(compiler), threads)}

  def capabilities(self) -> dict[str, Any]:
    caps = super().capabilities()
    caps["compiler"] = self.compiler.name if isinstance(self.compiler, CPUCompiler) else None
    caps["queues"] = sorted(self.queues)
    return caps

  def finalize(self) -> None:
    try: self.synchronize(timeout_ms=2000)
    except Exception: return  # a worker stuck on a wait would never join; process exit ends it
    for queue in self.queues.values(): queue.close()


def cpu_threads() -> int:
  """Threads a large kernel is split across: TINYCORE_CPU_THREADS, else the cores this process may use."""
  if (configured := os.environ.get("TINYCORE_CPU_THREADS")): return max(1, int(configured))
  try: return max(1, len(os.sched_getaffinity(0)))
  except AttributeError: return max(1, os.cpu_count() or 1)

