"""Models people bring, written with the public Tensor API: GPT-2 and the LLaMA family (LLaMA 2/3, Mistral, Qwen2)
from Hugging Face checkpoint directories or GGUF files, with a key/value cache for generation
(`tinycore.models.generate`), and BERT encoders.

    model = from_pretrained("path/to/checkpoint")          # config.json + model.safetensors (or shards)
    logits = model(Tensor([[1, 2, 3]]))                      # (batch, tokens, vocab)
"""
from __future__ import annotations
import os
from typing import Any
from tinycore.device.registry import Device
from tinycore.dtype import dtypes, to_dtype
from tinycore.models.checkpoint import CheckpointError, Weights, load_weights, read_config
from tinycore.models.bert import Bert
from tinycore.models.gguf_checkpoint import gguf_checkpoint
from tinycore.models.gpt2 import GPT2
from tinycore.models.llama import Llama

ARCHITECTURES: dict[str, type] = {"gpt2": GPT2, "llama": Llama, "mistral": Llama, "qwen2": Llama, "bert": Bert}
__all__ = ["ARCHITECTURES", "Bert", "CheckpointError", "GPT2", "Llama", "from_pretrained"]


def from_pretrained(path: str | os.PathLike, device: str | None = None, dtype: Any = None,
                    context: int | None = None) -> Any:
  """The model of a Hugging Face checkpoint directory (or a LLaMA-family `.gguf` file, its quantized tensors
  dequantized on the device), its weights on `device` (the default device) in `dtype`
  (float32 unless given); `context` caps the key/value cache (the checkpoint's maximum by default)."""
  device = str(Device.canonicalize(device or Device.DEFAULT))
  if os.fspath(path).endswith(".gguf"): config, tensors, _ = gguf_checkpoint(path, device)
  else: config, tensors = read_config(path), load_weights(path)
  kind = config.get("model_type")
  if kind not in ARCHITECTURES:
    raise CheckpointError(f"unknown architecture {kind!r} in {os.fspath(path)}/config.json "
                          f"(supported: {', '.join(sorted(ARCHITECTURES))})")
  weights = Weights(tensors, device, to_dtype(dtype) if dtype is not None else dtypes.float32)
  model = ARCHITECTURES[kind](config, weights, context)
  model.config = config
  return model
