"""Models exported by torch.onnx.export in the test, run by OnnxRunner and compared with torch and onnxruntime; the
runner's own behaviour (errors, lazy initializers from external data, TinyJit)."""
import io
import pathlib
import numpy as np
import pytest
import torch
import onnx
from tinycore import Device, Tensor, TinyJit
from tinycore.nn.onnx import OnnxError, OnnxRunner
from tinycore.uop.ops import Ops

ort = pytest.importorskip("onnxruntime")


def export(model: torch.nn.Module, args: tuple, names: list[str], outputs: list[str], **kwargs) -> bytes:
  buffer = io.BytesIO()
  model.eval()
  torch.onnx.export(model, args, buffer, input_names=names, output_names=outputs, dynamo=False, opset_version=17,
                    **kwargs)
  return buffer.getvalue()


def compare(data: bytes | pathlib.Path, feeds: dict[str, np.ndarray], torch_out: list[np.ndarray],
            atol: float = 1e-4) -> None:
  ours = OnnxRunner(data)(feeds)
  model = str(data) if isinstance(data, pathlib.Path) else data
  theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
  for got, ref_ort, ref_torch in zip(ours.values(), theirs, torch_out):
    got = got.numpy()
    np.testing.assert_allclose(got, ref_torch, atol=atol, rtol=1e-4)
    np.testing.assert_allclose(got, ref_ort, atol=atol, rtol=1e-4)


class SmallCNN(torch.nn.Module):
  def __init__(self):
    super().__init__()
    self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
    self.bn1 = torch.nn.BatchNorm2d(8)
    self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
    self.bn2 = torch.nn.BatchNorm2d(16)
    self.fc = torch.nn.Linear(16, 10)

  def forward(self, x):
    x = torch.nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
    x = torch.nn.functional.avg_pool2d(torch.relu(self.bn2(self.conv2(x))), 2, ceil_mode=True)
    return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)).softmax(-1)


def test_cnn_with_batchnorm_and_pooling():
  torch.manual_seed(0)
  model = SmallCNN().eval()
  for bn in (model.bn1, model.bn2):  # statistics that are not the identity
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
  x = np.random.default_rng(0).standard_normal((2, 3, 20, 20)).astype(np.float32)
  with torch.no_grad(): ref = model(torch.from_numpy(x)).numpy()
  compare(export(model, (torch.from_numpy(x),), ["x"], ["y"]), {"x": x}, [ref])


def test_transformer_encoder_layer_with_masks():
  torch.manual_seed(0)
  layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
  x = np.random.default_rng(1).standard_normal((2, 7, 32)).astype(np.float32)
  padding = np.zeros((2, 7), bool)
  padding[1, 5:] = True
  causal = torch.nn.Transformer.generate_square_subsequent_mask(7)

  class Wrapped(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.layer = layer

    def forward(self, x, pad):
      return self.layer(x, src_mask=causal, src_key_padding_mask=pad)

  model = Wrapped().eval()
  with torch.no_grad(): ref = model(torch.from_numpy(x), torch.from_numpy(padding)).numpy()
  data = export(model, (torch.from_numpy(x), torch.from_numpy(padding)), ["x", "pad"], ["y"])
  compare(data, {"x": x, "pad": padding}, [ref])


def test_lstm():
  torch.manual_seed(0)
  lstm = torch.nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=True).eval()
  x = np.random.default_rng(2).standard_normal((3, 5, 8)).astype(np.float32)
  with torch.no_grad(): y, (h, c) = lstm(torch.from_numpy(x))
  data = export(lstm, (torch.from_numpy(x),), ["x"], ["y", "h", "c"])
  compare(data, {"x": x}, [y.numpy(), h.numpy(), c.numpy()])


def test_dynamic_batch_reruns_and_jit_replays():
  torch.manual_seed(0)
  model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.GELU(), torch.nn.Linear(12, 3)).eval()
  x = torch.randn(4, 6)
  data = export(model, (x,), ["x"], ["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
  runner = OnnxRunner(data)
  assert runner.graph_inputs["x"][0][0] == "batch"
  for batch in (1, 5):
    xs = torch.randn(batch, 6)
    with torch.no_grad(): ref = model(xs).numpy()
    np.testing.assert_allclose(runner({"x": xs.numpy()})["y"].numpy(), ref, atol=1e-5, rtol=1e-5)
  step = TinyJit(lambda t: runner({"x": t})["y"].realize())
  for i in range(4):
    xs = torch.randn(4, 6)
    with torch.no_grad(): ref = model(xs).numpy()
    np.testing.assert_allclose(step(Tensor(xs.numpy())).numpy(), ref, atol=1e-5, rtol=1e-5)


def test_initializers_in_an_external_file_load_lazily(tmp_path):
  torch.manual_seed(0)
  model = torch.nn.Linear(64, 32).eval()
  x = torch.randn(2, 64)
  proto = onnx.load_model_from_string(export(model, (x,), ["x"], ["y"]))
  onnx.save_model(proto, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                  location="weights.bin", size_threshold=0)
  runner = OnnxRunner(tmp_path / "m.onnx")
  with torch.no_grad(): ref = model(x).numpy()
  np.testing.assert_allclose(runner({"x": x.numpy()})["y"].numpy(), ref, atol=1e-5, rtol=1e-5)
  # the weights are views of the file, read when a run realizes them: a runner made before the file changes reads
  # the new bytes (here zeros, so the output is zero)
  lazy = OnnxRunner(tmp_path / "m.onnx")
  size = (tmp_path / "weights.bin").stat().st_size
  with open(tmp_path / "weights.bin", "r+b") as f: f.write(bytes(size))
  np.testing.assert_array_equal(lazy({"x": x.numpy()})["y"].numpy(), np.zeros((2, 32), np.float32))
  (tmp_path / "weights.bin").unlink()
  with pytest.raises(FileNotFoundError, match="weights.bin"): OnnxRunner(tmp_path / "m.onnx")


def _node_model(op: str, inputs: list, attrs: dict | None = None, opset: int = 17) -> bytes:
  from onnx import TensorProto, helper
  node = helper.make_node(op, [f"i{k}" for k in range(len(inputs))], ["out"], name="the_node", **(attrs or {}))
  graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(f"i{k}", TensorProto.FLOAT, s)
                                          for k, s in enumerate(inputs)],
                            [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def test_errors_name_the_operator_node_opset_and_attribute(tmp_path):
  with pytest.raises(OnnxError, match=r"ImageDecoder node 'the_node' \(opset 20\).*ImageDecoder is not supported"):
    OnnxRunner(_node_model("ImageDecoder", [[16]], opset=20))
  with pytest.raises(OnnxError, match=r"Relu node 'the_node' \(opset 17\): attribute 'bogus'"):
    OnnxRunner(_node_model("Relu", [[2]], {"bogus": 1}))
  runner = OnnxRunner(_node_model("Relu", [[2, 3]]))
  with pytest.raises(OnnxError, match="input 'i0' is missing"): runner({})
  with pytest.raises(OnnxError, match="no input 'x'"): runner({"x": np.zeros((2, 3), np.float32)})
  with pytest.raises(Exception, match=r"i0.*\(2, 3\)"): runner({"i0": np.zeros((3, 3), np.float32)})
  with pytest.raises(FileNotFoundError, match="nothing.onnx"): OnnxRunner(tmp_path / "nothing.onnx")
  (tmp_path / "junk.onnx").write_bytes(b"\x01\x02 not a model")
  with pytest.raises(OnnxError, match="junk.onnx"): OnnxRunner(tmp_path / "junk.onnx")
  np.testing.assert_array_equal(runner({"i0": np.array([[-1, 2, -3], [4, -5, 6]], np.float32)})["out"].numpy(),
                                [[0, 2, 0], [4, 0, 6]])


class ConvsOfEveryRank(torch.nn.Module):
  def __init__(self):
    super().__init__()
    # c1, c2: rows of at least 256 * 9 weights (OnnxRunner.BLOCKED_WEIGHT_ROW) and 64 output channels; c3: short rows
    self.c1, self.c2 = torch.nn.Conv1d(768, 64, 3, padding=1), torch.nn.Conv2d(256, 64, 3)
    self.c3 = torch.nn.Conv3d(2, 3, 2)
    self.grouped = torch.nn.Conv2d(64, 64, 3, padding=1, groups=4)

  def forward(self, x1, x2, x3):
    y2 = self.c2(x2)
    return self.c1(x1), self.grouped(y2) + self.c2(x2.flip(-1)).flip(-1), self.c3(x3)  # c2's weight read twice


def test_conv_weights_are_stored_in_their_kernels_order_on_the_first_run():
  # same values and shapes through a view; a grouped conv's weight stays as it is; a jitted runner replays. On a
  # CPU (register tiles) long rows are stored in blocks of the tile's columns and short ones stay; on a grid target
  # every ungrouped weight is stored output-channels-innermost
  torch.manual_seed(0)
  model = ConvsOfEveryRank().eval()
  rng = np.random.default_rng(3)
  xs = [rng.standard_normal(s).astype(np.float32) for s in ((2, 768, 9), (2, 256, 7, 6), (1, 2, 4, 5, 3))]
  data = export(model, tuple(torch.from_numpy(x) for x in xs), ["x1", "x2", "x3"], ["y1", "y2", "y3"])
  runner = OnnxRunner(data)
  weight_names = {node.inputs[1]: node.attrs.get("group", 1) for node in runner._graphs[id(runner.graph)]
                  if node.op_type == "Conv"}
  assert sorted(runner._relaid_weights) == sorted(n for n, g in weight_names.items() if g == 1)
  step = TinyJit(lambda a, b, c: [t.realize() for t in runner({"x1": a, "x2": b, "x3": c}).values()])
  for _ in range(4):
    xs = [rng.standard_normal(x.shape).astype(np.float32) for x in xs]
    with torch.no_grad(): refs = [r.numpy() for r in model(*(torch.from_numpy(x) for x in xs))]
    for got, ref in zip(step(*(Tensor(x) for x in xs)), refs):
      np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-4)
  target = getattr(Device[runner.device].renderer, "kernel_target", None)
  block = None if target is None or target.grid else 2 * target.vector_lanes
  for name, group in weight_names.items():
    weight, original = runner.initializers[name], onnx.numpy_helper.to_array(
      next(i for i in runner.graph.initializer if i.name == name))
    np.testing.assert_array_equal(weight.numpy(), original)
    o, i, *kernel = original.shape
    if group != 1 or (block is not None and i * np.prod(kernel) < OnnxRunner.BLOCKED_WEIGHT_ROW):
      assert all(u.op is not Ops.PERMUTE for u in weight.uop.toposort())  # the initializer's buffer as it was
    elif block is None:  # a permute of the stored (*kernel, I, O) tensor
      assert weight.uop.op is Ops.PERMUTE and weight.uop.src[0].shape == (*kernel, i, o)
    else:  # a reshape of a permute of the stored (O / block, I, *kernel, block) tensor
      assert weight.uop.op is Ops.RESHAPE and weight.uop.src[0].op is Ops.PERMUTE
      assert weight.uop.src[0].src[0].shape == (o // block, i, *kernel, block)


def test_models_from_torchs_default_dynamo_exporter(tmp_path):
  # torch.onnx.export's default since torch 2.9 (torch.export + onnxscript): other patterns than the TorchScript
  # exporter's (opset 18+, decomposed ops, value names from the graph)
  pytest.importorskip("onnxscript")
  torch.manual_seed(0)
  cnn = SmallCNN().eval()
  encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
                                        2).eval()
  rng = np.random.default_rng(4)
  for name, model, x in (("cnn", cnn, rng.standard_normal((2, 3, 20, 20))),
                         ("encoder", encoder, rng.standard_normal((2, 7, 32))),
                         ("gru", torch.nn.GRU(8, 16, batch_first=True).eval(), rng.standard_normal((3, 5, 8)))):
    x = torch.from_numpy(x.astype(np.float32))
    model.eval()
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(model, (x,), path, dynamo=True)  # (its weights may go to an external file beside it)
    with torch.no_grad(): ref = model(x)
    refs = [r.numpy() for r in (ref if isinstance(ref, tuple) else (ref,))]
    feeds = {onnx.load(path, load_external_data=False).graph.input[0].name: x.numpy()}
    compare(path, feeds, refs)
