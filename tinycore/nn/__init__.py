"""tinycore.nn: layers (tinygrad's names and initializations), optimizers (``tinycore.nn.optim``) and model state
(``tinycore.nn.state``: safetensors through the DISK device, state dicts).

    from tinycore import Tensor, nn
    class Net:
      def __init__(self): self.l1, self.l2 = nn.Linear(64, 32), nn.Linear(32, 10)
      def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu())

A layer is a plain object holding tensors as attributes; ``nn.state.get_parameters(model)`` finds them.
"""
from __future__ import annotations
import math
from typing import Sequence
from tinycore.helpers import TRAINING
from tinycore.tensor import Tensor
from tinycore.uop.ops import prod


def filled(*shape: int, value: float, requires_grad: bool | None = None) -> Tensor:
  """A tensor of `value` in its own (lazy) storage. Distinct from every other tensor even when equal to it: a
  constant tensor is a shared graph node, and assigning into one must not touch another."""
  return Tensor.empty(*shape, requires_grad=requires_grad).assign(Tensor.full(shape, value))


class Linear:
  """y = x @ weight.T + bias, weight (out_features, in_features), both uniform in +-1/sqrt(in_features)."""

  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
  """2-d convolution layer: weight (out_channels, in_channels/groups, kh, kw), uniform in +-1/sqrt(fan_in)."""

  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int = 1,
               padding: int | Sequence[int] = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
    self.kernel_size = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    bound = 1 / math.sqrt(in_channels * prod(self.kernel_size) // groups)
    self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                    padding=self.padding)


class ConvTranspose2d(Conv2d):
  """Transposed 2-d convolution layer: weight (in_channels, out_channels/groups, kh, kw), uniform in
  +-1/sqrt(fan_in) with fan_in = out_channels/groups * kh * kw (torch's, since the weight is laid out the other way)."""

  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int = 1,
               padding: int | Sequence[int] = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1,
               bias: bool = True):
    self.kernel_size = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    self.output_padding = output_padding
    bound = 1 / math.sqrt(out_channels * prod(self.kernel_size) // groups)
    self.weight = Tensor.uniform(in_channels, out_channels // groups, *self.kernel_size, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride,
                              dilation=self.dilation, padding=self.padding, output_padding=self.output_padding)


class BatchNorm:
  """Batch normalization over every axis but 1 (the channels). In training mode (``Tensor.train()`` or
  ``Context(TRAINING=1)``) it normalizes with the batch's statistics and updates the running ones; otherwise it
  uses the running statistics."""

  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = filled(sz, value=1.0) if affine else None
    self.bias: Tensor | None = filled(sz, value=0.0) if affine else None
    self.num_batches_tracked = filled(1, value=0.0, requires_grad=False)
    if track_running_stats:
      self.running_mean = filled(sz, value=0.0, requires_grad=False)
      self.running_var = filled(sz, value=1.0, requires_grad=False)

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and (biased) variance per channel: the batch's in training mode, else the running ones."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    if self.track_running_stats and not TRAINING: return self.running_mean, self.running_var
    mean = x.mean(axes)
    var = (x - mean.reshape(1, -1, *[1] * (x.ndim - 2))).square().mean(axes)
    return mean, var

  def __call__(self, x: Tensor) -> Tensor:
    mean, var = self.calc_stats(x)
    if self.track_running_stats and TRAINING:
      count = x.numel() // x.shape[1]
      momentum = self.momentum
      self.running_mean.assign((1 - momentum) * self.running_mean + momentum * mean.detach())
      unbiased = var.detach() * (count / max(count - 1, 1))
      self.running_var.assign((1 - momentum) * self.running_var + momentum * unbiased)
      self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = (var + self.eps).rsqrt()
    if self.weight is not None: scale = scale * self.weight
    out = (x - mean.reshape(shape)) * scale.reshape(shape)
    return out if self.bias is None else out + self.bias.reshape(shape)


BatchNorm2d = BatchNorm


class LayerNorm:
  """Normalize over the last len(normalized_shape) axes, then scale and shift (weight ones, bias zeros)."""

  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
    self.weight = filled(*self.normalized_shape, value=1.0) if elementwise_affine else None
    self.bias = filled(*self.normalized_shape, value=0.0) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[-len(self.normalized_shape):] != self.normalized_shape:
      raise ValueError(f"LayerNorm{self.normalized_shape} got an input of shape {x.shape}")
    x = x.layernorm(self.axis, self.eps)
    return x if self.weight is None else x * self.weight + self.bias


class Embedding:
  """A lookup table: integer indices (...) -> rows of weight (vocab_size, embed_size) as (..., embed_size)."""

  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_size, self.embed_size = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

  def __call__(self, idx: Tensor) -> Tensor:
    # a one-hot matmul: gathers the rows, and its gradient scatters back into them
    return idx.one_hot(self.vocab_size).cast(self.weight.dtype) @ self.weight


__all__ = ["Linear", "Conv2d", "ConvTranspose2d", "BatchNorm", "BatchNorm2d", "LayerNorm", "Embedding"]
