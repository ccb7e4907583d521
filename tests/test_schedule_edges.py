"""Cross-device copies of views: which views are one contiguous run of memory (copied as bytes) and which must be
computed first, and what a copy leaves behind; values compared with numpy."""
import numpy as np
import pytest
from tinycore import Tensor
from tinycore.device.registry import Device
from tinycore.dtype import dtypes
from tinycore.schedule import ScheduleError

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
