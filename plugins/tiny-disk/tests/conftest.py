"""Fixtures for the DISK tests: files under pytest's tmp_path."""
from __future__ import annotations
import os
import pathlib
import pytest

os.environ.setdefault("TINYCORE_SPEC", "1")


@pytest.fixture
def data_file(tmp_path: pathlib.Path) -> pathlib.Path:
  """A 100-byte file holding the bytes 0..99."""
  path = tmp_path / "data.bin"
  path.write_bytes(bytes(range(100)))
  return path


@pytest.fixture(scope="session")
def cpu_device() -> str:
  """The tensor tests move data between DISK and CPU: without the CPU device they cannot run."""
  from tinycore import Device
  try: Device["CPU"]
  except Exception as error: pytest.skip(f"the CPU device is unavailable (pip install tiny-cpu): {error}")
  return "CPU"
