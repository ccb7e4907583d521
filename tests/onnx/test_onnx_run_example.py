"""examples/onnx_run.py on a small model exported here by torch.onnx.export: the outputs it prints and saves match
torch, random inputs take the model's shapes, and --benchmark prints tinycore's time beside onnxruntime's."""
import io
import pathlib
import subprocess
import sys
import numpy as np
import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "onnx_run.py"


def small_model(path: pathlib.Path) -> torch.nn.Module:
  torch.manual_seed(0)
  model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(4, 5)).eval()
  buffer = io.BytesIO()
  torch.onnx.export(model, (torch.zeros(2, 3, 8, 8),), buffer, input_names=["image"], output_names=["logits"],
                    dynamo=False, opset_version=17, dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
  path.write_bytes(buffer.getvalue())
  return model


def run_example(*args: str) -> str:
  done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr
  return done.stdout


def test_runs_a_model_on_given_inputs_and_saves_outputs(tmp_path):
  model = small_model(tmp_path / "m.onnx")
  x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
  np.save(tmp_path / "x.npy", x)
  out = run_example(str(tmp_path / "m.onnx"), "--input", f"image={tmp_path / 'x.npy'}", "--save", str(tmp_path / "out"))
  assert "input  image: (2, 3, 8, 8) float32\n" in out and "output logits: (2, 5) float32" in out
  with torch.no_grad(): expected = model(torch.from_numpy(x)).numpy()
  np.testing.assert_allclose(np.load(tmp_path / "out" / "logits.npy"), expected, rtol=1e-4, atol=1e-5)


def test_random_inputs_a_named_dim_and_the_benchmark(tmp_path):
  small_model(tmp_path / "m.onnx")
  out = run_example(str(tmp_path / "m.onnx"), "--dim", "batch=3", "--benchmark", "--repeat", "2")
  assert "input  image: (3, 3, 8, 8) float32 (random)" in out and "output logits: (3, 5) float32" in out
  assert "tinycore (CPU): " in out and " ms per run (TinyJit" in out
  assert "onnxruntime (CPUExecutionProvider): " in out


def test_a_bad_input_name_is_named(tmp_path):
  small_model(tmp_path / "m.onnx")
  done = subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path / "m.onnx"), "--input", "nope=x.npy"],
                        capture_output=True, text=True, timeout=300)
  assert done.returncode != 0 and "no input 'nope'" in done.stderr and "image" in done.stderr
