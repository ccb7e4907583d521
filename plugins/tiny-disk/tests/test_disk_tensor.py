"""Tensors on DISK: writes are stores into the file, reads are copies off it, views must be contiguous, and DISK
never computes. Files are checked byte for byte against numpy's ``tobytes()``."""
from __future__ import annotations
import os
import pathlib
import subprocess
import sys
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.dtype import to_np_dtype
import tiny_disk.device as disk_device
from disk_helpers import disk, make_read_only

pytestmark = pytest.mark.usefixtures("cpu_device")

NUMPY_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64]
SHAPES = [(1,), (7,), (3, 5), (2, 3, 4)]


def random_array(dtype, shape, rng) -> np.ndarray:
  npdt = to_np_dtype(dtype)
  if dtype is dtypes.bool: return rng.integers(0, 2, shape).astype(np.bool_)
  if dtypes.is_float(dtype): return (rng.standard_normal(shape) * 100).astype(npdt)
  info = np.iinfo(npdt)
  return rng.integers(info.min, info.max, shape, dtype=npdt, endpoint=True)


@pytest.fixture
def rng() -> np.random.Generator:
  return np.random.default_rng(0)


def record_reads(monkeypatch) -> list[tuple[int, int]]:
  """Every read the DISK device makes from now on, as (file offset, bytes)."""
  reads: list[tuple[int, int]] = []
  real = os.preadv
  monkeypatch.setattr(disk_device.os, "preadv",
                      lambda fd, bufs, off: reads.append((off, sum(memoryview(b).nbytes for b in bufs)))
                      or real(fd, bufs, off))
  return reads


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: d.name)
def test_round_trip_to(tmp_path, rng, dtype, shape):
  """t.to("DISK:/p") writes exactly numpy's bytes; reading the file back gives the values."""
  path = tmp_path / "t.bin"
  values = random_array(dtype, shape, rng)
  on_disk = Tensor(values).to(disk(path)).realize()
  assert on_disk.device == disk(path) and on_disk.shape == shape and on_disk.dtype is dtype
  assert path.read_bytes() == values.tobytes()
  np.testing.assert_array_equal(on_disk.numpy(), values)
  np.testing.assert_array_equal(on_disk.to("CPU").numpy(), values)
  from_file = Tensor(pathlib.Path(path)).bitcast(dtype).reshape(shape)
  np.testing.assert_array_equal(from_file.numpy(), values)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: d.name)
def test_round_trip_assign(tmp_path, rng, dtype):
  """Tensor.empty on DISK, then assign a CPU tensor into it (a cross-device store): the disk buffer is written."""
  path = tmp_path / "a.bin"
  values = random_array(dtype, (4, 9), rng)
  target = Tensor.empty(4, 9, dtype=dtype, device=disk(path))
  target.assign(Tensor(values, device="CPU")).realize()
  assert target.device == disk(path)
  assert path.read_bytes() == values.tobytes()
  np.testing.assert_array_equal(Tensor.empty(4, 9, dtype=dtype, device=disk(path)).numpy(), values)


def test_round_trip_bfloat16(tmp_path, rng):
  path = tmp_path / "bf16.bin"
  bits = rng.integers(0, 1 << 16, 37, dtype=np.uint16)
  bits[(bits & 0x7F80) == 0x7F80] = 0x3F80  # no NaN/inf patterns: they need not survive a float round trip
  Tensor(bits).bitcast(dtypes.bfloat16).to(disk(path)).realize()
  assert path.read_bytes() == bits.tobytes()
  back = Tensor.empty(37, dtype=dtypes.bfloat16, device=disk(path)).to("CPU").bitcast(dtypes.uint16).numpy()
  np.testing.assert_array_equal(back, bits)
  expected = (bits.astype(np.uint32) << 16).view(np.float32)
  np.testing.assert_array_equal(Tensor.empty(37, dtype=dtypes.bfloat16, device=disk(path)).to("CPU").numpy(), expected)


def test_computed_value_is_stored(tmp_path):
  """A value computed on CPU and moved to DISK: computed on its own device, then copied."""
  path = tmp_path / "c.bin"
  (Tensor.arange(10, dtype=dtypes.float32) * 2 + 1).to(disk(path)).realize()
  assert path.read_bytes() == (np.arange(10, dtype=np.float32) * 2 + 1).tobytes()


def test_tensor_from_path(data_file):
  t = Tensor(data_file)
  assert (t.shape, t.dtype, t.device) == ((100,), dtypes.uint8, disk(data_file))
  assert t.numpy().tolist() == list(range(100))


def test_zero_size(tmp_path):
  path = tmp_path / "empty.bin"
  t = Tensor(np.zeros(0, np.float32)).to(disk(path)).realize()
  assert t.shape == (0,) and t.numpy().shape == (0,)


# ------------------------------------------------------------------ partial reads and writes
def test_partial_read_reads_only_those_bytes(data_file, monkeypatch):
  reads = record_reads(monkeypatch)
  part = Tensor(data_file)[10:20]
  assert reads == []  # lazy: nothing read yet
  assert part.numpy().tolist() == list(range(10, 20))
  assert reads == [(10, 10)]


def test_contiguous_views_read(data_file):
  values = np.arange(100, dtype=np.uint8)
  t = Tensor(data_file)
  assert t.reshape(4, 25)[1:3].numpy().tolist() == values.reshape(4, 25)[1:3].tolist()
  assert t.reshape(4, 25)[2].numpy().tolist() == values.reshape(4, 25)[2].tolist()
  assert t.reshape(10, 10)[3, 2:7].numpy().tolist() == values.reshape(10, 10)[3, 2:7].tolist()
  assert t[4:12].bitcast(dtypes.uint32).numpy().tolist() == values[4:12].view(np.uint32).tolist()
  assert (t[8:40].bitcast(dtypes.int64).reshape(2, 2).numpy().tolist() ==
          values[8:40].view(np.int64).reshape(2, 2).tolist())
  # a view moved to CPU is an ordinary CPU tensor: compute on it there
  assert (t[10:20].to("CPU").cast(dtypes.int32) * 2).numpy().tolist() == [2 * v for v in range(10, 20)]


def test_permuted_view_is_read_then_permuted_on_the_target(data_file):
  """A COPY off DISK moves below permute/flip: the file is read contiguously and the permute runs on CPU."""
  t = Tensor(data_file).reshape(10, 10)
  np.testing.assert_array_equal(t.T.to("CPU").numpy(), np.arange(100, dtype=np.uint8).reshape(10, 10).T)
  np.testing.assert_array_equal(t.flip(0).to("CPU").numpy(), np.arange(100, dtype=np.uint8).reshape(10, 10)[::-1])


@pytest.mark.parametrize("view", [lambda t: t[::2], lambda t: t.reshape(10, 10)[:, 2:4],
                                  lambda t: t.reshape(10, 10)[1:3, ::3]],
                         ids=["step", "columns", "rows-step"])
def test_non_contiguous_read_raises(data_file, view):
  with pytest.raises(Exception, match="non-contiguous view is not supported"):
    view(Tensor(data_file)).numpy()


@pytest.mark.parametrize("view", [lambda t: t[::2], lambda t: t.reshape(10, 10).T, lambda t: t.reshape(10, 10)[:, 2:4]],
                         ids=["step", "transpose", "columns"])
def test_non_contiguous_write_raises(data_file, view):
  t = Tensor.empty(100, dtype=dtypes.uint8, device=disk(data_file))
  target = view(t)
  with pytest.raises(Exception, match="non-contiguous view is not supported"):
    target.assign(Tensor.zeros(*target.shape, dtype=dtypes.uint8)).realize()
  assert data_file.read_bytes() == bytes(range(100))


def test_write_into_slice(data_file):
  t = Tensor.empty(100, dtype=dtypes.uint8, device=disk(data_file))
  t[10:20].assign(Tensor(np.full(10, 255, np.uint8), device="CPU")).realize()
  expected = bytearray(range(100))
  expected[10:20] = b"\xff" * 10
  assert data_file.read_bytes() == bytes(expected)


def test_write_into_reshaped_rows(data_file):
  t = Tensor.empty(100, dtype=dtypes.uint8, device=disk(data_file))
  t.reshape(10, 10)[3:5].assign(Tensor.ones(2, 10, dtype=dtypes.uint8)).realize()
  expected = bytearray(range(100))
  expected[30:50] = b"\x01" * 20
  assert data_file.read_bytes() == bytes(expected)


def test_write_through_bitcast_view(data_file):
  t = Tensor.empty(100, dtype=dtypes.uint8, device=disk(data_file))
  t[8:16].bitcast(dtypes.float32).assign(Tensor([1.5, -2.25], dtype=dtypes.float32)).realize()
  expected = bytearray(range(100))
  expected[8:16] = np.array([1.5, -2.25], np.float32).tobytes()
  assert data_file.read_bytes() == bytes(expected)


def test_file_over_2_gib(tmp_path):
  """A sparse 2.25 GiB file: bytes past 2 GiB are read and written through DISK tensors, nothing truncated."""
  path = tmp_path / "big.bin"
  size = (9 << 28) + 64
  far = (1 << 31) + 1000
  with open(path, "wb") as f:
    f.truncate(size)
    f.seek(far)
    f.write(b"0123456789")
  t = Tensor(path)
  assert t.shape == (size,)
  assert bytes(t[far:far + 10].numpy()) == b"0123456789"
  t[size - 8:size].assign(Tensor(np.frombuffer(b"the end!", np.uint8))).realize()
  with open(path, "rb") as f:
    f.seek(size - 8)
    assert f.read() == b"the end!"
  assert path.stat().st_size == size


# ------------------------------------------------------------------ DISK never computes
def test_disk_never_computes(data_file):
  t = Tensor(data_file)
  with pytest.raises(Exception, match=r"DISK.*(cannot compute|cannot run kernels)"):
    (t + 1).numpy()
  with pytest.raises(Exception, match=r"DISK.*(cannot compute|cannot run kernels)"):
    t.sum().numpy()
  assert (t.to("CPU") + 1).numpy().tolist() == [(v + 1) % 256 for v in range(100)]  # move it first, then compute


# ------------------------------------------------------------------ bad input through tensors
def test_missing_directory(tmp_path):
  path = tmp_path / "missing" / "x.bin"
  with pytest.raises(FileNotFoundError, match=str(path)):
    Tensor([1, 2, 3]).to(disk(path)).realize()
  assert not path.parent.exists()


def test_read_only_file_write_raises_and_file_is_unchanged(data_file):
  make_read_only(data_file)
  t = Tensor.empty(100, dtype=dtypes.uint8, device=disk(data_file))
  with pytest.raises(PermissionError, match=str(data_file)):
    t.assign(Tensor.zeros(100, dtype=dtypes.uint8)).realize()
  assert data_file.read_bytes() == bytes(range(100))
  assert Tensor(data_file)[5:8].numpy().tolist() == [5, 6, 7]  # reading it is fine


def test_read_only_short_file(data_file):
  make_read_only(data_file)
  with pytest.raises(ValueError, match=f"{data_file}.*100 bytes.*400 bytes"):
    Tensor.empty(100, dtype=dtypes.float32, device=disk(data_file)).numpy()
  assert data_file.stat().st_size == 100


# ------------------------------------------------------------------ memory
READ_SCRIPT = r"""
import os, resource, sys
from tinycore import Tensor, Device
path, size = sys.argv[1], int(sys.argv[2])
Device["CPU"]; Device["DISK:" + path]
Tensor([1.0]).to("CPU").realize()  # warm up: compile nothing, load everything
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t = Tensor(__import__("pathlib").Path(path)).to("CPU").realize()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(after - before)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss units and sparse files as on Linux")
def test_reading_a_file_to_cpu_needs_one_copy_of_memory(tmp_path):
  """Reading N bytes off DISK into CPU memory grows the peak RSS by about N, not 2N: the bytes go straight into
  the destination, chunk by chunk."""
  path = tmp_path / "sparse.bin"
  size = 256 << 20
  with open(path, "wb") as f: f.truncate(size)
  out = subprocess.run([sys.executable, "-c", READ_SCRIPT, str(path), str(size)], capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  grown = int(out.stdout.strip().splitlines()[-1])
  assert grown < size * 1.5, f"peak RSS grew by {grown / 2**20:.0f} MiB reading a {size >> 20} MiB file"


# ------------------------------------------------------------------ names round-trip exactly
@pytest.mark.parametrize("name", ["x:0", "x:1", "0", "y:00", "a:b:0"])
def test_a_path_ending_like_an_index_is_that_file(tmp_path, name):
  """"DISK:/dir/x:0" is the file "/dir/x:0": the ":0" of an instance index is never taken off a path."""
  path = tmp_path / name
  t = Tensor(np.arange(5, dtype=np.int32)).to(disk(path)).realize()
  assert t.device == disk(path)
  assert path.read_bytes() == np.arange(5, dtype=np.int32).tobytes()
  assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing written to "/dir/x"
  assert Tensor(pathlib.Path(path)).device == disk(path)
  np.testing.assert_array_equal(Tensor.empty(5, dtype=dtypes.int32, device=disk(path)).numpy(), np.arange(5))
