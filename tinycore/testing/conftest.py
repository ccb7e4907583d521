"""Setup shared by the suite's modules: the device under test must open and compute, else every test skips."""
from __future__ import annotations
import pytest


def _unknown_kinds(requested: str) -> bool:
  """Whether no installed plugin provides any of the requested device kinds (a typo, or the plugin is missing)."""
  from tinycore import Device
  specs = getattr(Device, "specs", None)
  if specs is None: return False
  known = {spec.prefix for spec in specs()}
  names = [name.strip() for name in requested.split(",") if name.strip()]
  return not any(str(Device.canonicalize(name)).partition(":")[0] in known for name in names)


@pytest.fixture(scope="session", autouse=True)
def _compute_device(request: pytest.FixtureRequest) -> str:
  """Open the device under test once. When it cannot be opened (for example --tinycore-device=NV on a machine
  without an NVIDIA GPU) or cannot compute, every test skips with the reason; when no installed plugin provides
  the requested kind at all (a typo, or the plugin is not installed), the run stops with a usage error instead."""
  from tinycore import Device
  requested = request.config.getoption("tinycore_device", default=None)
  try:
    name = Device.DEFAULT
    opened = Device[name]
  except Exception as error:  # the reason is the point: show it, whatever its type
    if requested and _unknown_kinds(requested):
      pytest.exit(f"--tinycore-device={requested}: no installed plugin provides this device: {error}", returncode=4)
    pytest.skip(f"the device under test is unavailable: {type(error).__name__}: {error}")
  if not getattr(opened, "can_compute", True):
    pytest.skip(f"device {name} stores bytes but cannot compute; the conformance suite needs a compute device")
  return name
