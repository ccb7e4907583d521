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
from tinycore.dtype import DType, dtypes
from tinycore.errors import DTypeError
from tinycore.helpers import TRAINING
from tinycore.tensor import Tensor
from tinycore.uop.ops import prod


def filled(*shape: int, value: float, requires_grad: bool | None = None, dtype: DType | None = None) -> Tensor:
  """A tensor of `value` in its own (lazy) storage. Distinct from every other tensor even when equal to it: a
  constant tensor is a shared graph node, and assigning into one must not touch another."""
  return Tensor.empty(*shape, dtype=dtype, requires_grad=requires_grad).assign(Tensor.full(shape, value, dtype=dtype))


class Linear:
  """y = x @ weight.T + bias, weight (out_features, in_features), both uniform in +-1/sqrt(in_features)."""

  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)


def same_padding(kernel_size: Sequence[int], dilation: int | Sequence[int]) -> tuple[int, ...]:
  """The padding (torch's flat order: the last dim first) that keeps the spatial size of a stride-1 convolution;
  an odd total puts the extra element after."""
  dilation = (dilation,) * len(kernel_size) if isinstance(dilation, int) else tuple(dilation)
  flat: list[int] = []
  for k, d in zip(reversed(kernel_size), reversed(dilation)):
    total = d * (k - 1)
    flat += [total // 2, total - total // 2]
  return tuple(flat)


class Conv2d:
  """Convolution layer over len(kernel_size) spatial dims (an int kernel_size: 2): weight (out_channels,
  in_channels/groups, *kernel_size), uniform in +-1/sqrt(fan_in). padding may be "same" (stride 1 only)."""

  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
               stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
               dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True):
    self.kernel_size = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"in_channels {in_channels} and out_channels {out_channels} must divide by groups={groups}")
    if isinstance(padding, str):
      if padding.lower() != "same": raise ValueError(f"padding {padding!r}: the only padding name is 'same'")
      if any(s != 1 for s in ((stride,) if isinstance(stride, int) else tuple(stride))):
        raise ValueError(f"padding='same' needs stride 1, got stride={stride}")
      padding = same_padding(self.kernel_size, dilation)
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
    # a 0-d int64 counter, as tinygrad's and torch's (a torch state dict loads into it unchanged)
    self.num_batches_tracked = filled(value=0, requires_grad=False, dtype=dtypes.int64)
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
    channels = next((t.shape[0] for t in (self.weight, getattr(self, "running_mean", None)) if t is not None), None)
    if x.ndim < 2 or (channels is not None and x.shape[1] != channels):
      raise ValueError(f"BatchNorm({channels}) needs an input (N, {channels}, ...), got shape {x.shape}")
    if TRAINING and x.numel() == x.shape[1]:  # (torch raises too; tinygrad divides by zero)
      raise ValueError(f"BatchNorm in training mode needs more than one value per channel, got shape {x.shape}")
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


BatchNorm2d = BatchNorm3d = BatchNorm


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0,
           dilation: int = 1, groups: int = 1, bias: bool = True) -> Conv2d:
  """1-d convolution layer over (N, C, L): a Conv2d with a one-element kernel."""
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                    output_padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> ConvTranspose2d:
  """1-d transposed convolution layer over (N, C, L): a ConvTranspose2d with a one-element kernel."""
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups,
                         bias)


def _affine_per_channel(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
  """x * weight + bias with one weight and bias per channel (axis 1)."""
  if weight is None: return x
  shape = (1, -1) + (1,) * (x.ndim - 2)
  return x * weight.reshape(shape) + bias.reshape(shape)


class GroupNorm:
  """Normalize each of num_groups groups of channels (axis 1) over the group's channels and spatial positions, then
  scale and shift per channel (weight ones, bias zeros)."""

  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups:
      raise ValueError(f"GroupNorm: num_channels {num_channels} is not divisible by num_groups {num_groups}")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight: Tensor | None = filled(num_channels, value=1.0) if affine else None
    self.bias: Tensor | None = filled(num_channels, value=0.0) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:
      raise ValueError(f"GroupNorm({self.num_groups}, {self.num_channels}) got an input of shape {x.shape}")
    normed = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    return _affine_per_channel(normed, self.weight, self.bias)


class InstanceNorm:
  """Normalize each channel of each sample over its spatial positions, then scale and shift per channel."""

  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight: Tensor | None = filled(num_features, value=1.0) if affine else None
    self.bias: Tensor | None = filled(num_features, value=0.0) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 3 or x.shape[1] != self.num_features:
      raise ValueError(f"InstanceNorm({self.num_features}) needs (N, {self.num_features}, ...), got {x.shape}")
    normed = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
    return _affine_per_channel(normed, self.weight, self.bias)


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


class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels (axis 1) of an (N, C, H, W) input."""

  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class RMSNorm:
  """x / sqrt(mean(x^2 over the last axis) + eps), computed in float32, times weight (ones)."""

  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight: Tensor | None = filled(dim, value=1.0) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    wide = x.float()
    out = (wide * (wide.square().mean(-1, keepdim=True) + self.eps).rsqrt()).cast(x.dtype)
    return out if self.weight is None else out * self.weight


class Embedding:
  """A lookup table: integer indices (...) -> rows of weight (vocab_size, embed_size) as (..., embed_size)."""

  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_size, self.embed_size = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

  def __call__(self, idx: Tensor) -> Tensor:
    # the row of each index: a sum over the vocabulary of where(idx == row, weight[row], 0), which the code generator
    # turns into one gated load per element (codegen.optimize.gathered_reduce); its gradient scatters back into the
    # rows. An index outside the table reads zeros, as tinygrad's one-hot lookup does.
    if not dtypes.is_int(idx.dtype): raise DTypeError(f"Embedding needs integer indices, got {idx.dtype}")
    rows = Tensor.arange(self.vocab_size, device=idx.device).reshape(self.vocab_size, 1)
    return (idx.reshape(*idx.shape, 1, 1) == rows).where(self.weight, 0).sum(-2)


class LSTMCell:
  """One LSTM step: (x (N, input_size), (h, c)) -> (h', c'), gates in torch's order (input, forget, cell, output);
  weights uniform in +-1/sqrt(hidden_size), biases zeros. Without a state it starts from zeros."""

  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    bound = 1.0 / math.sqrt(hidden_size)
    self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-bound, high=bound)
    self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-bound, high=bound)
    self.bias_ih: Tensor | None = filled(hidden_size * 4, value=0.0) if bias else None
    self.bias_hh: Tensor | None = filled(hidden_size * 4, value=0.0) if bias else None

  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    if hc is None:
      zeros = Tensor.zeros(x.shape[0], self.weight_hh.shape[1], dtype=x.dtype, device=x.device)
      hc = (zeros, zeros)
    gates = x.linear(self.weight_ih.T, self.bias_ih) + hc[0].linear(self.weight_hh.T, self.bias_hh)
    input_gate, forget_gate, cell_gate, output_gate = gates.chunk(4, dim=1)
    c = forget_gate.sigmoid() * hc[1] + input_gate.sigmoid() * cell_gate.tanh()
    return output_gate.sigmoid() * c.tanh(), c


__all__ = ["Linear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "BatchNorm", "BatchNorm2d",
           "BatchNorm3d", "GroupNorm", "InstanceNorm", "LayerNorm", "LayerNorm2d", "RMSNorm", "Embedding", "LSTMCell"]

# `from tinycore import nn; nn.optim.Adam(...)` works as in tinygrad, without importing the submodules by hand
from tinycore.nn import optim, state  # noqa: E402,F401
