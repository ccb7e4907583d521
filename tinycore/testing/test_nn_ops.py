"""Neural network ops against numpy: conv2d (stride, dilation, padding, groups), max/avg pooling, layernorm,
losses and one_hot, and their gradients against central differences (float64 numpy)."""
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.testing.helpers import assert_close, check_gradient, random_array

TOL = {"atol": 1e-4, "rtol": 1e-4}


def np_windows(x: np.ndarray, kernel, stride, dilation) -> np.ndarray:
  """(..., H, W) -> (..., OH, OW, kh, kw) by explicit indexing."""
  (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
  h, w = x.shape[-2:]
  oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
  out = np.empty(x.shape[:-2] + (oh, ow, kh, kw), dtype=x.dtype)
  for i in range(oh):
    for j in range(ow):
      for a in range(kh):
        for b in range(kw):
          out[..., i, j, a, b] = x[..., i * sh + a * dh, j * sw + b * dw]
  return out


def np_conv2d(x, w, bias=None, groups=1, stride=(1, 1), dilation=(1, 1), padding=0):
  x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  win = np_windows(x, w.shape[2:], stride, dilation)  # N, C, OH, OW, kh, kw
  n, c, oh, ow = win.shape[:4]
  cout = w.shape[0]
  win = win.reshape(n, groups, c // groups, oh, ow, *w.shape[2:])
  wg = w.reshape(groups, cout // groups, c // groups, *w.shape[2:])
  out = np.einsum("ngchwab,gocab->ngohw", win, wg).reshape(n, cout, oh, ow)
  return out if bias is None else out + bias.reshape(1, -1, 1, 1)


CONV_CASES = [
  dict(x=(2, 3, 7, 6), w=(4, 3, 3, 3)),
  dict(x=(1, 2, 8, 8), w=(3, 2, 3, 2), stride=(2, 1), padding=1),
  dict(x=(2, 4, 7, 7), w=(6, 2, 3, 3), groups=2, dilation=(2, 1)),
  dict(x=(1, 1, 5, 5), w=(2, 1, 1, 1), bias=True),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()).replace(" ", ""))
def test_conv2d(rng, case):
  x, w = random_array(rng, case["x"], "float32"), random_array(rng, case["w"], "float32")
  bias = random_array(rng, (case["w"][0],), "float32") if case.get("bias") else None
  kw = {k: case[k] for k in ("groups", "stride", "dilation", "padding") if k in case}
  expected = np_conv2d(x.astype(np.float64), w.astype(np.float64), bias, **kw)
  got = Tensor(x).conv2d(Tensor(w), None if bias is None else Tensor(bias), **kw)
  assert_close(got, expected.astype(np.float32), **TOL)


def test_conv2d_gradient(rng):
  xs = [random_array(rng, (1, 2, 5, 4), "float32"), random_array(rng, (3, 2, 2, 2), "float32"),
        random_array(rng, (3,), "float32")]
  check_gradient(rng, lambda x, w, b: x.conv2d(w, b, padding=1, stride=(2, 1)),
                 lambda x, w, b: np_conv2d(x, w, b, padding=1, stride=(2, 1)), xs)


@pytest.mark.parametrize("kernel, stride", [((2, 2), None), ((3, 3), (1, 2)), ((2, 3), (2, 1))], ids=str)
def test_pooling(rng, kernel, stride):
  x = random_array(rng, (2, 3, 7, 8), "float32")
  win = np_windows(x, kernel, stride or kernel, (1, 1))
  assert_close(Tensor(x).max_pool2d(kernel, stride), win.max((-2, -1)), **TOL)
  assert_close(Tensor(x).avg_pool2d(kernel, stride), win.mean((-2, -1)), **TOL)


def test_max_pool_padding_is_negative_infinity():
  x = -np.ones((1, 1, 2, 2), dtype=np.float32)
  assert_close(Tensor(x).max_pool2d(2, stride=1, padding=1), -np.ones((1, 1, 3, 3), dtype=np.float32))


@pytest.mark.parametrize("pool", ["max_pool2d", "avg_pool2d"])
def test_pooling_gradient(rng, pool):
  def np_pool(x): return np_windows(x, (2, 2), (2, 2), (1, 1)).__getattribute__("max" if "max" in pool else "mean")(
    (-2, -1))
  check_gradient(rng, lambda x: getattr(x, pool)(), np_pool, [random_array(rng, (1, 2, 4, 6), "float32")])


def test_layernorm_and_gradient(rng):
  x = random_array(rng, (3, 7), "float32")

  def np_layernorm(v): return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5)
  assert_close(Tensor(x).layernorm(), np_layernorm(x.astype(np.float64)).astype(np.float32), **TOL)
  check_gradient(rng, lambda t: t.layernorm(), np_layernorm, [x])


def _np_log_softmax(x, axis=-1):
  shifted = x - x.max(axis, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def test_sparse_categorical_crossentropy(rng):
  logits = random_array(rng, (6, 5), "float32")
  labels = np.array([0, 4, 2, -1, 1, 3], dtype=np.int32)
  logp = _np_log_softmax(logits.astype(np.float64))
  # ignore_index=-1 (the default) ignores nothing, as tinygrad: the label -1 picks no class but counts in the mean
  valid = labels != -1
  picked = np.where(valid, logp[np.arange(6), labels], 0)
  assert_close(Tensor(logits).sparse_categorical_crossentropy(Tensor(labels)), np.float32(-picked.mean()), **TOL)
  smoothed = Tensor(logits).sparse_categorical_crossentropy(Tensor(labels), label_smoothing=0.1, reduction="sum")
  assert_close(smoothed, np.float32(-(0.9 * picked + 0.1 * logp.mean(-1)).sum()), **TOL)
  # another ignore_index: those labels count for nothing, not even in the mean
  kept = labels != 2
  ignored = Tensor(logits).sparse_categorical_crossentropy(Tensor(labels), ignore_index=2)
  assert_close(ignored, np.float32(-picked[kept].sum() / kept.sum()), **TOL)


def test_sparse_categorical_crossentropy_gradient(rng):
  labels = Tensor(np.array([1, 0, 3], dtype=np.int32))
  check_gradient(rng, lambda t: t.sparse_categorical_crossentropy(labels),
                 lambda v: -_np_log_softmax(v)[np.arange(3), [1, 0, 3]].mean(), [random_array(rng, (3, 4), "float32")])


def test_cross_entropy(rng):
  logits = random_array(rng, (4, 3, 2), "float32")
  labels = np.array([[0, 2], [1, 1], [2, 0], [0, 0]], dtype=np.int32)
  logp = _np_log_softmax(logits.astype(np.float64), 1)
  expected = -np.take_along_axis(logp, labels[:, None, :], 1).mean()
  assert_close(Tensor(logits).cross_entropy(Tensor(labels)), np.float32(expected), **TOL)
  probs = np.abs(random_array(rng, (4, 3, 2), "float32"))
  assert_close(Tensor(logits).cross_entropy(Tensor(probs), reduction="sum"), np.float32(-(logp * probs).sum()), **TOL)


def test_binary_crossentropy(rng):
  p = random_array(rng, (5,), "float32", low=0.05, high=0.95)
  y = (random_array(rng, (5,), "float32") > 0).astype(np.float32)
  expected = -(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()
  assert_close(Tensor(p).binary_crossentropy(Tensor(y)), np.float32(expected), **TOL)
  logits = random_array(rng, (5,), "float32") * 30  # large magnitudes: the logits form is stable
  # -(y log s + (1-y) log(1-s)) with s = sigmoid(x) is softplus(x) - y x
  expected = (np.logaddexp(0, logits.astype(np.float64)) - y * logits).mean()
  assert_close(Tensor(logits).binary_crossentropy_logits(Tensor(y)), np.float32(expected), atol=1e-3, rtol=1e-4)


def test_one_hot():
  assert Tensor([2, 0, 1]).one_hot(4).tolist() == [[0, 0, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0]]
  assert Tensor([2, 0]).one_hot(3).dtype is dtypes.int32
