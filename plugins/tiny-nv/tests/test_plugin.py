"""tiny-nv's plugin hooks and driver on a machine without an NVIDIA driver: cheap import, the reason `tinycore
devices` gives, device names, and the ctypes driver's behaviour when libcuda is missing."""
from __future__ import annotations
import subprocess
import sys
import pytest
from tiny_nv import plugin
from tiny_nv.driver import CudaDriver, CudaDriverMissing, CudaError, load_libcuda, pack_params


def libcuda_present() -> bool:
  try: load_libcuda()
  except CudaDriverMissing: return False
  return True


no_libcuda = pytest.mark.skipif(libcuda_present(), reason="this machine has an NVIDIA driver")


def test_plugin_import_is_cheap():
  code = ("import sys, tiny_nv.plugin; print(any(m in sys.modules for m in "
          "('tiny_nv.device', 'tiny_nv.driver', 'tiny_nv.compiler', 'tiny_nv.mock')))")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert result.stdout.split() == ["False"]


@no_libcuda
def test_without_a_driver_the_row_says_why(monkeypatch):
  from tinycore.cli import collect_rows
  monkeypatch.delenv(plugin.EMULATE_ENV, raising=False)
  monkeypatch.setattr(plugin, "_driver", None)
  rows = [row for row in collect_rows() if row.distribution == "tiny-nv"]
  assert [(row.name, row.status) for row in rows] == [
    ("NV", "unavailable: no NVIDIA driver (libcuda.so.1 not found)")]


@no_libcuda
def test_opening_without_a_driver_names_the_reason(monkeypatch):
  monkeypatch.delenv(plugin.EMULATE_ENV, raising=False)
  monkeypatch.setattr(plugin, "_driver", None)
  with pytest.raises(RuntimeError, match=r"cannot open NV:1: no NVIDIA driver \(libcuda.so.1 not found\)"):
    plugin.tinycore_open_device("NV:1")


def test_bad_device_names_are_refused():
  assert plugin.tinycore_open_device("CPU") is None
  for bad in ("NV:01", "NV:x", "NV:-1"):
    with pytest.raises(ValueError, match="bad NV device name"): plugin.tinycore_open_device(bad)


def test_priority_and_description_follow_emulation(monkeypatch):
  monkeypatch.setenv(plugin.EMULATE_ENV, "1")
  (spec,) = plugin.tinycore_devices()
  assert spec.priority == plugin.EMULATED_PRIORITY and "emulated" in spec.description
  monkeypatch.setenv(plugin.EMULATE_ENV, "0")
  (spec,) = plugin.tinycore_devices()
  assert spec.priority == plugin.PRIORITY and "emulated" not in spec.description


def test_known_failures_only_for_nv():
  assert plugin.tinycore_known_failures("CPU") == []
  assert len(plugin.tinycore_known_failures("NV")) >= len(plugin.KNOWN_FAILURES)


def test_driver_calls_before_init_are_clear_errors():
  with pytest.raises(CudaError, match=r"cuDeviceGetCount: the CUDA driver is not initialized"):
    CudaDriver().device_count()


@no_libcuda
def test_driver_init_without_libcuda():
  with pytest.raises(CudaDriverMissing, match=r"no NVIDIA driver \(libcuda.so.1 not found\)"): CudaDriver().init()


def test_pack_params_is_little_endian_words():
  assert pack_params([1, -1, 0x1122334455667788]) == (b"\x01" + b"\0" * 7 + b"\xff" * 8 +
                                                       bytes.fromhex("8877665544332211"))
