"""The README's test command sets up what the backends need itself: `.ci/run` is that command and nothing else, and
without root it says what it could not install and which envs it skipped (checked with its plan-only mode, which
makes the set-up's decisions and runs no tox)."""
from __future__ import annotations
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command_and_nothing_else():
  commands = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()
              if line.strip() and not line.lstrip().startswith("#")]
  assert commands[-1] == "bash scripts/test.sh"
  assert all(c.startswith(("set ", "cd ")) for c in commands[:-1]), commands  # no set-up of its own
  assert "    bash scripts/test.sh\n" in (ROOT / "README.md").read_text()


def test_without_root_the_test_command_names_what_it_could_not_install_and_skips_viz(tmp_path):
  fake_bin = tmp_path / "bin"
  fake_bin.mkdir()
  (fake_bin / "id").write_text("#!/bin/sh\necho 1000\n")  # `id -u` answers: not root
  (fake_bin / "id").chmod(0o755)
  env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "TINYCORE_TEST_PLAN_ONLY": "1",
         "TINYCORE_CHROMIUM": str(tmp_path / "no-chromium"), "TINYCORE_TEST_ENVS": "core,cpu,viz"}
  result = subprocess.run(["bash", str(ROOT / "scripts/test.sh")], capture_output=True, text=True, env=env,
                          timeout=120)
  assert result.returncode == 0, result.stdout + result.stderr
  assert "chromium not installed (not root): viz env skipped" in result.stdout
  assert "would run tox -e core,cpu " in result.stdout  # viz left out, the others kept


def test_as_root_with_a_browser_every_env_asked_for_is_planned(tmp_path):
  browser = tmp_path / "chromium"
  browser.write_text("#!/bin/sh\n")
  browser.chmod(0o755)
  env = {**os.environ, "TINYCORE_TEST_PLAN_ONLY": "1", "TINYCORE_CHROMIUM": str(browser),
         "TINYCORE_TEST_ENVS": "core,viz"}
  result = subprocess.run(["bash", str(ROOT / "scripts/test.sh")], capture_output=True, text=True, env=env,
                          timeout=600)
  assert result.returncode == 0 and "would run tox -e core,viz " in result.stdout, result.stdout + result.stderr


def test_the_system_pocl_is_the_one_the_cl_env_uses_when_it_is_installed():
  icd = pathlib.Path("/etc/OpenCL/vendors/pocl.icd")
  library = icd.read_text().strip() if icd.exists() else ""
  installed = library and (pathlib.Path(library).exists() or any(pathlib.Path(d, library).exists() for d in
                                                                  [*pathlib.Path("/usr/lib").glob("*/"), "/usr/lib"]))
  env = {k: v for k, v in os.environ.items() if not k.startswith("OCL_ICD")}
  env.update(TINYCORE_TEST_PLAN_ONLY="1", TINYCORE_TEST_ENVS="core")
  result = subprocess.run(["bash", str(ROOT / "scripts/test.sh")], capture_output=True, text=True, env=env,
                          timeout=600)
  assert result.returncode == 0, result.stdout + result.stderr
  if installed: assert f"with OCL_ICD_VENDORS={icd}" in result.stdout, result.stdout


def test_the_env_lists_agree():
  # tox's envlist, the test command's ALL_ENVS and the README's `tox -p auto -e ...` name the same envs in one order
  import configparser
  import re
  tox = configparser.ConfigParser()
  tox.read(ROOT / "tox.ini")
  envlist = [e.strip() for e in tox["tox"]["envlist"].split(",")]
  script = re.search(r'^ALL_ENVS="([^"]+)"', (ROOT / "scripts/test.sh").read_text(), re.M).group(1).split(",")
  readme = re.search(r"`tox -p auto -e ([a-z,]+)`", (ROOT / "README.md").read_text()).group(1).split(",")
  assert envlist == script == readme, (envlist, script, readme)
  assert all(f"[testenv:{env}]" in (ROOT / "tox.ini").read_text() for env in envlist)
  assert all(f"- `{env}`:" in (ROOT / "README.md").read_text() for env in envlist)
