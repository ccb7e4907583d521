"""A PTX interpreter for the mock CUDA driver: parse NVRTC's PTX once, run a kernel's threads vectorized in numpy.

    module = load_module(ptx_bytes)           # parse + decode every kernel
    kernel = module.kernel("E_4096")
    issued = kernel.launch(memory, grid=(16, 1, 1), block=(256, 1, 1), shared_bytes=0, params=packed)

`memory` is any object with `region(low, high, kernel_name) -> (uint8 numpy array, base address)` covering
[low, high); the mock driver's allocation table is one.
"""
from __future__ import annotations
import attrs
from tiny_nv.mock.ptx.calls import inline_calls
from tiny_nv.mock.ptx.decode import decode_kernel
from tiny_nv.mock.ptx.execute import MemoryFault, launch
from tiny_nv.mock.ptx.parse import Module, PTXError, parse_module
from tiny_nv.mock.ptx.translate import DecodedKernel

__all__ = ["PTXError", "MemoryFault", "PTXModule", "PTXKernel", "load_module"]

@attrs.define
class PTXKernel:
  """One decoded kernel of a module, ready to launch."""
  decoded: DecodedKernel

  @property
  def name(self) -> str: return self.decoded.name

  def launch(self, memory, grid: tuple, block: tuple, shared_bytes: int, params: bytes) -> int:
    """Run the kernel to completion; returns the number of instructions issued (per group of lanes)."""
    return launch(self.decoded, memory, grid, block, shared_bytes, params)

@attrs.define
class PTXModule:
  """A loaded module: the parsed PTX and its kernels decoded once."""
  parsed: Module
  kernels: dict[str, PTXKernel]

  def kernel(self, name: str) -> PTXKernel:
    """The kernel called `name`; KeyError lists the ones the module has."""
    if name not in self.kernels:
      raise KeyError(f"no kernel {name!r} in this PTX module (it has {sorted(self.kernels)})")
    return self.kernels[name]

def load_module(image: bytes | str) -> PTXModule:
  """Parse PTX text (bytes may end in NUL) and decode every kernel; raises PTXError on what cannot run."""
  text = image.decode() if isinstance(image, (bytes, bytearray)) else image
  if "\x7fELF" in text[:4]: raise PTXError("the mock driver runs PTX; it was given an ELF (cubin) image")
  parsed = parse_module(text)
  return PTXModule(parsed, {name: PTXKernel(decode_kernel(inline_calls(k, parsed.functions)))
                            for name, k in parsed.kernels.items()})
