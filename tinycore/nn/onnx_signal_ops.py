"""ONNX's signal operators: DFT, STFT and MelWeightMatrix, written with the public Tensor API (registered into
`onnx_ops.OPS`).

A transform along one axis is two matrix products with the cosines and sines of 2*pi*(n*k mod N)/N (the product
reduced mod N first, so the angles stay exact): O(N^2) per transform, like a matmul of that size, in float64 (ONNX's
definition is numpy's float64 FFT; in float32 a frequency that cancels to 0 comes out as 1e-5).
A complex tensor is ONNX's: a last dim of 2 (real, imaginary); a real one has a last dim of 1.
"""
from __future__ import annotations
import math
from tinycore.dtype import dtypes
from tinycore.nn.onnx_ops import first_value, onnx_type, positive_axis, register
from tinycore.tensor import Tensor


def _angles(rows: int, cols: int, length: int, device: str) -> tuple[Tensor, Tensor]:
  """cos and sin of 2*pi*(r*c mod length)/length for r < rows, c < cols."""
  r = Tensor.arange(rows, device=device, dtype=dtypes.int64).reshape(rows, 1)
  c = Tensor.arange(cols, device=device, dtype=dtypes.int64).reshape(1, cols)
  angle = ((r * c) % length).cast(dtypes.float64) * (2 * math.pi / length)
  return angle.cos(), angle.sin()


def _fit(t: Tensor, size: int) -> Tensor:
  """t's last dim cut or zero-padded to size (numpy's fft n=)."""
  if t.shape[-1] >= size: return t[..., :size]
  return t.pad([(0, 0)] * (t.ndim - 1) + [(0, size - t.shape[-1])])


def fourier(x: Tensor, axis: int, length: int | None, inverse: bool, onesided: bool) -> Tensor:
  """ONNX's DFT of x [..., 1 or 2] along `axis` (of x, not its last dim): forward (onesided: the first N//2+1
  frequencies), inverse (divided by N), or with inverse and onesided the real signal of a one-sided spectrum."""
  axis = positive_axis(axis, x.ndim)
  if axis == x.ndim - 1: raise ValueError("the DFT axis cannot be the last (real, imaginary) dim")
  real = x[..., 0].cast(dtypes.float64)
  imag = x[..., 1].cast(dtypes.float64) if x.shape[-1] == 2 else None
  perm = [d for d in range(real.ndim) if d != axis] + [axis]
  real = real.permute(perm)
  imag = imag.permute(perm) if imag is not None else None
  n_in = real.shape[-1]
  if inverse and onesided:
    size = length or 2 * (n_in - 1)
    bins = size // 2 + 1
    real = _fit(real, bins)
    cos, sin = _angles(bins, size, size, x.device)
    # each frequency but 0 (and N/2 for an even N) stands for itself and its mirror image
    doubled = [1.0] + [2.0 if 2 * k != size else 1.0 for k in range(1, bins)]
    weights = Tensor(doubled, device=x.device, dtype=dtypes.float64).reshape(-1, 1)
    out = real @ (cos * weights)
    if imag is not None: out = out - _fit(imag, bins) @ (sin * weights)
    parts = [out / size]
  else:
    size = length or n_in
    outs = size // 2 + 1 if onesided and not inverse else size
    real = _fit(real, size)
    imag = _fit(imag, size) if imag is not None else None
    cos, sin = _angles(size, outs, size, x.device)
    sign = 1.0 if inverse else -1.0  # e^(sign * i * angle)
    out_re, out_im = real @ cos, (real @ sin) * sign
    if imag is not None: out_re, out_im = out_re - (imag @ sin) * sign, out_im + imag @ cos
    parts = [out_re / size, out_im / size] if inverse else [out_re, out_im]
  back = [perm.index(d) for d in range(len(perm))]
  return Tensor.stack(*[p.permute(back) for p in parts], dim=-1).cast(x.dtype)


@register("DFT")
def dft(x, dft_length=None, axis_=None, axis=1, inverse=0, onesided=0, ctx=None):
  """Opset 17 takes the axis as an attribute (default 1), opset 20 as an input (default -2)."""
  length = int(first_value(ctx.value(dft_length))) if dft_length is not None else None
  if ctx.opset >= 20: axis = int(first_value(ctx.value(axis_))) if axis_ is not None else -2
  return fourier(x, axis, length, bool(inverse), bool(onesided))


@register("STFT")
def stft(signal, frame_step, window=None, frame_length=None, onesided=1, ctx=None):
  """Frames of the signal [batch, length, 1 or 2] every frame_step samples, times the window, each transformed:
  [batch, frames, bins, 2]."""
  step = int(first_value(ctx.value(frame_step)))
  size = int(first_value(ctx.value(frame_length))) if frame_length is not None else \
      window.shape[0] if window is not None else signal.shape[-2]
  frames = 1 + (signal.shape[-2] - size) // step
  starts = Tensor.arange(frames, device=signal.device, dtype=dtypes.int64).reshape(-1, 1) * step
  index = starts + Tensor.arange(size, device=signal.device, dtype=dtypes.int64).reshape(1, -1)
  framed = signal[:, index]  # [batch, frames, size, 1 or 2]
  if window is not None: framed = framed * window.cast(signal.dtype).reshape(size, 1)
  return fourier(framed, 2, size, False, bool(onesided))


@register("MelWeightMatrix")
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, output_datatype=1,
                      ctx=None):
  """[dft_length // 2 + 1, num_mel_bins] triangular filters: the band edges are host arithmetic on the five
  scalars (float64, as ONNX's definition), the weights a comparison of each bin with them."""
  mels, length, rate = (int(first_value(ctx.value(t))) for t in (num_mel_bins, dft_length, sample_rate))
  low, high = (float(first_value(ctx.value(t))) for t in (lower_edge_hertz, upper_edge_hertz))
  def to_mel(hz: float) -> float: return 2595 * math.log1p(hz / 700) / math.log(10)
  low_mel, high_mel = to_mel(low), to_mel(high)
  step = (high_mel - low_mel) / (mels + 2)
  edges = [int(((length + 1) * (700 * math.expm1((k * step + low_mel) / 2595 * math.log(10)))) // rate)
           for k in range(mels + 2)]
  dev = ctx.device
  j = Tensor.arange(length // 2 + 1, device=dev, dtype=dtypes.float32).reshape(-1, 1)
  left, center, right = (Tensor([float(e) for e in edges[k:k + mels]], device=dev).reshape(1, -1) for k in range(3))
  rising = (center == left).where((j == center).cast(dtypes.float32), (j - left) / (center - left).maximum(1.0))
  rising = ((j >= left) & (j <= center)).where(rising, 0.0)
  falling = ((j >= center) & (j < right)).where((right - j) / (right - center).maximum(1.0), 0.0)
  out = ((j >= center) & (j < right)).where(falling, rising)
  return out.cast(onnx_type(output_datatype))
