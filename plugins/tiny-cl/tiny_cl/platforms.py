"""Which OpenCL devices exist: every device of every platform, in order, is "CL", "CL:1", "CL:2", ...

Imports pyopencl only when called (the plugin module stays cheap to import).
"""
from __future__ import annotations
from typing import Any

PREFIX = "CL"
NO_PLATFORM = "no OpenCL platform (pip install tiny-cl[pocl], or a vendor driver)"


def pyopencl_missing() -> str | None:
  """None when pyopencl imports, else why not."""
  try:
    import pyopencl  # noqa: F401
  except Exception as error:  # an ImportError, or a broken binary wheel
    return f"pyopencl cannot be imported ({type(error).__name__}: {error}); pip install tiny-cl"
  return None


def platforms() -> list[Any]:
  """The OpenCL platforms the ICD loader finds; [] when there are none (the loader reports "no platform" as an
  error, CL_PLATFORM_NOT_FOUND_KHR)."""
  import pyopencl as cl
  try:
    return list(cl.get_platforms())
  except cl.Error:
    return []


def devices() -> list[Any]:
  """Every OpenCL device of every platform, in platform order: index i is the device "CL:i"."""
  import pyopencl as cl
  found: list[Any] = []
  for platform in platforms():
    try: found.extend(platform.get_devices())
    except cl.Error: continue  # a platform without devices (CL_DEVICE_NOT_FOUND)
  return found


def device_name(index: int) -> str:
  """The tinycore name of device index `index`: "CL" for 0, else "CL:<index>"."""
  return PREFIX if index == 0 else f"{PREFIX}:{index}"


def instance_names() -> list[str]:
  """The names of the devices present now; ["CL"] when there is none, so `tinycore devices` has a row that says why."""
  if pyopencl_missing() is not None: return [PREFIX]
  return [device_name(index) for index in range(len(devices()))] or [PREFIX]


def probe() -> str | None:
  """None when at least one OpenCL device exists, else why CL is unavailable."""
  if (reason := pyopencl_missing()) is not None: return reason
  if not platforms(): return NO_PLATFORM
  if not devices(): return "the OpenCL platforms have no devices"
  return None
