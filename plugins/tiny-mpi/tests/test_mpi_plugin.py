"""tiny-mpi in one process: the hooks (launched, probe, library), the 16-bit combining operations against tinycore's
own rounding, the datatype table, and MPI started alone (a singleton job of one rank, TINYCORE_DIST_BACKEND=MPI).
Whole jobs under mpiexec are tests/distributed."""
import os
import subprocess
import sys
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tiny_mpi import plugin
from tiny_mpi.backend import bf16_operation, bf16_to_float32, float16_operation, float32_to_bf16, fp8_operation
from tinycore.dtype import float_to_fp8, fp8_decode, fp8_encode

pytest.importorskip("mpi4py", reason="tiny-mpi[mpich] brings mpi4py and MPICH")


def tinycore_bf16(values: np.ndarray) -> np.ndarray:
  """tinycore's float32 -> bfloat16 rounding (a kernel on the default device), as 16-bit words."""
  return Tensor(values).cast(dtypes.bfloat16).bitcast(dtypes.uint16).numpy()


def edge_values() -> np.ndarray:
  rng = np.random.default_rng(0)
  halfway = (np.arange(1, 200, dtype=np.uint32) << 16 | 0x8000).view(np.float32)  # ties: to even
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-40, 65504.0], np.float32)
  return np.concatenate([rng.standard_normal(2000).astype(np.float32) * 1e3, halfway, special])


def test_bfloat16_rounding_is_tinycores():
  values = edge_values()
  ours, theirs = float32_to_bf16(values.copy()), tinycore_bf16(values)
  finite = ~np.isnan(values)
  np.testing.assert_array_equal(ours[finite], theirs[finite])
  assert np.isnan(bf16_to_float32(ours[~finite])).all()
  np.testing.assert_array_equal(bf16_to_float32(ours)[finite], Tensor(values).cast(dtypes.bfloat16)
                                .cast(dtypes.float32).numpy()[finite])


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_16_bit_operations_round_each_result_to_the_dtype(op):
  rng = np.random.default_rng(1)
  a, b = (rng.standard_normal(1000).astype(np.float32) * 100 for _ in range(2))
  combine = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
  a16, b16 = float32_to_bf16(a), float32_to_bf16(b)
  inout = b16.copy()
  bf16_operation(op)(a16, inout, None)
  np.testing.assert_array_equal(inout, float32_to_bf16(combine(bf16_to_float32(a16), bf16_to_float32(b16))))
  h_a, h_b = a.astype(np.float16), b.astype(np.float16)
  inout = h_b.copy()
  float16_operation(op)(h_a, inout, None)
  np.testing.assert_array_equal(inout, combine(h_a, h_b))
  for dtype in dtypes.fp8s:  # bytes combined in float32, each result rounded to the 8-bit float
    f_a, f_b = fp8_encode(a / 50, dtype), fp8_encode(b / 50, dtype)
    inout = f_b.copy()
    fp8_operation(dtype, op)(f_a, inout, None)
    expected = [float_to_fp8(float(v), dtype) for v in combine(fp8_decode(f_a, dtype), fp8_decode(f_b, dtype))]
    np.testing.assert_array_equal(inout, np.array(expected, np.uint8))


def test_launched_reads_the_launchers_variables(monkeypatch):
  for variable in plugin.LAUNCHER_VARIABLES: monkeypatch.delenv(variable, raising=False)
  assert not plugin.launched()
  monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
  assert plugin.launched()


def test_probe_and_library():
  assert plugin.probe() is None
  assert plugin.library().split()[0] in ("MPICH", "Open", "Intel(R)", "MVAPICH")


def test_every_dtype_has_an_mpi_datatype():
  script = ("from tiny_mpi.backend import MPIBackend\nfrom tinycore import dtypes\nb = MPIBackend()\n"
            "print(' '.join(sorted(d.name for d in b.datatypes)), b.rank, b.world_size)\n"
            "print(b.datatype(dtypes.bfloat16) == b.MPI.UINT16_T, b.operation(dtypes.bfloat16, 'sum') != b.MPI.SUM)\n"
            "b.finalize()\n")
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr
  names, flags = result.stdout.splitlines()
  every = sorted(["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
                  "bfloat16", "float32", "float64", "fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz"])
  assert names == " ".join(every) + " 0 1"
  assert flags == "True True"  # MPICH has no bfloat16 type: 16-bit words with a user-defined operation


def test_a_singleton_job_without_mpiexec():
  """TINYCORE_DIST_BACKEND=MPI starts MPI alone: one rank, collectives of one."""
  script = ("import numpy as np\nfrom tinycore import Tensor, distributed\ndistributed.init()\n"
            "x = np.arange(5000, dtype=np.float32)\n"
            "print(distributed.rank(), distributed.world_size(), bool((distributed.all_reduce(Tensor(x)).numpy() == x)"
            ".all()), distributed.all_gather(Tensor(x[:3])).tolist())\n")
  env = {k: v for k, v in os.environ.items() if k not in plugin.LAUNCHER_VARIABLES} | {"TINYCORE_DIST_BACKEND": "MPI"}
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
  assert result.returncode == 0, result.stderr
  assert result.stdout.split("\n")[0] == "0 1 True [0.0, 1.0, 2.0]"
