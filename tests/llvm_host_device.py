"""A test device that runs the core LLVM IR renderer's kernels on this machine: IR -> llvmlite O2 -> MCJIT.

It proves the renderer on a target where results can be compared with numpy directly (x86-64 here); the kernels
are the renderer's own IR compiled to machine code, nothing else. Registered by tests/test_llvm_ir.py as "LLVMHOST".
"""
from __future__ import annotations
import ctypes
from typing import Any
from tinycore.plugin import API_VERSION, Compiled, Compiler, DeviceSpec, hookimpl
from tinycore.codegen.llvm_ir import LLVMRenderer, LLVMTarget
from tinycore.device.host import HostAllocator


def llvm_binding() -> Any:
  import llvmlite.binding as llvm
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  return llvm


def host_target() -> LLVMTarget:
  """This machine's target; LLVMHOST_MATH_IN_IR=1 uses the renderer's IR math (what GPUs get) instead of libm."""
  import os
  llvm = llvm_binding()
  return LLVMTarget(triple=llvm.get_process_triple(), math_in_ir=os.environ.get("LLVMHOST_MATH_IN_IR") == "1")


class JITCompiler(Compiler):
  """'Compiles' to the O2-optimized IR (the binary the runtime JITs); checks the IR parses and verifies."""
  cachekey = None

  def compile(self, src: str) -> bytes:
    llvm = llvm_binding()
    module = llvm.parse_assembly(src)
    module.verify()
    machine = llvm.Target.from_triple(module.triple).create_target_machine(opt=2)
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
    builder.getModulePassManager().run(module, builder)
    return str(module).encode()


class JITProgram:
  engines: list[Any] = []   # kept alive: the machine code lives in the engine

  def __init__(self, name: str, lib: bytes):
    llvm = llvm_binding()
    module = llvm.parse_assembly(lib.decode())
    target = llvm.Target.from_triple(llvm.get_process_triple())
    features = llvm.get_host_cpu_features().flatten()
    machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    JITProgram.engines.append(engine)
    self.address, self.name = engine.get_function_address(name), name

  def __call__(self, *bufs: Any, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait=False):
    args = [b.addr for b in bufs] + [v & 0xFFFFFFFFFFFFFFFF for v in vals]
    ctypes.CFUNCTYPE(None, *[ctypes.c_uint64] * len(args))(self.address)(*args)
    return 0.0 if wait else None


class LLVMHostDevice(Compiled):
  def __init__(self, name: str):
    super().__init__(name, HostAllocator(), LLVMRenderer(host_target()), JITCompiler(), JITProgram)


@hookimpl
def tinycore_api_version() -> str: return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  return [DeviceSpec("LLVMHOST", "the core LLVM IR renderer, JIT-compiled for this machine (tests)", priority=-20)]


@hookimpl
def tinycore_open_device(name: str):
  return LLVMHostDevice(name) if name.partition(":")[0] == "LLVMHOST" else None


def pytest_configure(config: Any) -> None:
  """Loaded with `-p llvm_host_device` (tests/ on the path): run the conformance suite on LLVMHOST."""
  import sys
  from tinycore.plugin.manager import register_plugin
  register_plugin(sys.modules[__name__], "llvm-host-test")
