"""The tinycore plugin hooks of tiny-mpi (entry point ``mpi = "tiny_mpi.plugin"``).

Importing this module is cheap: mpi4py loads when the backend is probed or opened.
"""
from __future__ import annotations
import importlib.util
import os
from tinycore.plugin import API_VERSION, CollectiveSpec, hookimpl

NAME = "MPI"
# what MPI launchers put into each process's environment: MPICH's Hydra, Intel MPI and Slurm's PMI (PMI_RANK),
# Open MPI (OMPI_COMM_WORLD_RANK), PMIx launchers (PMIX_RANK), MVAPICH2 (MV2_COMM_WORLD_RANK)
LAUNCHER_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
INSTALL_HINT = "pip install tiny-mpi[mpich] (mpi4py and MPICH's wheels), or mpi4py built against your cluster's MPI"


def launched() -> bool:
  """Whether an MPI launcher (mpiexec, mpirun, srun) started this process."""
  return any(variable in os.environ for variable in LAUNCHER_VARIABLES)


def probe() -> str | None:
  if importlib.util.find_spec("mpi4py") is None: return f"mpi4py is not installed: {INSTALL_HINT}"
  try:
    from tiny_mpi.backend import library_version
    library_version()
  except Exception as error:  # a broken MPI library is a reason, not a crash of `tinycore devices`
    return f"mpi4py cannot load its MPI library ({type(error).__name__}: {error}): {INSTALL_HINT}"
  return None


def library() -> str:
  from tiny_mpi.backend import library_version
  return library_version()


def open_backend():
  from tiny_mpi.backend import MPIBackend
  return MPIBackend()


@hookimpl
def tinycore_api_version() -> str:
  return API_VERSION


@hookimpl
def tinycore_collective_backends() -> list[CollectiveSpec]:
  return [CollectiveSpec(NAME, "MPI through mpi4py, launched with mpiexec -n N python script.py (one machine: "
                         "shared memory; many: -hostfile, the MPI's network)", launched=launched, probe=probe,
                         open=open_backend, library=library)]
