"""The examples run: a shortened examples/train_digits.py trains (the loss falls), evaluates and saves its weights."""
import importlib.util
import pathlib
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str):
  spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_train_digits_loss_falls_and_weights_are_saved(tmp_path):
  pytest.importorskip("sklearn", reason="examples need scikit-learn: pip install -e '.[examples]'")
  from tinycore.nn.state import safe_load
  example = load_example("train_digits")
  out = tmp_path / "digits.safetensors"
  lines: list[str] = []
  result = example.train(example.parse_args(["--epochs", "3", "--out", str(out)]), log=lines.append)
  losses = result["losses"]
  assert losses[-1] < 0.6 * losses[0]
  assert result["test_accuracy"] > 0.8  # three epochs of the MLP: ~0.93
  assert lines[-2].startswith("test accuracy: 0.") and "images/s" in lines[1]
  weights = safe_load(out)
  assert sorted(weights) == ["l1.bias", "l1.weight", "l2.bias", "l2.weight"]
  assert weights["l1.weight"].shape == (128, 64)


def test_train_digits_data_parallel_matches_one_device(tmp_path):
  pytest.importorskip("sklearn", reason="examples need scikit-learn: pip install -e '.[examples]'")
  example = load_example("train_digits")
  common = ["--epochs", "1", "--batch-size", "32"]
  single = example.train(example.parse_args(common + ["--out", str(tmp_path / "a.safetensors")]), log=lambda _: None)
  lines: list[str] = []
  sharded = example.train(example.parse_args(common + ["--devices", "CPU:0,CPU:1", "--out",
                                                       str(tmp_path / "b.safetensors")]), log=lines.append)
  assert "CPU:0,CPU:1 (data parallel)" in lines[0]
  assert abs(sharded["losses"][0] - single["losses"][0]) < 1e-5
  assert sharded["test_accuracy"] == single["test_accuracy"]
