"""Compile-only checks of real-GPU code on machines without a GPU: every kernel the mock runs, also compiled to cubins.

On the mock driver the device compiles PTX. With TINYCORE_NV_CHECK_CUBINS="sm_90" (or "sm_80,sm_90") each distinct
kernel source it compiles is also handed to a `CubinCheck`, which compiles it with NVRTC to a cubin for each of
those archs on a thread pool (NVRTC runs outside the GIL, so the checks overlap with the PTX interpreter), writes the
cubins to TINYCORE_DUMP_BINARIES when that is set, and keeps every NVRTC error. The first error also fails the next
compile on the device; `finish()` waits for all checks and reports how many kernels compiled and which did not
(the pytest plugin tiny_nv.pytest_cubins prints that report and fails the run on any error).
"""
from __future__ import annotations
import hashlib
import os
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
import attrs

CHECK_CUBINS_ENV = "TINYCORE_NV_CHECK_CUBINS"
CUBIN_ARCH = re.compile(r"sm_\d+a?")
CUBIN_MAGIC = b"\x7fELF"
KERNEL_NAME = re.compile(r'extern "C" __global__ void (\w+)\(')


def archs_from_env() -> tuple[str, ...]:
  """The cubin archs named by TINYCORE_NV_CHECK_CUBINS ("sm_80,sm_90"); ValueError for a name that is not one."""
  archs = tuple(arch.strip() for arch in os.environ.get(CHECK_CUBINS_ENV, "").split(",") if arch.strip())
  if bad := [arch for arch in archs if CUBIN_ARCH.fullmatch(arch) is None]:
    raise ValueError(f"{CHECK_CUBINS_ENV}: {bad} are not cubin targets (sm_80, sm_90, ...)")
  return archs


def default_workers() -> int:
  """Threads for the checks: all cores but one (that one runs the tests), at least one, at most four."""
  return max(1, min(4, (os.cpu_count() or 2) - 1))


@attrs.define
class CubinFailure:
  """A kernel NVRTC did not compile to a cubin: its name, the arch and NVRTC's message (with its log)."""
  kernel: str
  arch: str
  error: str


@attrs.define
class CubinReport:
  """What a `CubinCheck` did: distinct kernels checked, cubins made per arch, failures, seconds from first to last."""
  kernels: int
  cubins: dict[str, int]
  failures: list[CubinFailure]
  seconds: float

  def summary(self) -> str:
    made = ", ".join(f"{count} {arch}" for arch, count in self.cubins.items()) or "none"
    text = f"tiny-nv: {self.kernels} distinct kernels compiled by NVRTC to cubins ({made}) in {self.seconds:.1f} s"
    if self.failures: text += f"; {len(self.failures)} FAILED: " + ", ".join(f"{f.kernel} ({f.arch})" for f in
                                                                          self.failures[:10])
    return text


class CubinCheck:
  """Compiles each distinct kernel source once per arch to a cubin on a thread pool (see the module docstring)."""

  def __init__(self, archs: tuple[str, ...], workers: int | None = None):
    self.archs = archs
    self.pool = ThreadPoolExecutor(max_workers=workers or default_workers(), thread_name_prefix="tiny-nv-cubin")
    self.lock = threading.Lock()
    self.seen: set[str] = set()
    self.futures: list[Future] = []
    self.cubins = {arch: 0 for arch in archs}
    self.failures: list[CubinFailure] = []
    self.first_error: str | None = None
    self.started: float | None = None
    self.last_done = 0.0

  def submit(self, src: str) -> None:
    """Queue `src` for a cubin per arch, unless it was queued before."""
    digest = hashlib.sha256(src.encode()).hexdigest()
    with self.lock:
      if digest in self.seen: return
      self.seen.add(digest)
      if self.started is None: self.started = time.perf_counter()
    for arch in self.archs: self.futures.append(self.pool.submit(self.compile_one, src, arch))

  def compile_one(self, src: str, arch: str) -> None:
    from tinycore.plugin import dump_binary
    from tiny_nv.compiler import nvrtc_compile
    name = match.group(1) if (match := KERNEL_NAME.search(src)) else "kernel"
    try:
      cubin = nvrtc_compile(src, arch)
      if cubin[:4] != CUBIN_MAGIC: raise RuntimeError(f"NVRTC returned no ELF cubin for {arch}")
      with self.lock:
        dump_binary(f"{name}-{arch}", cubin, ".cubin")
        self.cubins[arch] += 1
    except Exception as error:  # every failure is kept and reported, none lost in a worker thread
      with self.lock:
        self.failures.append(CubinFailure(name, arch, f"{type(error).__name__}: {error}"))
        if self.first_error is None: self.first_error = f"{name} to a {arch} cubin: {error}"
    finally:
      with self.lock: self.last_done = time.perf_counter()

  def raise_first_error(self) -> None:
    """An NVRTCError for the first kernel that failed so far, if any (the device calls this before each compile)."""
    if self.first_error is not None:
      from tiny_nv.compiler import NVRTCError
      raise NVRTCError(f"{CHECK_CUBINS_ENV}: NVRTC failed to compile {self.first_error}")

  def finish(self) -> CubinReport:
    """Wait for every queued check; the report of all checks so far."""
    for future in list(self.futures): future.result()
    with self.lock:
      seconds = self.last_done - self.started if self.started is not None else 0.0
      return CubinReport(len(self.seen), dict(self.cubins), list(self.failures), seconds)


_checks: dict[tuple[str, ...], CubinCheck] = {}
_checks_lock = threading.Lock()


def cubin_check(archs: tuple[str, ...]) -> CubinCheck:
  """The process's one CubinCheck for these archs (shared by every NV device, so a kernel is checked once)."""
  with _checks_lock:
    if (check := _checks.get(archs)) is None: check = _checks[archs] = CubinCheck(archs)
    return check


def active_checks() -> list[CubinCheck]:
  """The CubinChecks this process started (for reports)."""
  with _checks_lock: return list(_checks.values())
