"""Plugin hooks for the simulated HCQ2 device. Cheap to import: the device loads when opened."""
from __future__ import annotations
from tinycore.plugin import API_VERSION, DeviceSpec, hookimpl


@hookimpl
def tinycore_api_version() -> str: return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  return [DeviceSpec("SIM", "simulated queue device: private memory, a compute and a copy queue run by threads",
                     priority=-10)]


@hookimpl
def tinycore_open_device(name: str):
  prefix, _, index = name.partition(":")
  if prefix != "SIM": return None
  if index and not index.isdigit(): raise ValueError(f"invalid SIM device index in {name!r}")
  from hcq_sim.device import SimDevice
  return SimDevice(name)
