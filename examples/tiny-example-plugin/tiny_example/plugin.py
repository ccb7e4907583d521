"""The hooks of tiny-example (entry point ``example = "tiny_example.plugin"``). Cheap to import: it only names the
device kind; the compiler is looked for by the probe and the device module is imported when "EXAMPLE" is opened."""
from __future__ import annotations
from tinycore.plugin import API_VERSION, Compiled, DeviceSpec, KnownFailure, hookimpl

PREFIX = "EXAMPLE"


@hookimpl
def tinycore_api_version() -> str:
  return API_VERSION


def probe() -> str | None:
  """None when a C compiler is found, else why EXAMPLE cannot work here."""
  from tiny_example.device import find_cc
  return None if find_cc() else "no C compiler: set CC or install cc"


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  # a negative priority: installed next to a real device, EXAMPLE is never picked as the default
  return [DeviceSpec(PREFIX, "example plugin: C kernels compiled with cc, run synchronously", priority=-5,
                     probe=probe)]


@hookimpl
def tinycore_open_device(name: str) -> Compiled | None:
  prefix, _, index = name.partition(":")
  if prefix != PREFIX: return None
  if index not in ("", "0"): raise ValueError(f"{PREFIX} has one instance, named {PREFIX!r}; got {name!r}")
  from tiny_example.device import ExampleDevice
  return ExampleDevice(PREFIX)


@hookimpl
def tinycore_known_failures(device: str) -> list[KnownFailure]:
  # conformance tests this device is known to fail, reported as xfail: none (an entry would read
  # KnownFailure("test_dtypes.py::test_cast[float16-*]", "why it fails, and the issue that tracks it"))
  return []
