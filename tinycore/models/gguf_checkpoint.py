"""A LLaMA-family model from a GGUF file (llama.cpp's names and conventions): the config from the file's metadata,
the tensors under the Hugging Face names the models take, and the file's tokenizer (`tokenizer.ggml.*`)."""
from __future__ import annotations
import os
from typing import Any
from tinycore.models.checkpoint import CheckpointError
from tinycore.nn.gguf import QuantizedTensor, gguf_load

# GGUF architecture -> config.json's model_type
GGUF_ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}
LAYER_NAMES = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
               "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
               "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
               "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
               "attn_output.weight": "self_attn.o_proj.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
               "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}
TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}


def unpermute_rotary(t: Any, heads: int) -> Any:
  """llama.cpp's converter reorders each head's rows of the q and k projections for its rotary convention (pairs
  of adjacent values); the models here rotate halves, as transformers: put the rows back (a QuantizedTensor's rows
  of blocks are moved whole)."""
  if isinstance(t, QuantizedTensor): return t.with_blocks(unpermute_rotary(t.blocks, heads))
  rows = t.shape[0]
  rest = t.shape[1:]
  return t.reshape(heads, rows // heads // 2, 2, *rest).transpose(1, 2).reshape(rows, *rest)


def gguf_checkpoint(path: str | os.PathLike, device: str | None) -> tuple[dict[str, Any], dict[str, Any],
                                                                            dict[str, Any]]:
  """(config as config.json would have it, tensors under Hugging Face names, the file's metadata). Quantized
  matrices stay QuantizedTensors (their blocks); the rest are Tensors."""
  if not os.path.isfile(path): raise CheckpointError(f"no GGUF file at {os.fspath(path)!r}")
  metadata, tensors = gguf_load(path, device, quantized=True)
  arch = metadata.get("general.architecture")
  if arch not in GGUF_ARCHITECTURES:
    raise CheckpointError(f"unknown architecture {arch!r} in {os.fspath(path)} (supported: "
                          f"{', '.join(sorted(GGUF_ARCHITECTURES))})")

  def meta(key: str, default: Any = None) -> Any:
    value = metadata.get(f"{arch}.{key}", default)
    if value is None: raise CheckpointError(f"{os.fspath(path)} has no {arch}.{key} in its metadata")
    return value
  heads = meta("attention.head_count")
  config: dict[str, Any] = {
    "model_type": GGUF_ARCHITECTURES[arch], "hidden_size": meta("embedding_length"),
    "intermediate_size": meta("feed_forward_length"), "num_hidden_layers": meta("block_count"),
    "num_attention_heads": heads, "num_key_value_heads": meta("attention.head_count_kv", heads),
    "rms_norm_eps": meta("attention.layer_norm_rms_epsilon", 1e-5), "max_position_embeddings": meta("context_length"),
    "rope_theta": meta("rope.freq_base", 10000.0), "vocab_size": tensors["token_embd.weight"].shape[0],
    "bos_token_id": metadata.get("tokenizer.ggml.bos_token_id"),
    "eos_token_id": metadata.get("tokenizer.ggml.eos_token_id"),
    "tie_word_embeddings": "output.weight" not in tensors}
  if (key_length := metadata.get(f"{arch}.attention.key_length")) is not None: config["head_dim"] = key_length
  if metadata.get(f"{arch}.rope.scaling.type") == "linear":
    config["rope_scaling"] = {"rope_type": "linear", "factor": metadata[f"{arch}.rope.scaling.factor"]}
  if "rope_freqs.weight" in tensors:  # llama3's scaling, stored as a factor per frequency
    config["rope_frequency_factors"] = tensors["rope_freqs.weight"].float().tolist()
  permuted = arch in ("llama", "mistral")  # (llama.cpp's qwen2 keeps transformers' order)
  named: dict[str, Any] = {}
  for name, t in tensors.items():
    if name in TOP_NAMES:
      named[TOP_NAMES[name]] = t
      continue
    parts = name.split(".", 2)
    if parts[0] != "blk" or len(parts) < 3 or parts[2] not in LAYER_NAMES: continue
    if permuted and parts[2].startswith(("attn_q.", "attn_k.")):
      t = unpermute_rotary(t, heads if parts[2].startswith("attn_q.") else config["num_key_value_heads"])
    named[f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"] = t
  return config, named, metadata
