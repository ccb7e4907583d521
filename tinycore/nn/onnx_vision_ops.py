"""ONNX operators that sample images at computed coordinates or pick boxes: GridSample, DeformConv, RoiAlign,
Col2Im and NonMaxSuppression, written with the public Tensor API (registered into `onnx_ops.OPS`).

Sampling gathers the input, flattened over its spatial dims, at computed flat indices: one gather per tap (2 per dim
for linear interpolation, 4 for cubic), each weighted and summed, so nothing is copied to the host but a box count.
"""
from __future__ import annotations
import itertools
import math
from tinycore.dtype import dtypes
from tinycore.nn.onnx_ops import first_value, register
from tinycore.tensor import Tensor

CUBIC_A = -0.75  # the Keys cubic convolution coefficient GridSample uses (as torch)


def gather_flat(x_flat: Tensor, index: Tensor) -> Tensor:
  """x_flat (N, C, P) at index (N, Q) -> (N, C, Q)."""
  n, c, _ = x_flat.shape
  return x_flat.gather(2, index.reshape(n, 1, -1).expand(n, c, index.shape[-1]))


def reflect(x: Tensor, low: float, high: float) -> Tensor:
  """x reflected by the near border until it lies within [low, high] (GridSample's reflection padding)."""
  span = high - low
  if span <= 0: return x.full_like(low)
  below, above = x < low, x > high
  distance = below.where(low - x, x - high)
  folds = (distance / span).floor()
  rest = distance - folds * span
  even = (folds - (folds * 0.5).floor() * 2) == 0
  from_low, from_high = low + rest, high - rest
  reflected = below.where(even.where(from_low, from_high), even.where(from_high, from_low))
  return (below | above).where(reflected, x)


def _keys_cubic(t: Tensor) -> list[Tensor]:
  """The 4 cubic convolution weights of the taps at floor - 1 .. floor + 2 for t = x - floor(x)."""
  a = CUBIC_A
  def near(d: Tensor) -> Tensor: return ((a + 2) * d - (a + 3)) * d * d + 1
  def far(d: Tensor) -> Tensor: return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
  return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _taps(coord: Tensor, mode: str) -> list[tuple[Tensor, Tensor]]:
  """(integer pixel index as float, weight) of each tap along one dim."""
  if mode == "nearest": return [(coord.trunc(), coord.full_like(1.0))]
  base = coord.floor()
  t = coord - base
  if mode == "linear": return [(base, 1 - t), (base + 1, t)]
  return [(base + k - 1, w) for k, w in enumerate(_keys_cubic(t))]


def sample(x: Tensor, coords: list[Tensor], mode: str, padding: str, bounds: list[tuple[float, float]]) -> Tensor:
  """x (N, C, *dims) interpolated at pixel coordinates coords[i] (N, *out) along dim i -> (N, C, *out), in float32.
  Pixels outside the input are 0 (padding "zeros"), the nearest edge pixel ("border") or reflected ("reflection")."""
  n, c, *dims = x.shape
  out_shape = coords[0].shape[1:]
  x_flat = x.cast(dtypes.float32).reshape(n, c, -1)
  strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
  per_dim = [_taps(coord.reshape(n, -1), mode) for coord in coords]
  out = None
  for combo in itertools.product(*per_dim):
    flat, weight = None, None
    for (pixel, w), size, stride, (low, high) in zip(combo, dims, strides, bounds):
      if padding == "zeros":
        w = ((pixel >= 0) & (pixel < size)).where(w, 0.0)
        pixel = pixel.clip(0, size - 1)
      elif padding == "border": pixel = pixel.clip(0, size - 1)
      else: pixel = reflect(pixel, low, high).trunc().clip(0, size - 1)
      term = pixel.cast(dtypes.int32) * stride
      flat = term if flat is None else flat + term
      weight = w if weight is None else weight * w
    value = gather_flat(x_flat, flat) * weight.reshape(n, 1, -1)
    out = value if out is None else out + value
  return out.reshape(n, c, *out_shape)


@register("GridSample")
def grid_sample(x, grid, align_corners=0, mode="linear", padding_mode="zeros"):
  """Opset 16's bilinear/bicubic are 20's linear/cubic; any number of spatial dims (grid's last dim is (x, y, ...),
  the reverse of the input's dims)."""
  mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
  dims = x.shape[2:]
  g = grid.cast(dtypes.float32)
  coords, bounds = [], []
  for i, size in enumerate(dims):
    normalized = g[..., len(dims) - 1 - i]
    pixel = (normalized + 1) / 2 * (size - 1) if align_corners else ((normalized + 1) * size - 1) / 2
    if mode == "nearest": pixel = pixel.round()
    low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
    outside = (pixel < low) | (pixel > high)
    if padding_mode == "border": pixel = outside.where(pixel.clip(0, size - 1), pixel)
    elif padding_mode == "reflection": pixel = outside.where(reflect(pixel, low, high), pixel)
    coords.append(pixel)
    bounds.append((low, high))
  return sample(x, coords, mode, padding_mode, bounds).cast(x.dtype)


@register("DeformConv")
def deform_conv(x, w, offset, b=None, mask=None, dilations=None, group=1, kernel_shape=None, offset_group=1, pads=None,
                strides=None, ctx=None):
  """A 2-d convolution whose taps sit at offsets from the regular grid, each sampled bilinearly (zeros outside) and
  scaled by the mask."""
  if x.ndim != 4: raise ctx.error(f"DeformConv of a {x.ndim - 2}-d input is not supported (2-d only)")
  n, c, height, width = x.shape
  kh, kw = kernel_shape or w.shape[2:]
  sh, sw = strides or (1, 1)
  dh, dw = dilations or (1, 1)
  top, left = (pads or (0, 0, 0, 0))[:2]
  oh, ow = offset.shape[2:]
  taps = kh * kw
  off = offset.reshape(n, offset_group, kh, kw, 2, oh, ow).cast(dtypes.float32)
  rows = (Tensor.arange(kh, device=x.device) * dh).reshape(1, 1, kh, 1, 1, 1)
  cols = (Tensor.arange(kw, device=x.device) * dw).reshape(1, 1, 1, kw, 1, 1)
  out_rows = (Tensor.arange(oh, device=x.device) * sh - top).reshape(1, 1, 1, 1, oh, 1)
  out_cols = (Tensor.arange(ow, device=x.device) * sw - left).reshape(1, 1, 1, 1, 1, ow)
  ys = (off[:, :, :, :, 0] + rows + out_rows).reshape(n * offset_group, -1)
  xs = (off[:, :, :, :, 1] + cols + out_cols).reshape(n * offset_group, -1)
  grouped = x.reshape(n * offset_group, c // offset_group, height, width)
  bounds = [(0.0, height - 1.0), (0.0, width - 1.0)]
  columns = sample(grouped, [ys, xs], "linear", "zeros", bounds)
  columns = columns.reshape(n, offset_group, c // offset_group, taps, oh * ow)
  if mask is not None: columns = columns * mask.reshape(n, offset_group, 1, taps, oh * ow).cast(dtypes.float32)
  columns = columns.reshape(n, group, (c // group) * taps, oh * ow)
  weights = w.cast(dtypes.float32).reshape(group, w.shape[0] // group, -1)
  out = (weights.unsqueeze(0) @ columns).reshape(n, w.shape[0], oh, ow)
  if b is not None: out = out + b.cast(dtypes.float32).reshape(1, -1, 1, 1)
  return out.cast(x.dtype)


def _roi_axis(start: Tensor, size: Tensor, pooled: int, grid: Tensor, grid_max: int, limit: int) -> tuple[Tensor, ...]:
  """Along one axis of RoiAlign: (low index, high index, weight of low, weight of high, in range) of each sample,
  shaped (R, pooled, grid_max); samples past a roi's own grid count are out of range."""
  dev = start.device
  bin_size = (size / pooled).reshape(-1, 1, 1)
  cells = Tensor.arange(pooled, device=dev).reshape(1, -1, 1).cast(dtypes.float32)
  steps = Tensor.arange(grid_max, device=dev).reshape(1, 1, -1).cast(dtypes.float32)
  grid3 = grid.reshape(-1, 1, 1)
  pos = start.reshape(-1, 1, 1) + cells * bin_size + (steps + 0.5) * bin_size / grid3
  in_range = (pos >= -1.0) & (pos <= limit) & (steps < grid3)
  pos = pos.maximum(0.0)
  low = pos.floor()
  at_edge = low >= limit - 1
  low = at_edge.where(limit - 1, low)
  high = at_edge.where(limit - 1, low + 1)
  pos = at_edge.where(low, pos)
  frac = pos - low
  return low, high, 1 - frac, frac, in_range


@register("RoiAlign")
def roi_align(x, rois, batch_indices, coordinate_transformation_mode="half_pixel", mode="avg", output_height=1,
              output_width=1, sampling_ratio=0, spatial_scale=1.0, ctx=None):
  """Each roi's bins averaged (or maxed) over a grid of bilinear samples; with sampling_ratio 0 the grid of each roi
  is ceil(roi size / bins), so the largest one is read to shape the samples (the rest are masked)."""
  _, c, height, width = x.shape
  boxes = rois.cast(dtypes.float32) * spatial_scale - (0.5 if coordinate_transformation_mode == "half_pixel" else 0.0)
  start_w, start_h, end_w, end_h = (boxes[:, i] for i in range(4))
  roi_w, roi_h = end_w - start_w, end_h - start_h
  if coordinate_transformation_mode != "half_pixel": roi_w, roi_h = roi_w.maximum(1.0), roi_h.maximum(1.0)
  if sampling_ratio > 0: grid_h = grid_w = roi_w.full_like(float(sampling_ratio))
  else: grid_h, grid_w = (roi_h / output_height).ceil(), (roi_w / output_width).ceil()
  most = [int(v) for v in ctx.value(grid_h.max().reshape(1).cat(grid_w.max().reshape(1)))] if sampling_ratio <= 0 \
      else [sampling_ratio] * 2
  gh, gw = max(most[0], 1), max(most[1], 1)
  ylo, yhi, wyl, wyh, yok = _roi_axis(start_h, roi_h, output_height, grid_h, gh, height)
  xlo, xhi, wxl, wxh, xok = _roi_axis(start_w, roi_w, output_width, grid_w, gw, width)
  r = rois.shape[0]
  def grid5(t: Tensor, along_y: bool) -> Tensor:
    return t.reshape(r, output_height, gh, 1, 1) if along_y else t.reshape(r, 1, 1, output_width, gw)
  valid = grid5(yok, True) & grid5(xok, False)
  planes = x[batch_indices.cast(dtypes.int64)].cast(dtypes.float32).reshape(r, c, -1)
  terms = []
  for yi, wy in ((ylo, wyl), (yhi, wyh)):
    for xi, wx in ((xlo, wxl), (xhi, wxh)):
      flat = (grid5(yi, True) * width + grid5(xi, False)).cast(dtypes.int32).reshape(r, -1)
      weight = valid.where(grid5(wy, True) * grid5(wx, False), 0.0).reshape(r, 1, -1)
      terms.append(gather_flat(planes, flat) * weight)
  shape = (r, c, output_height, gh, output_width, gw)
  if mode == "max":
    best = terms[0].maximum(terms[1]).maximum(terms[2]).maximum(terms[3]).reshape(shape)
    best = valid.reshape(r, 1, output_height, gh, output_width, gw).where(best, -math.inf).max((3, 5))
    return (best == -math.inf).where(0.0, best).cast(x.dtype)
  count = (grid_h * grid_w).maximum(1.0).reshape(r, 1, 1, 1)
  return ((terms[0] + terms[1] + terms[2] + terms[3]).reshape(shape).sum((3, 5)) / count).cast(x.dtype)


@register("Col2Im")
def col2im(x, image_shape, block_shape, dilations=None, pads=None, strides=None, ctx=None):
  """Columns (N, C * prod(block), L) summed back into an image (N, C, *image_shape): each block offset's columns
  are spread with the stride and shifted to their place, then the padding is cut off."""
  image, block = ctx.ints(image_shape), ctx.ints(block_shape)
  r = len(image)
  dilations, strides = dilations or [1] * r, strides or [1] * r
  pads = pads or [0] * (2 * r)
  n, channels = x.shape[0], x.shape[1] // math.prod(block)
  padded = [image[i] + pads[i] + pads[i + r] for i in range(r)]
  counts = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(r)]
  cols = x.reshape(n, channels, math.prod(block), *counts)
  out = None
  for k, offsets in enumerate(itertools.product(*[range(b) for b in block])):
    piece = cols[:, :, k]
    for i in range(r):
      axis = 2 + i
      if strides[i] > 1:  # spread: each element followed by stride - 1 zeros
        piece = piece.unsqueeze(axis + 1).pad([(0, 0)] * (axis + 1) + [(0, strides[i] - 1)] + [(0, 0)] * (r - 1 - i))
        piece = piece.reshape(*piece.shape[:axis], -1, *piece.shape[axis + 2:])
      start = offsets[i] * dilations[i]
      piece = piece[(slice(None),) * axis + (slice(0, min(piece.shape[axis], padded[i] - start)),)]
      piece = piece.pad([(0, 0)] * axis + [(start, padded[i] - start - piece.shape[axis])] + [(0, 0)] * (r - 1 - i))
    out = piece if out is None else out + piece
  return out[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + image[i]) for i in range(r))]


def _box_edges(boxes: Tensor, center_point_box: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """(x_min, x_max, y_min, y_max) of boxes [..., 4] given as corners (y1, x1, y2, x2 in any order) or centers."""
  if center_point_box:
    cx, cy, half_w, half_h = boxes[..., 0], boxes[..., 1], boxes[..., 2] / 2, boxes[..., 3] / 2
    return cx - half_w, cx + half_w, cy - half_h, cy + half_h
  y1, x1, y2, x2 = (boxes[..., i] for i in range(4))
  return x1.minimum(x2), x1.maximum(x2), y1.minimum(y2), y1.maximum(y2)


def _overlaps(boxes: Tensor, center_point_box: int, threshold: float) -> Tensor:
  """(B, n, n): whether box i suppresses box j (intersection over union above the threshold; boxes that do not
  overlap or have no area never do)."""
  x0, x1, y0, y1 = _box_edges(boxes.cast(dtypes.float32), center_point_box)
  def pair(t: Tensor) -> tuple[Tensor, Tensor]: return t.unsqueeze(2), t.unsqueeze(1)
  (ax0, bx0), (ax1, bx1), (ay0, by0), (ay1, by1) = pair(x0), pair(x1), pair(y0), pair(y1)
  inter_w, inter_h = ax1.minimum(bx1) - ax0.maximum(bx0), ay1.minimum(by1) - ay0.maximum(by0)
  inter = inter_w * inter_h
  area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
  union = area_a + area_b - inter
  ok = (inter_w > 0) & (inter_h > 0) & (inter > 0) & (area_a > 0) & (area_b > 0) & (union > 0)
  return ok & (inter / ok.where(union, 1.0) > threshold)


@register("NonMaxSuppression")
def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None,
                        center_point_box=0, ctx=None):
  """Greedy selection per batch and class, all of them at once: each step takes the best box still standing and
  knocks out those it overlaps; rows (batch, class, box) in that order."""
  def scalar(t: Tensor | None, default: float) -> float:
    return float(first_value(ctx.value(t))) if t is not None and t.numel() else default
  limit = max(int(scalar(max_output_boxes_per_class, 0)), 0)
  threshold = scalar(iou_threshold, 0.0)
  b, classes, n = scores.shape
  steps = min(limit, n)
  if steps == 0: return Tensor.empty(0, 3, dtype=dtypes.int64, device=boxes.device)
  suppresses = _overlaps(boxes, center_point_box, threshold).unsqueeze(1)  # (B, 1, n, n)
  standing = scores.full_like(True, dtype=dtypes.bool) if score_threshold is None or not score_threshold.numel() \
      else scores > score_threshold.reshape(-1)[0]
  positions = Tensor.arange(n, device=boxes.device)
  picks, found = [], []
  for _ in range(steps):
    best = standing.where(scores, -math.inf).argmax(-1)  # (B, C): the lowest index among equal scores
    any_left = standing.any(-1)
    chosen = positions == best.unsqueeze(-1)  # (B, C, n)
    knocked = (chosen.unsqueeze(-1) & suppresses).any(-2)
    standing = standing & chosen.logical_not() & knocked.logical_not()
    picks.append(best)
    found.append(any_left)
  best_all, found_all = Tensor.stack(*picks, dim=-1), Tensor.stack(*found, dim=-1)  # (B, C, steps)
  batch_ids = Tensor.arange(b, device=boxes.device).reshape(b, 1, 1).expand(b, classes, steps)
  class_ids = Tensor.arange(classes, device=boxes.device).reshape(1, classes, 1).expand(b, classes, steps)
  rows = Tensor.stack(batch_ids, class_ids, best_all.cast(dtypes.int32), dim=-1).reshape(-1, 3).cast(dtypes.int64)
  keep = found_all.reshape(-1).nonzero().reshape(-1)
  return rows[keep] if keep.shape[0] else Tensor.empty(0, 3, dtype=dtypes.int64, device=boxes.device)

