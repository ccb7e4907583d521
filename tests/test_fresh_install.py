"""The core plus any one plugin works: a fresh virtual environment with only tinycore and tiny-disk installed (no
tiny-cpu, no C compiler needed) reads safetensors, moves DISK views to host memory and lists DISK.

Builds the environment from copies of this checkout (pip install --no-deps, plus numpy, pluggy and attrs); skips
with the reason when a virtual environment or those packages cannot be had here."""
from __future__ import annotations
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import textwrap
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "*.pyc", "tests")

CHECK = """
import importlib.util, pathlib, sys
import numpy as np
from tinycore import Device, Tensor
from tinycore.nn.state import safe_load
assert importlib.util.find_spec("tiny_cpu") is None, "tiny-cpu must not be installed here"
path = sys.argv[1]
w = safe_load(path)["w"]
assert w.device.startswith("DISK:"), w.device
np.testing.assert_equal(w.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
np.testing.assert_equal(w.flip(0).numpy(), np.arange(12, dtype=np.float32).reshape(3, 4)[::-1])
np.testing.assert_equal(w.flip(0).to("PYTHON").numpy(), np.arange(12, dtype=np.float32).reshape(3, 4)[::-1])
host = w.to(Device.DEFAULT).flip(1) * 2
np.testing.assert_equal(host.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-1] * 2)
raw = Tensor(pathlib.Path(path))
print("default", Device.DEFAULT, "raw", raw.device.partition(":")[0], raw.shape[0])
"""


def write_safetensors(path: pathlib.Path, name: str, array: np.ndarray) -> None:
  header = json.dumps({name: {"dtype": "F32", "shape": list(array.shape), "data_offsets": [0, array.nbytes]}}).encode()
  path.write_bytes(struct.pack("<Q", len(header)) + header + array.tobytes())


def run(arguments: list, timeout: int = 180, **kwargs) -> subprocess.CompletedProcess:
  env = {key: value for key, value in os.environ.items() if not key.startswith(("TINYCORE_", "PYTHON"))}
  env.update(kwargs.pop("env", {}))
  return subprocess.run([str(a) for a in arguments], capture_output=True, text=True, timeout=timeout, env=env, **kwargs)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> pathlib.Path:
  """A virtual environment with tinycore and tiny-disk (from copies of this checkout) and their dependencies."""
  tmp = tmp_path_factory.mktemp("fresh")
  core, disk = tmp / "tinycore-src", tmp / "tiny-disk-src"
  shutil.copytree(ROOT / "tinycore", core / "tinycore", ignore=IGNORED)
  for name in ("pyproject.toml", "README.md"): shutil.copy(ROOT / name, core / name)
  shutil.copytree(ROOT / "plugins" / "tiny-disk", disk, ignore=IGNORED)
  venv = tmp / "venv"
  made = run([sys.executable, "-m", "venv", "--without-pip", venv])
  python = venv / "bin" / "python"
  if made.returncode != 0 or not python.exists(): pytest.skip(f"cannot create a virtual environment: {made.stderr}")
  pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps"]
  needed = run([*pip, "numpy", "pluggy", "attrs", "setuptools", "wheel"])
  if needed.returncode != 0:
    pytest.skip(f"cannot install numpy, pluggy, attrs and setuptools into a fresh environment: {needed.stderr[-500:]}")
  installed = run([*pip, "--no-build-isolation", core, disk])
  assert installed.returncode == 0, installed.stdout + installed.stderr
  return venv


def test_core_plus_disk_reads_safetensors_and_moves_disk_views(fresh_venv, tmp_path):
  path = tmp_path / "model.safetensors"
  write_safetensors(path, "w", np.arange(12, dtype=np.float32).reshape(3, 4))
  result = run([fresh_venv / "bin" / "python", "-c", textwrap.dedent(CHECK), path], cwd=tmp_path,
               env={"TINYCORE_CACHE_DIR": str(tmp_path / "cache")})
  assert result.returncode == 0, result.stdout + result.stderr
  # with no other compute device installed, the core's own PYTHON interpreter computes
  assert result.stdout.split() == ["default", "PYTHON", "raw", "DISK", str(path.stat().st_size)]


def test_core_plus_disk_lists_disk(fresh_venv, tmp_path):
  result = run([fresh_venv / "bin" / "tinycore", "devices"], cwd=tmp_path)
  assert result.returncode == 0, result.stdout + result.stderr
  rows = [line.replace("*", " ").split() for line in result.stdout.splitlines()[1:]]
  status = {row[0]: row[3] for row in rows if len(row) >= 4}  # DEVICE DISTRIBUTION VERSION STATUS ...
  assert status.get("DISK") == "ok" and ["DISK", "tiny-disk"] in [row[:2] for row in rows], result.stdout
  assert status.get("PYTHON") == "ok" and "CPU" not in status, result.stdout
