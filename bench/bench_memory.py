"""Peak memory of a training step and of an encoder forward: tinycore with its memory planner on and off, beside torch.

    python bench/bench_memory.py [--layers 8] [--dim 256] [--batch 8] [--seq 64] [--encoder-layers 6]

Models (bench/scale_models.py, the same math and weights in both libraries):
- train: the small GPT's training step (pre-LN blocks, causal attention, GELU MLP, sparse cross entropy, Adam) at
  `--layers` x `--dim`, batch `--batch` x `--seq` tokens, eager (each step schedules from the plan cache) and
  under TinyJit;
- encoder: the BERT-style encoder forward (hidden 384, 12 heads, `--encoder-layers`), batch 8 x 64 with padding.

Each (library, model, setting) runs in a fresh process; the baseline is its resident memory once the library is
imported and the weights are made (and, for tinycore, on the device). Columns:
- state MB: resident memory above the baseline just before the measured call, after the warm-up calls (for training
  the gradients and Adam's moments, and in both libraries memory their allocators keep for reuse);
- peak MB: the most resident memory above the baseline during one call after warm-up (Linux's VmHWM, reset before
  the call through /proc/self/clear_refs): what the call needs beyond its weights;
- device peak MB (tinycore): the most device memory that buffers held during the call (`GlobalCounters.mem_peak`)
  above what they held before it (memory the allocator keeps for reuse is not in it).
Asserts nothing: numbers, not pass/fail.
"""
from __future__ import annotations
import argparse
import json
import os
import pathlib
import subprocess
import sys
from typing import Any
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from scale_models import Encoder, Transformer, encoder_weights, torch_encoder, torch_transformer, transformer_weights  # noqa: E402,E501

WARMUP_STEPS = 3


def resident_kib(field: str = "VmRSS") -> int:
  """This process's resident memory (VmRSS) or its high-water mark since the last reset (VmHWM), in KiB."""
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith(field + ":"): return int(line.split()[1])
  raise RuntimeError(f"/proc/self/status has no {field}")


def reset_high_water_mark() -> None:
  """Linux: writing 5 to clear_refs resets VmHWM to the present VmRSS."""
  pathlib.Path("/proc/self/clear_refs").write_text("5")


def measure(call, baseline_kib: int, counters: Any = None) -> dict[str, float]:
  """state and peak (MB) of one call, as the module docstring says."""
  for _ in range(WARMUP_STEPS): call()
  before = resident_kib()
  device_before = counters.mem_used if counters is not None else 0
  if counters is not None: counters.reset()
  reset_high_water_mark()
  call()
  peak = resident_kib("VmHWM")
  result = {"state_mb": (before - baseline_kib) / 1024, "peak_mb": (peak - baseline_kib) / 1024}
  if counters is not None: result["device_peak_mb"] = (counters.mem_peak - device_before) / 2**20
  return result


def tinycore_worker(model: str, args: argparse.Namespace, jit: bool) -> dict[str, float]:
  import tinycore
  from tinycore import GlobalCounters, Tensor, TinyJit, nn
  rng = np.random.default_rng(0)
  if model == "train":
    net = Transformer(tinycore, transformer_weights(args.layers, dim=args.dim, seq=args.seq), args.layers)
    Tensor.realize(*net.params.values())
    baseline = resident_kib()
    opt = nn.optim.Adam(list(net.params.values()), lr=1e-4)
    tokens = rng.integers(0, 256, (args.batch, args.seq)).astype(np.int32)

    def step(x: Tensor) -> Tensor:
      with Tensor.train():
        opt.zero_grad()
        loss = net(x).sparse_categorical_crossentropy(x)
        loss.backward()
        opt.step()
      return loss.realize()
    run = TinyJit(step) if jit else step
    def call() -> None: run(Tensor(tokens)).item()
  else:
    params = {name: Tensor(value) for name, value in encoder_weights(args.encoder_layers).items()}
    net = Encoder(params, args.encoder_layers)
    Tensor.realize(*params.values())
    baseline = resident_kib()
    tokens = rng.integers(0, 1000, (8, 64)).astype(np.int32)
    mask = np.ones((8, 64), np.int32)
    mask[:, 48:] = 0
    def call() -> None: net(Tensor(tokens), Tensor(mask)).realize().numpy()
  return measure(call, baseline, GlobalCounters)


def torch_worker(model: str, args: argparse.Namespace) -> dict[str, float]:
  import torch
  torch.manual_seed(0)
  rng = np.random.default_rng(0)
  if model == "train":
    forward, params = torch_transformer(transformer_weights(args.layers, dim=args.dim, seq=args.seq), args.layers)
    baseline = resident_kib()
    opt = torch.optim.Adam(params, lr=1e-4)
    tokens = torch.tensor(rng.integers(0, 256, (args.batch, args.seq)))

    def call() -> None:
      opt.zero_grad()
      logits = forward(tokens)
      loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))
      loss.backward()
      opt.step()
      loss.item()
  else:
    forward = torch_encoder(encoder_weights(args.encoder_layers), args.encoder_layers)
    baseline = resident_kib()
    tokens = torch.tensor(rng.integers(0, 1000, (8, 64)))
    mask = torch.ones(8, 64, dtype=torch.int32)
    mask[:, 48:] = 0
    def call() -> None:
      with torch.no_grad(): forward(tokens, mask).numpy()
  return measure(call, baseline)


def run_worker(label: str, model: str, extra_env: dict[str, str], argv: list[str]) -> dict[str, Any]:
  out = subprocess.run([sys.executable, __file__, "--worker", label, "--model", model, *argv], capture_output=True,
                       text=True, env={**os.environ, **extra_env}, timeout=1800)
  if out.returncode != 0: return {"error": (out.stderr or out.stdout).strip().splitlines()[-1]}
  return json.loads(out.stdout.strip().splitlines()[-1])


SETTINGS = [  # (row label, worker, environment)
  ("tinycore (planner)", "tinycore", {}),
  ("tinycore (no planner)", "tinycore", {"TINYCORE_NO_MEMORY_PLANNER": "1"}),
  ("tinycore TinyJit (planner)", "tinycore-jit", {}),
  ("tinycore TinyJit (no planner)", "tinycore-jit", {"TINYCORE_NO_MEMORY_PLANNER": "1"}),
  ("torch", "torch", {}),
]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--layers", type=int, default=8)
  parser.add_argument("--dim", type=int, default=256)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--seq", type=int, default=64)
  parser.add_argument("--encoder-layers", type=int, default=6)
  parser.add_argument("--models", default="train,encoder")
  parser.add_argument("--worker", help=argparse.SUPPRESS)
  parser.add_argument("--model", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker:
    if args.worker == "torch": result = torch_worker(args.model, args)
    else: result = tinycore_worker(args.model, args, jit=args.worker == "tinycore-jit")
    print(json.dumps(result))
    return
  argv = [f"--layers={args.layers}", f"--dim={args.dim}", f"--batch={args.batch}", f"--seq={args.seq}",
          f"--encoder-layers={args.encoder_layers}"]
  titles = {"train": f"training step: {args.layers} layers x d_model {args.dim}, batch {args.batch} x {args.seq}, Adam",
            "encoder": f"encoder forward: {args.encoder_layers} layers x 384, batch 8 x 64"}
  for model in args.models.split(","):
    print(f"\n{titles[model]}\n")
    print("| library | state MB | peak MB | device peak MB |\n| --- | --- | --- | --- |")
    for label, worker, env in SETTINGS:
      if model == "encoder" and worker == "tinycore-jit": continue
      r = run_worker(worker, model, env, argv)
      if "error" in r: print(f"| {label} | error: {r['error'][:80]} | | |")
      else:
        device = f"{r['device_peak_mb']:.1f}" if "device_peak_mb" in r else "-"
        print(f"| {label} | {r['state_mb']:.1f} | {r['peak_mb']:.1f} | {device} |", flush=True)


if __name__ == "__main__":
  main()
