"""CPUCompiler: C source -> shared object bytes, with the system's C compiler ($CC, else clang, else gcc)."""
from __future__ import annotations
import functools
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
from tinycore.plugin import COMPILE_TIMEOUT_ENV, Compiler, compile_timeout_s, run_bounded

# Results must match IEEE arithmetic as numpy does it: no -ffast-math, and no fused multiply-add contraction (which
# -march=native would otherwise allow). -fno-math-errno only lets sqrt & co. compile to single instructions.
# -fopenmp-simd honours the renderer's `omp simd reduction` pragmas (vectorized reductions) without an OpenMP runtime
COMPILE_FLAGS = ("-O2", "-march=native", "-shared", "-fPIC", "-fno-math-errno", "-ffp-contract=off", "-fopenmp-simd")
LINK_FLAGS = ("-lm",)
# the compiler driver's own link step costs clang about 30 ms (gcc about 10) per kernel, mostly finding and reading
# the C runtime's startup files and libraries that a kernel never needs; the system linker called directly on the
# object links in about 5 ms. Undefined symbols (libm's, libc's memcpy) bind when the library loads into the process.
LINKER_ENV = "TINYCORE_CPU_LINKER"


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
    self.linker: str | None = find_linker()
    version = compiler_version(tuple(self.command))
    linked_by = f"|{self.linker}" if self.linker else ""
    self.cachekey = f"tiny-cpu|{shlex.join(self.command)}|{version}|{shlex.join(self.flags)}{linked_by}"

  @property
  def name(self) -> str:
    """The compiler's executable name, as in "clang" or "gcc"."""
    return pathlib.Path(self.command[-1] if self.command[0].endswith("ccache") else self.command[0]).name

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tiny_cpu_") as workdir:
      source_path, library_path = pathlib.Path(workdir, "kernel.c"), pathlib.Path(workdir, "kernel.so")
      source_path.write_text(src)
      if self.linker is None:
        self._run([*self.command, *self.flags, "-o", str(library_path), str(source_path), *LINK_FLAGS], src, workdir)
      else:  # compile to an object, then link it with the system linker directly
        object_path = pathlib.Path(workdir, "kernel.o")
        flags = [flag for flag in self.flags if flag != "-shared"]
        self._run([*self.command, *flags, "-c", "-o", str(object_path), str(source_path)], src, workdir)
        self._run([self.linker, "-shared", "-o", str(library_path), str(object_path), *LINK_FLAGS], src, workdir)
      return library_path.read_bytes()

  def _run(self, invocation: list[str], src: str, workdir: str) -> None:
    """Run one compile or link step; its failure is a RuntimeError with the messages, the command and the source."""
    timeout = compile_timeout_s()
    try:
      returncode, messages = run_bounded(invocation, timeout, cwd=workdir)
    except OSError as error:
      raise RuntimeError(f"cannot run {shlex.join(invocation[:1])}: {error}") from error
    except subprocess.TimeoutExpired as error:
      raise RuntimeError(f"the C compiler {shlex.join(self.command)} did not finish compiling a kernel within "
                         f"{timeout:g} s and was killed; if it is only slow, allow more time with "
                         f"{COMPILE_TIMEOUT_ENV}=<seconds>") from error
    if returncode != 0:
      messages = messages.strip()
      raise RuntimeError(f"{self.name} failed to compile a kernel (exit code {returncode}):\n{messages}\n"
                         f"command: {shlex.join(invocation)}\n--- source ---\n{src}")


def find_linker() -> str | None:
  """The linker to call directly: $TINYCORE_CPU_LINKER ("" or "driver": let the compiler driver link), else the
  system's `ld` on Linux (None elsewhere, or when there is none: the driver links)."""
  configured = os.environ.get(LINKER_ENV)
  if configured is not None:
    return None if configured.strip() in ("", "driver") else shutil.which(configured.strip())
  return shutil.which("ld") if sys.platform.startswith("linux") else None
