"""Train a small MLP (or convnet) on the handwritten digits that ship with scikit-learn (1,797 8x8 images, no
download), with Adam; print a progress line per epoch and the held-out test accuracy, and save the weights.

    pip install -e '.[examples]' -e plugins/tiny-cpu
    python examples/train_digits.py                      # default device; --device CPU:1, --model conv, --epochs 20
    python examples/train_digits.py --devices CPU:0,CPU:1  # data parallel: the batch sharded over two devices
    mpiexec -n 2 python examples/train_digits.py --distributed  # over processes (pip install tiny-mpi[mpich])

With --distributed each process trains on its slice of every batch, the gradients are averaged across the processes
(tinycore.distributed), and the per-epoch losses are those of one process training on the whole batch; only rank 0
prints and saves. --devices combines with it: each process's slice is sharded over its devices.
"""
from __future__ import annotations
import argparse
import os
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--device", help="device to train on (default: tinycore's default device)")
  parser.add_argument("--devices", help="data parallel over these devices (comma-separated): the weights are "
                      "replicated on each, every batch is split evenly between them, gradients are allreduced")
  parser.add_argument("--distributed", action="store_true", help="data parallel over the processes of an MPI job "
                      "(run under mpiexec): each trains on its slice of every batch, gradients are averaged")
  parser.add_argument("--model", choices=("mlp", "conv"), default="mlp")
  parser.add_argument("--epochs", type=int, default=12)
  parser.add_argument("--batch-size", type=int, default=32)
  parser.add_argument("--lr", type=float, default=3e-3)
  parser.add_argument("--seed", type=int, default=1337)
  parser.add_argument("--no-jit", dest="jit", action="store_false", help="run the train step eagerly, not jitted")
  parser.add_argument("--out", default="digits.safetensors", help="where the trained weights are saved")
  return parser.parse_args(argv)


def load_split(seed: int):
  """(x_train, y_train, x_test, y_test): pixels scaled to [0, 1] as (N, 1, 8, 8) float32, labels int32; 20% held
  out."""
  import numpy as np
  from sklearn.datasets import load_digits
  digits = load_digits()
  images = (digits.images / 16.0).astype(np.float32)[:, None]
  labels = digits.target.astype(np.int32)
  order = np.random.default_rng(seed).permutation(len(labels))
  test_count = len(labels) // 5
  test, train = order[:test_count], order[test_count:]
  return images[train], labels[train], images[test], labels[test]


def build_model(kind: str):
  from tinycore import Tensor, nn

  class ConvNet:
    """conv 3x3 (16) -> relu -> maxpool 2 -> conv 3x3 (32) -> relu -> maxpool 2 -> linear 128 -> 10."""
    def __init__(self):
      self.c1, self.c2 = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
      self.l1 = nn.Linear(32 * 2 * 2, 10)

    def __call__(self, x: Tensor) -> Tensor:
      x = self.c1(x).relu().max_pool2d(2)
      x = self.c2(x).relu().max_pool2d(2)
      return self.l1(x.flatten(1))

  class MLP:
    """64 -> 128 -> relu -> 10."""
    def __init__(self): self.l1, self.l2 = nn.Linear(64, 128), nn.Linear(128, 10)
    def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x.flatten(1)).relu())

  return ConvNet() if kind == "conv" else MLP()


def make_train_step(model, opt, distributed: bool = False):
  """One step on a batch: forward, loss, backward and the Adam update realized as one schedule. Distributed, the
  gradients are averaged over the processes and the loss and hits are those of the whole batch (one collective for
  the gradients, one for the two numbers), in the same schedule."""
  from tinycore import Tensor, dtypes
  from tinycore import distributed as dist

  def train_step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    opt.zero_grad()
    out = model(x)
    loss = out.sparse_categorical_crossentropy(y)
    loss.backward()
    hits = (out.argmax(-1) == y).sum()
    if distributed:
      dist.all_reduce_gradients(opt.params)
      totals = dist.all_reduce(loss.reshape(1).cat(hits.cast(dtypes.float32).reshape(1)))
      loss, hits = totals[0] / dist.world_size(), totals[1].cast(dtypes.int32)
    Tensor.realize(loss, hits, *opt.schedule_step())
    return loss, hits
  return train_step


def run_epoch(step_fn, x_train, y_train, batch_size: int, order, devices=None, part=(0, 1)) -> tuple[float, float]:
  """(mean loss, accuracy) over the epoch's full batches, in the given order (each batch sharded over `devices`).
  `part` (rank, world size): this process takes that slice of every batch (the step returns the whole batch's
  loss and hits)."""
  from tinycore import Tensor
  steps = len(y_train) // batch_size
  rank, world = part
  loss_sum = correct = 0.0
  with Tensor.train():
    for step in range(steps):
      batch = order[step * batch_size:(step + 1) * batch_size]
      batch = batch[rank * batch_size // world:(rank + 1) * batch_size // world]
      x, y = Tensor(x_train[batch]), Tensor(y_train[batch])
      if devices: x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
      loss, hits = step_fn(x, y)
      loss_sum, correct = loss_sum + loss.item(), correct + hits.item()
  return loss_sum / steps, correct / (steps * batch_size)


def data_parallel_part(args: argparse.Namespace, devices) -> tuple[int, int]:
  """(rank, world size): this process's part of every batch (started here with --distributed, else (0, 1)); the
  batch must split evenly over the processes and each process's slice over its devices."""
  from tinycore import distributed as dist
  part = (0, 1)
  if args.distributed:
    dist.init()
    part = (dist.rank(), dist.world_size())
  local_batch = args.batch_size // part[1]
  if local_batch * part[1] != args.batch_size or (devices and local_batch % len(devices)):
    raise SystemExit(f"--batch-size {args.batch_size} does not split over {part[1]} processes x "
                     f"{len(devices) if devices else 1} devices")
  return part


def place_parameters(model, devices, distributed: bool) -> None:
  """The weights replicated on each of `devices`; distributed, every process starts from rank 0's."""
  from tinycore import distributed as dist
  from tinycore.nn.state import get_parameters
  if devices:
    for weight in get_parameters(model): weight.replace(weight.to(devices).realize())
  if distributed: dist.broadcast_parameters(get_parameters(model))


def train(args: argparse.Namespace, log=print) -> dict:
  """Train; return {"losses": per-epoch mean loss, "test_accuracy": float, "seconds": float}."""
  if args.device: os.environ["TINYCORE_DEVICE"] = args.device  # read when the default device is first needed
  import numpy as np
  from tinycore import Device, Tensor, TinyJit
  from tinycore import distributed as dist
  from tinycore.nn import optim
  from tinycore.nn.state import get_parameters, get_state_dict, safe_save
  devices = tuple(args.devices.split(",")) if args.devices else None
  part = data_parallel_part(args, devices)
  if part[0] != 0: log = lambda *_: None  # noqa: E731 (only rank 0 prints)
  x_train, y_train, x_test, y_test = load_split(args.seed)
  Tensor.manual_seed(args.seed)
  model = build_model(args.model)
  place_parameters(model, devices, args.distributed)
  opt = optim.Adam(get_parameters(model), lr=args.lr)
  step_fn = make_train_step(model, opt, args.distributed)
  if args.jit: step_fn = TinyJit(step_fn)
  rng = np.random.default_rng(args.seed)
  where = f"{','.join(devices)} (data parallel)" if devices else Device.DEFAULT
  if args.distributed: where += f" in each of {part[1]} processes ({dist.backend_name()}, data parallel)"
  log(f"training a {args.model} on {where}{' (jitted step)' if args.jit else ''}: {len(y_train)} train / "
      f"{len(y_test)} test images, {args.epochs} epochs of {len(y_train) // args.batch_size} steps "
      f"(batch {args.batch_size})")
  losses, start = [], time.perf_counter()
  for epoch in range(1, args.epochs + 1):
    epoch_start = time.perf_counter()
    loss, accuracy = run_epoch(step_fn, x_train, y_train, args.batch_size, rng.permutation(len(y_train)), devices,
                               part)
    losses.append(loss)
    rate = len(y_train) // args.batch_size * args.batch_size / (time.perf_counter() - epoch_start)
    log(f"epoch {epoch:3d}/{args.epochs}  loss {loss:.6f}  train accuracy {accuracy:.3f}  {rate:8.0f} images/s")
  with Tensor.test():
    predictions = model(Tensor(x_test).to(devices) if devices else Tensor(x_test)).argmax(-1).numpy()
  test_accuracy = float((predictions == y_test).mean())
  seconds = time.perf_counter() - start
  log(f"trained in {seconds:.1f} s")
  log(f"test accuracy: {test_accuracy:.3f}")
  state = get_state_dict(model)
  if devices: state = {name: weight.to(devices[0]) for name, weight in state.items()}  # gathered (replicas agree)
  if part[0] == 0:
    safe_save(state, args.out)
    log(f"saved the weights to {args.out}")
  return {"losses": losses, "test_accuracy": test_accuracy, "seconds": seconds}


if __name__ == "__main__":
  train(parse_args())
