"""The pieces the models share: activations by their config names, norms and linear layers over checkpoint tensors
(a weight, and a bias or None), as transformers computes them. A weight may be a GGUF file's QuantizedTensor: its
matmul and its row lookup dequantize inside the kernel that reads it."""
from __future__ import annotations
from typing import Any, Callable
from tinycore.models.checkpoint import CheckpointError
from tinycore.nn.gguf import QuantizedTensor
from tinycore.tensor import Tensor

# a config's hidden_act / activation_function -> the function ("gelu" is exact; the others are the tanh form)
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
  "gelu": lambda x: x.gelu(approximate="none"), "gelu_new": lambda x: x.gelu(), "gelu_fast": lambda x: x.gelu(),
  "gelu_pytorch_tanh": lambda x: x.gelu(), "relu": lambda x: x.relu(), "silu": lambda x: x.silu()}


def activation(name: str, model: str) -> Callable[[Tensor], Tensor]:
  if name not in ACTIVATIONS:
    raise CheckpointError(f"{model} activation {name!r} is not supported ({sorted(ACTIVATIONS)})")
  return ACTIVATIONS[name]


def kept_positions(x: Tensor, logits_to_keep: int) -> Tensor:
  """The hidden states (batch, n, dim) of the last `logits_to_keep` positions (0: all), before a model's head."""
  if logits_to_keep < 0: raise ValueError(f"logits_to_keep must be >= 0, got {logits_to_keep}")
  return x[:, -logits_to_keep:] if 0 < logits_to_keep < x.shape[1] else x


def layer_norm(x: Tensor, weight_bias: tuple[Tensor, Tensor], eps: float) -> Tensor:
  return x.layernorm(eps=eps) * weight_bias[0] + weight_bias[1]


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
  """x / sqrt(mean(x^2) + eps) * weight, the statistics in float32 (as transformers' LlamaRMSNorm)."""
  f = x.float()
  return (f * (f.square().mean(-1, keepdim=True) + eps).rsqrt()).cast(x.dtype) * weight


def matmul_transposed(x: Tensor, weight: Tensor | QuantizedTensor) -> Tensor:
  """x @ weight.T: a torch Linear's (out, in) weight, or a quantized one's blocks dequantized in the matmul."""
  return weight.linear(x).cast(x.dtype) if isinstance(weight, QuantizedTensor) else x @ weight.T


def linear(x: Tensor, weight_bias: tuple[Tensor | QuantizedTensor, Tensor | None]) -> Tensor:
  """x @ weight.T (+ bias)."""
  weight, bias = weight_bias
  return matmul_transposed(x, weight) if bias is None else matmul_transposed(x, weight) + bias


def embedding(table: Tensor | QuantizedTensor, ids: Tensor) -> Tensor:
  """The rows of a (vocab, dim) table that the int tensor `ids` picks."""
  return table.rows(ids) if isinstance(table, QuantizedTensor) else table[ids]


def weight_and_bias(take: Any, name: str, out: int, inp: int) -> tuple[Tensor, Tensor]:
  return take(f"{name}.weight", out, inp), take(f"{name}.bias", out)
