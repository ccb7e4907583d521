"""The attention of a decoder with its key/value cache: per layer one realized buffer (2, batch, kv heads, context,
head dim) written with `assign` at the position `start_pos` (an int, or a bound Variable so one TinyJit capture
serves every position) and read back up to `start_pos + tokens`."""
from __future__ import annotations
from typing import Any
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor


class KVCache:
  """One layer's cache: a buffer per batch size (made at its first use and kept, so a decode step captured for that
  batch size always writes the buffer its prefill wrote)."""

  def __init__(self, kv_heads: int, context: int, head_dim: int, dtype: DType, device: str | None):
    self.kv_heads, self.context, self.head_dim, self.dtype, self.device = kv_heads, context, head_dim, dtype, device
    self.buffers: dict[int, Tensor] = {}

  def update(self, keys: Tensor, values: Tensor, start_pos: Any) -> tuple[Tensor, Tensor]:
    """Store (batch, kv heads, tokens, head dim) keys and values at start_pos; all the keys and values so far."""
    batch, tokens = keys.shape[0], keys.shape[2]
    if (cache := self.buffers.get(batch)) is None:
      shape = (2, batch, self.kv_heads, self.context, self.head_dim)
      cache = self.buffers[batch] = Tensor.zeros(*shape, dtype=self.dtype, device=self.device).contiguous().realize()
    # keys and values assigned apart: as one stack they were one kernel computing both projections for every element
    # and selecting one (a LLaMA-1B layer's prefill k/v write took 13 ms instead of 2)
    cache[0, :, :, start_pos:start_pos + tokens].assign(keys)
    cache[1, :, :, start_pos:start_pos + tokens].assign(values)
    cache.realize()
    upto = cache[:, :, :, 0:start_pos + tokens]
    return upto[0], upto[1]


def causal_attention(q: Tensor, keys: Tensor, values: Tensor, start_pos: Any) -> Tensor:
  """softmax(q k^T / sqrt(d) + causal mask) v for q (batch, heads, tokens, d) against the cached keys and values
  (batch, kv heads, start_pos + tokens, d); kv heads repeat to the query heads (grouped-query attention)."""
  tokens, mask = q.shape[2], None
  if tokens > 1:  # a prefill: each token sees the cache and the tokens up to itself
    mask = Tensor.ones(tokens, keys.shape[2], dtype=dtypes.bool, device=q.device).tril(diagonal=start_pos)
  return q.scaled_dot_product_attention(keys, values, attn_mask=mask, enable_gqa=q.shape[1] != keys.shape[1])
