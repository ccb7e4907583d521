"""The MPI collective backend: tinycore's host buffers passed to mpi4py's buffer-protocol calls (no copies).

The buffers arrive as memoryviews of bytes with the element dtype alongside; each call names the MPI datatype, so
MPI counts elements itself. float16 uses MPI's FLOAT16_T where the library has it (MPICH 4+), bfloat16 its
BFLOAT16_T where it has one; otherwise they travel as 16-bit words combined by a user-defined operation that
rounds each pairwise result to the dtype, so no float32 copy is ever sent. The 8-bit floats travel as bytes the same
way (MPI has no such types).
"""
from __future__ import annotations
import sys
from typing import Any, Callable
import numpy as np
from tinycore.plugin import CollectiveBackend, DType, dtypes, fp8_decode, fp8_encode


def load_mpi() -> Any:
  """mpi4py.MPI; imported without starting MPI when this process has not imported it yet (a probe only reads the
  library's version; MPIBackend starts MPI, and finalizes it when it started it)."""
  if "mpi4py.MPI" not in sys.modules:
    import mpi4py
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
  from mpi4py import MPI
  return MPI


def library_version() -> str:
  """The MPI library and its version in a few words ("MPICH 5.0.2", "Open MPI v4.1.5")."""
  first = load_mpi().Get_library_version().strip().splitlines()[0]
  return " ".join(first.replace("Version:", "").split(",")[0].split())


# ---------------------------------------------------------------------------- 16-bit floats MPI may lack
def bf16_to_float32(words: np.ndarray) -> np.ndarray:
  return (words.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
  """Round to nearest even, as tinycore's kernels do (a NaN stays a quiet NaN)."""
  bits = values.view(np.uint32)
  rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
  return np.where((bits & 0x7FFFFFFF) > 0x7F800000, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


NUMPY_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def bf16_operation(op: str) -> Callable[[Any, Any, Any], None]:
  combine = NUMPY_COMBINE[op]

  def bf16_combine(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    a, b = np.frombuffer(inbuf, np.uint16), np.frombuffer(inoutbuf, np.uint16)
    b[:] = float32_to_bf16(combine(bf16_to_float32(a), bf16_to_float32(b)))
  return bf16_combine


def fp8_operation(dtype: DType, op: str) -> Callable[[Any, Any, Any], None]:
  """The pairwise combine of two buffers of an 8-bit float's bytes: in float32, each result rounded to the dtype."""
  combine = NUMPY_COMBINE[op]

  def fp8_combine(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    a, b = np.frombuffer(inbuf, np.uint8), np.frombuffer(inoutbuf, np.uint8)
    b[:] = fp8_encode(combine(fp8_decode(a, dtype), fp8_decode(b, dtype)), dtype)
  return fp8_combine


def float16_operation(op: str) -> Callable[[Any, Any, Any], None]:
  combine = NUMPY_COMBINE[op]

  def float16_combine(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    b = np.frombuffer(inoutbuf, np.float16)
    combine(np.frombuffer(inbuf, np.float16), b, out=b)  # numpy rounds each result to float16
  return float16_combine


# ---------------------------------------------------------------------------- the backend
class MPIBackend(CollectiveBackend):
  """MPI_COMM_WORLD, duplicated (tinycore's collectives never meet the application's own on COMM_WORLD)."""
  name = "MPI"

  def __init__(self) -> None:
    self.MPI = MPI = load_mpi()
    self.started_mpi = not MPI.Is_initialized()
    if self.started_mpi: MPI.Init_thread(MPI.THREAD_MULTIPLE)  # the watch thread may abort while one waits
    self.comm = MPI.COMM_WORLD.Dup()
    self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
    self.datatypes = self.datatype_table()
    self.reduce_ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
    self.logical_ops = {"max": MPI.LOR, "min": MPI.LAND}  # on bools: any, all
    self.user_ops: dict[tuple[DType, str], Any] = {}

  def datatype_table(self) -> dict[DType, Any]:
    MPI = self.MPI
    table = {dtypes.bool: MPI.C_BOOL, dtypes.int8: MPI.INT8_T, dtypes.uint8: MPI.UINT8_T, dtypes.int16: MPI.INT16_T,
             dtypes.uint16: MPI.UINT16_T, dtypes.int32: MPI.INT32_T, dtypes.uint32: MPI.UINT32_T,
             dtypes.int64: MPI.INT64_T, dtypes.uint64: MPI.UINT64_T, dtypes.float32: MPI.FLOAT,
             dtypes.float64: MPI.DOUBLE}
    for dtype, name in ((dtypes.float16, "FLOAT16_T"), (dtypes.bfloat16, "BFLOAT16_T")):
      native = getattr(MPI, name, MPI.DATATYPE_NULL)
      # without the library's own type: 16-bit words, combined by a user-defined operation
      table[dtype] = native if native != MPI.DATATYPE_NULL else MPI.UINT16_T
    for dtype in dtypes.fp8s: table[dtype] = MPI.UINT8_T  # bytes, combined by a user-defined operation
    return table

  def datatype(self, dtype: DType) -> Any:
    if (found := self.datatypes.get(dtype)) is None: raise TypeError(f"the MPI backend has no datatype for {dtype}")
    return found

  def operation(self, dtype: DType, op: str) -> Any:
    """The MPI operation combining `dtype` values with `op` (a user-defined one for the narrow floats MPI lacks)."""
    if dtype is dtypes.bool: return self.logical_ops[op]
    emulated = dtype in dtypes.fp8s or (dtype in (dtypes.float16, dtypes.bfloat16) and
                                        self.datatypes[dtype] == self.MPI.UINT16_T)
    if emulated:
      if (user := self.user_ops.get((dtype, op))) is None:
        function = (fp8_operation(dtype, op) if dtype in dtypes.fp8s else
                    bf16_operation(op) if dtype is dtypes.bfloat16 else float16_operation(op))
        user = self.user_ops[(dtype, op)] = self.MPI.Op.Create(function, commute=True)
      return user
    return self.reduce_ops[op]

  def all_gather(self, send: Any, recv: Any, dtype: DType) -> None:
    datatype = self.datatype(dtype)
    self.comm.Allgather([send, datatype], [recv, datatype])

  def all_reduce(self, send: Any, recv: Any, dtype: DType, op: str) -> None:
    datatype = self.datatype(dtype)
    source = self.MPI.IN_PLACE if send is recv else [send, datatype]
    self.comm.Allreduce(source, [recv, datatype], self.operation(dtype, op))

  def broadcast(self, buffer: Any, dtype: DType, root: int) -> None:
    self.comm.Bcast([buffer, self.datatype(dtype)], root)

  def abort(self, code: int) -> None:
    self.MPI.COMM_WORLD.Abort(code)

  def finalize(self) -> None:
    for user in self.user_ops.values(): user.Free()
    self.user_ops = {}
    self.comm.Free()
    if self.started_mpi: self.MPI.Finalize()
