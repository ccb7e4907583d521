"""An ONNX model at a real size, beside onnxruntime on the CPU in the same run: a ResNet-18-shaped network (torch,
random weights, exported here by torch.onnx.export: nothing is downloaded) at batch 1 and 16, 224x224 images.

tinycore runs the model through `OnnxRunner` inside `TinyJit` (the replayed kernels, synchronized); onnxruntime runs
its CPUExecutionProvider with its default threads (all cores). The two alternate in blocks of runs, so a load that
comes and goes on a shared machine falls on both alike. Each block starts after a pause and an uncounted run:
onnxruntime's threads spin for tens of milliseconds after its run returns, and took a core from the tinycore runs
that followed at once (ResNet-18 at batch 1: 23 ms alone, 66 ms run by run, 38 / 30 / 26 / 24 ms for the first four
runs after one of onnxruntime's). The table has the median and the fastest counted run of each.

    python bench/bench_onnx.py [--batches 1,16] [--repeat 10] [--profile]
"""
from __future__ import annotations
import argparse
import io
import os
import statistics
import time
from typing import Callable
import numpy as np


def resnet18():
  """torchvision's resnet18 layout (BasicBlocks 2-2-2-2, 64-512 channels), written out so torchvision is not needed."""
  import torch
  from torch import nn

  class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
      super().__init__()
      self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
      self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
      self.down = None if stride == 1 and cin == cout else \
          nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
      y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
      return torch.relu(y + (x if self.down is None else self.down(x)))

  layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
  cin = 64
  for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
    layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
    cin = cout
  layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
  model = nn.Sequential(*layers).eval()
  torch.manual_seed(0)
  for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
      m.running_mean.uniform_(-0.1, 0.1)
      m.running_var.uniform_(0.5, 1.5)
  return model


def export(model, batch: int) -> bytes:
  import torch
  buffer = io.BytesIO()
  torch.onnx.export(model, (torch.zeros(batch, 3, 224, 224),), buffer, input_names=["input"], output_names=["output"],
                    dynamo=False, opset_version=17)
  return buffer.getvalue()


def make_tinycore(data: bytes, x: np.ndarray) -> tuple[float, Callable[[], None], np.ndarray]:
  """(first call seconds: building and compiling, one synchronized replayed run, the output)."""
  from tinycore import Device, Tensor, TinyJit
  from tinycore.nn.onnx import OnnxRunner
  runner = OnnxRunner(data)
  step = TinyJit(lambda t: runner({"input": t})["output"].realize())
  start = time.perf_counter()
  out = step(Tensor(x)).numpy()
  first = time.perf_counter() - start
  image = Tensor(x).realize()
  def run() -> None:
    step(image)
    Device[Device.DEFAULT].synchronize()
  for _ in range(2): run()  # the capture, then a replay
  return first, run, out


def make_onnxruntime(data: bytes, x: np.ndarray) -> tuple[Callable[[], None], np.ndarray] | None:
  try: import onnxruntime as ort
  except ImportError: return None
  session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
  out = session.run(None, {"input": x})[0]
  def run() -> None: session.run(None, {"input": x})
  run()
  return run, out


def interleaved(runs: list[Callable[[], None]], repeat: int, block: int = 4, pause: float = 0.2) -> list[list[float]]:
  """Seconds of each run, `repeat` times, the runs alternating in blocks of `block` runs: a load that comes and goes
  on a shared machine falls on all of them alike. A block starts after `pause` seconds and one uncounted run (the
  previous block's threads may still spin on the cores)."""
  times: list[list[float]] = [[] for _ in runs]
  while len(times[0]) < repeat:
    for run, samples in zip(runs, times):
      time.sleep(pause)
      run()
      for _ in range(min(block - 1, repeat - len(samples))):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
  return times


def profile(data: bytes, x: np.ndarray) -> None:
  """The kernels of one replayed run, slowest first (the profiler's per-kernel times)."""
  from tinycore import Tensor, TinyJit, profiler
  from tinycore.nn.onnx import OnnxRunner
  runner = OnnxRunner(data)
  step = TinyJit(lambda t: runner({"input": t})["output"].realize())
  for _ in range(3): step(Tensor(x)).numpy()
  profiler.clear()
  with profiler.profile(): step(Tensor(x)).numpy()
  kernels = [e for e in profiler.trace()["traceEvents"] if e.get("cat") == "kernel"]
  total = sum(e["dur"] for e in kernels) / 1000
  print(f"  {len(kernels)} kernels, {total:.1f} ms in kernels; the slowest:")
  for e in sorted(kernels, key=lambda e: -e["dur"])[:15]: print(f"    {e['dur'] / 1000:8.2f} ms  {e['name']}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batches", default="1,16")
  parser.add_argument("--repeat", type=int, default=10)
  parser.add_argument("--profile", action="store_true", help="list the slowest kernels of a tinycore run")
  args = parser.parse_args()
  model = resnet18()
  print(f"ResNet-18 (224x224, random weights) on {os.cpu_count()} cores; ms per run, median (fastest) of "
        f"{args.repeat}, tinycore and onnxruntime alternating in blocks")
  print(f"{'batch':>5} | {'tinycore':>15} | {'onnxruntime':>15} | {'ratio':>11} | tinycore's first call")
  print("------|-----------------|-----------------|-------------|---------------------")
  for batch in (int(b) for b in args.batches.split(",")):
    data = export(model, batch)
    x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    first, ours, out = make_tinycore(data, x)
    theirs = make_onnxruntime(data, x)
    if theirs is not None: np.testing.assert_allclose(out, theirs[1], rtol=1e-3, atol=1e-3)
    times = interleaved([ours] + ([theirs[0]] if theirs else []), args.repeat)
    cells = [f"{1000 * statistics.median(t):7.1f} ({1000 * min(t):5.1f})" for t in times]
    ratio = (f"{statistics.median(times[0]) / statistics.median(times[1]):4.2f} "
             f"({min(times[0]) / min(times[1]):4.2f})") if theirs else "-"
    print(f"{batch:5d} | {cells[0]:>15} | {cells[1] if theirs else '-':>15} | {ratio:>11} | {first:.1f} s")
    if args.profile: profile(data, x)


if __name__ == "__main__":
  main()
