"""The ranks suite runs in every process of an MPI job: `mpiexec -n 2 python -m pytest -p no:cacheprovider
tests/distributed/ranks` (tox -e mpi runs it with 2 and with 3 processes). Every process runs the same tests in the
same order, so their collectives meet; each checks its own results. Outside a launcher everything is skipped.

Rank 0 reports as usual; the other ranks print only their failures, each with its rank (a failure on any rank
fails the job: mpiexec's status is the worst of its processes')."""
import sys
import numpy as np
import pytest
from tinycore import distributed

STARTED: list[str] = []  # why not, when init() failed


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
  try: distributed.init()
  except distributed.CollectiveError as error:
    STARTED.append(str(error))
    return
  if distributed.rank() > 0 and (reporter := config.pluginmanager.get_plugin("terminalreporter")) is not None:
    config.pluginmanager.unregister(reporter)


def pytest_runtest_logreport(report):
  if report.failed and distributed.is_initialized() and distributed.rank() > 0:
    sys.stderr.write(f"\n[rank {distributed.rank()}] FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n")


def pytest_collection_modifyitems(config, items):
  if not STARTED: return
  skip = pytest.mark.skip(reason=f"run under mpiexec (tox -e mpi): {STARTED[0]}")
  for item in items: item.add_marker(skip)


def rank_input(rank: int, shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
  """What rank `rank` passes (every rank can compute every other rank's input, so each checks against numpy)."""
  rng = np.random.default_rng([seed, rank])
  if dtype == "bool": return rng.random(shape) < 0.5
  if dtype in ("float16", "bfloat16"):  # small whole numbers: sums of a few are exact in 16 bits, in any order
    return rng.integers(-8, 9, shape).astype(np.float32)
  if dtype.startswith("fp8"):  # smaller ones: sums of up to 3 are exact in 8 bits (e5m2 holds 5 and 6, not 9)
    return rng.integers(-2, 3, shape).astype(np.float32)
  if dtype.startswith("float"): return rng.standard_normal(shape).astype(dtype)
  low = 0 if dtype.startswith("uint") else -40
  return rng.integers(low, 41, shape).astype(dtype)
