"""The tinycore plugin hooks of tiny-disk (entry point ``disk = "tiny_disk.plugin"``).

Importing this module is cheap: the device module loads when a DISK name is opened.
"""
from __future__ import annotations
from typing import TYPE_CHECKING
from tinycore.plugin import API_VERSION, DeviceSpec, hookimpl

if TYPE_CHECKING:
  from tinycore.plugin import Compiled

PREFIX = "DISK"


@hookimpl
def tinycore_api_version() -> str:
  return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  # names are unbounded (any file): list the kind itself, which opens and describes DISK:/absolute/path
  return [DeviceSpec(prefix=PREFIX, description="tensors stored in files, named DISK:/absolute/path "
                     "(stores bytes; runs no kernels)", priority=-100, compute=False, names_are_paths=True)]


@hookimpl
def tinycore_open_device(name: str) -> Compiled | None:
  if name.partition(":")[0] != PREFIX: return None
  from tiny_disk.device import DiskDevice
  return DiskDevice(name)
