"""A third-party storage-only device behaves like DISK in copies: movement ops run below the copy on the compute
device, copies go both ways, and reading one back needs no device name. The core decides from DeviceSpec fields."""
from __future__ import annotations
import numpy as np
import pytest
import storage_plugin
from tinycore import Device, Tensor
from tinycore.device.registry import copy_traits
from tinycore.plugin.manager import register_plugin, unregister_plugin
from tinycore.uop.ops import Ops


@pytest.fixture(scope="module", autouse=True)
def vault():
  register_plugin(storage_plugin, "tiny-vault", "0.1")
  yield
  unregister_plugin(storage_plugin)


def on_vault(data: np.ndarray) -> Tensor:
  return Tensor(data).to("VAULT").realize()


def test_vault_is_storage_only_by_declaration():
  assert not Device["VAULT"].can_compute and not Device["VAULT"].zero_copy_host_view
  traits = copy_traits("VAULT")
  assert not traits.computes and traits.copies_below_movement
  np.testing.assert_equal(on_vault(np.arange(6, dtype=np.int32)).numpy(), np.arange(6))


@pytest.mark.parametrize("move", ["flip", "permute", "pad", "expand", "shrink_flip"])
def test_movement_runs_below_the_copy(move):
  data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  expected = {"flip": np.flip(data, 1), "permute": data.transpose(2, 0, 1),
              "pad": np.pad(data, ((0, 0), (1, 2), (0, 1))), "expand": np.broadcast_to(data[:1], (3, 3, 4)),
              "shrink_flip": np.flip(data[1:], 2)}[move]
  stored = on_vault(data)
  view = {"flip": lambda t: t.flip(1), "permute": lambda t: t.permute(2, 0, 1),
          "pad": lambda t: t.pad(((0, 0), (1, 2), (0, 1))), "expand": lambda t: t[:1].expand(3, 3, 4),
          "shrink_flip": lambda t: t[1:].flip(2)}[move](stored)
  moved = view.to(Device.DEFAULT)
  calls = [(call.src[0].op, call.src[1].device) for call in moved.schedule_linear().src]
  # the bytes leave VAULT as one contiguous copy; the movement is a kernel on the compute device
  assert calls[0] == (Ops.COPY, Device.DEFAULT) and all(device == Device.DEFAULT for _, device in calls)
  np.testing.assert_equal(moved.numpy(), expected)
  np.testing.assert_equal(view.numpy(), expected)  # read back with no device named: the host compute device


def test_copies_to_and_from_compute_devices():
  data = np.arange(10, dtype=np.int16)
  computed = (Tensor(data) * 3).to("VAULT")
  assert computed.device == "VAULT"
  np.testing.assert_equal(computed.numpy(), data * 3)
  back = computed.to(Device.DEFAULT) + 1
  np.testing.assert_equal(back.numpy(), data * 3 + 1)
  target = Tensor.empty(10, dtype="int16", device="VAULT")
  target[2:5].assign(Tensor(np.array([7, 8, 9], dtype=np.int16))).realize()
  np.testing.assert_equal(target[2:5].numpy(), [7, 8, 9])


def test_vault_cannot_compute_in_place():
  stored = on_vault(np.arange(4, dtype=np.float32))
  with pytest.raises(RuntimeError, match="VAULT cannot run kernels|VAULT cannot compute"):
    (stored + 1).realize()


def test_declared_compute_device_without_compiler_fails_at_open():
  with pytest.raises(RuntimeError) as error:
    Device["HOLLOW"]
  message = str(error.value)
  assert "DeviceSpec.compute=True" in message and "no renderer and no compiler and no runtime" in message
