"""Codegen: kernel SINK -> optimized kernel -> source (device renderer) -> binary (device compiler) -> Program.

Compiled programs are cached twice: in memory by (device, kernel) so a repeated computation does no codegen at
all, and on disk by source (Compiler.compile_cached) so a new process does not run the C compiler again.
"""
from __future__ import annotations
import hashlib
from typing import Any
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.scalars import kernel_scalars
from tinycore.codegen.optimize import optimize_kernel


class CompiledKernel:
  """A kernel ready to run on one device: its Program, the source it came from and its launch dimensions."""
  def __init__(self, name: str, source: str, program: Any, global_size: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, ...] = (1, 1, 1)):
    self.name, self.source, self.program = name, source, program
    self.global_size, self.local_size = global_size, local_size

  def __call__(self, *handles: Any, vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    """Run with these buffer handles and scalar arguments (64-bit words, `tinycore.uop.scalars.scalar_word`)."""
    return self.program(*handles, global_size=self.global_size, local_size=self.local_size, vals=vals, wait=wait)


_kernels: dict[tuple[str, UOp], CompiledKernel] = {}
_binaries: dict[tuple[str, str], bytes] = {}


class CodegenStats:
  """How many kernels were rendered and compiled in this process (for tests and benchmarks)."""
  rendered = 0
  compiled = 0


def kernel_name(sink: UOp) -> str:
  ranges = sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  kind = "r" if any(u.op is Ops.REDUCE for u in sink.toposort()) else "E"
  sizes = "_".join(str(r.src[0].arg) for r in ranges) or "1"
  return f"{kind}_{sizes}"


def compile_kernel(device: str, sink: UOp) -> CompiledKernel:
  from tinycore.device.registry import Device
  if (hit := _kernels.get((device, sink))) is not None: return hit
  dev = Device[device]
  if not dev.can_compute:
    raise RuntimeError(f"device {device} cannot run kernels (it only stores bytes): move the tensor to a compute "
                       "device with .to('CPU') first")
  check_dtypes(dev.renderer, sink, device)
  optimized = optimize_kernel(sink)
  if kernel_scalars(optimized) != kernel_scalars(sink):
    raise AssertionError("optimizing a kernel changed its scalar parameters: its CALL's arguments would not match")
  name = kernel_name(optimized)
  source = dev.renderer.render(name, optimized)
  CodegenStats.rendered += 1
  key = (type(dev.compiler).__name__ + str(getattr(dev.compiler, "cachekey", "")), source)
  if (lib := _binaries.get(key)) is None:
    lib = _binaries[key] = dev.compiler.compile_cached(source)
    CodegenStats.compiled += 1
  global_size, local_size = dev.renderer.launch_dims(optimized)
  kernel = _kernels[(device, sink)] = CompiledKernel(name, source, dev.runtime(name, lib), global_size, local_size)
  return kernel


def check_dtypes(renderer: Any, sink: UOp, device: str) -> None:
  """An unsupported dtype is a clear error before anything is compiled."""
  for u in sink.toposort():
    if u.dtype is not None and u.dtype not in renderer.supported_dtypes:
      raise TypeError(f"dtype {u.dtype.name} is not supported on device {device}")


def source_digest(source: str) -> str: return hashlib.sha256(source.encode()).hexdigest()[:16]
