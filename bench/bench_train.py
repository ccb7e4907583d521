"""Training and TinyJit: images/s of the digits model's train step jitted vs eager, and the per-call time of a
20-op elementwise chain on a tiny tensor, jitted vs eager.

    python bench/bench_train.py [--model mlp|conv] [--steps 40] [--repeat 200]

- train step (examples/train_digits.py: forward, loss, backward, Adam update realized as one schedule): eager
  schedules each step (schedule cache hit, compiled batch template), jitted replays one compiled plan;
- chain: ((x * 1.01 + 0.5) ...) 20 ops on 16 floats, one fused kernel: eager = realize() of a new graph per call,
  jitted = TinyJit replay (bind the input, run the compiled batch).
"""
from __future__ import annotations
import argparse
import pathlib
import sys
import time
import numpy as np
from tinycore import Tensor, TinyJit
from timing import median_time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
import train_digits  # noqa: E402


def train_rate(model_kind: str, jit: bool, steps: int, batch: int = 32) -> float:
  """Images per second of train steps after three warm-up steps (compile, capture)."""
  from tinycore.nn import optim
  from tinycore.nn.state import get_parameters
  x_train, y_train, _, _ = train_digits.load_split(1337)
  Tensor.manual_seed(0)
  model = train_digits.build_model(model_kind)
  opt = optim.Adam(get_parameters(model), lr=1e-3)
  step = train_digits.make_train_step(model, opt)
  if jit: step = TinyJit(step)
  rng = np.random.default_rng(0)
  with Tensor.train():
    for i in range(steps + 3):
      if i == 3: start = time.perf_counter()
      idx = rng.integers(0, len(y_train), batch)
      loss, _ = step(Tensor(x_train[idx]), Tensor(y_train[idx]))
      loss.item()
  return steps * batch / (time.perf_counter() - start)


def chain(x: Tensor) -> Tensor:
  for i in range(10): x = x * 1.01 + 0.5 * (i % 3)
  return x.realize()


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--model", choices=("mlp", "conv"), default="mlp")
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--repeat", type=int, default=200)
  args = parser.parse_args()
  eager, jitted = train_rate(args.model, False, args.steps), train_rate(args.model, True, args.steps)
  print(f"train step ({args.model}, batch 32): eager {eager:8.0f} images/s   jitted {jitted:8.0f} images/s   "
        f"({jitted / eager:.1f}x)")
  x = Tensor(np.ones(16, np.float32)).realize()
  jit_chain = TinyJit(chain)
  eager_s = median_time(lambda: chain(x).numpy(), args.repeat)
  jit_s = median_time(lambda: jit_chain(x).numpy(), args.repeat)
  print(f"20-op elementwise chain on 16 floats, per call incl. readback: eager {eager_s * 1e6:7.1f} us   "
        f"jitted {jit_s * 1e6:7.1f} us")


if __name__ == "__main__":
  main()
