"""The tinycore plugin hooks of tiny-cpu (entry point ``cpu = "tiny_cpu.plugin"``).

Importing this module is cheap: the compiler is looked for when the device kind is probed, and the device, its
renderer and tinycore's code generator are imported when a "CPU" device is opened.
"""
from __future__ import annotations
import re
from typing import TYPE_CHECKING
from tinycore.plugin import API_VERSION, DeviceSpec, hookimpl

if TYPE_CHECKING:
  from tinycore.plugin import Compiled

PREFIX = "CPU"
DEVICE_INDEX = re.compile(r"(0|[1-9][0-9]*)")
# each CPU:N is a device of its own with a worker thread, a pool of helper threads and a command ring, started when it
# opens: the index is bounded so that a typo or a loop cannot start threads without bound
MAX_CPU_DEVICES = 64


def probe_c_compiler() -> str | None:
  """None when a C compiler is found, else why the CPU device is unavailable."""
  from tiny_cpu.compiler import find_c_compiler, missing_compiler_reason
  return None if find_c_compiler() is not None else missing_compiler_reason()


@hookimpl
def tinycore_api_version() -> str:
  return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  return [DeviceSpec(prefix=PREFIX, description="C kernels compiled with clang or gcc, run in this process",
                     priority=0, probe=probe_c_compiler, host_memory=True)]


@hookimpl
def tinycore_open_device(name: str) -> Compiled | None:
  prefix, _, index = name.partition(":")
  if prefix != PREFIX: return None
  if index and DEVICE_INDEX.fullmatch(index) is None:
    raise ValueError(f"bad CPU device name {name!r}: the part after ':' must be a non-negative integer without "
                     "leading zeros, as in 'CPU:1'")
  if index and int(index) >= MAX_CPU_DEVICES:
    raise ValueError(f"bad CPU device name {name!r}: tiny-cpu provides CPU:0 to CPU:{MAX_CPU_DEVICES - 1} (each one "
                     "starts its own worker threads)")
  from tiny_cpu.device import CPUDevice
  return CPUDevice(PREFIX if index in ("", "0") else name)
