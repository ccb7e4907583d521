"""Every collective and dtype across the job's processes, against numpy on all ranks' inputs (small tensors, whose
bytes ride in the header exchange, and large ones, the backend's own calls); mismatches named on every rank."""
import numpy as np
import pytest
from conftest import rank_input
from tinycore import Tensor, distributed, dtypes
from tinycore.device.collective import CollectiveMismatch, current_group

DTYPES = ["float32", "float64", "float16", "bfloat16", "fp8e4m3", "fp8e5m2", "int8", "uint8", "int16", "int32", "int64",
          "uint32", "uint64"]
NARROW = ("float16", "bfloat16", "fp8e4m3", "fp8e5m2")  # made from float32 values they hold exactly
SHAPES = {"small": (3, 5), "large": (40, 300)}


def tensor(x: np.ndarray, dtype: str) -> Tensor:
  """Narrow floats are made from their (exactly representable) float32 values."""
  return Tensor(x).cast(getattr(dtypes, dtype)) if dtype in NARROW else Tensor(x)


def values(t: Tensor) -> np.ndarray:
  return (t.cast(dtypes.float32) if t.dtype in (dtypes.bfloat16, *dtypes.fp8s) else t).numpy()


def everyone(shape, dtype, seed=0) -> np.ndarray:
  return np.stack([rank_input(r, shape, dtype, seed) for r in range(distributed.world_size())])


def test_the_job():
  assert distributed.backend_name() == "MPI" and 0 <= distributed.rank() < distributed.world_size()
  assert distributed.world_size() >= 2
  assert SHAPES["small"][0] * SHAPES["small"][1] * 8 <= current_group().inline_bytes < 40 * 300


@pytest.mark.parametrize("size", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_all_reduce(op, dtype, size):
  shape = SHAPES[size]
  mine, inputs = rank_input(distributed.rank(), shape, dtype, 1), everyone(shape, dtype, 1)
  out = distributed.all_reduce(tensor(mine, dtype), op)
  expected = {"sum": inputs.sum(0), "max": inputs.max(0), "min": inputs.min(0),
              "mean": inputs.astype(np.float64).mean(0)}[op]
  assert out.shape == shape and out.dtype is (dtypes.float32 if op == "mean" and "int" in dtype else to_dtype(dtype))
  if op == "sum" and "int" in dtype: expected = expected.astype(dtype)  # wraps as the dtype does
  # narrow sums of (small) whole numbers are exact; a narrow mean rounds once more
  rounding = {"float16": 1e-3, "bfloat16": 8e-3, "fp8e4m3": 0.0625, "fp8e5m2": 0.125}  # half an ulp, relative
  tolerance = rounding[dtype] if op == "mean" and dtype in rounding else 1e-6 if "float" in dtype or op == "mean" else 0
  np.testing.assert_allclose(values(out), expected, rtol=tolerance, atol=tolerance)


def to_dtype(name: str):
  return getattr(dtypes, name)


@pytest.mark.parametrize("size", SHAPES)
def test_all_reduce_of_bools(size):
  shape = SHAPES[size]
  mine, inputs = rank_input(distributed.rank(), shape, "bool"), everyone(shape, "bool")
  np.testing.assert_array_equal(distributed.all_reduce(Tensor(mine), "max").numpy(), inputs.any(0))
  np.testing.assert_array_equal(distributed.all_reduce(Tensor(mine), "min").numpy(), inputs.all(0))


def test_float16_sums_round_each_step_in_16_bits():
  """Values whose float32 sum is not a float16: the result is the 16-bit sum (within a rounding of each step)."""
  mine = rank_input(distributed.rank(), (2000,), "float32", 5) * 10
  inputs = everyone((2000,), "float32", 5) * 10
  out = distributed.all_reduce(Tensor(mine).cast(dtypes.float16)).numpy()
  assert out.dtype == np.float16
  np.testing.assert_allclose(out, inputs.astype(np.float16).astype(np.float32).sum(0), rtol=3e-3, atol=3e-2)


@pytest.mark.parametrize("size", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "fp8e5m2", "int64", "uint8", "bool"])
@pytest.mark.parametrize("axis", [0, -1])
def test_all_gather(axis, dtype, size):
  shape = SHAPES[size]
  mine, inputs = rank_input(distributed.rank(), shape, dtype, 2), everyone(shape, dtype, 2)
  out = distributed.all_gather(tensor(mine, dtype), axis)
  np.testing.assert_array_equal(values(out), np.concatenate(list(inputs), axis=axis))


@pytest.mark.parametrize("size", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
def test_broadcast_from_every_rank(dtype, size):
  shape = SHAPES[size]
  for root in range(distributed.world_size()):
    mine = rank_input(distributed.rank(), shape, dtype, 3)
    out = distributed.broadcast(tensor(mine, dtype), root)
    np.testing.assert_array_equal(values(out), rank_input(root, shape, dtype, 3))


def test_collectives_chain_lazily_with_kernels():
  """One realize: kernels, the collective, more kernels, a second collective."""
  mine = rank_input(distributed.rank(), (64, 64), "float32", 4)
  inputs = everyone((64, 64), "float32", 4)
  out = distributed.all_reduce(distributed.all_reduce(Tensor(mine) * 2).relu() - 1, "max")
  expected = np.broadcast_to(np.maximum(inputs.sum(0) * 2, 0) - 1, (64, 64))
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_staged_memory():
  """SIM's memory has no host view: staged through host memory."""
  mine, inputs = rank_input(distributed.rank(), SHAPES["large"], "float32"), everyone(SHAPES["large"], "float32")
  out = distributed.all_reduce(Tensor(mine, device="SIM"))
  assert out.device == "SIM"
  np.testing.assert_allclose(out.numpy(), inputs.sum(0), rtol=1e-5, atol=1e-5)


def test_a_shape_mismatch_is_named_on_every_rank():
  rank = distributed.rank()
  with pytest.raises(CollectiveMismatch) as error:
    distributed.all_reduce(Tensor.ones(100, 10 + rank)).realize()
  message = str(error.value)
  assert "rank 0: all_reduce sum float32 (100, 10)" in message and "rank 1: all_reduce sum float32 (100, 11)" in message
  distributed.barrier()  # every rank is past the mismatch, in step


def test_a_dtype_or_kind_mismatch_is_named_on_every_rank():
  rank = distributed.rank()
  with pytest.raises(CollectiveMismatch, match=r"rank 1: all_reduce sum int32 \(1000,\)"):
    distributed.all_reduce(Tensor.ones(1000, dtype=dtypes.int32 if rank == 1 else dtypes.float32)).realize()
  with pytest.raises(CollectiveMismatch, match="rank 0: broadcast from rank 0 float32"):
    (distributed.broadcast(Tensor.ones(1000)) if rank == 0 else distributed.all_gather(Tensor.ones(1000))).realize()
  distributed.barrier()
