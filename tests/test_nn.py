"""tinycore.nn layers and tinycore.nn.optim optimizers against numpy references; state dicts by attribute path."""
import numpy as np
import pytest
from tinycore import Context, Tensor, dtypes, nn
from tinycore.nn import optim
from tinycore.nn.state import get_parameters, get_state_dict, load_state_dict

TOL = {"atol": 1e-5, "rtol": 1e-4}


def test_linear_matches_numpy():
  layer = nn.Linear(5, 3)
  x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
  w, b = layer.weight.numpy(), layer.bias.numpy()
  assert w.shape == (3, 5) and np.abs(w).max() <= 1 / np.sqrt(5)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), x @ w.T + b, **TOL)
  assert nn.Linear(5, 3, bias=False).bias is None


def test_conv2d_layer_shapes():
  layer = nn.Conv2d(3, 8, 3, padding=1, stride=2)
  assert layer.weight.shape == (8, 3, 3, 3) and layer.bias.shape == (8,)
  assert layer(Tensor.rand(2, 3, 9, 9)).shape == (2, 8, 5, 5)


def test_batchnorm_counts_batches_in_a_0d_int64():
  # torch and tinygrad keep num_batches_tracked as a 0-d int64, so their state dicts load into it unchanged
  bn = nn.BatchNorm2d(2)
  assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.dtype == dtypes.int64
  with Tensor.train():
    for _ in range(3): bn(Tensor.ones(2, 2, 3, 3)).realize()
  assert bn.num_batches_tracked.item() == 3
  torch_style = {"weight": Tensor([2.0, 3.0]), "bias": Tensor([0.5, -0.5]), "running_mean": Tensor([1.0, 2.0]),
                 "running_var": Tensor([4.0, 9.0]), "num_batches_tracked": Tensor(np.array(7, dtype=np.int64))}
  load_state_dict(bn, torch_style)
  assert bn.num_batches_tracked.item() == 7
  x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
  expected = (x - np.array([1, 2]).reshape(1, 2, 1, 1)) / np.sqrt(np.array([4, 9]).reshape(1, 2, 1, 1) + 1e-5)
  expected = expected * np.array([2, 3]).reshape(1, 2, 1, 1) + np.array([0.5, -0.5]).reshape(1, 2, 1, 1)
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), expected, **TOL)


def test_batchnorm_train_and_eval():
  bn = nn.BatchNorm2d(3)
  x = np.random.default_rng(1).standard_normal((4, 3, 2, 5)).astype(np.float32) * 2 + 1
  with Tensor.train():
    out = bn(Tensor(x)).numpy()
  mean, var = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
  np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5), atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean.reshape(3), **TOL)
  n = x.size // 3
  np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var.reshape(3) * n / (n - 1), **TOL)
  # eval mode: the running statistics
  expected = (x - bn.running_mean.numpy().reshape(1, 3, 1, 1)) / np.sqrt(bn.running_var.numpy().reshape(1, 3, 1, 1)
                                                                           + 1e-5)
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), expected, atol=1e-4, rtol=1e-4)


def test_layernorm_layer():
  ln = nn.LayerNorm(4)
  x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
  expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(ln(Tensor(x)).numpy(), expected, atol=1e-5, rtol=1e-4)
  with pytest.raises(ValueError, match="LayerNorm"):
    ln(Tensor.rand(3, 5))


def test_embedding_gathers_rows_and_scatters_gradient():
  emb = nn.Embedding(5, 3)
  idx = Tensor([[0, 4], [4, 2]])
  out = emb(idx)
  w = emb.weight.numpy()
  np.testing.assert_allclose(out.numpy(), w[[[0, 4], [4, 2]]], **TOL)
  (grad,) = out.sum().gradient(emb.weight)
  np.testing.assert_allclose(grad.numpy()[:, 0], [1, 0, 1, 0, 2])


class TwoLayer:
  def __init__(self):
    self.l1, self.bn, self.l2 = nn.Linear(3, 4), nn.BatchNorm(4), nn.Linear(4, 2)
  def __call__(self, x): return self.l2(self.bn(self.l1(x)).relu())


def test_state_dict_by_attribute_path_and_load():
  model = TwoLayer()
  names = list(get_state_dict(model))
  assert names[:2] == ["l1.weight", "l1.bias"] and "bn.running_mean" in names and names[-1] == "l2.bias"
  assert len(get_parameters(model)) == len(names)
  other = TwoLayer()
  load_state_dict(other, get_state_dict(model))
  np.testing.assert_array_equal(other.l2.weight.numpy(), model.l2.weight.numpy())


def _run_steps(opt_factory, steps=3):
  """Minimize sum(w * c) + 0.5 |w|^2 from the same start; return the weights after each step."""
  w = Tensor([[1.0, -2.0, 0.5]], requires_grad=True)
  c = Tensor([[0.3, 0.1, -0.4]])
  opt = opt_factory([w])
  history = []
  with Tensor.train():
    for _ in range(steps):
      opt.zero_grad()
      ((w * c).sum() + 0.5 * w.square().sum()).backward()
      opt.step()
      history.append(w.numpy().copy())
  return history


def _grad(w): return np.array([[0.3, 0.1, -0.4]]) + w


def test_sgd_momentum_nesterov_weight_decay():
  lr, mom, wd = 0.1, 0.9, 0.01
  got = _run_steps(lambda p: optim.SGD(p, lr=lr, momentum=mom, weight_decay=wd, nesterov=True))
  w, b = np.array([[1.0, -2.0, 0.5]]), np.zeros((1, 3))
  for step in got:
    g = _grad(w) + wd * w
    b = mom * b + g
    w = w - lr * (g + mom * b)
    np.testing.assert_allclose(step, w, atol=1e-6, rtol=1e-5)
  plain = _run_steps(lambda p: optim.SGD(p, lr=lr), steps=1)[0]
  np.testing.assert_allclose(plain, np.array([[1.0, -2.0, 0.5]]) - lr * _grad(np.array([[1.0, -2.0, 0.5]])),
                             atol=1e-6)


@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
def test_adam_and_adamw(kind):
  lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-8, 0.05
  got = _run_steps(lambda p: getattr(optim, kind)(p, lr=lr, weight_decay=wd))
  w, m, v = np.array([[1.0, -2.0, 0.5]]), np.zeros((1, 3)), np.zeros((1, 3))
  for t, step in enumerate(got, 1):
    g = _grad(w) + (wd * w if kind == "Adam" else 0)
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    update = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    w = w - lr * (update + (wd * w if kind == "AdamW" else 0))
    np.testing.assert_allclose(step, w, atol=1e-5, rtol=1e-5)


def test_optimizer_errors():
  w = Tensor([1.0], requires_grad=True)
  opt = optim.SGD([w], lr=0.1)
  with pytest.raises(RuntimeError, match="training mode"):
    opt.step()
  with Context(TRAINING=1), pytest.raises(RuntimeError, match="backward"):
    opt.step()
  with pytest.raises(ValueError, match="learning rate"):
    optim.Adam([w], lr=-1)


def test_training_reduces_loss_and_changing_lr_reuses_kernels():
  from tinycore.codegen import CodegenStats
  rng = np.random.default_rng(3)
  x = rng.standard_normal((32, 3)).astype(np.float32)
  y = (x[:, 0] > x[:, 1]).astype(np.int32)
  Tensor.manual_seed(3)
  model = TwoLayer()
  opt = optim.SGD(get_parameters(model), lr=0.5, momentum=0.9)
  losses = []
  with Tensor.train():
    for step in range(12):
      if step == 6: opt.lr.assign(Tensor([0.2])).realize()
      if step == 7: compiled = CodegenStats.compiled
      opt.zero_grad()
      loss = model(Tensor(x)).sparse_categorical_crossentropy(Tensor(y))
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
      losses.append(loss.item())
  assert CodegenStats.compiled == compiled  # a new lr is a buffer value, not a new kernel
  assert losses[-1] < 0.5 * losses[0]


def test_setting_lr_to_a_number_stores_into_the_lr_buffer():
  # `opt.lr = 0.25` (tinygrad users write it) must keep working, and a jitted step must see the new value
  from tinycore import TinyJit
  w = Tensor([1.0, 2.0], requires_grad=True)
  opt = optim.SGD([w], lr=0.1)

  @TinyJit
  def step() -> Tensor:
    opt.zero_grad()
    loss = (w * w).sum()
    loss.backward()
    opt.step()
    return loss.realize()

  expected = np.array([1.0, 2.0])
  with Tensor.train():
    for i in range(6):
      if i == 3: opt.lr = 0.25
      if i == 5: opt.lr *= 0.5
      lr = 0.1 if i < 3 else 0.25 if i < 5 else 0.125
      step()
      expected = expected - lr * 2 * expected  # d(sum(w^2))/dw = 2w
      np.testing.assert_allclose(w.numpy(), expected, **TOL)
  assert opt.lr.shape == (1,) and abs(opt.lr.item() - 0.125) < 1e-7
  with pytest.raises(ValueError, match="learning rate"): opt.lr = -0.5
  with pytest.raises(ValueError, match="one number"): opt.lr = Tensor([0.1, 0.2])


def test_batchnorm_training_on_one_value_per_channel_raises():
  bn = nn.BatchNorm(3)
  with Tensor.train(), pytest.raises(ValueError, match=r"more than one value per channel, got shape \(1, 3\)"):
    bn(Tensor([[1.0, 2.0, 3.0]]))
  with Tensor.train(): out = bn(Tensor([[[1.0, 3.0], [2.0, 2.0], [0.0, 4.0]]])).numpy()  # two values per channel
  np.testing.assert_allclose(out, [[[-1, 1], [0, 0], [-1, 1]]], atol=1e-4)
  running_var = 0.9 + 0.1 * np.array([2.0, 0.0, 8.0])  # unbiased variances of the batch above
  expected = (np.array([1.0, 2.0, 3.0]) - 0.1 * 2.0) / np.sqrt(running_var + 1e-5)
  np.testing.assert_allclose(bn(Tensor([[1.0, 2.0, 3.0]])).numpy(), [expected], atol=1e-4)  # eval: one row is fine
