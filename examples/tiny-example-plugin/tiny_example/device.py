"""The EXAMPLE device: host memory from ctypes arrays, kernels rendered by the core's C-style renderer, compiled by
``cc`` into a shared object and called synchronously through ctypes.

What a device must provide, in the order the core uses it:
  - an Allocator: ``_alloc``/``_free``, ``_copyin``/``_copyout``, ``_offset`` (views), ``_as_buffer`` (zero-copy
    host view, which also lets other host devices map this memory);
  - a renderer: ``CStyleRenderer`` as is (plain C);
  - a Compiler: ``compile(source) -> bytes`` and a ``cachekey`` (the core caches binaries by it);
  - a runtime: ``runtime(name, lib) -> Program``; a Program is called with the buffers' handles in the kernel's
    parameter order (``data0`` is the output), then the integer variable values, and ``wait``.
"""
from __future__ import annotations
import ctypes
import os
import shlex
import shutil
import tempfile
import time
from typing import Any, Sequence
from tinycore.plugin import BufferSpec, CStyleRenderer, Compiled, Compiler, LRUAllocator, run_compiler

# IEEE results as numpy computes them: no fused multiply-add, no fast-math
CFLAGS = ("-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno")


def find_cc() -> list[str] | None:
  """$CC (may carry arguments) if set, else cc; None when it is not an executable."""
  command = shlex.split(os.environ.get("CC", "").strip() or "cc")
  executable = shutil.which(command[0])
  return [executable, *command[1:]] if executable else None


class ExampleMemory:
  """``nbytes`` of host memory at ``addr``; ``owner`` keeps the ctypes array alive (shared by sub-ranges)."""
  __slots__ = ("owner", "addr", "nbytes", "view")

  def __init__(self, owner: Any, addr: int, nbytes: int, view: memoryview):
    self.owner, self.addr, self.nbytes, self.view = owner, addr, nbytes, view


class ExampleAllocator(LRUAllocator[ExampleMemory]):
  """Zero-filled host memory; freed handles are cached for reuse by LRUAllocator."""

  def _alloc(self, nbytes: int, spec: BufferSpec) -> ExampleMemory:
    array = (ctypes.c_uint8 * nbytes)()
    return ExampleMemory(array, ctypes.addressof(array), nbytes, memoryview(array).cast("B"))

  def _free(self, handle: ExampleMemory, spec: BufferSpec) -> None: pass  # the array goes with its last handle

  def _copyin(self, dst: ExampleMemory, src: memoryview) -> None: dst.view[:src.nbytes] = src.cast("B")
  def _copyout(self, dst: memoryview, src: ExampleMemory) -> None: dst[:] = src.view[:dst.nbytes]

  def _offset(self, handle: ExampleMemory, nbytes: int, offset: int) -> ExampleMemory:
    return ExampleMemory(handle.owner, handle.addr + offset, nbytes, handle.view[offset:offset + nbytes])

  def _as_buffer(self, handle: ExampleMemory) -> memoryview: return handle.view


class ExampleCompiler(Compiler):
  """C source -> shared object bytes, with cc."""

  def __init__(self) -> None:
    command = find_cc()
    if command is None: raise RuntimeError("EXAMPLE needs a C compiler: set CC or install cc")
    self.command = command
    self.cachekey = f"tiny-example|{shlex.join(command)}|{shlex.join(CFLAGS)}"

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tiny_example_") as workdir:
      source, library = os.path.join(workdir, "kernel.c"), os.path.join(workdir, "kernel.so")
      with open(source, "w") as f: f.write(src)
      # run_compiler kills a compiler that hangs (TINYCORE_COMPILE_TIMEOUT) and says how to allow more time
      returncode, messages = run_compiler([*self.command, *CFLAGS, "-o", library, source, "-lm"])
      if returncode != 0:
        raise RuntimeError(f"cc failed to compile a kernel:\n{messages}\n--- source ---\n{src}")
      with open(library, "rb") as f: return f.read()


class ExampleProgram:
  """A compiled kernel: the C function ``name`` of the shared object ``lib``."""

  def __init__(self, name: str, lib: bytes):
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f: f.write(lib)
    try: self.function = getattr(ctypes.CDLL(f.name), name)
    finally: os.unlink(f.name)  # the loaded library stays mapped
    self.function.restype = None

  def __call__(self, *bufs: ExampleMemory, global_size: Sequence[int] = (1, 1, 1),
               local_size: Sequence[int] = (1, 1, 1), vals: Sequence[int] = (), wait: bool = False) -> float | None:
    # the calling convention: T* data0..dataN (buffer addresses, output first), then long long values
    self.function.argtypes = [ctypes.c_void_p] * len(bufs) + [ctypes.c_int64] * len(vals)
    start = time.perf_counter()
    self.function(*[buf.addr for buf in bufs], *vals)
    return time.perf_counter() - start if wait else None


class ExampleDevice(Compiled):
  """The EXAMPLE device: everything runs synchronously on the calling thread."""

  def __init__(self, name: str):
    super().__init__(name, ExampleAllocator(), CStyleRenderer(), ExampleCompiler(), ExampleProgram)
