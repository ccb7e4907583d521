"""The plugin as users meet it: `tinycore devices` without a GPU, and a fresh install with the core alone."""
from __future__ import annotations
import os
import pathlib
import shutil
import subprocess
import sys
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "*.pyc", "tests", "emulator")


def run(arguments: list, timeout: int = 300, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
  clean = {key: value for key, value in os.environ.items() if not key.startswith(("TINYCORE_", "PYTHON"))}
  clean.update(env or {})
  return subprocess.run([str(a) for a in arguments], capture_output=True, text=True, timeout=timeout, env=clean,
                        **kwargs)


@pytest.mark.skipif(os.path.exists("/dev/kfd"), reason="this machine has /dev/kfd")
def test_devices_row_says_why_amd_is_unavailable(tmp_path):
  result = run([sys.executable, "-m", "tinycore", "devices"], env={"TINYCORE_CACHE_DIR": str(tmp_path)})
  assert result.returncode == 0, result.stderr
  row = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["AMD"])
  assert "tiny-amd" in row and "unavailable: no /dev/kfd" in row


def test_opening_amd_without_a_gpu_is_a_clear_error():
  if os.path.exists("/dev/kfd"): pytest.skip("this machine has /dev/kfd")
  from tiny_amd.driver import DriverUnavailable, KFDDriver
  with pytest.raises(DriverUnavailable, match="no /dev/kfd"):
    KFDDriver()


def test_fresh_install_with_the_core_alone_lists_amd(tmp_path):
  """pip install ./ ./plugins/tiny-amd (no tiny-cpu) then `tinycore devices` lists AMD."""
  core, amd = tmp_path / "tinycore-src", tmp_path / "tiny-amd-src"
  shutil.copytree(ROOT / "tinycore", core / "tinycore", ignore=IGNORED)
  for name in ("pyproject.toml", "README.md"): shutil.copy(ROOT / name, core / name)
  shutil.copytree(ROOT / "plugins" / "tiny-amd", amd, ignore=IGNORED)
  venv = tmp_path / "venv"
  made = run([sys.executable, "-m", "venv", "--without-pip", venv])
  python = venv / "bin" / "python"
  if made.returncode != 0 or not python.exists(): pytest.skip(f"cannot create a virtual environment: {made.stderr}")
  pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps"]
  needed = run([*pip, "numpy", "pluggy", "attrs", "llvmlite", "setuptools", "wheel"])
  if needed.returncode != 0:
    pytest.skip(f"cannot install the dependencies into a fresh environment: {needed.stderr[-500:]}")
  installed = run([*pip, "--no-build-isolation", core, amd])
  assert installed.returncode == 0, installed.stdout + installed.stderr
  result = run([python, "-c", "import importlib.util, sys; assert importlib.util.find_spec('tiny_cpu') is None\n"
                "from tinycore.cli import main; sys.exit(main(['devices']))"],
               env={"TINYCORE_CACHE_DIR": str(tmp_path)}, cwd=tmp_path)
  assert result.returncode == 0, result.stdout + result.stderr
  assert any(line.split()[:2] == ["AMD", "tiny-amd"] for line in result.stdout.splitlines()), result.stdout
