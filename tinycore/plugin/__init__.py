"""The plugin API: everything a device plugin may subclass or call, in one module (docs/plugins.md is its guide).

A plugin imports only from here (its tests may also use the public `tinycore` API: Tensor, Device, dtypes). The
names are covered by API_VERSION: a MINOR bump adds names or optional hooks, a MAJOR bump changes or removes them.

- hooks: `hookimpl` (decorate your hook functions with it), `hookspec`, DeviceSpec, API_VERSION, KnownFailure;
- collective backends: CollectiveSpec (the row `tinycore_collective_backends` returns) and CollectiveBackend (what
  its `open` starts);
- memory: Allocator, LRUAllocator, BufferSpec, BufferStorage, Buffer, HostAllocator and HostMemory (the core's host
  memory, page-aligned), view_address, HOST_DEVICE (the core's host kind, "PYTHON");
- compiling and running: Compiled, Compiler, Program, cache_dir, dump_binary (TINYCORE_DUMP_BINARIES);
- rendering: CStyleRenderer, LLVMRenderer and LLVMTarget (LLVM IR for any LLVM target), RenderedKernel, LinearKernel,
  Loop, AccUpdate, linearize, KernelTarget (the machine the optimizer shapes tiles for), KernelOpts (a kernel's
  searchable choices, which a renderer reads as `self.opts` and offers more of in `search_space`), Panel and
  find_panels (operand panels a renderer may pack into a kernel-local buffer) and the IR they render (Ops, GroupOp,
  UOp, DType, dtypes, NARROW_FLOATS: the floats computed in float and rounded back after every op, FP8S, and
  fp8_encode / fp8_decode: numpy arrays of float values to 8-bit float bytes and back, for host-side code);
- queue devices (HCQ2): HCQDevice, HWQueue, CommandWriter, Encoded, HCQTimeoutError, Signal, signal_pool, the queue
  commands
  (Exec, Copy, SignalStore, SignalWait, Timestamp, Barrier, Command) and their run-time values (Value,
  InputAddress, Variable), is_hcq_device, wait_for_queues.

Only the hook names are loaded with this module; every other name is imported on first use (PEP 562). The device
registry imports the plugin manager, which lives in this package, so loading the layers above it (codegen, hcq)
here eagerly would make the device layer load them too; lazily, `import tinycore.plugin` also stays cheap.
"""
from __future__ import annotations
import importlib
from typing import TYPE_CHECKING, Any
from tinycore.plugin.hookspecs import API_VERSION, hookimpl, hookspec
from tinycore.plugin.spec import CollectiveSpec, DeviceSpec

if TYPE_CHECKING:  # the lazily exported names, for type checkers
  from tinycore.codegen.c_style import CStyleRenderer, RenderedKernel
  from tinycore.codegen.linearize import AccUpdate, LinearKernel, Loop, linearize
  from tinycore.codegen.optimize import KernelOpts, KernelTarget
  from tinycore.codegen.packing import Panel, find_panels
  from tinycore.codegen.llvm_ir import LLVMRenderer, LLVMTarget
  from tinycore.device.allocator import Allocator, BufferSpec, BufferStorage, LRUAllocator
  from tinycore.device.buffer import Buffer
  from tinycore.device.collective import CollectiveBackend
  from tinycore.device.host import HostAllocator, HostMemory, view_address
  from tinycore.device.kernels import dump_binary
  from tinycore.device.python import HOST_DEVICE
  from tinycore.device.compiled import (COMPILE_TIMEOUT_ENV, Compiled, Compiler, Program, cache_dir, compile_timeout_s,
                                        count_setting, finish_bounded, run_bounded, run_compiler, start_bounded,
                                        trusted_cache_dir)
  from tinycore.dtype import FP8S, NARROW_FLOATS, DType, dtypes, fp8_decode, fp8_encode
  from tinycore.hcq.commands import (Barrier, Command, Copy, Exec, InputAddress, SignalStore, SignalWait, Timestamp,
                                     Value, Variable)
  from tinycore.hcq.device import (CommandWriter, Encoded, HCQDevice, HCQTimeoutError, HWQueue, is_hcq_device,
                                   queue_timeout_s, raise_timeout_hint)
  from tinycore.hcq.in_flight import keep_in_flight_memory, wait_for_queues
  from tinycore.hcq.signal import Signal, signal_pool
  from tinycore.errors import DeviceUnavailable, SettingError
  from tinycore.plugin.known_failures import KnownFailure
  from tinycore.uop.ops import GroupOp, Ops, UOp

# exported name -> the module that defines it
_LAZY_EXPORTS: dict[str, str] = {
  **dict.fromkeys(("Allocator", "BufferSpec", "BufferStorage", "LRUAllocator"), "tinycore.device.allocator"),
  "Buffer": "tinycore.device.buffer",
  "CollectiveBackend": "tinycore.device.collective",
  **dict.fromkeys(("HostAllocator", "HostMemory", "view_address"), "tinycore.device.host"),
  "HOST_DEVICE": "tinycore.device.python",
  "dump_binary": "tinycore.device.kernels",
  **dict.fromkeys(("Compiled", "Compiler", "Program", "cache_dir", "trusted_cache_dir", "COMPILE_TIMEOUT_ENV",
                   "compile_timeout_s", "count_setting", "run_bounded", "run_compiler", "start_bounded", "finish_bounded"),
                 "tinycore.device.compiled"),
  **dict.fromkeys(("CStyleRenderer", "RenderedKernel"), "tinycore.codegen.c_style"),
  **dict.fromkeys(("AccUpdate", "LinearKernel", "Loop", "linearize"), "tinycore.codegen.linearize"),
  **dict.fromkeys(("KernelOpts", "KernelTarget"), "tinycore.codegen.optimize"),
  **dict.fromkeys(("Panel", "find_panels"), "tinycore.codegen.packing"),
  **dict.fromkeys(("LLVMRenderer", "LLVMTarget"), "tinycore.codegen.llvm_ir"),
  **dict.fromkeys(("DType", "dtypes", "FP8S", "NARROW_FLOATS", "fp8_decode", "fp8_encode"), "tinycore.dtype"),
  **dict.fromkeys(("GroupOp", "Ops", "UOp"), "tinycore.uop.ops"),
  **dict.fromkeys(("Barrier", "Command", "Copy", "Exec", "InputAddress", "SignalStore", "SignalWait", "Timestamp",
                   "Value", "Variable"), "tinycore.hcq.commands"),
  **dict.fromkeys(("CommandWriter", "Encoded", "HCQDevice", "HCQTimeoutError", "HWQueue", "is_hcq_device",
                   "queue_timeout_s", "raise_timeout_hint"), "tinycore.hcq.device"),
  "KnownFailure": "tinycore.plugin.known_failures",
  **dict.fromkeys(("DeviceUnavailable", "SettingError"), "tinycore.errors"),
  **dict.fromkeys(("Signal", "signal_pool"), "tinycore.hcq.signal"),
  **dict.fromkeys(("wait_for_queues", "keep_in_flight_memory"), "tinycore.hcq.in_flight"),
}

__all__ = ["API_VERSION", "CollectiveSpec", "DeviceSpec", "hookimpl", "hookspec", *sorted(_LAZY_EXPORTS)]


def __getattr__(name: str) -> Any:
  if (module := _LAZY_EXPORTS.get(name)) is None:
    raise AttributeError(f"module 'tinycore.plugin' has no attribute {name!r} (the plugin API is: "
                         f"{', '.join(__all__)})")
  value = getattr(importlib.import_module(module), name)
  globals()[name] = value  # later lookups skip this function
  return value


def __dir__() -> list[str]: return sorted(set(globals()) | set(__all__))
