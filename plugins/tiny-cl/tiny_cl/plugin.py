"""The tinycore plugin hooks of tiny-cl (entry point ``cl = "tiny_cl.plugin"``).

Importing this module is cheap: pyopencl is imported when the device kind is probed or listed
(tiny_cl.platforms), and the device, its renderer and tinycore's code generator when a "CL" device is opened.
"""
from __future__ import annotations
import re
from typing import TYPE_CHECKING
from tinycore.plugin import API_VERSION, DeviceSpec, hookimpl

if TYPE_CHECKING:
  from tinycore.plugin import Compiled

PREFIX = "CL"
DEVICE_INDEX = re.compile(r"(0|[1-9][0-9]*)")
# below tiny-cpu (0): PoCL runs on the same CPU, and not faster than tiny-cpu's native C. A machine whose GPU has an
# OpenCL driver selects it with TINYCORE_DEVICE=CL (with tiny-cl alone installed, CL is the default anyway).
PRIORITY = -1


def _instances() -> list[str]:
  from tiny_cl.platforms import instance_names
  return instance_names()


def _probe() -> str | None:
  from tiny_cl.platforms import probe
  return probe()


@hookimpl
def tinycore_api_version() -> str:
  return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  return [DeviceSpec(prefix=PREFIX, description="OpenCL C kernels built by the OpenCL driver (PoCL, or a GPU's)",
                     priority=PRIORITY, instances=_instances, probe=_probe)]


@hookimpl
def tinycore_open_device(name: str) -> Compiled | None:
  prefix, _, index = name.partition(":")
  if prefix != PREFIX: return None
  if index and DEVICE_INDEX.fullmatch(index) is None:
    raise ValueError(f"bad CL device name {name!r}: the part after ':' must be a non-negative integer without leading "
                     "zeros, as in 'CL:1' (the index counts the devices of all OpenCL platforms, in order)")
  from tiny_cl.platforms import NO_PLATFORM, platforms, pyopencl_missing
  if (reason := pyopencl_missing()) is not None: raise RuntimeError(reason)
  if not platforms(): raise RuntimeError(NO_PLATFORM)
  from tiny_cl.device import CLDevice
  return CLDevice(PREFIX if index in ("", "0") else name, int(index or 0))
