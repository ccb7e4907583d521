"""`tinycore devices` lists DISK (from the installed tiny-disk distribution) as a storage device."""
from __future__ import annotations
import json
import subprocess
import sys


def run_devices(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tinycore", "devices", *args], capture_output=True, text=True,
                        timeout=120)


def test_devices_lists_disk():
  out = run_devices()
  assert out.returncode == 0, out.stderr
  (line,) = [line for line in out.stdout.splitlines() if line.split()[:1] == ["DISK"]]
  assert "tiny-disk" in line and " ok " in f"{line} " and "no-compute" in line and "DISK:/absolute/path" in line


def test_devices_json_row():
  out = run_devices("--json")
  assert out.returncode == 0, out.stderr
  (row,) = [row for row in json.loads(out.stdout) if row["name"] == "DISK"]
  assert row["distribution"] == "tiny-disk" and row["status"] == "ok" and not row["compute"] and not row["default"]
  assert row["capabilities"] == {"compute": False, "file": "DISK:/absolute/path"}


def test_devices_check_skips_disk():
  """--check runs a kernel on compute devices only: DISK stores bytes and is not checked (and does not fail)."""
  out = run_devices("--check")
  assert not any(line.startswith("DISK") and "FAIL" in line for line in out.stdout.splitlines())
