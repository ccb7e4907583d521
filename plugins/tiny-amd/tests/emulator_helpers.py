"""Helpers for the emulator tests: compile hand-written LLVM IR for gfx1100 with llvmlite (O2 first, as the plugin
does), place it in emulated memory and run one dispatch on the RDNA3 interpreter."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from tiny_amd.emulator.loader import compile_ir, load_code_object
from tiny_amd.emulator.memory import MemoryRegistry
from tiny_amd.emulator.rdna3 import DispatchRegisters, DispatchStats, run_dispatch
from tiny_amd.pm4 import tmpring_size

pytest.importorskip("llvmlite.binding")


def private_fill(element: str, value: str) -> str:
  """IR filling a private array `%arr` of 16 `element`s (i32 or i16) with arr[k] = k * `value` (an i32), then
  branching to the block `read` (the kernel's first block must be the entry, named %0)."""
  value_of_k = (f"  %v = mul i32 %k, {value}" if element == "i32" else
                f"  %kv = mul i32 %k, {value}\n  %v = trunc i32 %kv to {element}")
  return f"""  %arr = alloca [16 x {element}], addrspace(5)
  br label %fill
fill:
  %k = phi i32 [0, %0], [%k2, %fill]
{value_of_k}
  %p = getelementptr [16 x {element}], ptr addrspace(5) %arr, i32 0, i32 %k
  store volatile {element} %v, ptr addrspace(5) %p
  %k2 = add i32 %k, 1
  %more = icmp slt i32 %k2, 16
  br i1 %more, label %fill, label %read
read:
"""


# a private array indexed by a loaded value: scratch memory (the kernel descriptor's private segment)
SCRATCH = """declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()

define amdgpu_kernel void @priv(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %idx) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %g, 64
  %gid = add i32 %base, %t
""" + private_fill("i32", "%gid") + """  %ip = getelementptr i32, ptr addrspace(1) %idx, i32 %gid
  %i = load i32, ptr addrspace(1) %ip
  %q = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %i
  %r = load volatile i32, ptr addrspace(5) %q
  %op = getelementptr i32, ptr addrspace(1) %out, i32 %gid
  store i32 %r, ptr addrspace(1) %op
  ret void
}"""


def scratch_slots(memory: MemoryRegistry, lane_bytes: int, waves: int) -> tuple:
  """(COMPUTE_TMPRING_SIZE, scratch allocation or None) for a kernel with `lane_bytes` of private memory per lane:
  `waves` slots of a wave's 32 lanes times that size, in 256-byte units, as the plugin sets up."""
  if not lane_bytes or not waves: return 0, None
  wave_bytes = -(-lane_bytes * 32 // 256) * 256
  return tmpring_size("gfx1100", waves, wave_bytes), memory.allocate(waves * wave_bytes)


def compile_gfx1100(ir: str, cpu: str = "gfx1100") -> bytes:
  return compile_ir(ir, cpu)


class Kernel:
  """A compiled kernel placed in emulated memory, callable with numpy buffers (written back in place)."""

  def __init__(self, ir: str, name: str, memory: MemoryRegistry | None = None):
    self.memory = memory or MemoryRegistry()
    self.alloc, kernels = load_code_object(compile_gfx1100(ir), self.memory)
    self.kernel = kernels[name]

  def __call__(self, *args, grid=(1, 1, 1), block=(32, 1, 1), lds_bytes: int = 0,
               scratch_waves: int = 256) -> DispatchStats:
    """args: numpy arrays (passed as pointers, copied back after) or python ints/floats (i32/f32 by type)."""
    kernarg, buffers = b"", []
    for a in args:
      if isinstance(a, np.ndarray):
        mem = self.memory.allocate(max(a.nbytes, 4))
        mem.bytes[:a.nbytes] = a.reshape(-1).view(np.uint8)
        buffers.append((a, mem))
        kernarg = kernarg.ljust(-(-len(kernarg) // 8) * 8, b"\0") + struct.pack("<Q", mem.va)
      elif isinstance(a, float): kernarg += struct.pack("<f", a)
      else: kernarg += struct.pack("<i", a)
    args_mem = self.memory.allocate(max(len(kernarg), 8))
    args_mem.bytes[:len(kernarg)] = np.frombuffer(kernarg, np.uint8)
    user = (args_mem.va & 0xFFFFFFFF, args_mem.va >> 32) + (0,) * 14
    lds_granules = -(-max(lds_bytes, self.kernel.group_segment_size) // 512)
    tmpring, scratch = scratch_slots(self.memory, self.kernel.private_segment_size, scratch_waves)
    regs = DispatchRegisters(self.kernel.code_address, self.kernel.rsrc1, self.kernel.rsrc2 | lds_granules << 15,
                             self.kernel.rsrc3, user, block, grid, tmpring, scratch.va if scratch else 0)
    try: stats = run_dispatch(regs, self.memory)
    finally:
      if scratch: self.memory.release(scratch)
    for a, mem in buffers:
      a.reshape(-1).view(np.uint8)[:] = mem.bytes[:a.nbytes]
      self.memory.release(mem)
    self.memory.release(args_mem)
    return stats
