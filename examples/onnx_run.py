"""Run an ONNX model on tinycore: print each output's name, shape and dtype; with --benchmark, the time per run
beside onnxruntime's (when it is installed) on the same inputs.

    python examples/onnx_run.py MODEL.onnx [--input NAME=file.npy ...] [--benchmark] [--save DIR] [--device CPU]

Inputs not given are random: normal floats, small non-negative ints, random bools, in the model's shapes (a free
dim, e.g. the batch, is 1; --dim NAME=SIZE sets one by its name).
"""
from __future__ import annotations
import argparse
import pathlib
import statistics
import sys
import time
from typing import Callable
import numpy as np


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
  pairs = {}
  for item in items:
    name, sep, value = item.partition("=")
    if not sep or not name: raise SystemExit(f"{what} must be NAME=VALUE, got {item!r}")
    pairs[name] = value
  return pairs


def random_input(shape: tuple | None, dtype, dims: dict[str, int], rng: np.random.Generator) -> np.ndarray:
  """Random data of a graph input's shape (free dims from `dims`, else 1) and dtype."""
  from tinycore import dtypes
  concrete = tuple(d if isinstance(d, int) and d > 0 else int(dims.get(str(d), 1)) for d in (shape or ()))
  if dtype is None or dtypes.is_float(dtype): return rng.standard_normal(concrete).astype(np.float32)
  if dtype is dtypes.bool: return rng.random(concrete) < 0.5
  return rng.integers(0, 4, concrete).astype(np.dtype(dtype.name))


def median_ms(fn: Callable[[], object], repeat: int) -> float:
  fn()
  samples = []
  for _ in range(repeat):
    start = time.perf_counter()
    fn()
    samples.append(time.perf_counter() - start)
  return 1000 * statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description="Run an ONNX model on tinycore")
  parser.add_argument("model", help="the .onnx file")
  parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input from a .npy file")
  parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="the size of a named free dim")
  parser.add_argument("--benchmark", action="store_true", help="time per run, beside onnxruntime's when installed")
  parser.add_argument("--repeat", type=int, default=10, help="runs timed for --benchmark (the median is printed)")
  parser.add_argument("--save", metavar="DIR", help="write each output to DIR/NAME.npy")
  parser.add_argument("--device", default=None, help="the tinycore device (default: the default device)")
  args = parser.parse_args(argv)

  from tinycore import Device, Tensor, TinyJit
  from tinycore.nn.onnx import OnnxRunner
  runner = OnnxRunner(args.model, device=args.device)
  files = parse_pairs(args.input, "--input")
  unknown = sorted(set(files) - set(runner.graph_inputs))
  if unknown: raise SystemExit(f"the model has no input {unknown[0]!r}; its inputs: {list(runner.graph_inputs)}")
  dims = {name: int(size) for name, size in parse_pairs(args.dim, "--dim").items()}
  rng = np.random.default_rng(0)
  feeds = {name: np.load(files[name]) if name in files else random_input(spec.shape, spec.dtype, dims, rng)
           for name, spec in runner.graph_inputs.items()}
  for name, value in feeds.items():
    print(f"input  {name}: {tuple(value.shape)} {value.dtype}{' (random)' if name not in files else ''}")
  outputs = runner(feeds)
  for name, value in outputs.items():
    if isinstance(value, list): print(f"output {name}: a sequence of {len(value)} tensors")
    else: print(f"output {name}: {tuple(value.realize().shape)} {value.dtype.name}")
    if args.save and isinstance(value, Tensor):
      pathlib.Path(args.save).mkdir(parents=True, exist_ok=True)
      np.save(pathlib.Path(args.save) / f"{name}.npy", value.numpy())
  if not args.benchmark: return 0

  device, names = runner.device, list(feeds)
  step = TinyJit(lambda *ts: [v.realize() for v in runner(dict(zip(names, ts))).values() if isinstance(v, Tensor)])
  tensors = [Tensor(feeds[name], device=device).realize() for name in names]
  def ours() -> None:
    step(*tensors)
    Device[device].synchronize()
  ours()  # the first calls build the graph and capture the kernels
  print(f"tinycore ({device}): {median_ms(ours, args.repeat):.2f} ms per run (TinyJit, median of {args.repeat})")
  try: import onnxruntime as ort
  except ImportError:
    print("onnxruntime: not installed (pip install onnxruntime)")
    return 0
  session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
  ms = median_ms(lambda: session.run(None, feeds), args.repeat)
  print(f"onnxruntime (CPUExecutionProvider): {ms:.2f} ms per run (median of {args.repeat})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
