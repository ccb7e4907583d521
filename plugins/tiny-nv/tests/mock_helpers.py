"""Helpers for the mock tests: compile CUDA C to PTX with NVRTC and run one kernel on the PTX interpreter."""
from __future__ import annotations
import numpy as np
import pytest
from tiny_nv.compiler import nvrtc_compile, nvrtc_missing
from tiny_nv.mock.memory import DeviceMemory
from tiny_nv.mock.ptx import PTXModule, load_module

needs_nvrtc = pytest.mark.skipif(nvrtc_missing() is not None, reason=f"{nvrtc_missing()}")

# NVRTC's wheel has no cuda_fp16.h: half and bfloat16 conversions through the PTX instructions themselves
HALF_HELPERS = r"""
__device__ float half_to_float(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ unsigned short float_to_half(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h; }
__device__ unsigned short float_to_half_rz(float f) { unsigned short h;
  asm("cvt.rz.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ unsigned short double_to_half(double f) { unsigned short h;
  asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(f)); return h; }
__device__ unsigned short float_to_bf16(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h; }
__device__ float bf16_to_float(unsigned short h) { float f; asm("cvt.f32.bf16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ unsigned short half_add(unsigned short a, unsigned short b) { unsigned short h;
  asm("add.f16 %0, %1, %2;" : "=h"(h) : "h"(a), "h"(b)); return h; }
"""

def compile_ptx(source: str) -> PTXModule:
  """NVRTC -> PTX for compute_90 -> a decoded module."""
  return load_module(nvrtc_compile(source, "compute_90"))

def pack_params(args: list) -> bytes:
  """The CUDA ABI: each argument at its natural alignment (int32/float32: 4 bytes, pointers/int64/double: 8)."""
  out = b""
  for arg in args:
    raw = np.asarray(arg).tobytes()
    out += b"\0" * (-len(out) % len(raw)) + raw
  return out

class KernelRunner:
  """Device buffers from numpy arrays, a launch, and the arrays read back."""
  def __init__(self):
    self.memory = DeviceMemory()

  def run(self, module: PTXModule, name: str, arrays: list, scalars: list = (), grid=(1, 1, 1), block=(1, 1, 1),
          shared_bytes: int = 0) -> list:
    addresses = []
    for array in arrays:
      address = self.memory.allocate(max(array.nbytes, 1))
      self.memory.view(address, array.nbytes)[:] = np.ascontiguousarray(array).view(np.uint8).ravel()
      addresses.append(address)
    params = pack_params([np.uint64(a) for a in addresses] + list(scalars))
    module.kernel(name).launch(self.memory, grid, block, shared_bytes, params)
    out = [self.memory.view(a, x.nbytes).view(x.dtype).reshape(x.shape).copy() for a, x in zip(addresses, arrays)]
    for address in addresses: self.memory.free(address)
    return out

def run_kernel(source: str, name: str, arrays: list, scalars: list = (), **launch) -> list:
  """Compile `source`, run kernel `name` over copies of `arrays` (then scalar args), return the arrays afterwards."""
  return KernelRunner().run(compile_ptx(source), name, arrays, scalars, **launch)
