"""BERT encoders (Hugging Face `BertModel` checkpoints, and the `bert.` part of `BertFor...` ones), written with the
public Tensor API: `model(input_ids, attention_mask=None, token_type_ids=None)` -> (last hidden state, pooled)."""
from __future__ import annotations
from typing import Any
from tinycore.dtype import dtypes
from tinycore.models.checkpoint import Weights
from tinycore.models.layers import activation, layer_norm, linear, weight_and_bias
from tinycore.tensor import Tensor



class Bert:
  def __init__(self, config: dict[str, Any], weights: Weights, context: int | None = None):
    self.device = weights.device
    dim, self.heads = config["hidden_size"], config["num_attention_heads"]
    inner, self.eps = config["intermediate_size"], config.get("layer_norm_eps", 1e-12)
    self.act = activation(config.get("hidden_act", "gelu"), "BERT")
    self.context = config.get("max_position_embeddings", 512)
    prefix = "bert." if weights.has("bert.embeddings.word_embeddings.weight") else ""
    take = lambda name, *shape: weights.take(prefix + name, shape)  # noqa: E731
    dense = lambda name, out, inp: weight_and_bias(take, name, out, inp)  # noqa: E731
    norm = lambda name: (take(f"{name}.weight", dim), take(f"{name}.bias", dim))  # noqa: E731
    self.word = take("embeddings.word_embeddings.weight", config["vocab_size"], dim)
    self.position = take("embeddings.position_embeddings.weight", self.context, dim)
    self.token_type = take("embeddings.token_type_embeddings.weight", config.get("type_vocab_size", 2), dim)
    self.embed_norm = norm("embeddings.LayerNorm")
    self.layers = []
    for i in range(config["num_hidden_layers"]):
      p = f"encoder.layer.{i}."
      self.layers.append({
        "q": dense(p + "attention.self.query", dim, dim), "k": dense(p + "attention.self.key", dim, dim),
        "v": dense(p + "attention.self.value", dim, dim), "o": dense(p + "attention.output.dense", dim, dim),
        "attn_norm": norm(p + "attention.output.LayerNorm"), "up": dense(p + "intermediate.dense", inner, dim),
        "down": dense(p + "output.dense", dim, inner), "out_norm": norm(p + "output.LayerNorm")})
    self.pooler = dense("pooler.dense", dim, dim) if weights.has(prefix + "pooler.dense.weight") else None

  def __call__(self, input_ids: Tensor, attention_mask: Tensor | None = None,
               token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    batch, tokens = input_ids.shape
    if tokens > self.context: raise ValueError(f"{tokens} tokens is longer than the context ({self.context} tokens)")
    if token_type_ids is None: token_type_ids = Tensor.zeros(batch, tokens, dtype=dtypes.int32, device=self.device)
    x = self.word[input_ids] + self.position[0:tokens] + self.token_type[token_type_ids]
    x = layer_norm(x, self.embed_norm, self.eps)
    mask = None if attention_mask is None else (attention_mask.reshape(batch, 1, 1, tokens) != 0)
    head_dim = x.shape[-1] // self.heads
    for layer in self.layers:
      q, k, v = (linear(x, layer[n]).reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
                 for n in ("q", "k", "v"))
      attn = q.scaled_dot_product_attention(k, v, attn_mask=mask).transpose(1, 2).reshape(batch, tokens, -1)
      x = layer_norm(x + linear(attn, layer["o"]), layer["attn_norm"], self.eps)
      x = layer_norm(x + linear(self.act(linear(x, layer["up"])), layer["down"]), layer["out_norm"], self.eps)
    pooled = None if self.pooler is None else linear(x[:, 0], self.pooler).tanh()
    return x, pooled
