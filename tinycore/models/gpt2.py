"""GPT-2 (Hugging Face `GPT2LMHeadModel` checkpoints), written with the public Tensor API."""
from __future__ import annotations
from typing import Any
from tinycore.dtype import dtypes
from tinycore.models.checkpoint import Weights
from tinycore.models.kv_cache import KVCache, causal_attention
from tinycore.models.layers import activation, kept_positions, layer_norm
from tinycore.tensor import Tensor



class GPT2Block:
  def __init__(self, w: Weights, prefix: str, dim: int, heads: int, inner: int, eps: float, act: Any,
               context: int, device: str | None):
    self.heads, self.eps, self.act = heads, eps, act
    take = lambda name, *shape: w.take(prefix + name, shape)  # noqa: E731
    self.ln_1 = (take("ln_1.weight", dim), take("ln_1.bias", dim))
    self.ln_2 = (take("ln_2.weight", dim), take("ln_2.bias", dim))
    self.c_attn = (take("attn.c_attn.weight", dim, 3 * dim), take("attn.c_attn.bias", 3 * dim))
    self.c_proj = (take("attn.c_proj.weight", dim, dim), take("attn.c_proj.bias", dim))
    self.c_fc = (take("mlp.c_fc.weight", dim, inner), take("mlp.c_fc.bias", inner))
    self.mlp_proj = (take("mlp.c_proj.weight", inner, dim), take("mlp.c_proj.bias", dim))
    self.cache = KVCache(heads, context, dim // heads, w.dtype, device)

  def __call__(self, x: Tensor, start_pos: Any) -> Tensor:
    batch, tokens, dim = x.shape
    h = layer_norm(x, self.ln_1, self.eps)
    qkv = h @ self.c_attn[0] + self.c_attn[1]
    q, k, v = (t.reshape(batch, tokens, self.heads, dim // self.heads).transpose(1, 2) for t in qkv.chunk(3, dim=2))
    keys, values = self.cache.update(k, v, start_pos)
    attn = causal_attention(q, keys, values, start_pos).transpose(1, 2).reshape(batch, tokens, dim)
    x = x + (attn @ self.c_proj[0] + self.c_proj[1])
    h = layer_norm(x, self.ln_2, self.eps)
    return x + (self.act(h @ self.c_fc[0] + self.c_fc[1]) @ self.mlp_proj[0] + self.mlp_proj[1])


class GPT2:
  """`model(tokens (batch, n) int32, start_pos)` -> logits (batch, n, vocab): the next-token scores after each
  token, the keys and values of the tokens kept in the blocks' caches from start_pos on. `logits_to_keep=k` (as in
  transformers) scores only the last k positions (batch, k, vocab): a prompt's prefill needs only its last."""

  def __init__(self, config: dict[str, Any], weights: Weights, context: int | None = None):
    dim, heads, layers = config["n_embd"], config["n_head"], config["n_layer"]
    self.device = weights.device
    self.vocab_size, self.max_context = config["vocab_size"], config["n_positions"]
    self.context = min(context or self.max_context, self.max_context)
    act = activation(config.get("activation_function", "gelu_new"), "GPT-2")
    prefix = "transformer." if weights.has("transformer.wte.weight") else ""
    self.wte = weights.take(prefix + "wte.weight", (self.vocab_size, dim))
    self.wpe = weights.take(prefix + "wpe.weight", (self.max_context, dim))
    eps = config.get("layer_norm_epsilon", 1e-5)
    self.blocks = [GPT2Block(weights, f"{prefix}h.{i}.", dim, heads, config.get("n_inner") or 4 * dim, eps,
                             act, self.context, weights.device) for i in range(layers)]
    self.ln_f = (weights.take(prefix + "ln_f.weight", (dim,)), weights.take(prefix + "ln_f.bias", (dim,)))
    self.eps = eps
    self.lm_head = weights.take("lm_head.weight", (self.vocab_size, dim)) if weights.has("lm_head.weight") and \
      not config.get("tie_word_embeddings", True) else self.wte

  def __call__(self, tokens: Tensor, start_pos: Any = 0, logits_to_keep: int = 0) -> Tensor:
    if tokens.dtype not in (dtypes.int32, dtypes.int64): tokens = tokens.cast(dtypes.int32)
    x = self.wte[tokens] + self.wpe[start_pos:start_pos + tokens.shape[1]]
    for block in self.blocks: x = block(x, start_pos)
    x = layer_norm(kept_positions(x, logits_to_keep), self.ln_f, self.eps)
    return x @ self.lm_head.T
