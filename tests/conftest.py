import os
os.environ.setdefault("TINYCORE_SPEC", "1")

import subprocess  # noqa: E402
import sys  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def run_scenario():
  """run_scenario(script, *args, timeout=240, env=None): the script in a fresh interpreter (this environment plus
  `env`), as a CompletedProcess. For crash and hang classes: a hang fails the test with what the script printed, and
  the caller asserts on the exit status (negative: killed by that signal)."""
  def run(script: str, *args: str, timeout: float = 240, env: dict[str, str] | None = None):
    try:
      return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as error:
      pytest.fail(f"the scenario hung (killed after {timeout} s): {error.stdout}{error.stderr}")
  return run
