"""Helpers for the emulator tests: compile hand-written LLVM IR for gfx1100 with llvmlite (O2 first, as the plugin
does), place it in emulated memory and run one dispatch on the RDNA3 interpreter."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from tiny_amd.emulator.loader import compile_ir, load_code_object
from tiny_amd.emulator.memory import MemoryRegistry
from tiny_amd.emulator.rdna3 import DispatchRegisters, DispatchStats, run_dispatch

pytest.importorskip("llvmlite.binding")


def compile_gfx1100(ir: str, cpu: str = "gfx1100") -> bytes:
  return compile_ir(ir, cpu)


class Kernel:
  """A compiled kernel placed in emulated memory, callable with numpy buffers (written back in place)."""

  def __init__(self, ir: str, name: str, memory: MemoryRegistry | None = None):
    self.memory = memory or MemoryRegistry()
    self.alloc, kernels = load_code_object(compile_gfx1100(ir), self.memory)
    self.kernel = kernels[name]

  def __call__(self, *args, grid=(1, 1, 1), block=(32, 1, 1), lds_bytes: int = 0) -> DispatchStats:
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
    regs = DispatchRegisters(self.kernel.code_address, self.kernel.rsrc1, self.kernel.rsrc2 | lds_granules << 15,
                             self.kernel.rsrc3, user, block, grid)
    stats = run_dispatch(regs, self.memory)
    for a, mem in buffers:
      a.reshape(-1).view(np.uint8)[:] = mem.bytes[:a.nbytes]
      self.memory.release(mem)
    self.memory.release(args_mem)
    return stats
