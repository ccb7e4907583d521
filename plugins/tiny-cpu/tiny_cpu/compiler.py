"""CPUCompiler: C source -> shared object bytes, with the system's C compiler ($CC, else clang, else gcc)."""
from __future__ import annotations
import atexit
import functools
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Callable
from tinycore.plugin import COMPILE_TIMEOUT_ENV, Compiler, compile_timeout_s, finish_bounded, run_bounded, start_bounded

# Results must match IEEE arithmetic as numpy does it: no -ffast-math, and no fused multiply-add contraction (which
# -march=native would otherwise allow). -fno-math-errno only lets sqrt & co. compile to single instructions.
# -fopenmp-simd honours the renderer's `omp simd reduction` pragmas (vectorized reductions) without an OpenMP runtime
COMPILE_FLAGS = ("-O2", "-march=native", "-shared", "-fPIC", "-fno-math-errno", "-ffp-contract=off", "-fopenmp-simd")
LINK_FLAGS = ("-lm",)
# the compiler driver's own link step costs clang about 30 ms (gcc about 10) per kernel, mostly finding and reading
# the C runtime's startup files and libraries that a kernel never needs; the system linker called directly on the
# object links in about 5 ms. Undefined symbols (libm's, libc's memcpy) bind when the library loads into the process.
LINKER_ENV = "TINYCORE_CPU_LINKER"
# clang 14 spends about 17 ms of a 35 ms compile loading itself (its shared LLVM libraries) before it reads a byte of
# source; gcc about 2 ms. So when a CPU device opens, and after each compile, a compiler process is started and waits
# for its source on stdin ("standby"): the next kernel's compile starts from a loaded compiler. "0" turns this off.
STANDBY_ENV = "TINYCORE_CPU_STANDBY_COMPILER"


def find_c_compiler() -> list[str] | None:
  """The compiler command as a list: $CC (which may carry arguments, as in "ccache gcc") if set, else clang, else
  gcc; the executable resolved to its full path. None if there is none."""
  if cc := os.environ.get("CC", "").strip():
    command = shlex.split(cc)
    executable = shutil.which(command[0])
    return [executable, *command[1:]] if executable else None
  for candidate in ("clang", "gcc"):
    if executable := shutil.which(candidate): return [executable]
  return None


def missing_compiler_reason() -> str:
  """Why find_c_compiler() found nothing, in words."""
  if cc := os.environ.get("CC", "").strip(): return f"CC={cc!r} is not an executable on PATH"
  return "no C compiler (install clang or gcc, or set CC)"


@functools.lru_cache(maxsize=None)
def compiler_version(command: tuple[str, ...]) -> str:
  """The first line of ``<compiler> --version`` (part of the cache key, so an upgrade recompiles)."""
  try:
    returncode, output = run_bounded([*command, "--version"], min(30.0, compile_timeout_s()))
  except (OSError, subprocess.TimeoutExpired) as error:
    return f"unknown version ({error})"
  lines = output.splitlines()
  return lines[0].strip() if lines else "unknown version"



class CPUCompiler(Compiler):
  """Compiles one C translation unit into a shared object and returns its bytes.

  command: the compiler to use (a list, as find_c_compiler returns); found automatically when omitted.
  Raises RuntimeError at construction when no compiler exists, and from compile() with the compiler's messages and the
  source when the source does not compile.
  """

  def __init__(self, command: list[str] | None = None):
    found = command if command is not None else find_c_compiler()
    if not found: raise RuntimeError(missing_compiler_reason())
    self.command: list[str] = list(found)
    self.flags: tuple[str, ...] = COMPILE_FLAGS
    self.object_flags = [flag for flag in self.flags if flag != "-shared"]  # compiling to an object, linked apart
    self.linker: str | None = find_linker()
    version = compiler_version(tuple(self.command))
    linked_by = f"|{self.linker}" if self.linker else ""
    self.cachekey = f"tiny-cpu|{shlex.join(self.command)}|{version}|{shlex.join(self.flags)}{linked_by}"

  @property
  def name(self) -> str:
    """The compiler's executable name, as in "clang" or "gcc"."""
    return pathlib.Path(self.command[-1] if self.command[0].endswith("ccache") else self.command[0]).name

  def compile(self, src: str) -> bytes:
    standby_failed = False
    if self.linker is not None and (standby := Standby.take(self.command, self.object_flags)) is not None:
      try:
        returncode, _ = self._wait(lambda timeout: finish_bounded(standby.process, timeout, src), standby.invocation)
        if returncode == 0:
          library = self._link(src, standby.workdir, standby.object_path)
          self.start_standby()
          return library
        standby_failed = True  # compiled again below: the source's fault, or a compiler that cannot read stdin
      finally: standby.discard()
    with tempfile.TemporaryDirectory(prefix="tiny_cpu_") as workdir:
      source_path, library_path = pathlib.Path(workdir, "kernel.c"), pathlib.Path(workdir, "kernel.so")
      source_path.write_text(src)
      if self.linker is None:
        self._run([*self.command, *self.flags, "-o", str(library_path), str(source_path), *LINK_FLAGS], src, workdir)
        return library_path.read_bytes()
      # compile to an object, then link it with the system linker directly
      object_path = pathlib.Path(workdir, "kernel.o")
      self._run([*self.command, *self.object_flags, "-c", "-o", str(object_path), str(source_path)], src, workdir)
      library = self._link(src, workdir, object_path)
    if standby_failed: Standby.refuse(self.command, self.object_flags)
    else: self.start_standby()
    return library

  def start_standby(self) -> None:
    """Start a compiler process that waits for the next compile's source (see STANDBY_ENV), unless one waits."""
    if self.linker is not None: Standby.start(self.command, self.object_flags)

  def _link(self, src: str, workdir: str, object_path: pathlib.Path) -> bytes:
    """The shared object of a compiled object file, linked by the system linker."""
    library_path = pathlib.Path(workdir, "kernel.so")
    self._run([self.linker, "-shared", "-o", str(library_path), str(object_path), *LINK_FLAGS], src, workdir)
    return library_path.read_bytes()

  def _run(self, invocation: list[str], src: str, workdir: str) -> None:
    """Run one compile or link step; its failure is a RuntimeError with the messages, the command and the source."""
    returncode, messages = self._wait(lambda timeout: run_bounded(invocation, timeout, cwd=workdir), invocation)
    if returncode != 0:
      raise RuntimeError(f"{self.name} failed to compile a kernel (exit code {returncode}):\n{messages.strip()}\n"
                         f"command: {shlex.join(invocation)}\n--- source ---\n{src}")

  def _wait(self, wait: Callable[[float], tuple[int, str]], invocation: list[str]) -> tuple[int, str]:
    """wait(timeout) -> (exit code, messages) under the compile time limit; a compiler that cannot run or runs past
    the limit is a RuntimeError that says so."""
    timeout = compile_timeout_s()
    try: return wait(timeout)
    except OSError as error:
      raise RuntimeError(f"cannot run {shlex.join(invocation[:1])}: {error}") from error
    except subprocess.TimeoutExpired as error:
      raise RuntimeError(f"the C compiler {shlex.join(self.command)} did not finish compiling a kernel within "
                         f"{timeout:g} s and was killed; if it is only slow, allow more time with "
                         f"{COMPILE_TIMEOUT_ENV}=<seconds>") from error


class Standby:
  """A compiler process started ahead of need, waiting for a C translation unit on stdin (see STANDBY_ENV), to write
  its object into a private directory made when it is taken. At most one per (command, flags), owned by the process
  that started it: a forked child drops its copies (and closes its ends of the pipes, or the compiler would never see
  the end of its input); left over at exit, it is killed and its directory removed."""
  _waiting: dict[tuple[str, ...], Standby] = {}
  _refused: set[tuple[str, ...]] = set()  # compilers that ended unfed, or failed from stdin but compiled the file
  _lock = threading.Lock()

  workdir: str | None

  def __init__(self, command: list[str], object_flags: list[str]):
    # the directory is only named now and made when the standby is taken: a process that ends without its exit
    # handlers (os._exit, a signal) leaves a compiler that reads end of file and then cannot write its object
    self.workdir = tempfile.mkdtemp(prefix="tiny_cpu_")
    os.rmdir(self.workdir)
    self.object_path = pathlib.Path(self.workdir, "kernel.o")
    self.invocation = [*command, *object_flags, "-c", "-o", str(self.object_path), "-x", "c", "-"]
    self.process = start_bounded(self.invocation, stdin=True)

  @classmethod
  def start(cls, command: list[str], object_flags: list[str]) -> None:
    """Start the standby for this compiler unless one waits already; a compiler that cannot start is no error here
    (the next compile runs it directly and reports it)."""
    key = (*command, *object_flags)
    if os.environ.get(STANDBY_ENV, "1") == "0" or key in cls._refused: return
    with cls._lock:
      if key in cls._waiting: return
      try: cls._waiting[key] = Standby(command, object_flags)
      except OSError: pass

  @classmethod
  def refuse(cls, command: list[str], object_flags: list[str]) -> None:
    """Never start a standby for this compiler again in this process."""
    cls._refused.add((*command, *object_flags))

  @classmethod
  def take(cls, command: list[str], object_flags: list[str]) -> Standby | None:
    """The waiting standby of this compiler, removed from the table (the caller feeds it, then discards it); None if
    there is none or it has exited (then it is cleaned up, and this compiler is not kept on standby again)."""
    with cls._lock: standby = cls._waiting.pop((*command, *object_flags), None)
    if standby is None: return None
    ended = standby.process.poll() is not None
    if ended: cls.refuse(command, object_flags)  # it ended unfed: it cannot wait for its input
    try:
      if not ended: os.mkdir(standby.workdir, 0o700)
    except OSError: ended = True  # something else took the name meanwhile
    if ended:
      standby.workdir = None  # never made by us: not ours to remove
      standby.discard()
      return None
    return standby

  def discard(self) -> None:
    """Kill the process (and anything it started) if it still runs, and remove the directory."""
    if self.process.poll() is None:
      try: os.killpg(self.process.pid, signal.SIGKILL)
      except ProcessLookupError: pass
      self.process.wait()
    for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
      if stream is not None and not stream.closed: stream.close()
    if self.workdir is not None: shutil.rmtree(self.workdir, ignore_errors=True)

  @classmethod
  def discard_all(cls) -> None:
    with cls._lock: waiting, cls._waiting = list(cls._waiting.values()), {}
    for standby in waiting: standby.discard()

  @classmethod
  def forget_after_fork(cls) -> None:
    """In a forked child: the parent's standbys are the parent's; close this process's ends of their pipes."""
    for standby in cls._waiting.values():
      for stream in (standby.process.stdin, standby.process.stdout, standby.process.stderr):
        try: stream.close()
        except OSError: pass
      standby.process.returncode = 0  # not this process's child: never waited for here
    cls._waiting, cls._lock = {}, threading.Lock()


atexit.register(Standby.discard_all)
os.register_at_fork(after_in_child=Standby.forget_after_fork)


def find_linker() -> str | None:
  """The linker to call directly: $TINYCORE_CPU_LINKER ("" or "driver": let the compiler driver link), else the
  system's `ld` on Linux (None elsewhere, or when there is none: the driver links)."""
  configured = os.environ.get(LINKER_ENV)
  if configured is not None:
    return None if configured.strip() in ("", "driver") else shutil.which(configured.strip())
  return shutil.which("ld") if sys.platform.startswith("linux") else None
