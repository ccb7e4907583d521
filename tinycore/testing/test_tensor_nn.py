"""Neural-network ops of the Tensor API against numpy references written from torch's documented formulas:
scaled_dot_product_attention (masks, causal), nll_loss, cross_entropy (label smoothing, class weights,
ignore_index), binary_crossentropy_logits, interpolate (nearest, nearest-exact, linear/bilinear/trilinear,
align_corners), the pad modes reflect/replicate/circular (numpy's reflect/edge/wrap) and conv_transpose2d; with
gradients against central differences."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, assert_equal, check_gradient, random_array


def _ids(value) -> str: return str(value).replace(" ", "")


def _log_softmax(x, axis):
  shifted = x - x.max(axis, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


# ---------------------------------------------------------------------------- attention
def _attention(q, k, v, mask=None, causal=False):
  scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
  if causal: mask = np.tril(np.ones(scores.shape[-2:], dtype=bool))
  if mask is not None: scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  return (weights / weights.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal"])
def test_scaled_dot_product_attention(rng, mask_kind):
  q, k, v = (random_array(rng, shape, "float32") for shape in ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5)))
  mask = None
  if mask_kind == "bool":
    mask = random_array(rng, (4, 6), "bool")
    mask[:, 0] = True  # no row entirely masked
  if mask_kind == "float": mask = random_array(rng, (3, 4, 6), "float32")
  expected = _attention(q.astype(np.float64), k, v, mask, causal=mask_kind == "causal")
  got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), None if mask is None else Tensor(mask),
                                               is_causal=mask_kind == "causal")
  assert_close(got, expected.astype(np.float32), atol=1e-5, rtol=1e-4, dtype=dtypes.float32)


def test_attention_gradient(rng):
  q, k, v = (random_array(rng, (3, 4), "float32") for _ in range(3))
  check_gradient(rng, lambda a, b, c: a.scaled_dot_product_attention(b, c, is_causal=True),
                 lambda a, b, c: _attention(a, b, c, causal=True), [q, k, v])


def test_attention_causal_with_mask_raises():
  x = Tensor.ones(2, 3)
  with pytest.raises(RuntimeError):
    x.scaled_dot_product_attention(x, x, attn_mask=Tensor.ones(2, 2, dtype=dtypes.bool), is_causal=True)


def test_attention_gqa(rng):
  q, k, v = random_array(rng, (1, 4, 3, 8), "float32"), random_array(rng, (1, 2, 5, 8), "float32"), \
    random_array(rng, (1, 2, 5, 8), "float32")
  expected = _attention(q.astype(np.float64), np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1))
  got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True)
  assert_close(got, expected.astype(np.float32), atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------- losses
def _nll(log_probs, target, weight=None, ignore_index=None, reduction="mean"):
  """torch.nn.functional.nll_loss for (N, C, ...) log-probabilities."""
  picked = -np.take_along_axis(log_probs, np.clip(target, 0, None)[:, None], 1)[:, 0]
  w = np.ones(log_probs.shape[1]) if weight is None else weight
  tw = w[np.clip(target, 0, None)]
  if ignore_index is not None: tw = np.where(target == ignore_index, 0, tw)
  loss = picked * tw
  return loss.sum() / tw.sum() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def _cross_entropy(logits, target, weight=None, ignore_index=None, label_smoothing=0.0, reduction="mean"):
  """torch.nn.functional.cross_entropy with class-index targets: (1-e) * nll + e/C * the weighted uniform term,
  "mean" dividing both by the targets' weights."""
  log_probs = _log_softmax(logits, 1)
  classes = logits.shape[1]
  w = np.ones(classes) if weight is None else weight
  nll = _nll(log_probs, target, weight, ignore_index, "none")
  smooth = -(log_probs * w.reshape((classes,) + (1,) * (logits.ndim - 2))).sum(1)
  if ignore_index is not None: smooth = np.where(target == ignore_index, 0, smooth)
  loss = (1 - label_smoothing) * nll + label_smoothing / classes * smooth
  tw = w[np.clip(target, 0, None)]
  if ignore_index is not None: tw = np.where(target == ignore_index, 0, tw)
  return loss.sum() / tw.sum() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5)], ids=_ids)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(rng, shape, weighted, reduction):
  log_probs = _log_softmax(random_array(rng, shape, "float32"), 1).astype(np.float32)
  target = rng.integers(0, shape[1], size=(shape[0],) + shape[2:]).astype(np.int32)
  target.flat[0] = -100
  weight = random_array(rng, (shape[1],), "float32", low=0.5, high=2.0) if weighted else None
  got = Tensor(log_probs).nll_loss(Tensor(target), None if weight is None else Tensor(weight), ignore_index=-100,
                                   reduction=reduction)
  assert_close(got, np.float32(_nll(log_probs.astype(np.float64), target, weight, -100, reduction)), atol=1e-5,
               rtol=1e-5)


@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 5), (4,)], ids=_ids)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_indices(rng, shape, smoothing, weighted):
  logits = random_array(rng, shape, "float32")
  classes = shape[1] if len(shape) > 1 else shape[0]
  target = rng.integers(0, classes, size=(shape[0],) + shape[2:] if len(shape) > 1 else ()).astype(np.int32)
  weight = random_array(rng, (classes,), "float32", low=0.5, high=2.0) if weighted else None
  got = Tensor(logits).cross_entropy(Tensor(target), label_smoothing=smoothing,
                                     weight=None if weight is None else Tensor(weight))
  batched = (logits[None], target[None]) if len(shape) == 1 else (logits, target)
  expected = _cross_entropy(batched[0].astype(np.float64), batched[1], weight, label_smoothing=smoothing)
  assert_close(got, np.float32(expected), atol=1e-5, rtol=1e-5)


def test_cross_entropy_ignore_index_and_reductions(rng):
  logits = random_array(rng, (5, 3), "float32")
  target = np.array([0, 2, -100, 1, 2], dtype=np.int32)
  for reduction in ("none", "sum", "mean"):
    got = Tensor(logits).cross_entropy(Tensor(target), reduction=reduction, label_smoothing=0.1, ignore_index=-100)
    expected = _cross_entropy(logits.astype(np.float64), target, None, -100, 0.1, reduction)
    assert_close(got, np.asarray(expected, np.float32), atol=1e-5, rtol=1e-5)


def test_cross_entropy_probabilities(rng):
  logits = random_array(rng, (4, 5), "float32")
  probs = np.exp(_log_softmax(random_array(rng, (4, 5), "float32"), 1)).astype(np.float32)
  expected = -(_log_softmax(logits.astype(np.float64), 1) * (probs * 0.9 + 0.1 / 5)).sum(1).mean()
  assert_close(Tensor(logits).cross_entropy(Tensor(probs), label_smoothing=0.1), np.float32(expected), atol=1e-5,
               rtol=1e-5)


def test_cross_entropy_gradient(rng):
  logits = random_array(rng, (3, 4), "float32")
  target = np.array([1, 3, 0], dtype=np.int32)
  weight = np.array([0.5, 1.0, 2.0, 1.5], dtype=np.float32)
  check_gradient(rng, lambda x: x.cross_entropy(Tensor(target), label_smoothing=0.2, weight=Tensor(weight)),
                 lambda x: _cross_entropy(x, target, weight, label_smoothing=0.2), [logits])


def _bce_logits(x, y, pos_weight=None):
  log_p, log_not_p = -np.logaddexp(0, -x), -np.logaddexp(0, x)
  return -((1 if pos_weight is None else pos_weight) * y * log_p + (1 - y) * log_not_p)


def test_binary_crossentropy_logits(rng):
  x = random_array(rng, (4, 3), "float32") * 5
  x[0, 0], x[0, 1] = 200.0, -200.0  # stable where sigmoid saturates
  y = random_array(rng, (4, 3), "float32", low=0, high=1)
  pos_weight = random_array(rng, (3,), "float32", low=0.5, high=3)
  assert_close(Tensor(x).binary_crossentropy_logits(Tensor(y)), np.float32(_bce_logits(x, y).mean()), rtol=1e-5)
  assert_close(Tensor(x).binary_crossentropy_logits(Tensor(y), reduction="none", pos_weight=Tensor(pos_weight)),
               _bce_logits(x.astype(np.float64), y, pos_weight).astype(np.float32), atol=1e-5, rtol=1e-5)
  check_gradient(rng, lambda a: a.binary_crossentropy_logits(Tensor(y[:2]), pos_weight=Tensor(pos_weight)),
                 lambda a: _bce_logits(a, y[:2], pos_weight).mean(), [x[1:3] / 5])


# ---------------------------------------------------------------------------- interpolate
def _source_index(out_size, in_size, mode, align_corners):
  """Per output index: (low, high, fraction) as torch computes them (float32 scales)."""
  out = np.arange(out_size, dtype=np.float64)
  if mode.startswith("nearest"):
    scale = np.float32(in_size / out_size)
    index = np.floor((out + 0.5) * scale if mode == "nearest-exact" else out * scale).astype(np.int64)
    index = np.minimum(index, in_size - 1)
    return index, index, np.zeros(out_size)
  if align_corners: source = out * ((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
  else: source = np.maximum((out + 0.5) * (in_size / out_size) - 0.5, 0)
  low = np.minimum(np.floor(source).astype(np.int64), in_size - 1)
  return low, np.minimum(low + 1, in_size - 1), source - low


def _interpolate(x, size, mode, align_corners=False):
  for axis, new in zip(range(x.ndim - len(size), x.ndim), size):
    low, high, frac = _source_index(new, x.shape[axis], mode, align_corners)
    shape = [1] * x.ndim
    shape[axis] = new
    frac = frac.reshape(shape)
    x = np.take(x, low, axis) * (1 - frac) + np.take(x, high, axis) * frac
  return x


def test_interpolate_known_values():
  row = Tensor([[1.0, 2.0, 3.0, 4.0]])
  assert_close(row.interpolate((8,)), np.array([[1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4]], np.float32))
  assert_close(row.interpolate((7,), align_corners=True), np.array([[1, 1.5, 2, 2.5, 3, 3.5, 4]], np.float32))
  three = Tensor([[1.0, 2.0, 3.0]])
  assert_equal(three.interpolate((5,), mode="nearest"), np.array([[1, 1, 2, 2, 3]], np.float32))
  assert_equal(three.interpolate((5,), mode="nearest-exact"), np.array([[1, 1, 2, 3, 3]], np.float32))


@pytest.mark.parametrize("shape,size", [((2, 3, 5), (9,)), ((1, 2, 4, 6), (7, 3)), ((1, 1, 3, 4, 5), (5, 2, 8)),
                                        ((2, 6, 7), (6, 7)), ((3, 4), (1,))], ids=_ids)
@pytest.mark.parametrize("mode,align_corners", [("linear", False), ("linear", True), ("nearest", False),
                                                ("nearest-exact", False)], ids=_ids)
def test_interpolate(rng, shape, size, mode, align_corners):
  x = random_array(rng, shape, "float32")
  expected = _interpolate(x.astype(np.float64), size, mode, align_corners)
  assert_close(Tensor(x).interpolate(size, mode=mode, align_corners=align_corners), expected.astype(np.float32),
               atol=1e-5, rtol=1e-5, dtype=dtypes.float32)


def test_interpolate_named_modes_and_ints(rng):
  x = random_array(rng, (1, 2, 3, 4), "float32")
  assert_close(Tensor(x).interpolate((5, 6), mode="bilinear"), _interpolate(x, (5, 6), "linear"), atol=1e-5)
  y = random_array(rng, (1, 1, 2, 3, 4), "float32")
  assert_close(Tensor(y).interpolate((3, 3, 3), mode="trilinear", align_corners=True),
               _interpolate(y, (3, 3, 3), "linear", True), atol=1e-5)
  ints = random_array(rng, (2, 5), "int32")
  assert_equal(Tensor(ints).interpolate((8,), mode="nearest"), _interpolate(ints, (8,), "nearest").astype(np.int32),
               dtype=dtypes.int32)
  with pytest.raises(ValueError):
    Tensor(x).interpolate((5,), mode="bilinear")
  with pytest.raises(ValueError):
    Tensor(x).interpolate((5, 6), mode="nearest", align_corners=True)
  with pytest.raises(ValueError):
    Tensor(x).interpolate((5, 6), mode="cubic")


def _linear_uint8(x: np.ndarray, size: tuple, align_corners: bool) -> np.ndarray:
  """torch's uint8 bilinear: a pass per dim from the last, weights in fixed point, each pass rounded to uint8."""
  for axis, new in reversed(list(zip(range(x.ndim - len(size), x.ndim), size))):
    old = x.shape[axis]
    i = np.arange(new, dtype=np.float64)
    source = i * ((old - 1) / (new - 1) if new > 1 else 0.0) if align_corners else \
        np.maximum((i + 0.5) * (old / new) - 0.5, 0.0)
    low = np.minimum(np.floor(source).astype(np.int64), old - 1)
    high, frac = np.minimum(low + 1, old - 1), source - low
    largest = max(frac.max(initial=0.0), (1 - frac).max(initial=0.0))
    bits = next((b for b in range(22) if int(0.5 + largest * (1 << (b + 1))) >= 1 << 15), 22)
    w0, w1 = np.floor((1 - frac) * (1 << bits) + 0.5).astype(np.int64), np.floor(frac * (1 << bits) + 0.5).astype(np.int64)
    rows = np.moveaxis(x.astype(np.int64), axis, -1)
    total = rows[..., low] * w0 + rows[..., high] * w1 + (1 << (bits - 1))
    x = np.moveaxis(np.clip(total >> bits, 0, 255).astype(np.uint8), -1, axis)
  return x


@pytest.mark.parametrize("shape, size", [((2, 3, 16, 16), (5, 7)), ((1, 2, 5, 6), (11, 13)), ((1, 1, 4, 9), (4, 3))])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_uint8_as_torch_resamples_images(rng, shape, size, align_corners):
  # uint8 images resample as torch's uint8 kernels do (fixed-point weights, each dim's pass rounded), element for
  # element (tests/test_math_conformance.py compares with torch itself)
  x = rng.integers(0, 256, shape).astype(np.uint8)
  assert_equal(Tensor(x).interpolate(size, mode="bilinear", align_corners=align_corners),
               _linear_uint8(x, size, align_corners), dtype=dtypes.uint8)


def test_interpolate_gradient(rng):
  x = random_array(rng, (1, 3, 4), "float32")
  check_gradient(rng, lambda t: t.interpolate((2, 6)), lambda a: _interpolate(a, (2, 6), "linear"), [x])
  check_gradient(rng, lambda t: t.interpolate((5,), mode="nearest"), lambda a: _interpolate(a, (5,), "nearest"), [x])


# ---------------------------------------------------------------------------- pad modes
NUMPY_PAD_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", list(NUMPY_PAD_MODE))
@pytest.mark.parametrize("pads", [((1, 2), (2, 3)), ((0, 0), (3, 1)), ((2, 0), (0, 0))], ids=_ids)
def test_pad_modes(rng, mode, pads):
  x = random_array(rng, (4, 5), "float32")
  assert_equal(Tensor(x).pad(pads, mode=mode), np.pad(x, pads, mode=NUMPY_PAD_MODE[mode]), dtype=dtypes.float32)
  flat = (pads[1][0], pads[1][1], pads[0][0], pads[0][1])  # torch's flat order: last dim first
  assert_equal(Tensor(x).pad(flat, mode=mode), np.pad(x, pads, mode=NUMPY_PAD_MODE[mode]))
  xi = random_array(rng, (2, 4, 5), "int32")
  assert_equal(Tensor(xi).pad(flat, mode=mode), np.pad(xi, ((0, 0),) + pads, mode=NUMPY_PAD_MODE[mode]),
               dtype=dtypes.int32)


@pytest.mark.parametrize("mode", list(NUMPY_PAD_MODE))
def test_pad_modes_negative_and_errors(rng, mode):
  x = random_array(rng, (4, 5), "float32")
  full = np.pad(x, ((0, 2), (2, 0)), mode=NUMPY_PAD_MODE[mode])
  if mode == "circular": expected = np.pad(x[1:, :4], ((0, 2), (2, 0)), mode="wrap")  # crop, then wrap
  else: expected = full[1:, :-1]  # pad, then crop
  assert_equal(Tensor(x).pad(((-1, 2), (2, -1)), mode=mode), expected)
  too_much = 5 if mode == "reflect" else 6  # reflect reaches at most size - 1, circular size
  if mode != "replicate":
    with pytest.raises(ValueError):
      Tensor(x).pad(((0, 0), (too_much, 0)), mode=mode)
  with pytest.raises(NotImplementedError):
    Tensor(x).pad(((1, 1), (1, 1)), mode="symmetric")


@pytest.mark.parametrize("mode", list(NUMPY_PAD_MODE))
def test_pad_modes_gradient(rng, mode):
  x = random_array(rng, (3, 4), "float32")
  pads = ((1, 2), (2, 1))
  check_gradient(rng, lambda t: t.pad(pads, mode=mode), lambda a: np.pad(a, pads, mode=NUMPY_PAD_MODE[mode]), [x])


# ---------------------------------------------------------------------------- conv_transpose2d
def _conv_transpose2d(x, w, bias=None, groups=1, stride=1, dilation=1, padding=0, output_padding=0):
  """Each input pixel scatters its kernel-weighted copy into the output, as torch documents."""
  pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
  (sh, sw), (dh, dw), (ph, pw), (oh, ow) = pair(stride), pair(dilation), pair(padding), pair(output_padding)
  n, cin, h, wd = x.shape
  _, cout_group, kh, kw = w.shape
  full_h, full_w = (h - 1) * sh + dh * (kh - 1) + 1 + oh, (wd - 1) * sw + dw * (kw - 1) + 1 + ow
  out = np.zeros((n, cout_group * groups, full_h, full_w))
  cin_group = cin // groups
  for g in range(groups):
    xs, ws = x[:, g * cin_group:(g + 1) * cin_group], w[g * cin_group:(g + 1) * cin_group]
    for i in range(kh):
      for j in range(kw):
        contribution = np.einsum("nchw,co->nohw", xs, ws[:, :, i, j])
        out[:, g * cout_group:(g + 1) * cout_group, i * dh:i * dh + (h - 1) * sh + 1:sh,
            j * dw:j * dw + (wd - 1) * sw + 1:sw] += contribution
  out = out[:, :, ph:full_h - ph, pw:full_w - pw]
  return out if bias is None else out + bias.reshape(1, -1, 1, 1)


@pytest.mark.parametrize("kwargs", [{}, {"stride": 2}, {"stride": (2, 3), "padding": 1},
                                    {"stride": 2, "padding": (1, 0), "output_padding": 1},
                                    {"dilation": 2, "padding": 2}, {"groups": 2, "stride": 2},
                                    {"stride": 3, "dilation": (1, 2), "output_padding": (2, 1)}], ids=_ids)
def test_conv_transpose2d(rng, kwargs):
  x = random_array(rng, (2, 4, 5, 4), "float32")
  w = random_array(rng, (4, 3, 3, 2), "float32")
  b = random_array(rng, (3 * kwargs.get("groups", 1),), "float32")
  expected = _conv_transpose2d(x.astype(np.float64), w, b, **kwargs)
  assert_close(Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), **kwargs), expected.astype(np.float32), atol=1e-5,
               rtol=1e-5, dtype=dtypes.float32)


def test_conv_transpose2d_gradient(rng):
  x = random_array(rng, (1, 2, 3, 3), "float32")
  w = random_array(rng, (2, 2, 2, 2), "float32")
  check_gradient(rng, lambda a, b: a.conv_transpose2d(b, stride=2, padding=1),
                 lambda a, b: _conv_transpose2d(a, b, stride=2, padding=1), [x, w])


def test_conv_transpose2d_shape_errors():
  with pytest.raises(ValueError):
    Tensor.ones(1, 3, 4, 4).conv_transpose2d(Tensor.ones(2, 2, 3, 3))
  with pytest.raises(ValueError):
    Tensor.ones(1, 2, 4, 4).conv_transpose2d(Tensor.ones(2, 2, 3, 3), stride=2, output_padding=2)


# ---------------------------------------------------------------------------- normalization
def test_softmin_normalize_batchnorm(rng):
  x = random_array(rng, (3, 4, 5), "float32")
  shifted = -x - (-x).max(1, keepdims=True)
  assert_close(Tensor(x).softmin(1), np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True), atol=1e-6)
  for p in (2.0, 1.0, 3.0):
    norm = (np.abs(x) ** p).sum(1, keepdims=True) ** (1 / p)
    assert_close(Tensor(x).normalize(p=p), x / np.maximum(norm, 1e-12), atol=1e-6, rtol=1e-5)
  assert_equal(Tensor.zeros(2, 3).normalize(), np.zeros((2, 3), np.float32))  # eps: no 0/0
  mean, invstd = random_array(rng, (4,), "float32"), random_array(rng, (4,), "float32", low=0.5, high=2)
  weight, bias = random_array(rng, (4,), "float32"), random_array(rng, (4,), "float32")
  view = (1, 4, 1)
  expected = (x - mean.reshape(view)) * weight.reshape(view) * invstd.reshape(view) + bias.reshape(view)
  got = Tensor(x).batchnorm(Tensor(weight), Tensor(bias), Tensor(mean), Tensor(invstd))
  assert_close(got, expected, atol=1e-5, rtol=1e-5)
  assert_close(Tensor(x).batchnorm(None, None, Tensor(mean), Tensor(invstd)), (x - mean.reshape(view)) *
               invstd.reshape(view), atol=1e-5, rtol=1e-5)
  check_gradient(rng, lambda t: t.normalize(dim=0), lambda a: a / np.sqrt((a * a).sum(0, keepdims=True)),
                 [random_array(rng, (3, 2), "float32")])


def test_conv_transpose2d_layer(rng):
  from tinycore import nn
  layer = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
  assert layer.weight.shape == (4, 3, 3, 3) and layer.bias.shape == (6,)
  x = random_array(rng, (1, 4, 3, 5), "float32")
  expected = _conv_transpose2d(x.astype(np.float64), layer.weight.numpy(), layer.bias.numpy(), groups=2, stride=2,
                               padding=1, output_padding=1)
  assert_close(layer(Tensor(x)), expected.astype(np.float32), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- max pooling indices
def _max_pool_with_indices(x, kernel, stride, padding):
  """(values, flat H*W indices of the first maximum) of each window, padding -inf, by loops."""
  n, c, h, w = x.shape
  padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=-np.inf)
  oh, ow = (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1
  values, indices = np.zeros((n, c, oh, ow), x.dtype), np.zeros((n, c, oh, ow), np.int32)
  for i in range(oh):
    for j in range(ow):
      window = padded[:, :, i * stride:i * stride + kernel, j * stride:j * stride + kernel].reshape(n, c, -1)
      best = window.argmax(-1)
      values[:, :, i, j] = window.max(-1)
      row, col = i * stride + best // kernel - padding, j * stride + best % kernel - padding
      indices[:, :, i, j] = row * w + col
  return values, indices


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), (3, 1, 0)], ids=_ids)
def test_max_pool2d_indices_and_unpool(rng, kernel, stride, padding):
  x = random_array(rng, (2, 3, 6, 5), "float32")
  x[0, 0, :2, :2] = 1.5  # ties: the first maximum
  values, indices = Tensor(x).max_pool2d(kernel, stride, padding=padding, return_indices=True)
  want_values, want_indices = _max_pool_with_indices(x, kernel, stride, padding)
  assert_equal(values, want_values)
  assert_equal(indices, want_indices, dtype=dtypes.int32)
  unpooled = values.max_unpool2d(indices, kernel, stride, padding=padding, output_size=(6, 5))
  expected = np.zeros((2, 3, 30), np.float32)
  np.put_along_axis(expected, want_indices.reshape(2, 3, -1), want_values.reshape(2, 3, -1), -1)
  assert_equal(unpooled, expected.reshape(2, 3, 6, 5))
  if (kernel, stride, padding) == (2, 2, 0):  # the default output size: the input's, here
    assert values.max_unpool2d(indices).shape == (2, 3, 6, 4)


def test_max_pool2d_indices_with_ceil_mode(rng):
  # the last partial window (ceil_mode) holds only input places: its index names one of them
  x = random_array(rng, (1, 2, 7, 7), "float32")
  values, indices = Tensor(x).max_pool2d(2, 2, ceil_mode=True, return_indices=True)
  assert values.shape == indices.shape == (1, 2, 4, 4)
  flat = x.reshape(1, 2, 49)
  assert_equal(values, np.take_along_axis(flat, indices.numpy().reshape(1, 2, 16), -1).reshape(1, 2, 4, 4))
  assert ((indices.numpy() >= 0) & (indices.numpy() < 49)).all()
  assert_equal(values[..., 3, 3], x[..., 6, 6])  # the corner window holds one input place
  assert_equal(indices[..., 3, 3], np.full((1, 2), 48, np.int32), dtype=dtypes.int32)
