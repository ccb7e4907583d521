"""nn.state.torch_load reads checkpoints written by torch.save. The fixtures in tests/data were written by torch 2.x:

    lin, bn = torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)   # torch.manual_seed(0); bn saw two batches
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd = {"lin.weight": ..., "lin.bias": ..., "bn.*": ..., "transposed": base.t(), "sliced": base[1:3, 2:5],
          "half": [1.5, -2.25, 65504] fp16, "bf16": [1, 2.5, -3] bf16, "int64": [2**40, -3], "uint8": [0, 200, 255],
          "bool": [True, False, True], "scalar": 3.25 (0-d float64), "param": nn.Parameter([[1.0, 2.0]])}
    torch.save({"model": sd, "epoch": 7, "name": "fixture", "lrs": [0.1, 0.01]}, "torch_checkpoint.pt")
    torch.save({"w": torch.ones(2)}, "torch_legacy.pt", _use_new_zipfile_serialization=False)
    torch.save({"expanded": torch.tensor([1.5, -2.0]).reshape(2, 1).expand(2, 3), "device": torch.device("cpu"),
                "config": Config(), "dtype": torch.float16}, "torch_objects.pt")  # Config(): hidden=16, name="tiny"
    base = torch.tensor([[1.5, -2.0, 448.0], [0.3, -0.001, 1000.0]])   # (torch 2.13: untyped storages)
    torch.save({"e4m3": base.to(torch.float8_e4m3fn), "e5m2_t": base.to(torch.float8_e5m2).t(),
                "uint16": torch.tensor([1, 65535, 300], dtype=torch.uint16)}, "torch_untyped.pt")
"""
import pathlib
import numpy as np
import pytest
from tinycore import Tensor, dtypes, nn
from tinycore.nn.state import load_state_dict, torch_load
from tinycore.nn.torch_format import TorchFormatError

DATA = pathlib.Path(__file__).parent / "data"
LIN_WEIGHT = [[-0.004322517663240433, 0.3097158372402191, -0.4751853346824646],
              [-0.4248946011066437, -0.2223689705133438, 0.15482072532176971]]
LIN_BIAS = [-0.011439144611358643, 0.45777493715286255]


def test_torch_load_reads_every_dtype_and_layout():
  ckpt = torch_load(DATA / "torch_checkpoint.pt")
  assert ckpt["epoch"] == 7 and ckpt["name"] == "fixture" and ckpt["lrs"] == [0.1, 0.01]
  sd = ckpt["model"]
  assert list(sd)[:2] == ["lin.weight", "lin.bias"]  # the OrderedDict keeps torch's order
  np.testing.assert_allclose(sd["lin.weight"].numpy(), LIN_WEIGHT, rtol=1e-7)
  base = np.arange(24, dtype=np.float32).reshape(4, 6)
  expected = {"transposed": (base.T, dtypes.float32), "sliced": (base[1:3, 2:5], dtypes.float32),
              "half": (np.array([1.5, -2.25, 65504], np.float16), dtypes.float16),
              "int64": (np.array([2**40, -3], np.int64), dtypes.int64),
              "uint8": (np.array([0, 200, 255], np.uint8), dtypes.uint8),
              "bool": (np.array([True, False, True]), dtypes.bool), "scalar": (np.array(3.25), dtypes.float64),
              "param": (np.array([[1.0, 2.0]], np.float32), dtypes.float32),
              "bn.num_batches_tracked": (np.array(2, np.int64), dtypes.int64)}
  for key, (values, dtype) in expected.items():
    t = sd[key]
    assert t.dtype == dtype and t.shape == values.shape, key
    np.testing.assert_array_equal(t.numpy(), values, err_msg=key)
  assert sd["bf16"].dtype == dtypes.bfloat16 and sd["bf16"].to("CPU").float().tolist() == [1.0, 2.5, -3.0]
  # tensors view the file on DISK (as safe_load's): on a compute device they compute like any tensor
  assert (sd["transposed"].to("CPU") + 1).tolist() == (base.T + 1).tolist()


def test_torch_load_into_a_model_and_from_a_tensor():
  class Net:
    def __init__(self): self.lin, self.bn = nn.Linear(3, 2), nn.BatchNorm(2)
  net = Net()
  sd = torch_load(Tensor(DATA / "torch_checkpoint.pt").to("CPU"))["model"]  # the file's bytes as a tensor
  load_state_dict(net, {k: v for k, v in sd.items() if k.startswith(("lin.", "bn."))})
  x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], np.float32)
  np.testing.assert_allclose(net.lin(Tensor(x)).numpy(), x @ np.array(LIN_WEIGHT).T + LIN_BIAS, rtol=1e-5)
  assert net.bn.num_batches_tracked.item() == 2


def test_torch_load_names_what_it_cannot_read(tmp_path):
  with pytest.raises(TorchFormatError, match="legacy format is not supported"):
    torch_load(DATA / "torch_legacy.pt")
  with pytest.raises(FileNotFoundError):
    torch_load(tmp_path / "missing.pt")
  with pytest.raises(TorchFormatError, match="1-d uint8 tensor"):
    torch_load(Tensor([1.0, 2.0]))


def test_torch_load_keeps_unknown_objects_inert_and_reads_expanded_tensors():
  ckpt = torch_load(DATA / "torch_objects.pt")
  np.testing.assert_array_equal(ckpt["expanded"].numpy(), [[1.5, 1.5, 1.5], [-2.0, -2.0, -2.0]])  # stride 0
  assert ckpt["config"].pickled_name == "__main__.Config" and ckpt["config"].state == {"hidden": 16, "name": "tiny"}
  assert ckpt["device"].pickled_name == "torch.device" and ckpt["device"].args == ("cpu",)
  assert ckpt["dtype"] is dtypes.float16  # a torch dtype in a checkpoint is tinycore's


def test_torch_load_reads_tensors_over_untyped_storages():
  # torch saves dtypes without a typed storage class (the 8-bit floats, uint16..64) with _rebuild_tensor_v3
  ckpt = torch_load(DATA / "torch_untyped.pt")
  assert ckpt["e4m3"].dtype is dtypes.fp8e4m3 and ckpt["e5m2_t"].dtype is dtypes.fp8e5m2
  np.testing.assert_array_equal(ckpt["e4m3"].numpy(), [[1.5, -2.0, 448.0], [0.3125, -0.001953125, 448.0]])
  np.testing.assert_array_equal(ckpt["e5m2_t"].numpy(), [[1.5, 0.3125], [-2.0, -0.0009765625], [448.0, 1024.0]])
  assert ckpt["uint16"].dtype is dtypes.uint16 and ckpt["uint16"].tolist() == [1, 65535, 300]
