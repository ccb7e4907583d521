"""Setup shared by the suite's modules: the device under test must open and compute, else every test skips."""
from __future__ import annotations
import pytest


@pytest.fixture(scope="session", autouse=True)
def _compute_device() -> str:
  """Open the device under test once; skip the suite, with the reason, when it cannot be opened (for example
  --tinycore-device=NV on a machine without an NVIDIA GPU) or cannot compute."""
  from tinycore import Device
  try:
    name = Device.DEFAULT
    opened = Device[name]
  except Exception as error:  # the reason is the point: show it, whatever its type
    pytest.skip(f"the device under test is unavailable: {type(error).__name__}: {error}")
  if not getattr(opened, "can_compute", True):
    pytest.skip(f"device {name} stores bytes but cannot compute; the conformance suite needs a compute device")
  return name
