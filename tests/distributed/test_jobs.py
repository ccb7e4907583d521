"""Whole MPI jobs, launched here with mpiexec (tox -e mpi): a rank that raises, exits early, hangs, is killed or
calls a mismatched collective ends the job with a non-zero status and a message naming it, within
TINYCORE_DIST_TIMEOUT; examples/train_digits.py --distributed prints the losses one process prints; `tinycore
devices` under mpiexec. Skipped without mpiexec and tiny-mpi."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
import pathlib
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MPIEXEC = shutil.which("mpiexec")
NEEDS = "needs mpiexec and tiny-mpi (tox -e mpi; pip install -e plugins/tiny-mpi[mpich])"
pytestmark = pytest.mark.skipif(MPIEXEC is None or importlib.util.find_spec("tiny_mpi") is None, reason=NEEDS)
TIMEOUT_S = 4  # TINYCORE_DIST_TIMEOUT in the scripts below
# every job: start, one collective that every rank reaches, then the fault on rank 1 (rank 0 goes on to a collective)
PROLOGUE = """
import os, signal, sys, time
import numpy as np
from tinycore import Tensor, distributed
distributed.init()
rank = distributed.rank()
x = Tensor(np.ones(4096, np.float32))
assert distributed.all_reduce(x).numpy()[0] == distributed.world_size()
"""
# (one write per line: the ranks share the job's stdout, and print writes its pieces one by one)
EPILOGUE = "\nos.write(1, f'rank {rank} done {distributed.all_reduce(x).numpy()[0]}\\n'.encode())\n"


def run_job(body: str, ranks: int = 2, timeout: float = 60, env: dict[str, str] | None = None,
            args: list[str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
  environment = {**os.environ, "TINYCORE_DIST_TIMEOUT": str(TIMEOUT_S), "TINYCORE_CPU_THREADS": "1", **(env or {})}
  command = [MPIEXEC, "-n", str(ranks), sys.executable] + (args if args is not None else ["-c", body])
  start = time.monotonic()
  try: result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, cwd=ROOT)
  except subprocess.TimeoutExpired as error:
    pytest.fail(f"the job hung (killed after {timeout} s): {error.stdout}{error.stderr}")
  return result, time.monotonic() - start


def rank_table(output: str) -> dict[int, int]:
  """rank -> pid, from the line rank 0 prints at the start."""
  line = next(line for line in output.splitlines() if "started" in line and "(rank: process)" in line)
  return {int(rank): int(pid) for rank, pid in re.findall(r"(\d+): pid (\d+)", line)}


def test_a_healthy_job_ends_with_status_0():
  result, _ = run_job(PROLOGUE + EPILOGUE, ranks=3)
  assert result.returncode == 0, result.stderr
  assert sorted(line for line in result.stdout.splitlines() if "done" in line) == \
    [f"rank {r} done 3.0" for r in range(3)]
  assert sorted(rank_table(result.stderr)) == [0, 1, 2]


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_rank_that_raises_ends_the_job_naming_it(ranks):
  result, seconds = run_job(PROLOGUE + "if rank == 1: raise ValueError('broken on purpose')" + EPILOGUE, ranks)
  assert result.returncode != 0
  assert "ValueError: broken on purpose" in result.stderr
  assert f"rank 1 of {ranks} failed (ValueError: broken on purpose): ending the job" in result.stderr
  assert seconds < TIMEOUT_S + 30 and "done" not in result.stdout


def test_a_rank_that_exits_early_is_named_by_the_exit_exchange():
  result, _ = run_job(PROLOGUE + "if rank == 1: sys.exit(0)" + EPILOGUE)
  assert result.returncode != 0
  assert "rank 1 of 2 exits, but the processes called different collectives" in result.stderr
  assert "rank 0: all_reduce sum float32 (4096,) (collective #2); rank 1: exiting after 1 collective" in \
    result.stderr


def test_a_rank_that_hangs_ends_the_job_after_the_timeout():
  result, seconds = run_job(PROLOGUE + "if rank == 1: time.sleep(600)" + EPILOGUE)
  assert result.returncode != 0
  assert f"rank 0 waited more than {TIMEOUT_S} s inside all_reduce sum float32 (4096,) (collective #2)" in \
    result.stderr
  assert "another rank did not reach it" in result.stderr and "TINYCORE_DIST_TIMEOUT" in result.stderr
  assert TIMEOUT_S <= seconds < TIMEOUT_S + 30


def test_a_killed_rank_ends_the_job_and_its_pid_is_in_the_rank_table():
  """mpiexec ends the job at once (killing the others): its message names the dead pid, which rank 0's table at the
  start maps to rank 1 (or, when the watch of rank 0 sees it first, it names rank 1 itself)."""
  result, seconds = run_job(PROLOGUE + "if rank == 1: os.kill(os.getpid(), signal.SIGKILL)" + EPILOGUE)
  assert result.returncode != 0 and seconds < TIMEOUT_S + 30
  pid = rank_table(result.stderr)[1]
  output = result.stdout + result.stderr
  assert f"PID {pid} " in output or f"rank 1 (pid {pid} on this machine) exited" in output, output


@pytest.mark.parametrize("mismatch, expected", [
  ("Tensor(np.ones(4097 if rank == 1 else 4096, np.float32))",
   "rank 0: all_reduce sum float32 (4096,) (collective #2); rank 1: all_reduce sum float32 (4097,)"),
  ("Tensor(np.ones(4096, np.int32 if rank == 1 else np.float32))",
   "rank 0: all_reduce sum float32 (4096,) (collective #2); rank 1: all_reduce sum int32 (4096,)"),
])
def test_a_mismatched_collective_is_named_and_ends_the_job(mismatch, expected):
  result, _ = run_job(PROLOGUE + f"x = {mismatch}" + EPILOGUE)
  assert result.returncode != 0
  assert "CollectiveMismatch: the processes called different collectives at the same point" in result.stderr
  assert expected in result.stderr and "done" not in result.stdout


def test_init_outside_mpiexec_is_a_clear_error():
  environment = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_", "MV2_"))}
  result = subprocess.run([sys.executable, "-c", "from tinycore import distributed; distributed.init()"],
                          capture_output=True, text=True, timeout=120, env=environment)
  assert result.returncode != 0
  assert "CollectiveError: this process was not started by the launcher of a collective backend" in result.stderr
  assert "MPI: MPI through mpi4py, launched with mpiexec -n N python script.py" in result.stderr


def test_tinycore_devices_under_mpiexec_lists_mpi_launched():
  result, _ = run_job("", ranks=1, args=["-m", "tinycore", "devices"])
  assert result.returncode == 0, result.stderr
  [line] = [line for line in result.stdout.splitlines() if line.split()[:1] == ["MPI"]]
  assert "tiny-mpi" in line and "ok (launched here)" in line and "library=" in line


def epoch_losses(output: str) -> list[float]:
  return [float(m) for m in re.findall(r"^epoch +\d+/\d+ +loss ([0-9.]+)", output, re.MULTILINE)]


def test_training_over_processes_prints_the_losses_of_one_process(tmp_path):
  """The same global batch of 32: one process, and 2 processes with 16 images each (gradients averaged)."""
  script = str(ROOT / "examples" / "train_digits.py")
  common = ["--epochs", "2", "--batch-size", "32"]
  env = {**os.environ, "TINYCORE_CPU_THREADS": "1"}
  single = subprocess.run([sys.executable, script, *common, "--out", str(tmp_path / "one.safetensors")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
  assert single.returncode == 0, single.stderr
  job, _ = run_job("", ranks=2, timeout=300, args=[script, *common, "--distributed", "--out",
                                                    str(tmp_path / "two.safetensors")])
  assert job.returncode == 0, job.stderr
  one, two = epoch_losses(single.stdout), epoch_losses(job.stdout)
  assert len(one) == len(two) == 2 and all(abs(a - b) <= 1e-5 for a, b in zip(one, two)), (one, two)
  assert job.stdout.count("epoch   1/2") == 1  # only rank 0 prints
  assert "in each of 2 processes (MPI, data parallel)" in job.stdout
  assert (tmp_path / "two.safetensors").exists()
