"""Neural-network ops of tinygrad's Tensor API, mixed into Tensor: scaled dot-product attention, the losses that take
class indices (nll_loss, cross_entropy with label smoothing and class weights, binary_crossentropy_logits with
pos_weight), resampling (interpolate), the pad modes reflect/replicate/circular, and conv_transpose2d. All compose
existing lazy ops (movement ops, where, reductions), so they fuse and differentiate like the rest."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Sequence
from tinycore.dtype import DType, dtypes, least_upper_dtype
from tinycore.errors import ArgumentError, ShapeError

if TYPE_CHECKING:
  from tinycore.tensor import Tensor

INTERPOLATE_MODES = {"linear": None, "bilinear": 2, "trilinear": 3, "nearest": None, "nearest-exact": None}
PAD_MODES = ("reflect", "replicate", "circular")


def _tuple_of(value: int | Sequence[int], count: int, name: str) -> tuple[int, ...]:
  """An int repeated count times, or a sequence of count ints."""
  values = (value,) * count if isinstance(value, int) else tuple(value)
  if len(values) != count: raise ArgumentError(f"{name} needs an int or {count} ints, got {value}")
  return values


class TensorNN:
  """Neural-network methods of Tensor (Tensor inherits them through TensorOps)."""
  __slots__ = ()

  # ------------------------------------------------------------------ attention
  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False,
                                   enable_gqa: bool = False) -> Tensor:
    """softmax(self @ key^T / sqrt(d) + mask) @ value, self the queries (..., L, d), key (..., S, d), value
    (..., S, dv). attn_mask: bools (False masks out) or floats added to the scores; is_causal masks each query from
    the keys after it (top-left aligned, as torch). enable_gqa: key/value heads (dim -3) repeat to the query's."""
    if enable_gqa:
      key = key.repeat_interleave(self.shape[-3] // key.shape[-3], dim=-3)
      value = value.repeat_interleave(self.shape[-3] // value.shape[-3], dim=-3)
    score_dtype = least_upper_dtype(self.dtype, key.dtype, dtypes.float32)
    scores = self.cast(score_dtype) @ key.cast(score_dtype).transpose(-2, -1) * (1 / math.sqrt(self.shape[-1]))
    if is_causal:
      if attn_mask is not None: raise ArgumentError("scaled_dot_product_attention: attn_mask with is_causal=True")
      attn_mask = type(self).ones(*scores.shape[-2:], device=self.device, dtype=dtypes.bool).tril()
    if attn_mask is not None:
      scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype is dtypes.bool else scores + attn_mask
    return scores.softmax(-1).cast(self.dtype).dropout(dropout_p) @ value

  # ------------------------------------------------------------------ normalization
  def softmin(self: Tensor, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """softmax of -self (computed in `dtype` when given; ints and bools in float, where -x does not wrap)."""
    return (-self._softmax_input(dtype)).softmax(axis)

  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """self divided by its L`p` norm along dim (at least eps), as torch.nn.functional.normalize."""
    if p == 2.0: norm = self.square().sum(dim, keepdim=True).sqrt()
    elif p == 0: norm = (self != 0).sum(dim, keepdim=True).cast(self.dtype)  # the count of nonzeros, as torch
    elif math.isinf(p): norm = self.abs().max(dim, keepdim=True) if p > 0 else self.abs().min(dim, keepdim=True)
    else: norm = (self.abs() ** p).sum(dim, keepdim=True) ** (1 / p)
    return self / norm.maximum(eps)

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                axis: int | Sequence[int] = 1) -> Tensor:
    """(self - mean) * invstd * weight + bias, the statistics and parameters laid along axis (tinygrad's op)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % self.ndim for a in axes)
    shape = tuple(s if d in axes else 1 for d, s in enumerate(self.shape))
    out = self - mean.reshape(shape)
    if weight is not None: out = out * weight.reshape(shape)
    out = out * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return out if bias is None else out + bias.reshape(shape)

  # ------------------------------------------------------------------ losses
  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
               reduction: str = "mean") -> Tensor:
    """The negative log likelihood of log-probabilities self (N, C, ...) (or (C,)) at class indices Y (N, ...) (or
    ()); weight (C,) scales each class, and "mean" divides by the weights of the targets counted; targets equal to
    ignore_index count for nothing."""
    if self.ndim == 1: return self.unsqueeze(0).nll_loss(Y.unsqueeze(0), weight, ignore_index, reduction)
    if Y.shape != self.shape[:1] + self.shape[2:]:
      raise ShapeError(f"nll_loss: targets of shape {Y.shape} for log-probabilities of shape {self.shape}")
    picked = -self.gather(1, Y.unsqueeze(1)).squeeze(1)
    target_weight = self._target_weight(Y, weight, ignore_index)
    loss = picked * target_weight
    return loss.sum() / target_weight.sum() if reduction == "mean" else type(self)._reduce_loss(loss, reduction)

  def _target_weight(self: Tensor, Y: Tensor, weight: Tensor | None, ignore_index: int | None) -> Tensor:
    """Each target's class weight (1 without weights), 0 where the target is ignore_index."""
    picked = Y.ones_like(dtype=self.dtype) if weight is None else weight.cast(self.dtype).gather(
      0, Y.flatten()).reshape(Y.shape)
    return picked if ignore_index is None else (Y != ignore_index).where(picked, 0)

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0,
                    weight: Tensor | None = None, ignore_index: int | None = None) -> Tensor:
    """Cross-entropy of logits self (N, C, ...) (or (C,)) against class indices Y (N, ...) or probabilities (like
    self), as torch.nn.functional.cross_entropy: label_smoothing mixes in the uniform distribution, weight (C,)
    scales each class ("mean" over class indices divides by the targets' weights), targets equal to ignore_index
    count for nothing."""
    if not 0.0 <= label_smoothing <= 1.0:
      raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    classes_axis = 1 if self.ndim > 1 else 0
    classes = self.shape[classes_axis]
    log_probs = self.log_softmax(classes_axis)
    class_weight = 1 if weight is None else weight.cast(self.dtype).reshape(
      (classes,) + (1,) * (self.ndim - classes_axis - 1))
    if Y.shape == self.shape:  # probabilities
      smoothed = Y * (1 - label_smoothing) + label_smoothing / classes
      return type(self)._reduce_loss(-(log_probs * smoothed * class_weight).sum(classes_axis), reduction)
    if Y.shape != self.shape[:classes_axis] + self.shape[classes_axis + 1:]:
      raise ShapeError(f"cross_entropy: targets of shape {Y.shape} for logits of shape {self.shape}")
    loss = log_probs.nll_loss(Y, weight, ignore_index, "none")
    target_weight = self._target_weight(Y, weight, ignore_index)
    if label_smoothing:  # (without smoothing, no 0 * -inf from a masked class's log-probability: torch's value)
      smooth = -(log_probs * class_weight).sum(classes_axis)
      if ignore_index is not None: smooth = (Y != ignore_index).where(smooth, 0)
      loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)
    return loss.sum() / target_weight.sum() if reduction == "mean" else type(self)._reduce_loss(loss, reduction)

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean",
                                 pos_weight: Tensor | None = None) -> Tensor:
    """binary_crossentropy of sigmoid(self), from the logits through logsigmoid (stable for large |x|);
    pos_weight scales the positive term, as torch's BCEWithLogitsLoss."""
    log_p = self.logsigmoid()
    positive = log_p * Y
    if pos_weight is not None: positive = positive * pos_weight
    # log(1 - sigmoid(x)) = logsigmoid(x) - x: one logsigmoid for both terms
    loss = -(positive + (1 - Y) * (log_p - self))
    return type(self)._reduce_loss(loss, reduction)

  # ------------------------------------------------------------------ resampling
  def interpolate(self: Tensor, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resample the last len(size) dims to size (any leading dims are batch): mode "linear" (with 2 or 3 dims
    bilinear/trilinear; "bilinear"/"trilinear" also name it), "nearest" or "nearest-exact", as torch's
    interpolate. Each dim is a product with a (new, old) weight matrix, so gradients flow to the input."""
    if mode not in INTERPOLATE_MODES:
      raise ArgumentError(f"interpolate mode must be one of {', '.join(INTERPOLATE_MODES)}, got {mode!r}")
    size = tuple(size)
    if not size or len(size) > self.ndim or any(not isinstance(s, int) or s < 0 for s in size):
      raise ShapeError(f"interpolate size {size} for a tensor of shape {self.shape}")
    if INTERPOLATE_MODES[mode] not in (None, len(size)):
      raise ShapeError(f"{mode} interpolates {INTERPOLATE_MODES[mode]} dims, size has {len(size)}")
    if align_corners and "nearest" in mode: raise ArgumentError("align_corners needs a linear interpolate mode")
    nearest = "nearest" in mode
    axes = range(self.ndim - len(size), self.ndim)
    if self.dtype is dtypes.uint8 and not nearest:
      # images: torch's uint8 resampling, one dim at a time from the last, each pass rounded to uint8 in fixed point
      x = self
      for axis, new in reversed(list(zip(axes, size))): x = x._linear_uint8_pass(axis, new, align_corners)
      return x
    x = self if nearest or dtypes.is_float(self.dtype) else self.float()
    for axis, new in zip(axes, size):
      if nearest and (picked := x._nearest_by_movement(axis, new, mode)) is not None:
        x = picked
        continue
      rows = x.transpose(axis, -1).unsqueeze(-2)
      # each output reads one or two inputs: selects summed over the inputs, which the code generator turns into
      # gathers (codegen.optimize.gathered_reduce); selects, not products with weights, so inf stays inf
      reads = [chosen.where(rows, 0).sum(-1).cast(x.dtype) * (1 if weight is None else weight)
               for chosen, weight in x._resample_sources(self.shape[axis], new, mode, align_corners)]
      x = sum(reads[1:], reads[0]).cast(x.dtype).transpose(axis, -1)
    # ints interpolate in float and round to the nearest (torch's uint8 resampling rounds too)
    return x.cast(self.dtype) if nearest or dtypes.is_float(self.dtype) else x.round().cast(self.dtype)

  def _nearest_by_movement(self: Tensor, axis: int, new: int, mode: str) -> Tensor | None:
    """Nearest resampling of `axis` to `new` by movement ops alone where the sources are exactly every k-th input or
    each input k times: an upscale by a power of two k (output i reads input i // k: the float index computation
    i * (1 / k) is exact) or a downscale by a whole factor k (output i reads input i * k, "nearest-exact" i * k +
    k // 2). None otherwise (the general path computes each source index)."""
    old = self.shape[axis]
    if old == 0 or new == 0: return None
    moved = self.transpose(axis, -1)
    lead = moved.shape[:-1]
    if new > old and new % old == 0 and (k := new // old) & (k - 1) == 0:
      out = moved.unsqueeze(-1).expand(*lead, old, k).reshape(*lead, new)
    elif old > new and old % new == 0:
      k = old // new
      out = moved.reshape(*lead, new, k)[..., k // 2 if mode == "nearest-exact" else 0]
    elif old == new: out = moved
    else: return None
    return out.transpose(axis, -1)

  def _linear_uint8_pass(self: Tensor, axis: int, new: int, align_corners: bool) -> Tensor:
    """Linear resampling of uint8 `axis` to `new` as torch's uint8 kernels compute it (equal to theirs on every
    element): each output's two weights, computed on the host, scaled to integers of `bits` fractional bits (as many
    as keep the largest weight under 2^15), the weighted sum of the two inputs rounded half up and clamped to
    0..255."""
    from tinycore.tensor import Tensor
    old = self.shape[axis]
    lows, highs, weights = [], [], []
    for i in range(new):
      if align_corners: source = i * ((old - 1) / (new - 1)) if new > 1 else 0.0
      else: source = max((i + 0.5) * (old / new) - 0.5, 0.0)
      low = min(int(math.floor(source)), old - 1)
      lows.append(low)
      highs.append(min(low + 1, old - 1))
      weights.append(source - low)
    largest = max([1.0 - w for w in weights] + weights, default=1.0)
    bits = next((b for b in range(22) if int(0.5 + largest * (1 << (b + 1))) >= 1 << 15), 22)
    scaled = [(math.floor((1.0 - w) * (1 << bits) + 0.5), math.floor(w * (1 << bits) + 0.5)) for w in weights]
    rows = self.transpose(axis, -1).cast(dtypes.int32).unsqueeze(-2)  # (..., 1, old)
    inputs = Tensor.arange(old, device=self.device, dtype=dtypes.int32)
    def weighted(picks: list[int], factors: list[int]) -> Tensor:
      chosen = Tensor(picks, device=self.device, dtype=dtypes.int32).reshape(new, 1) == inputs
      return chosen.where(rows, 0).sum(-1, dtype=dtypes.int32) * Tensor(factors, device=self.device, dtype=dtypes.int32)
    total = weighted(lows, [a for a, _ in scaled]) + weighted(highs, [b for _, b in scaled]) + (1 << bits >> 1)
    return (total // (1 << bits)).clip(0, 255).cast(dtypes.uint8).transpose(axis, -1)

  def _resample_sources(self: Tensor, old: int, new: int, mode: str,
                        align_corners: bool) -> list[tuple[Tensor, Tensor | None]]:
    """Which input each of `new` outputs reads, as (new, old) bool matrices with the weight of that read per output
    (None for nearest: one read of weight 1): the lower and the upper neighbour for linear."""
    from tinycore.tensor import Tensor
    out = Tensor.arange(new, device=self.device, dtype=dtypes.float32).reshape(new, 1)
    inputs = Tensor.arange(old, device=self.device, dtype=dtypes.int32).reshape(1, old)
    if "nearest" in mode:
      scale = old / new if new else 0.0
      source = ((out + 0.5) * scale if mode == "nearest-exact" else out * scale).floor().minimum(old - 1)
      return [(inputs == source.cast(dtypes.int32), None)]
    if align_corners: source = out * ((old - 1) / (new - 1) if new > 1 else 0.0)
    else: source = ((out + 0.5) * (old / new if new else 0.0) - 0.5).maximum(0)
    low = source.floor().minimum(old - 1)
    high = (low + 1).minimum(old - 1)
    frac = (source - low).reshape(new).cast(self.dtype)
    return [(inputs == low.cast(dtypes.int32), 1 - frac), (inputs == high.cast(dtypes.int32), frac)]

  # ------------------------------------------------------------------ padding modes
  def _pad_with_mode(self: Tensor, pairs: Sequence[tuple[int, int]], mode: str) -> Tensor:
    """Pad each dim by (before, after) reflecting ("reflect": the edge not repeated, numpy's "reflect"),
    repeating the edge ("replicate") or wrapping around ("circular"); negative amounts crop, as in pad."""
    if mode not in PAD_MODES: raise NotImplementedError(f"pad mode {mode!r}: constant, {', '.join(PAD_MODES)}")
    x = self
    if mode == "circular":  # crop first, then wrap around what is left
      x = x.pad([(min(b, 0), min(a, 0)) for b, a in pairs])
    for dim, (before, after) in enumerate(pairs):
      before, after = max(before, 0), max(after, 0)
      if before or after: x = x._pad_dim_with_mode(dim, before, after, mode)
    if mode != "circular": x = x.pad([(min(b, 0), min(a, 0)) for b, a in pairs])
    return x

  def _pad_dim_with_mode(self: Tensor, dim: int, before: int, after: int, mode: str) -> Tensor:
    n = self.shape[dim]
    limit = n - 1 if mode == "reflect" else n
    if mode != "replicate" and (before > limit or after > limit):
      raise ShapeError(f"{mode} padding ({before}, {after}) of dim {dim} needs amounts <= {limit} (its size is {n})")
    if mode == "replicate" and n == 0: raise ShapeError(f"replicate padding of dim {dim}, which is empty")

    def part(start: int, stop: int) -> Tensor:
      return self.shrink([(start, stop) if d == dim else None for d in range(self.ndim)])
    if mode == "reflect": head, tail = part(1, before + 1).flip(dim), part(n - 1 - after, n - 1).flip(dim)
    elif mode == "circular": head, tail = part(n - before, n), part(0, after)
    else:
      def edge(start: int, count: int) -> Tensor:
        return part(start, start + 1).expand([count if d == dim else s for d, s in enumerate(self.shape)])
      head, tail = edge(0, before), edge(n - 1, after)
    return type(self).cat(*[t for t in (head, self, tail) if t.shape[dim]], dim=dim)

  # ------------------------------------------------------------------ pooling indices
  def _pool_argmax(self: Tensor, windows: Tensor, sides: Sequence[tuple[int, int, int]], kernel: tuple[int, int],
                   stride: tuple[int, int], dilation: tuple[int, int]) -> Tensor:
    """For max_pool2d(return_indices=True): the flat (H*W) index of each window's first maximum. Positions count
    down (H*W ... 1, padding 0, ceil_mode's extra right padding too: `sides` as _pool_windows gives them), so the
    first maximum has the largest count and padding never wins."""
    from tinycore.tensor import Tensor
    h, w = self.shape[-2:]
    countdown = Tensor.arange(h * w, 0, -1, device=self.device, dtype=dtypes.int32).reshape(h, w)
    counts = countdown.pad(tuple((b, a + e) for b, a, e in sides), value=0)._pool(kernel, stride, dilation)
    is_max = windows == windows.max((-2, -1), keepdim=True)
    return (h * w - is_max.where(counts, 0).max((-2, -1))).cast(dtypes.int32)

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: int | Sequence[int] = (2, 2),
                   stride: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1,
                   padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """The partial inverse of max_pool2d: each pooled value goes back to the place its index names (torch's
    max_unpool2d), zeros elsewhere, in a plane of output_size (default: the size max_pool2d's arguments map to
    self's)."""
    if self.shape != indices.shape: raise ShapeError(f"max_unpool2d: indices {indices.shape} for values {self.shape}")
    if output_size is None:
      kernel, dilation = _tuple_of(kernel_size, 2, "kernel_size"), _tuple_of(dilation, 2, "dilation")
      stride = kernel if stride is None else _tuple_of(stride, 2, "stride")
      pads = _tuple_of(padding, 2, "padding")
      output_size = tuple((i - 1) * s - 2 * p + d * (k - 1) + 1
                          for i, k, s, d, p in zip(self.shape[-2:], kernel, stride, dilation, pads))
    plane = tuple(output_size)[-2:]
    lead, count = self.shape[:-2], plane[0] * plane[1]
    flat_values = self.reshape(*lead, -1, 1)
    hits = indices.reshape(*lead, -1, 1) == type(self).arange(count, device=self.device, dtype=indices.dtype)
    # overlapping windows may name one place twice, always with its one value: take it once (a max, not a sum)
    placed = hits.where(flat_values, dtypes.min(self.dtype)).max(-2)
    return hits.any(-2).where(placed, 0).cast(self.dtype).reshape(*lead, *plane)

  # ------------------------------------------------------------------ transposed convolution
  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                       stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                       padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
    """The transposed convolution (the gradient of conv2d with respect to its input) over any number of spatial
    dims, self (N, C_in, *spatial), weight (C_in, C_out/groups, *kernel), as torch's conv_transpose: the input
    spread out by stride, padded by dilation*(k-1) - padding (plus output_padding after), convolved with the flipped
    kernel."""
    dims = weight.ndim - 2
    if dims < 1 or self.ndim != weight.ndim:
      raise ShapeError(f"conv_transpose2d needs input (N, C_in, *spatial) and weight (C_in, C_out/groups, *kernel) "
                       f"with the same number of dims, got {self.shape} and {weight.shape}")
    cin, cout_group, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    if self.shape[1] != cin or cin % groups:
      raise ShapeError(f"conv_transpose2d channels: input {self.shape}, weight {weight.shape}, groups={groups}")
    stride, dilation = _tuple_of(stride, dims, "stride"), _tuple_of(dilation, dims, "dilation")
    output_padding = _tuple_of(output_padding, dims, "output_padding")
    padding = type(self)._spatial_padding(padding, dims)  # (before, after) per dim, as conv2d's padding forms
    if any(o >= max(s, d) for o, s, d in zip(output_padding, stride, dilation)):
      raise ArgumentError(f"output_padding {output_padding} must be smaller than stride {stride} or dilation "
                          f"{dilation}")
    x = self._spread(stride)
    sides = [(d * (k - 1) - before, d * (k - 1) - after + o)
             for k, d, (before, after), o in zip(kernel, dilation, padding, output_padding)]
    x = x.pad(((0, 0), (0, 0), *sides))
    # the spread input in its own buffer, the flipped kernel too: the convolution then reads plain dense arrays (read
    # through the spreading and flipping views, its tiles were gathers: a (4,16,56,56) 7x7 stride-2 layer took 15 s)
    if any(s > 1 for s in stride): x = x.contiguous()
    flipped = weight.reshape(groups, cin // groups, cout_group, *kernel).transpose(1, 2)
    flipped = flipped.reshape(groups * cout_group, cin // groups, *kernel).flip(*range(2, 2 + dims)).contiguous()
    return x.conv2d(flipped, bias, groups=groups, dilation=dilation)

  def _spread(self: Tensor, stride: tuple[int, ...]) -> Tensor:
    """(N, C, *spatial) with stride-1 zeros between neighbours along each spatial dim: n -> (n-1)*s + 1."""
    x = self
    for dim, step in enumerate(stride, start=2):
      n = x.shape[dim]
      if step == 1 or n == 0: continue
      gaps = tuple((0, step - 1) if d == dim + 1 else (0, 0) for d in range(x.ndim + 1))
      x = x.unsqueeze(dim + 1).pad(gaps).reshape(*x.shape[:dim], n * step, *x.shape[dim + 1:])
      x = x.shrink(tuple((0, (n - 1) * step + 1) if d == dim else None for d in range(x.ndim)))
    return x
