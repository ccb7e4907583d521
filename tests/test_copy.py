"""COPY is an anonymous store: cross-device copies and assigns (the seed's TestCrossDeviceAssign), on every pair of
devices installed here: (CPU:0 <- CPU:1) always, and (CPU <- DISK), (DISK <- CPU) when tiny-disk is installed."""
import numpy as np
import pytest
from tinycore import GlobalCounters, Tensor
from tinycore.device.buffer import Buffer
from tinycore.device.registry import Device
from tinycore.dtype import dtypes
from tinycore.engine.realize import run_linear
from tinycore.uop.ops import Ops


def _disk_available() -> bool:
  return any(spec.prefix == "DISK" for spec in Device.specs())


@pytest.fixture(params=["CPU:0<-CPU:1", "CPU<-DISK", "DISK<-CPU"])
def pair(request, tmp_path):
  dst, src = request.param.split("<-")
  if "DISK" in request.param and not _disk_available(): pytest.skip("tiny-disk is not installed")
  def resolve(name, tag): return f"DISK:{tmp_path / tag}" if name == "DISK" else name
  return resolve(dst, "dst.bin"), resolve(src, "src.bin")


def on(device, data):
  """A realized tensor on `device` holding data (DISK tensors are written through a store)."""
  t = Tensor(np.asarray(data, dtype=np.float32))
  return (t.to(device) if device.startswith("DISK") else Tensor(np.asarray(data, np.float32), device=device)).realize()


def zeros(device, *shape):
  return on(device, np.zeros(shape, np.float32))


def calls(linear):
  return [(c.src[0].op, c.src[1].device, c.src[2].device if len(c.src) > 2 else None) for c in linear.src]


def test_cross_device_assign(pair):
  dst_dev, src_dev = pair
  a = zeros(dst_dev, 4, 4)
  buffer = a.uop.base
  a.assign(on(src_dev, np.full((4, 4), 3.0)))
  np.testing.assert_allclose(a.numpy(), np.full((4, 4), 3.0))
  assert a.device == Device.canonicalize(dst_dev) and a.uop.base is buffer  # the buffer did not move


def test_cross_device_assign_is_one_copy(pair):
  dst_dev, src_dev = pair
  a = zeros(dst_dev, 5)
  src = on(src_dev, [0., 1., 2., 3., 4.])
  linear = Tensor.schedule_linear(a.assign(src))
  assert [op for op, _, _ in calls(linear)] == [Ops.COPY]
  _, copy_dst, copy_src = calls(linear)[0]
  assert copy_dst == a.device and copy_src == src.device
  run_linear(linear)
  np.testing.assert_allclose(a.numpy(), np.arange(5))


def test_cross_device_assign_unrealized_source_computes_on_its_own_device():
  a = zeros("CPU", 8)
  value = Tensor.ones(8, device="CPU:1") * 2
  linear = Tensor.schedule_linear(a.assign(value))
  assert [call[:2] for call in calls(linear)] == [(Ops.SINK, "CPU:1"), (Ops.COPY, "CPU")]
  run_linear(linear)
  np.testing.assert_allclose(a.numpy(), np.full(8, 2.0))


def test_cross_device_assign_view(pair):
  dst_dev, src_dev = pair
  a = zeros(dst_dev, 8)
  a[2:6].assign(on(src_dev, [0., 1., 2., 3.]))
  np.testing.assert_allclose(a.numpy(), np.array([0, 0, 0, 1, 2, 3, 0, 0], dtype=np.float32))


def test_cross_device_assign_view_on_compute_devices_scatters_locally():
  a = zeros("CPU", 8)
  linear = Tensor.schedule_linear(a[2:6].assign(on("CPU:1", [0., 1., 2., 3.])))
  # the data is copied into a temporary on a's device, and a local kernel scatters it
  assert calls(linear)[0][0] is Ops.COPY and calls(linear)[-1][:2] == (Ops.SINK, "CPU")


def test_assign_dtype_mismatch_still_raises():
  a = zeros("CPU", 4)
  with pytest.raises(TypeError, match="dtype"):
    a.assign(Tensor([1, 2, 3, 4], device="CPU:1"))


def test_to_of_a_realized_tensor_is_one_copy_and_no_kernel():
  a = Tensor.arange(6).float().realize()
  assert calls(a.to("CPU:1").schedule_linear()) == [(Ops.COPY, "CPU:1", "CPU")]
  np.testing.assert_allclose(a.to("CPU:1").numpy(), np.arange(6))


def test_to_of_a_computed_tensor_is_a_kernel_then_a_copy():
  a = Tensor.arange(6).float().realize()
  assert calls((a + 1).to("CPU:1").schedule_linear()) == [(Ops.SINK, "CPU", "CPU"), (Ops.COPY, "CPU:1", "CPU")]
  GlobalCounters.reset()
  np.testing.assert_allclose((a + 1).to("CPU:1").numpy(), np.arange(6) + 1)


def test_same_device_permute_contiguous_is_still_a_kernel():
  b = Tensor.arange(24).reshape(2, 3, 4).realize()
  assert [op for op, _, _ in calls(b.permute(2, 0, 1).contiguous().schedule_linear())] == [Ops.SINK]


def test_copy_to_the_same_device_is_nothing():
  a = Tensor.arange(4).realize()
  assert a.to("CPU") is a and calls(a.to("CPU").schedule_linear()) == []


def test_copies_keep_every_dtype_bit_exact():
  for dtype in (np.uint8, np.int16, np.float16, np.int64, np.float64, np.bool_):
    data = (np.random.default_rng(1).integers(0, 100, 37) % (2 if dtype is np.bool_ else 100)).astype(dtype)
    out = Tensor(data).to("CPU:1").to("CPU").numpy()
    assert out.dtype == data.dtype and out.tobytes() == data.tobytes()


def test_buffer_copy_from_is_a_copy_call():
  src = Buffer("CPU:1", 4, dtypes.uint8, initial_value=b"wxyz")
  dst = Buffer("CPU", 4, dtypes.uint8, preallocate=True)
  before = GlobalCounters.kernel_count
  dst.copy_from(src)
  assert bytes(dst.as_memoryview()) == b"wxyz" and GlobalCounters.kernel_count == before
  with pytest.raises(ValueError, match="equal sizes"):
    dst.copy_from(Buffer("CPU", 3, dtypes.uint8, preallocate=True))


def test_numpy_of_a_value_without_a_buffer_goes_through_clone():
  a = Tensor.arange(12).reshape(3, 4).realize()
  np.testing.assert_equal(a.T.numpy(), np.arange(12).reshape(3, 4).T)
  assert a.uop.base.op is Ops.BUFFER  # reading a view did not rebind the tensor


def test_a_plugin_transfer_hook_is_the_first_copy_path():
  """`tinycore_transfer` lets a plugin move bytes directly between a pair of devices; the copy path asks it first."""
  from tinycore.device import copy as copy_module
  from tinycore.plugin import hookimpl
  from tinycore.plugin.manager import get_plugin_manager
  moved = []

  class PeerTransfer:
    @hookimpl
    def tinycore_transfer(self, src, dst):
      if (src.device, dst.device) != ("CPU:1", "CPU"): return None
      def copy(dst_handle, src_handle, nbytes):
        moved.append(nbytes)
        dst_handle.view[:nbytes] = src_handle.view[:nbytes]
      return copy

  plugin = PeerTransfer()
  manager = get_plugin_manager()
  manager.register(plugin, name="test-peer-transfer")
  copy_module._direct_paths.clear()
  try:
    a = Tensor([1.0, 2.0, 3.0], device="CPU:1").realize()
    out = a.to("CPU")
    np.testing.assert_equal(out.numpy(), [1.0, 2.0, 3.0])
    assert moved == [12]
    np.testing.assert_equal(Tensor([4.0], device="CPU").to("CPU:1").numpy(), [4.0])  # other pairs: no hook
    assert moved == [12]
  finally:
    manager.unregister(plugin)
    copy_module._direct_paths.clear()


def test_assign_into_a_view_of_a_lazy_tensor_writes_only_that_tensor():
  """Tensors built alike share one graph node; an assign into a view of one of them must not reach the others (nor
  their views), and the views of the written tensor see the write."""
  a, b = Tensor.zeros(2, 2), Tensor.zeros(2, 2)
  b_flat = b.reshape(4)
  b[0].assign(Tensor.ones(2))
  np.testing.assert_array_equal(a.numpy(), np.zeros((2, 2), np.float32))
  np.testing.assert_array_equal(b.numpy(), [[1, 1], [0, 0]])
  np.testing.assert_array_equal(b_flat.numpy(), [1, 1, 0, 0])
  c, d = Tensor.arange(6).reshape(2, 3), Tensor.arange(6).reshape(2, 3)
  d[1].assign(Tensor([7, 8, 9]))
  np.testing.assert_array_equal(c.numpy(), np.arange(6).reshape(2, 3))
  np.testing.assert_array_equal(d.numpy(), [[0, 1, 2], [7, 8, 9]])
  e = Tensor.zeros(4)
  Tensor.zeros(4).reshape(2, 2).assign(Tensor.ones(2, 2))  # a view of a tensor nobody holds
  np.testing.assert_array_equal(e.numpy(), np.zeros(4, np.float32))
