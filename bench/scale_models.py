"""The models of bench/bench_scale.py, written once with the public Tensor API (so the same code runs on tinycore and
on tinygrad: `lib` is either package) and once with torch, with the same weights.

- `Transformer`: pre-LN blocks (attention with a causal mask, a GELU MLP), d_model 64, 4 heads, as a small GPT;
- `Encoder`: a BERT-style encoder (post-LN blocks, GELU MLP of 4x hidden, token + position embeddings, an attention
  mask of padded tokens), hidden 384, 12 heads at the issue's sizes.

Weights are numpy arrays in a dict with Hugging Face-like names, so they can be written to a safetensors file and
loaded back the way a user loads a checkpoint.
"""
from __future__ import annotations
import math
from types import ModuleType
import numpy as np


def transformer_weights(layers: int, dim: int = 64, vocab: int = 256, seq: int = 32, seed: int = 0) -> dict:
  rng = np.random.default_rng(seed)
  def w(*shape: int) -> np.ndarray: return (rng.standard_normal(shape) * (1 / math.sqrt(shape[-1]))).astype(np.float32)
  weights = {"wte": w(vocab, dim), "wpe": w(seq, dim), "ln_f.weight": np.ones(dim, np.float32),
             "ln_f.bias": np.zeros(dim, np.float32), "head": w(vocab, dim)}
  for i in range(layers):
    p = f"h.{i}."
    weights |= {p + "ln1.weight": np.ones(dim, np.float32), p + "ln1.bias": np.zeros(dim, np.float32),
                p + "ln2.weight": np.ones(dim, np.float32), p + "ln2.bias": np.zeros(dim, np.float32),
                p + "qkv.weight": w(3 * dim, dim), p + "qkv.bias": np.zeros(3 * dim, np.float32),
                p + "proj.weight": w(dim, dim), p + "proj.bias": np.zeros(dim, np.float32),
                p + "fc.weight": w(4 * dim, dim), p + "fc.bias": np.zeros(4 * dim, np.float32),
                p + "out.weight": w(dim, 4 * dim), p + "out.bias": np.zeros(dim, np.float32)}
  return weights


def encoder_weights(layers: int, dim: int = 384, vocab: int = 1000, seq: int = 64, seed: int = 0) -> dict:
  rng = np.random.default_rng(seed)
  def w(*shape: int) -> np.ndarray: return (rng.standard_normal(shape) * 0.02).astype(np.float32)
  def ln(name: str) -> dict:
    return {name + ".weight": np.ones(dim, np.float32), name + ".bias": np.zeros(dim, np.float32)}
  weights = {"embeddings.word_embeddings.weight": w(vocab, dim), "embeddings.position_embeddings.weight": w(seq, dim),
             **ln("embeddings.LayerNorm")}
  for i in range(layers):
    p = f"encoder.layer.{i}."
    for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
      weights |= {p + name + ".weight": w(dim, dim), p + name + ".bias": w(dim)}
    weights |= {p + "intermediate.dense.weight": w(4 * dim, dim), p + "intermediate.dense.bias": w(4 * dim),
                p + "output.dense.weight": w(dim, 4 * dim), p + "output.dense.bias": w(dim),
                **ln(p + "attention.output.LayerNorm"), **ln(p + "output.LayerNorm")}
  return weights


class Transformer:
  """A small GPT: token ids (batch, seq) -> logits (batch, seq, vocab). `lib` is tinycore or tinygrad."""

  def __init__(self, lib: ModuleType, weights: dict, layers: int, heads: int = 4):
    Tensor = lib.Tensor
    self.lib, self.layers, self.heads = lib, layers, heads
    self.params = {name: Tensor(value) for name, value in weights.items()}
    for t in self.params.values(): t.requires_grad = True

  def linear(self, x, name: str):
    return x.linear(self.params[name + ".weight"].T, self.params[name + ".bias"])

  def layernorm(self, x, name: str):
    return x.layernorm() * self.params[name + ".weight"] + self.params[name + ".bias"]

  def attention(self, x, i: int):
    batch, seq, dim = x.shape
    q, k, v = self.linear(x, f"h.{i}.qkv").chunk(3, dim=2)
    q, k, v = [t.reshape(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v)]
    scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(dim // self.heads))
    mask = self.lib.Tensor.ones(seq, seq).tril().reshape(1, 1, seq, seq)
    scores = (mask == 0).where(-1e9, scores)
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
    return self.linear(out, f"h.{i}.proj")

  def __call__(self, tokens):
    seq = tokens.shape[1]
    pos = self.lib.Tensor.arange(seq).reshape(1, seq)
    x = self.params["wte"][tokens] + self.params["wpe"][pos]
    for i in range(self.layers):
      x = x + self.attention(self.layernorm(x, f"h.{i}.ln1"), i)
      x = x + self.linear(self.linear(self.layernorm(x, f"h.{i}.ln2"), f"h.{i}.fc").gelu(), f"h.{i}.out")
    return self.layernorm(x, "ln_f") @ self.params["head"].T


class Encoder:
  """A BERT-style encoder: token ids (batch, seq) and an attention mask (1 = token, 0 = padding) -> hidden states.
  `params` is a dict of tensors (a loaded safetensors file moved to the device)."""

  def __init__(self, params: dict, layers: int, heads: int = 12):
    self.params, self.layers, self.heads = params, layers, heads

  def linear(self, x, name: str):
    return x.linear(self.params[name + ".weight"].T, self.params[name + ".bias"])

  def layernorm(self, x, name: str):
    return x.layernorm(eps=1e-12) * self.params[name + ".weight"] + self.params[name + ".bias"]

  def __call__(self, tokens, attention_mask):
    batch, seq = tokens.shape
    p = self.params
    x = p["embeddings.word_embeddings.weight"][tokens] + p["embeddings.position_embeddings.weight"][:seq]
    x = self.layernorm(x, "embeddings.LayerNorm")
    bias = ((1 - attention_mask.float()) * -10000.0).reshape(batch, 1, 1, seq)
    for i in range(self.layers):
      name = f"encoder.layer.{i}."
      dim = x.shape[-1]
      def heads(t): return t.reshape(batch, seq, self.heads, dim // self.heads).transpose(1, 2)
      q, k, v = (heads(self.linear(x, name + "attention.self." + n)) for n in ("query", "key", "value"))
      scores = q @ k.transpose(-2, -1) / math.sqrt(dim // self.heads) + bias
      context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
      x = self.layernorm(self.linear(context, name + "attention.output.dense") + x, name + "attention.output.LayerNorm")
      hidden = self.linear(self.linear(x, name + "intermediate.dense").gelu(), name + "output.dense")
      x = self.layernorm(hidden + x, name + "output.LayerNorm")
    return x


def torch_transformer(weights: dict, layers: int, heads: int = 4):
  """The Transformer in torch (same math, same weights): returns (forward(tokens), parameters)."""
  import torch
  import torch.nn.functional as F
  params = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}

  def linear(x, name): return F.linear(x, params[name + ".weight"], params[name + ".bias"])

  def layernorm(x, name): return F.layer_norm(x, x.shape[-1:], params[name + ".weight"], params[name + ".bias"])

  def forward(tokens):
    batch, seq = tokens.shape
    x = params["wte"][tokens] + params["wpe"][torch.arange(seq)].unsqueeze(0)
    dim = x.shape[-1]
    mask = torch.ones(seq, seq).tril()
    for i in range(layers):
      h = layernorm(x, f"h.{i}.ln1")
      q, k, v = linear(h, f"h.{i}.qkv").chunk(3, dim=2)
      q, k, v = [t.reshape(batch, seq, heads, dim // heads).transpose(1, 2) for t in (q, k, v)]
      scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(dim // heads))
      scores = scores.masked_fill(mask == 0, -1e9)
      out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
      x = x + linear(out, f"h.{i}.proj")
      x = x + linear(F.gelu(linear(layernorm(x, f"h.{i}.ln2"), f"h.{i}.fc"), approximate="tanh"), f"h.{i}.out")
    return layernorm(x, "ln_f") @ params["head"].T
  return forward, list(params.values())


def torch_encoder(weights: dict, layers: int, heads: int = 12):
  """The Encoder in torch: forward(tokens, attention_mask)."""
  import torch
  import torch.nn.functional as F
  p = {k: torch.tensor(v) for k, v in weights.items()}

  def linear(x, name): return F.linear(x, p[name + ".weight"], p[name + ".bias"])

  def layernorm(x, name): return F.layer_norm(x, x.shape[-1:], p[name + ".weight"], p[name + ".bias"], eps=1e-12)

  def forward(tokens, attention_mask):
    batch, seq = tokens.shape
    x = layernorm(p["embeddings.word_embeddings.weight"][tokens] + p["embeddings.position_embeddings.weight"][:seq],
                  "embeddings.LayerNorm")
    bias = ((1 - attention_mask.float()) * -10000.0).reshape(batch, 1, 1, seq)
    for i in range(layers):
      name = f"encoder.layer.{i}."
      dim = x.shape[-1]
      def split(t): return t.reshape(batch, seq, heads, dim // heads).transpose(1, 2)
      q, k, v = (split(linear(x, name + "attention.self." + n)) for n in ("query", "key", "value"))
      scores = q @ k.transpose(-2, -1) / math.sqrt(dim // heads) + bias
      context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
      x = layernorm(linear(context, name + "attention.output.dense") + x, name + "attention.output.LayerNorm")
      hidden = linear(F.gelu(linear(x, name + "intermediate.dense"), approximate="tanh"), name + "output.dense")
      x = layernorm(hidden + x, name + "output.LayerNorm")
    return x
  return forward
