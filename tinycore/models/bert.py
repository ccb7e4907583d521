"""BERT encoders (Hugging Face `BertModel` checkpoints, and the `bert.` part of `BertFor...` ones), written with the
public Tensor API: `model(input_ids, attention_mask=None, token_type_ids=None)` -> (last hidden state, pooled)."""
from __future__ import annotations
from typing import Any
from tinycore.dtype import dtypes
from tinycore.models.checkpoint import CheckpointError, Weights
from tinycore.tensor import Tensor

ACTIVATIONS = {"gelu": lambda x: x.gelu(approximate="none"), "gelu_new": lambda x: x.gelu(),
               "gelu_pytorch_tanh": lambda x: x.gelu(), "relu": lambda x: x.relu()}


class Bert:
  def __init__(self, config: dict[str, Any], weights: Weights, context: int | None = None):
    self.device = weights.device
    dim, self.heads = config["hidden_size"], config["num_attention_heads"]
    inner, self.eps = config["intermediate_size"], config.get("layer_norm_eps", 1e-12)
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
      raise CheckpointError(f"BERT activation {act!r} is not supported ({sorted(ACTIVATIONS)})")
    self.act = ACTIVATIONS[act]
    self.context = config.get("max_position_embeddings", 512)
    prefix = "bert." if weights.has("bert.embeddings.word_embeddings.weight") else ""
    take = lambda name, *shape: weights.take(prefix + name, shape)  # noqa: E731
    linear = lambda name, out, inp: (take(f"{name}.weight", out, inp), take(f"{name}.bias", out))  # noqa: E731
    norm = lambda name: (take(f"{name}.weight", dim), take(f"{name}.bias", dim))  # noqa: E731
    self.word = take("embeddings.word_embeddings.weight", config["vocab_size"], dim)
    self.position = take("embeddings.position_embeddings.weight", self.context, dim)
    self.token_type = take("embeddings.token_type_embeddings.weight", config.get("type_vocab_size", 2), dim)
    self.embed_norm = norm("embeddings.LayerNorm")
    self.layers = []
    for i in range(config["num_hidden_layers"]):
      p = f"encoder.layer.{i}."
      self.layers.append({
        "q": linear(p + "attention.self.query", dim, dim), "k": linear(p + "attention.self.key", dim, dim),
        "v": linear(p + "attention.self.value", dim, dim), "o": linear(p + "attention.output.dense", dim, dim),
        "attn_norm": norm(p + "attention.output.LayerNorm"), "up": linear(p + "intermediate.dense", inner, dim),
        "down": linear(p + "output.dense", dim, inner), "out_norm": norm(p + "output.LayerNorm")})
    self.pooler = linear("pooler.dense", dim, dim) if weights.has(prefix + "pooler.dense.weight") else None

  def _norm(self, x: Tensor, wb: tuple[Tensor, Tensor]) -> Tensor: return x.layernorm(eps=self.eps) * wb[0] + wb[1]

  def __call__(self, input_ids: Tensor, attention_mask: Tensor | None = None,
               token_type_ids: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    batch, tokens = input_ids.shape
    if tokens > self.context: raise ValueError(f"{tokens} tokens is longer than the context ({self.context} tokens)")
    if token_type_ids is None: token_type_ids = Tensor.zeros(batch, tokens, dtype=dtypes.int32, device=self.device)
    x = self.word[input_ids] + self.position[0:tokens] + self.token_type[token_type_ids]
    x = self._norm(x, self.embed_norm)
    mask = None if attention_mask is None else (attention_mask.reshape(batch, 1, 1, tokens) != 0)
    head_dim = x.shape[-1] // self.heads
    for layer in self.layers:
      q, k, v = ((x @ layer[n][0].T + layer[n][1]).reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
                 for n in ("q", "k", "v"))
      attn = q.scaled_dot_product_attention(k, v, attn_mask=mask).transpose(1, 2).reshape(batch, tokens, -1)
      x = self._norm(x + attn @ layer["o"][0].T + layer["o"][1], layer["attn_norm"])
      h = self.act(x @ layer["up"][0].T + layer["up"][1]) @ layer["down"][0].T + layer["down"][1]
      x = self._norm(x + h, layer["out_norm"])
    pooled = None if self.pooler is None else (x[:, 0] @ self.pooler[0].T + self.pooler[1]).tanh()
    return x, pooled
