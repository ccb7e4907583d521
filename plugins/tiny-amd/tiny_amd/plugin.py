"""Plugin hooks for AMD GPUs. Cheap to import: the driver, llvmlite and the emulator load when AMD is opened."""
from __future__ import annotations
import os
import threading
from typing import Any
from tinycore.plugin import API_VERSION, DeviceSpec, KnownFailure, hookimpl

EMULATE_ENV = "TINYCORE_AMD_EMULATE"
EMULATED_INSTANCES = ("AMD", "AMD:1")  # two logical devices on the one emulated GPU (cross-device copies)
_lock = threading.Lock()
_driver: list[Any] = []   # the process's one driver object and its host mappings, opened on first use


def emulated() -> bool: return os.environ.get(EMULATE_ENV) == "1"


def probe() -> str | None:
  """None when AMD can be opened here, else why not."""
  if emulated():
    import importlib.util
    if importlib.util.find_spec("tiny_amd.emulator") is None:
      return f"{EMULATE_ENV}=1 but tiny_amd.emulator is not installed"
    return None
  from tiny_amd.driver import kfd_absent_reason
  return kfd_absent_reason()


def shared_driver() -> tuple[Any, Any]:
  """(driver, host mappings): one per process, shared by every AMD:N."""
  with _lock:
    if not _driver:
      from tiny_amd.device import HostMappings
      from tiny_amd.driver import open_driver
      driver = open_driver(emulated())
      _driver.append((driver, HostMappings(driver)))
    return _driver[0]


@hookimpl
def tinycore_api_version() -> str: return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  description = ("emulated gfx1100 (TINYCORE_AMD_EMULATE=1): mock KFD, PM4/SDMA processor, RDNA3 interpreter"
                 if emulated() else "AMD GPU via /dev/kfd: PM4 compute + SDMA copy queues, LLVM code objects")
  return [DeviceSpec("AMD", description, priority=-5 if emulated() else 10, probe=probe,
                     instances=(lambda: list(EMULATED_INSTANCES)) if emulated() else None, slow=emulated())]


@hookimpl
def tinycore_open_device(name: str):
  prefix, _, index = name.partition(":")
  if prefix != "AMD": return None
  if index and not index.isdigit(): raise ValueError(f"invalid AMD device index in {name!r}")
  reason = probe()
  if reason is not None: raise RuntimeError(f"AMD is unavailable: {reason}")
  from tiny_amd.device import AMDDevice
  driver, mappings = shared_driver()
  return AMDDevice(name, driver, mappings)


@hookimpl
def tinycore_known_failures(device: str) -> list[KnownFailure]:
  return []
