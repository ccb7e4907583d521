"""CPUCompiler: C source -> shared object bytes, with the system's C compiler ($CC, else clang, else gcc)."""
from __future__ import annotations
import functools
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile
from tinycore.plugin import COMPILE_TIMEOUT_ENV, Compiler, compile_timeout_s, run_bounded

# Results must match IEEE arithmetic as numpy does it: no -ffast-math, and no fused multiply-add contraction (which
# -march=native would otherwise allow). -fno-math-errno only lets sqrt & co. compile to single instructions.
# -fopenmp-simd honours the renderer's `omp simd reduction` pragmas (vectorized reductions) without an OpenMP runtime
COMPILE_FLAGS = ("-O2", "-march=native", "-shared", "-fPIC", "-fno-math-errno", "-ffp-contract=off", "-fopenmp-simd")
LINK_FLAGS = ("-lm",)


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
    version = compiler_version(tuple(self.command))
    self.cachekey = f"tiny-cpu|{shlex.join(self.command)}|{version}|{shlex.join(self.flags)}"

  @property
  def name(self) -> str:
    """The compiler's executable name, as in "clang" or "gcc"."""
    return pathlib.Path(self.command[-1] if self.command[0].endswith("ccache") else self.command[0]).name

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tiny_cpu_") as workdir:
      source_path, library_path = pathlib.Path(workdir, "kernel.c"), pathlib.Path(workdir, "kernel.so")
      source_path.write_text(src)
      invocation = [*self.command, *self.flags, "-o", str(library_path), str(source_path), *LINK_FLAGS]
      timeout = compile_timeout_s()
      try:
        returncode, messages = run_bounded(invocation, timeout, cwd=workdir)
      except OSError as error:
        raise RuntimeError(f"cannot run the C compiler {shlex.join(self.command)}: {error}") from error
      except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"the C compiler {shlex.join(self.command)} did not finish compiling a kernel within "
                           f"{timeout:g} s and was killed; if it is only slow, allow more time with "
                           f"{COMPILE_TIMEOUT_ENV}=<seconds>") from error
      if returncode != 0:
        messages = messages.strip()
        raise RuntimeError(f"{self.name} failed to compile a kernel (exit code {returncode}):\n{messages}\n"
                           f"command: {shlex.join(invocation)}\n--- source ---\n{src}")
      return library_path.read_bytes()
