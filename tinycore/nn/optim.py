"""Optimizers (tinygrad's names and update rules): SGD (momentum, nesterov, weight decay), Adam, AdamW, LAMB, and
OptimizerGroup to step several at once.

    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=1e-3)
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()          # one schedule: the backward pass, the updates and the loss's own kernels

The learning rate and the optimizer state live in tensors (device buffers), so changing `opt.lr` does not change a
kernel and a step is the same graph every time (the schedule cache hits from the second step on).
"""
from __future__ import annotations
from tinycore.dtype import dtypes
from tinycore.helpers import TRAINING
from tinycore.tensor import Tensor


def _dedup(tensors: list[Tensor]) -> list[Tensor]:
  seen: dict[int, Tensor] = {}
  for t in tensors: seen.setdefault(id(t), t)
  return list(seen.values())


def _state_like(t: Tensor) -> Tensor:
  """Zeros in their own buffer, shaped like t: optimizer state that steps update in place."""
  return _own_buffer(Tensor.zeros(*t.shape, device=t.device, dtype=t.dtype))


def _own_buffer(value: Tensor) -> Tensor:
  """value stored in a fresh buffer of its own (equal constants are one shared graph node: no sharing here)."""
  return Tensor.empty(*value.shape, device=value.device, dtype=value.dtype, requires_grad=False).assign(value).realize()


class Optimizer:
  """Base class: `params` are the tensors to update (requires_grad not False; None becomes True); tensors with
  requires_grad=False (e.g. BatchNorm's running statistics) are `buffers`, realized with every step."""

  def __init__(self, params: list[Tensor], lr: float, device: str | None = None, fused: bool = False):
    """`device`: where the learning rate and step counters live (default: the first parameter's device). `fused`
    (tinygrad packs all parameters into one buffer) is accepted and changes nothing: a step is one schedule anyway."""
    if lr < 0: raise ValueError(f"invalid learning rate {lr}: it must be >= 0")
    for t in params:
      if t.requires_grad is None: t.requires_grad = True
    self.params = _dedup([t for t in params if t.requires_grad])
    if not self.params: raise ValueError("the optimizer got no parameters (every tensor has requires_grad=False)")
    self.buffers = _dedup([t for t in params if not t.requires_grad])
    self.device = device or self.params[0].device
    self._lr = _own_buffer(Tensor([lr], device=self.device, dtype=dtypes.float32))

  @property
  def lr(self) -> Tensor:
    """The learning rate: a (1,) float32 tensor on `device`. Assigning a number or a tensor (`opt.lr = 0.01`,
    `opt.lr *= 0.5`) stores into it, so every later step, a jitted one included, reads the new value."""
    return self._lr

  @lr.setter
  def lr(self, value: float | Tensor) -> None:
    if not isinstance(value, Tensor):
      if value < 0: raise ValueError(f"invalid learning rate {value}: it must be >= 0")
      value = Tensor([value], device=self.device, dtype=dtypes.float32)
    if value.numel() != 1:
      raise ValueError(f"the learning rate must be one number, got a tensor of shape {value.shape}")
    self._lr.assign(value.reshape(1).cast(dtypes.float32).to(self._lr.device)).realize()  # a jitted step reads it

  def zero_grad(self) -> None:
    """Forget the parameters' gradients (the next backward() starts from zero)."""
    for t in self.params: t.grad = None

  def step(self) -> None:
    """Update every parameter from its .grad (one realize for all of them)."""
    Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Assign the updates lazily; return the tensors to realize (state, parameters, buffers)."""
    if not TRAINING:
      raise RuntimeError("optimizer step outside training mode: use `with Tensor.train():` or Context(TRAINING=1)")
    missing = [i for i, t in enumerate(self.params) if t.grad is None]
    if missing: raise RuntimeError(f"parameters {missing} have no .grad: call loss.backward() before step()")
    state = self.update_parameters([t.grad for t in self.params])
    return state + self.params + self.buffers

  def update_parameters(self, grads: list[Tensor]) -> list[Tensor]:
    """Assign each parameter its new value; return the state tensors that changed."""
    raise NotImplementedError


class SGD(Optimizer):
  """g = grad + weight_decay * p; with momentum: b = momentum * b + g, g = g + momentum * b (nesterov) or b;
  p -= lr * g. `classic` scales the gradient by lr before the momentum instead of after (they differ only when lr
  changes between steps)."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
               nesterov: bool = False, classic: bool = False, device: str | None = None, fused: bool = False):
    super().__init__(params, lr, device, fused)
    self.classic = classic
    if momentum < 0: raise ValueError(f"invalid momentum {momentum}: it must be >= 0")
    if nesterov and momentum <= 0: raise ValueError("nesterov momentum needs momentum > 0")
    self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
    self.velocity = [_state_like(t) for t in self.params] if momentum else []

  def update_parameters(self, grads: list[Tensor]) -> list[Tensor]:
    for i, (t, g) in enumerate(zip(self.params, grads)):
      lr = self.lr.to(t.device)
      g = g + self.weight_decay * t.detach() if self.weight_decay else g
      if self.classic: g = g * lr
      if self.momentum:  # the velocity may live on another device (offloaded): it is updated there
        velocity = self.velocity[i]
        velocity.assign(self.momentum * velocity + g.to(velocity.device))
        g = g + self.momentum * velocity.to(t.device) if self.nesterov else velocity.to(t.device)
      t.assign((t.detach() - (g if self.classic else lr * g)).cast(t.dtype))
    return self.velocity


class LAMB(Optimizer):
  """Adam moments with bias correction; `adam=True` is AdamW (decoupled weight decay), otherwise the update is
  scaled by the trust ratio |p| / |update| (LAMB). `l2` adds weight_decay * p to the gradient instead (torch's
  Adam weight_decay)."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False, l2: bool = False, device: str | None = None,
               fused: bool = False):
    super().__init__(params, lr, device, fused)
    if weight_decay < 0: raise ValueError(f"invalid weight_decay {weight_decay}: it must be >= 0")
    self.b1, self.b2, self.eps, self.weight_decay, self.adam, self.l2 = b1, b2, eps, weight_decay, adam, l2
    # the running powers of b1 and b2 stay float32 whatever the default float (as tinygrad: half would round them)
    self.b1_t = _own_buffer(Tensor.ones(1, device=self.device, dtype=dtypes.float32))
    self.b2_t = _own_buffer(Tensor.ones(1, device=self.device, dtype=dtypes.float32))
    self.m = [_state_like(t) for t in self.params]
    self.v = [_state_like(t) for t in self.params]

  def update_parameters(self, grads: list[Tensor]) -> list[Tensor]:
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    for t, g, m, v in zip(self.params, grads, self.m, self.v):
      # the moments may live on another device than the parameter (offloaded): they are updated there
      b1_t, b2_t = self.b1_t.to(m.device), self.b2_t.to(m.device)
      if self.l2 and self.weight_decay: g = g + self.weight_decay * t.detach()
      g = g.to(m.device)
      m.assign(self.b1 * m + (1 - self.b1) * g)
      v.assign(self.b2 * v + (1 - self.b2) * g.to(v.device).square())
      update = ((m / (1 - b1_t)) / ((v.to(m.device) / (1 - b2_t)).sqrt() + self.eps)).to(t.device)
      lr = self.lr.to(t.device)
      if not self.l2 and self.weight_decay: update = update + self.weight_decay * t.detach()
      if not self.adam:
        r1, r2 = t.detach().square().sum().sqrt(), update.square().sum().sqrt()
        update = update * ((r1 > 0) & (r2 > 0)).where(r1 / r2, 1.0)
      t.assign((t.detach() - lr * update).cast(t.dtype))
    return [self.b1_t, self.b2_t, *self.m, *self.v]


def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         weight_decay: float = 0.0, device: str | None = None, fused: bool = False) -> LAMB:
  """Adam; weight_decay (default 0) is added to the gradient (L2), as torch's Adam."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, l2=True, device=device, fused=fused)


def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 0.01, device: str | None = None, fused: bool = False) -> LAMB:
  """Adam with decoupled weight decay: p -= lr * (adam_update + weight_decay * p)."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, device=device, fused=fused)


class OptimizerGroup(Optimizer):
  """Several optimizers stepped as one (e.g. different learning rates for parts of a model): zero_grad and step
  act on all of them, in one realize; `group[i]` is the i-th optimizer."""

  def __init__(self, *optimizers: Optimizer):  # pylint: disable=super-init-not-called
    if not optimizers: raise ValueError("OptimizerGroup needs at least one optimizer")
    self.optimizers = optimizers
    self.params = [t for o in optimizers for t in o.params]
    self.buffers = [t for o in optimizers for t in o.buffers]

  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def schedule_step(self) -> list[Tensor]: return [t for o in self.optimizers for t in o.schedule_step()]


__all__ = ["Optimizer", "OptimizerGroup", "SGD", "LAMB", "Adam", "AdamW"]
