"""The tinycore plugin hooks of tiny-nv (entry point ``nv = "tiny_nv.plugin"``).

Importing this module is cheap: libcuda and NVRTC load when the kind is probed or a device opens. With
TINYCORE_NV_EMULATE=1 the device runs on the mock CUDA driver (tiny_nv.mock, test equipment that executes the
kernels' PTX) instead of libcuda.so.1, and says so in `tinycore devices` ("ok (emulated)").
"""
from __future__ import annotations
import os
import re
from typing import TYPE_CHECKING, Any
from tinycore.plugin import API_VERSION, DeviceSpec, hookimpl

if TYPE_CHECKING:
  from tinycore.plugin import Compiled

PREFIX = "NV"
EMULATE_ENV = "TINYCORE_NV_EMULATE"
DEVICE_INDEX = re.compile(r"(0|[1-9][0-9]*)")
PRIORITY = 10            # a GPU: the default device where one works
EMULATED_PRIORITY = -5   # the mock: used only when named (it interprets PTX: slow)


def emulated() -> bool:
  """Whether NV devices run on the mock CUDA driver (TINYCORE_NV_EMULATE=1)."""
  return os.environ.get(EMULATE_ENV, "") not in ("", "0")


def new_driver() -> Any:
  """The driver object every NV device talks to: the real one, or the mock when emulating (the one seam)."""
  if emulated():
    from tiny_nv.mock import MockCudaDriver
    return MockCudaDriver()
  from tiny_nv.driver import CudaDriver
  return CudaDriver()


_driver: Any = None
_driver_emulated = False


def shared_driver() -> Any:
  """One initialized driver per process (and per emulation setting), shared by the NV devices."""
  global _driver, _driver_emulated
  if _driver is None or _driver_emulated != emulated():
    driver = new_driver()
    driver.init()
    _driver, _driver_emulated = driver, emulated()
  return _driver


def probe() -> str | None:
  """None when an NV device can open here, else why not (no driver, no GPU, no NVRTC)."""
  from tiny_nv.compiler import nvrtc_missing
  from tiny_nv.driver import CudaDriverMissing
  try: count = shared_driver().device_count()
  except CudaDriverMissing as error: return str(error)
  except ImportError as error: return f"the mock CUDA driver cannot load: {error}"
  except Exception as error: return f"the CUDA driver failed: {type(error).__name__}: {error}"
  if count == 0: return "no NVIDIA GPU (the driver reports 0 devices)"
  return nvrtc_missing()


def instances() -> list[str]:
  """NV, NV:1, ... for each GPU the driver reports (one row, "NV", when none: the probe says why)."""
  if probe() is not None: return [PREFIX]
  return [PREFIX if i == 0 else f"{PREFIX}:{i}" for i in range(shared_driver().device_count())]


@hookimpl
def tinycore_api_version() -> str: return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  if emulated():
    # slow: kernels run in a PTX interpreter, so the suite skips its tests marked slow here (as on emulated AMD)
    return [DeviceSpec(PREFIX, "NVIDIA GPU emulated: a mock CUDA driver running the kernels' PTX (test equipment)",
                       priority=EMULATED_PRIORITY, instances=instances, probe=probe, slow=True)]
  return [DeviceSpec(PREFIX, "NVIDIA GPU: CUDA C compiled by NVRTC, run on CUDA streams (HCQ2)", priority=PRIORITY,
                     instances=instances, probe=probe)]


@hookimpl
def tinycore_open_device(name: str) -> Compiled | None:
  prefix, _, index = name.partition(":")
  if prefix != PREFIX: return None
  if index and DEVICE_INDEX.fullmatch(index) is None:
    raise ValueError(f"bad NV device name {name!r}: the part after ':' must be a GPU index without leading zeros, "
                     "as in 'NV:1'")
  if (reason := probe()) is not None: raise RuntimeError(f"cannot open {name}: {reason}")
  from tiny_nv.device import NVDevice
  return NVDevice(PREFIX if index in ("", "0") else name, int(index or 0), shared_driver(), emulated())


# conformance tests that fail on NV, each with the reason (the suite marks them xfail); aim: none. Real GPUs: none
# known. The mock (test equipment) only: limits of its PTX interpreter, not of the plugin (not strict: an interpreter
# that learns the feature makes them pass).
KNOWN_FAILURES: list[tuple[str, str]] = []
EMULATED_KNOWN_FAILURES: list[tuple[str, str]] = []


@hookimpl
def tinycore_known_failures(device: str) -> list:
  if device.partition(":")[0] != PREFIX: return []
  from tinycore.plugin import KnownFailure
  rows = [KnownFailure(test, reason) for test, reason in KNOWN_FAILURES]
  if emulated(): rows += [KnownFailure(test, reason, strict=False) for test, reason in EMULATED_KNOWN_FAILURES]
  return rows
