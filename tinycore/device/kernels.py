"""Kernels ready to run: a kernel SINK optimized and rendered (codegen), compiled by its device's compiler and loaded
by its runtime, as a `CompiledKernel`.

Compiled programs are cached twice: in memory by (device, kernel) so a repeated computation does no codegen at
all, and on disk by source (Compiler.compile_cached) so a new process does not run the compiler again.
"""
from __future__ import annotations
import concurrent.futures
import hashlib
import os
import pathlib
from typing import Any, Sequence
import tinycore.profiler as profiler
from tinycore.caches import BoundedCache
from tinycore.uop.ops import UOp
from tinycore.uop.scalars import kernel_scalars
from tinycore.uop import capture
from tinycore.codegen import DEFAULT_TARGET, CodegenStats, kernel_name, optimize_kernel
from tinycore.codegen.optimize import KernelOpts
from tinycore.device.registry import Device


class CompiledKernel:
  """A kernel ready to run on one device: its Program, the source it came from and its launch dimensions."""
  def __init__(self, name: str, source: str, program: Any, global_size: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, ...] = (1, 1, 1)):
    self.name, self.source, self.program = name, source, program
    self.global_size, self.local_size = global_size, local_size

  def __call__(self, *handles: Any, vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    """Run with these buffer handles and scalar arguments (64-bit words, `tinycore.uop.scalars.scalar_word`)."""
    return self.program(*handles, global_size=self.global_size, local_size=self.local_size, vals=vals, wait=wait)


MAX_CACHED_KERNELS = 4096
compiled_kernels: BoundedCache[CompiledKernel] = BoundedCache("compiled kernels by (device, kernel)",
                                                             MAX_CACHED_KERNELS)
binaries: BoundedCache[bytes] = BoundedCache("compiled binaries by (compiler, source)", MAX_CACHED_KERNELS)


class RenderedSource:
  """A kernel rendered for one device, before its compiler ran: what building and loading it needs."""
  __slots__ = ("device", "sink", "name", "source", "rendered", "key", "started")

  def __init__(self, device: str, sink: UOp):
    self.device, self.sink, self.started = device, sink, profiler.clock_ns() if profiler.enabled else 0
    dev = Device[device]
    if not dev.can_compute:
      raise RuntimeError(f"device {device} cannot run kernels (it only stores bytes): move the tensor to a compute "
                         "device first, e.g. .to(Device.DEFAULT)")
    check_dtypes(dev.renderer, sink, device)
    # a renderer may describe its machine (vector width, registers, cores) for the tiles; else the default shapes. A
    # kernel whose SINK carries opts (a kernel search's choice, `tinycore.engine.search`) is shaped by them instead
    opts = sink.arg if isinstance(sink.arg, KernelOpts) else None
    optimized = optimize_kernel(sink, getattr(dev.renderer, "kernel_target", DEFAULT_TARGET), opts)
    if kernel_scalars(optimized) != kernel_scalars(sink):
      raise AssertionError("optimizing a kernel changed its scalar parameters: its CALL's arguments would not match")
    self.name = kernel_name(optimized)
    self.rendered = dev.renderer.render(self.name, optimized)
    self.source = self.rendered.source
    if capture.listener is not None: capture.listener.kernel_rendered(device, sink, optimized, self.name, self.source)
    CodegenStats.rendered += 1
    self.key = (type(dev.compiler).__name__ + str(getattr(dev.compiler, "cachekey", "")), self.source)

  def build(self) -> bytes:
    """The binary: the compiler's output for this source (the on-disk cache first). Safe from any thread."""
    return Device[self.device].compiler.compile_cached(self.source)

  def load(self, lib: bytes, built: bool) -> CompiledKernel:
    """The loaded kernel, kept in the caches."""
    dev = Device[self.device]
    binaries.put(self.key, lib)
    if built: CodegenStats.compiled += 1
    dump_binary(self.name, lib, getattr(dev.compiler, "binary_extension", ".bin"))
    kernel = CompiledKernel(self.name, self.source, dev.runtime(self.name, lib), self.rendered.global_size,
                            self.rendered.local_size)
    if self.started and profiler.enabled:
      profiler.record(self.name, "compile", profiler.HOST_PROCESS, "compile", self.started, profiler.clock_ns(),
                      device=self.device, source_bytes=len(self.source), binary="built" if built else "cached")
    return compiled_kernels.put((self.device, self.sink), kernel)


def compile_kernel(device: str, sink: UOp) -> CompiledKernel:
  """The kernel `sink` compiled for `device` (by canonical name), from the caches when it was compiled before."""
  if (hit := compiled_kernels.get((device, sink))) is not None: return hit
  rendered = RenderedSource(device, sink)
  if (lib := binaries.get(rendered.key)) is not None: return rendered.load(lib, False)
  return rendered.load(rendered.build(), True)


def compile_kernels(kernels: Sequence[tuple[str, UOp]]) -> None:
  """Compile, side by side, the kernels (device, kernel SINK) that are not compiled yet: each is rendered here, then
  their compilers run on threads, one per core (a compiler is another process: the threads only wait), then they
  load. A model's first call compiles its distinct kernels in about the time of the slowest of each core's share.
  The first kernel (in order) that fails to render or compile raises, as `compile_kernel` would."""
  rendered = [RenderedSource(device, sink) for device, sink in dict.fromkeys(kernels)
              if compiled_kernels.get((device, sink)) is None]
  unbuilt = list({r.key: r for r in rendered if binaries.get(r.key) is None}.values())
  built: dict[tuple, bytes] = {}
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(unbuilt), compile_threads()))) as pool:
    futures = {r.key: pool.submit(r.build) for r in unbuilt}
    for key, future in futures.items(): built[key] = future.result()
  for r in rendered:
    if (lib := binaries.get(r.key)) is not None: r.load(lib, False)
    else: r.load(built[r.key], True)


def compile_threads() -> int:
  """How many compilers run at once: the cores this process may use."""
  try: return max(1, len(os.sched_getaffinity(0)))
  except AttributeError: return max(1, os.cpu_count() or 1)


DUMP_BINARIES_ENV = "TINYCORE_DUMP_BINARIES"


def dump_binary(name: str, lib: bytes, extension: str = ".bin") -> pathlib.Path | None:
  """With TINYCORE_DUMP_BINARIES=DIR, write a compiled program to DIR/<kernel name>-<sha256 of the binary><extension>
  (every device's, since every kernel is compiled here; the extension is the compiler's `binary_extension`, e.g.
  ".hsaco", else ".bin"); returns the path, or None when the variable is unset."""
  directory = os.environ.get(DUMP_BINARIES_ENV)
  if not directory: return None
  path = pathlib.Path(directory) / f"{name}-{hashlib.sha256(lib).hexdigest()[:16]}{extension}"
  if path.exists(): return path  # the name holds the content's hash: the same bytes are already there
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    temporary.write_bytes(lib)
    os.replace(temporary, path)
  except OSError as error:
    raise OSError(f"{DUMP_BINARIES_ENV}={directory}: cannot write the compiled program {path.name}: {error}") from error
  return path


def check_dtypes(renderer: Any, sink: UOp, device: str) -> None:
  """An unsupported dtype is a clear error before anything is compiled."""
  for u in sink.toposort():
    if u.dtype is not None and u.dtype not in renderer.supported_dtypes:
      why = getattr(renderer, "unsupported_reasons", {}).get(u.dtype.name)
      raise TypeError(f"dtype {u.dtype.name} is not supported on device {device}" + (f": {why}" if why else ""))


def source_digest(source: str) -> str: return hashlib.sha256(source.encode()).hexdigest()[:16]
