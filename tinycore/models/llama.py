"""The LLaMA family (Hugging Face `LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM` checkpoints): RMSNorm,
rotary embeddings (plain, linear and llama3 scaling), grouped-query attention, SwiGLU; attention biases where the
checkpoint has them (Qwen2). Written with the public Tensor API."""
from __future__ import annotations
import math
from typing import Any
from tinycore.dtype import dtypes
from tinycore.models.checkpoint import CheckpointError, Weights
from tinycore.models.kv_cache import KVCache, causal_attention
from tinycore.models.layers import activation, embedding, kept_positions, linear, matmul_transposed, rms_norm
from tinycore.tensor import Tensor


def rope_settings(config: dict[str, Any]) -> tuple[float, dict[str, Any]]:
  """(theta, scaling) from a config: transformers 5's `rope_parameters`, or the older `rope_theta` + `rope_scaling`."""
  params = dict(config.get("rope_parameters") or {})
  scaling = dict(config.get("rope_scaling") or {})
  theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
  merged = {**scaling, **{k: v for k, v in params.items() if k != "rope_theta"}}
  kind = merged.get("rope_type", merged.get("type", "default"))
  if kind not in ("default", "linear", "llama3"):
    raise CheckpointError(f"rope scaling {kind!r} is not supported (default, linear, llama3)")
  return float(theta), {**merged, "rope_type": kind}


def rope_frequencies(head_dim: int, theta: float, scaling: dict[str, Any]) -> list[float]:
  """The rotary inverse frequencies, with the checkpoint's scaling (as transformers computes them)."""
  inv = [1.0 / theta ** (i / head_dim) for i in range(0, head_dim, 2)]
  kind = scaling["rope_type"]
  if kind == "linear": return [f / scaling["factor"] for f in inv]
  if kind == "llama3":
    factor, low, high = scaling["factor"], scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_context = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_context / low, old_context / high
    out = []
    for f in inv:
      wavelen = 2 * math.pi / f
      if wavelen < high_wavelen: out.append(f)
      elif wavelen > low_wavelen: out.append(f / factor)
      else:
        smooth = (old_context / wavelen - low) / (high - low)
        out.append((1 - smooth) * f / factor + smooth * f)
    return out
  return inv


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
  """x * cos + rotate_half(x) * sin, the halves convention of transformers' LLaMA."""
  half = x.shape[-1] // 2
  rotated = Tensor.cat(-x[..., half:], x[..., :half], dim=-1)
  return x * cos + rotated * sin


class LlamaBlock:
  def __init__(self, w: Weights, prefix: str, config: dict[str, Any], head_dim: int, context: int):
    dim, self.heads = config["hidden_size"], config["num_attention_heads"]
    self.kv_heads, self.head_dim = config.get("num_key_value_heads") or self.heads, head_dim
    self.eps, inner = config.get("rms_norm_eps", 1e-6), config["intermediate_size"]
    self.act = activation(config.get("hidden_act", "silu"), "LLaMA")
    take = lambda name, *shape: w.take(prefix + name, shape)  # noqa: E731
    maybe = lambda name, *shape: take(name, *shape) if w.has(prefix + name) else None  # noqa: E731
    q_width, kv_width = self.heads * head_dim, self.kv_heads * head_dim
    self.q = (take("self_attn.q_proj.weight", q_width, dim), maybe("self_attn.q_proj.bias", q_width))
    self.k = (take("self_attn.k_proj.weight", kv_width, dim), maybe("self_attn.k_proj.bias", kv_width))
    self.v = (take("self_attn.v_proj.weight", kv_width, dim), maybe("self_attn.v_proj.bias", kv_width))
    self.o = (take("self_attn.o_proj.weight", dim, self.heads * head_dim), maybe("self_attn.o_proj.bias", dim))
    self.gate, self.up = take("mlp.gate_proj.weight", inner, dim), take("mlp.up_proj.weight", inner, dim)
    self.down = take("mlp.down_proj.weight", dim, inner)
    self.attn_norm, self.mlp_norm = take("input_layernorm.weight", dim), take("post_attention_layernorm.weight", dim)
    self.cache = KVCache(self.kv_heads, context, head_dim, w.dtype, w.device)

  def __call__(self, x: Tensor, start_pos: Any, cos: Tensor, sin: Tensor) -> Tensor:
    batch, tokens, _ = x.shape
    h = rms_norm(x, self.attn_norm, self.eps)
    q = linear(h, self.q).reshape(batch, tokens, self.heads, self.head_dim).transpose(1, 2)
    k = linear(h, self.k).reshape(batch, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
    v = linear(h, self.v).reshape(batch, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    keys, values = self.cache.update(k, v, start_pos)
    attn = causal_attention(q, keys, values, start_pos).transpose(1, 2).reshape(batch, tokens, -1)
    x = x + linear(attn, self.o)
    h = rms_norm(x, self.mlp_norm, self.eps)
    gated = self.act(matmul_transposed(h, self.gate)) * matmul_transposed(h, self.up)
    return x + matmul_transposed(gated, self.down)


class Llama:
  """`model(tokens (batch, n) int32, start_pos)` -> logits (batch, n, vocab), caching keys and values from
  start_pos on; `logits_to_keep=k` (as in transformers) scores only the last k positions (batch, k, vocab)."""

  def __init__(self, config: dict[str, Any], weights: Weights, context: int | None = None):
    dim, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or dim // heads
    self.device = weights.device
    self.vocab_size = config["vocab_size"]
    self.max_context = config.get("max_position_embeddings", 2048)
    self.context = min(context or self.max_context, self.max_context)
    self.embed = weights.take("model.embed_tokens.weight", (self.vocab_size, dim))
    self.blocks = [LlamaBlock(weights, f"model.layers.{i}.", config, head_dim, self.context)
                   for i in range(config["num_hidden_layers"])]
    self.norm = weights.take("model.norm.weight", (dim,))
    self.eps = config.get("rms_norm_eps", 1e-6)
    tied = config.get("tie_word_embeddings", False) or not weights.has("lm_head.weight")
    self.lm_head = self.embed if tied else weights.take("lm_head.weight", (self.vocab_size, dim))
    theta, scaling = rope_settings(config)
    frequencies = rope_frequencies(head_dim, theta, scaling)
    if factors := config.get("rope_frequency_factors"):  # a GGUF's rope_freqs: each frequency divided by its factor
      frequencies = [f / factor for f, factor in zip(frequencies, factors)]
    inv = Tensor(frequencies, device=weights.device)
    angles = Tensor.arange(self.context, device=weights.device).float().reshape(-1, 1) * inv.reshape(1, -1)
    angles = angles.cat(angles, dim=-1)  # (context, head_dim): the halves convention
    self.cos, self.sin = angles.cos().cast(weights.dtype).contiguous().realize(), \
      angles.sin().cast(weights.dtype).contiguous().realize()

  def __call__(self, tokens: Tensor, start_pos: Any = 0, logits_to_keep: int = 0) -> Tensor:
    if tokens.dtype not in (dtypes.int32, dtypes.int64): tokens = tokens.cast(dtypes.int32)
    n = tokens.shape[1]
    cos, sin = self.cos[start_pos:start_pos + n], self.sin[start_pos:start_pos + n]
    x = embedding(self.embed, tokens)
    for block in self.blocks: x = block(x, start_pos, cos, sin)
    return matmul_transposed(rms_norm(kept_positions(x, logits_to_keep), self.norm, self.eps), self.lm_head)
