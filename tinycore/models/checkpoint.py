"""Hugging Face checkpoint directories: `config.json` and the weights in `model.safetensors`, or sharded as
`model-0000N-of-0000M.safetensors` beside `model.safetensors.index.json`. The weights load lazily through DISK
(`safe_load`): a tensor's bytes are read when a kernel first needs them, never the whole file into Python memory."""
from __future__ import annotations
import json
import os
from typing import Any
from tinycore.nn.gguf import QuantizedTensor
from tinycore.nn.state import safe_load
from tinycore.tensor import Tensor


class CheckpointError(ValueError):
  """A checkpoint that cannot be loaded: a missing file, an unknown architecture, a missing or misshaped weight."""


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
  path = os.path.join(directory, "config.json")
  if not os.path.isdir(directory): raise CheckpointError(f"no checkpoint directory at {os.fspath(directory)!r}")
  if not os.path.isfile(path): raise CheckpointError(f"the checkpoint {os.fspath(directory)!r} has no config.json")
  with open(path) as f: return json.load(f)


def load_weights(directory: str | os.PathLike) -> dict[str, Tensor]:
  """Every tensor of the checkpoint's safetensors files, by name (DISK tensors: nothing is read yet)."""
  single, index = os.path.join(directory, "model.safetensors"), os.path.join(directory, "model.safetensors.index.json")
  if os.path.isfile(single): return safe_load(single)
  if os.path.isfile(index):
    with open(index) as f: weight_map: dict[str, str] = json.load(f)["weight_map"]
    weights: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
      shard_path = os.path.join(directory, shard)
      if not os.path.isfile(shard_path): raise CheckpointError(f"the index names the shard {shard!r}, which is missing")
      weights.update(safe_load(shard_path))
    if missing := sorted(set(weight_map) - set(weights)):
      raise CheckpointError(f"the index lists tensors no shard holds: {missing[:5]}")
    return weights
  raise CheckpointError(f"the checkpoint {os.fspath(directory)!r} has neither model.safetensors nor "
                        "model.safetensors.index.json")


class Weights:
  """A checkpoint's tensors moved to a device as they are taken (`take(name, shape)`): each is checked against the
  shape the model expects and cast to the model's float dtype, except a QuantizedTensor, whose blocks are moved as
  they are (it dequantizes where it is used). `unused()` lists what no layer took."""

  def __init__(self, tensors: dict[str, Tensor], device: str | None, dtype: Any):
    self.tensors, self.device, self.dtype = tensors, device, dtype
    self.taken: set[str] = set()

  def has(self, name: str) -> bool: return name in self.tensors

  def take(self, name: str, shape: tuple[int, ...]) -> Any:
    if name not in self.tensors: raise CheckpointError(f"the checkpoint has no weight {name!r}")
    t = self.tensors[name]
    if tuple(t.shape) != tuple(shape):
      raise CheckpointError(f"the weight {name!r} has shape {tuple(t.shape)}, the model needs {tuple(shape)}")
    self.taken.add(name)
    if isinstance(t, QuantizedTensor): return t.to(self.device).realize()
    moved = t.to(self.device)
    return (moved if moved.dtype is self.dtype else moved.cast(self.dtype)).contiguous().realize()

  def unused(self) -> list[str]: return sorted(set(self.tensors) - self.taken)
