"""A test device "AMDEMU": the core LLVM IR renderer's kernels compiled for gfx1100 (llvmlite) and executed by the
RDNA3 interpreter directly (no queues: the device tests of tiny-amd cover the packets). It runs the conformance
suite's kernels as real gfx1100 machine code to find interpreter gaps before the plugin's device exists:

  pytest -p emulated_llvm_device --pyargs tinycore.testing --tinycore-device=AMDEMU   (tests/ on sys.path)
"""
from __future__ import annotations

import re
import struct
from typing import Any

from tinycore.codegen.llvm_ir import LLVMRenderer, LLVMTarget
from tinycore.device.host import HostAllocator
from tinycore.plugin import API_VERSION, Compiled, Compiler, DeviceSpec, hookimpl

from tiny_amd.emulator.loader import compile_ir, load_code_object
from tiny_amd.emulator.memory import MemoryRegistry
from tiny_amd.emulator.rdna3 import DispatchRegisters, run_dispatch
from emulator_helpers import scratch_slots

MEMORY = MemoryRegistry()
DISPATCHES = 0  # kernels run on the interpreter (tests check the device really executes)


def amdgcn_datalayout() -> str:
  """The target's data layout (A5: allocas live in the private address space)."""
  import llvmlite.binding as llvm
  llvm.initialize_all_targets()
  machine = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu="gfx1100")
  return str(machine.target_data)


GFX1100 = LLVMTarget(triple="amdgcn-amd-amdhsa", datalayout=amdgcn_datalayout(), global_addrspace=1,
                     calling_convention="amdgpu_kernel",
                     workgroup_id="llvm.amdgcn.workgroup.id.{axis}", workitem_id="llvm.amdgcn.workitem.id.{axis}",
                     grid_dims=3, max_local_size=256, math_in_ir=True)


ALLOCA = re.compile(r"^  (%[\w.]+) = alloca (.+)$", re.M)


def private_allocas(src: str) -> str:
  """amdgpu wants allocas in addrspace(5); the core renderer's are generic: allocate private, cast to generic
  (SROA/mem2reg at O2 still promote them to registers)."""
  return ALLOCA.sub(lambda m: f"  {m[1]}.private = alloca {m[2]}, addrspace(5)\n"
                              f"  {m[1]} = addrspacecast ptr addrspace(5) {m[1]}.private to ptr", src)


class GFX1100Compiler(Compiler):
  cachekey = None

  def compile(self, src: str) -> bytes: return compile_ir(private_allocas(src))


class EmulatedProgram:
  def __init__(self, name: str, lib: bytes):
    self.code, kernels = load_code_object(lib, MEMORY)
    self.kernel = kernels[name]

  def __call__(self, *bufs: Any, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait=False):
    global DISPATCHES
    ranges = [MEMORY.register_external(b.addr, b.nbytes) for b in bufs]
    words = [b.addr for b in bufs] + [v & 0xFFFFFFFFFFFFFFFF for v in vals]
    args = MEMORY.allocate(max(8 * len(words), 8))
    tmpring, scratch = scratch_slots(MEMORY, self.kernel.private_segment_size, 256)
    try:
      args.bytes[:8 * len(words)] = memoryview(struct.pack(f"<{len(words)}Q", *words)).cast("B")
      k = self.kernel
      lds = -(-k.group_segment_size // 512)
      regs = DispatchRegisters(k.code_address, k.rsrc1, k.rsrc2 | lds << 15, k.rsrc3,
                               (args.va & 0xFFFFFFFF, args.va >> 32) + (0,) * 14,
                               tuple(local_size) + (1,) * (3 - len(local_size)),
                               tuple(global_size) + (1,) * (3 - len(global_size)), tmpring,
                               scratch.va if scratch else 0)
      stats = run_dispatch(regs, MEMORY)
      DISPATCHES += 1
    finally:
      MEMORY.release(args)
      if scratch: MEMORY.release(scratch)
      for r in ranges: MEMORY.release(r)
    return stats.seconds if wait else None


class EmulatedLLVMDevice(Compiled):
  def __init__(self, name: str):
    super().__init__(name, HostAllocator(), LLVMRenderer(GFX1100), GFX1100Compiler(), EmulatedProgram)


@hookimpl
def tinycore_api_version() -> str: return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  return [DeviceSpec("AMDEMU", "LLVM IR kernels on the RDNA3 interpreter, no queues (emulator tests)", priority=-20)]


@hookimpl
def tinycore_open_device(name: str):
  return EmulatedLLVMDevice(name) if name.partition(":")[0] == "AMDEMU" else None


def pytest_configure(config: Any) -> None:
  import sys
  from tinycore.plugin.manager import register_plugin
  register_plugin(sys.modules[__name__], "amd-emu-test")
