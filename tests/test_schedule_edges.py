"""Cross-device copies of views: which views are one contiguous run of memory (copied as bytes) and which must be
computed first, and what a copy leaves behind; values compared with numpy."""
import numpy as np
import pytest
from tinycore import Tensor
from tinycore.device.registry import Device
from tinycore.dtype import dtypes, from_np_dtype
from tinycore.schedule import ScheduleError
from tinycore.uop.ops import Ops, UOp

X = np.arange(20, dtype=np.float32).reshape(4, 5)


def shrink(a, bounds):
  """Tensor.shrink, or the same slices of a numpy array."""
  return a.shrink(bounds) if isinstance(a, Tensor) else a[tuple(slice(b, e) for b, e in bounds)]


def _disk_available() -> bool:
  return any(spec.prefix == "DISK" for spec in Device.specs())


@pytest.mark.parametrize("view", [
  lambda t: t[1:3, 1:3],        # two partial dims: not one run of memory
  lambda t: shrink(t, ((1, 3), (1, 3))),  # the same as one SHRINK
  lambda t: shrink(t, ((1, 2), (1, 4))),  # one SHRINK that is one run of memory
  lambda t: t[1:2, 1:4],        # one row's middle: a run starting at an offset
  lambda t: t[1:3],             # whole rows
  lambda t: t[:, 2:3],          # a column: strided
  lambda t: t.T,                # a permute that moves data
  lambda t: t.reshape(5, 4)[1:3].reshape(2, 2, 2),
], ids=["block", "block-one-shrink", "run-one-shrink", "row-middle", "rows", "column", "transpose", "reshaped-rows"])
def test_copy_of_a_view_between_compute_devices(view):
  t = Tensor(X, device="CPU:1").realize()
  np.testing.assert_equal(view(t).to("CPU:0").numpy(), view(X))


@pytest.mark.parametrize("view, dtype, np_dtype", [
  (lambda t: t.T, dtypes.int32, np.int32),           # a bitcast of a view that is not contiguous
  (lambda t: t[1:2, 1:4], dtypes.uint8, np.uint8),    # a bitcast of a contiguous run at an offset
  (lambda t: t[2:4], dtypes.int16, np.int16),
], ids=["transpose", "row-middle", "rows"])
def test_copy_of_a_bitcast_view_between_compute_devices(view, dtype, np_dtype):
  t = Tensor(X, device="CPU:1").realize()
  np.testing.assert_equal(view(t).bitcast(dtype).to("CPU:0").numpy(), np.ascontiguousarray(view(X)).view(np_dtype))


@pytest.mark.skipif(not _disk_available(), reason="tiny-disk is not installed")
def test_disk_views_copy_when_contiguous_and_are_refused_otherwise(tmp_path):
  disk = Tensor(X).to(f"DISK:{tmp_path / 'x.bin'}").realize()
  np.testing.assert_equal(disk[1:2, 1:4].to("CPU").numpy(), X[1:2, 1:4])
  np.testing.assert_equal(disk[2:4].bitcast(dtypes.int32).to("CPU").numpy(), X[2:4].view(np.int32))
  np.testing.assert_equal(disk.shrink(((2, 3), (0, 4))).to("CPU").numpy(), X[2:3, 0:4])
  for view in (disk[1:3, 1:3], disk.shrink(((1, 3), (1, 3))), disk[:, 1:2]):
    with pytest.raises(ScheduleError, match="non-contiguous view"):
      view.to("CPU").realize()


class _NumpyView:
  """The movement methods the chains below use, on a numpy array (expand is broadcast_to)."""
  def __init__(self, array): self.array = array
  def __getitem__(self, key): return _NumpyView(self.array[key])
  def expand(self, *shape): return _NumpyView(np.broadcast_to(self.array, shape))
  def flip(self, axis): return _NumpyView(np.flip(self.array, axis))
  def pad(self, pads): return _NumpyView(np.pad(self.array, pads))
  def reshape(self, *shape): return _NumpyView(self.array.reshape(shape))
  def permute(self, *order): return _NumpyView(self.array.transpose(order))
  @property
  def T(self): return _NumpyView(self.array.T)


@pytest.mark.parametrize("chain", [
  lambda t: t[1:2].expand(4, 3),                    # a broadcast row taken out of the middle of a buffer
  lambda t: t[:, 2:3].expand(3, 5),                 # a broadcast column
  lambda t: t[1:2].flip(0).expand(2, 3),
  lambda t: t[0:1, 1:].pad(((0, 0), (1, 0))).expand(3, 3),
  lambda t: t.reshape(9, 1)[4:5].expand(2, 6),
], ids=["row", "column", "flipped-row", "padded-row", "reshaped"])
def test_expand_of_a_moved_size_one_dim_reads_the_right_elements(chain):
  x = np.arange(9, dtype=np.float32).reshape(3, 3)
  expected = chain(_NumpyView(x)).array
  np.testing.assert_equal((chain(Tensor(x)) + 0).numpy(), expected)


@pytest.mark.parametrize("shape, src, dst", [((3, 4), np.float32, np.uint8), ((3, 16), np.uint8, np.float32),
                                             ((2, 3, 4), np.int32, np.int16), ((2, 4), np.int16, np.int64)])
def test_resizing_bitcast_of_a_computed_value_keeps_leading_dims(shape, src, dst):
  x = np.random.default_rng(1).integers(-100, 100, shape).astype(src)
  out = (Tensor(x) + 1).bitcast(from_np_dtype(dst)).numpy()
  np.testing.assert_equal(out, (x + 1).astype(src).view(dst))


def test_a_copy_to_the_device_it_is_on_moves_nothing():
  t = Tensor(np.arange(5, dtype=np.float32)).realize()
  same = Tensor(UOp(Ops.COPY, t.dtype, (t.uop,), t.device))
  assert list(same.schedule_linear().src) == []
  np.testing.assert_equal(same.numpy(), np.arange(5, dtype=np.float32))


@pytest.mark.parametrize("view", [
  lambda t: t.reshape(1, 6).permute(1, 0),          # moves only a size-1 dim: the same order in memory
  lambda t: t.reshape(1, 6).flip(0),                # flips only a size-1 dim
  lambda t: t.reshape(2, 3).pad(((0, 0), (0, 0))),  # pads nothing
], ids=["permute", "flip", "pad"])
def test_a_view_in_memory_order_copies_as_bytes_without_a_kernel(view):
  t = Tensor(np.arange(6, dtype=np.float32), device="CPU:1").realize()
  moved = view(t).to("CPU:0")
  assert [call.src[0].op for call in moved.schedule_linear().src] == [Ops.COPY]
  np.testing.assert_equal(moved.numpy(), view(_NumpyView(np.arange(6, dtype=np.float32))).array)


@pytest.mark.skipif(not _disk_available(), reason="tiny-disk is not installed")
@pytest.mark.parametrize("view", [lambda t: t.T, lambda t: t.flip(0), lambda t: t.pad(((1, 0), (0, 2))),
                                  lambda t: t[1:2].expand(3, 5)], ids=["transpose", "flip", "pad", "expand"])
def test_a_copy_off_disk_of_a_moved_view_moves_the_bytes_then_the_view(view, tmp_path):
  disk = Tensor(X).to(f"DISK:{tmp_path / 'x.bin'}").realize()
  np.testing.assert_equal(view(disk).to("CPU").numpy(), view(_NumpyView(X)).array)
