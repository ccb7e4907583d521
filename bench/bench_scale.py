"""Real models at real sizes: scheduling, planning, first and repeated calls, and training steps, by depth.

    python bench/bench_scale.py [--layers 1,2,4,8,12,24] [--models transformer,encoder,train]
                                [--peers torch,tinygrad] [--repeat 5] [--device CPU]

Models (bench/scale_models.py, written once with the public Tensor API, so tinycore and tinygrad run the same code):
- transformer: a small GPT (d_model 64, 4 heads, pre-LN blocks: causal attention and a GELU MLP), forward on
  batch 1 x 16 tokens;
- encoder: a BERT-style encoder (hidden 384, 12 heads, post-LN, GELU MLP of 1536), batch 8 x 64 tokens with padding,
  its weights written to a safetensors file and loaded with `safe_load(...)` then `.to(Device.DEFAULT)`;
- train: the transformer's training step (batch 2 x 32 tokens, sparse cross entropy, Adam), eager and under TinyJit.

Every (library, model, depth) runs in a fresh process with empty compile caches, so "first" is a user's first call
(graph, schedule, compiles, run). Columns (tinycore; peers beside it):
- kernels: kernel calls in the schedule; sched ms: the scheduler on that graph (`create_schedule`, uncached);
  plan ms: the run plan of that schedule with every kernel already compiled; per kernel: (sched + plan) / kernels,
  which stays flat when both grow linearly with the graph;
- first s: the first call; repeat ms: the median of `--repeat` later calls on new inputs (each a new graph of the
  same structure: the plan cache serves it), read back to the host;
- train rows: eager step ms and TinyJit step ms (median after warm-up), each step reading the loss back.
Asserts nothing: numbers, not pass/fail.
"""
from __future__ import annotations
import argparse
import importlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from scale_models import Encoder, Transformer, encoder_weights, torch_encoder, torch_transformer, transformer_weights  # noqa: E402,E501

FORWARD_BATCH, FORWARD_SEQ = 1, 16
TRAIN_BATCH, TRAIN_SEQ = 2, 32
ENCODER_BATCH, ENCODER_SEQ = 8, 64


def median_ms(fn, repeat: int) -> float:
  samples = []
  for _ in range(repeat):
    start = time.perf_counter()
    fn()
    samples.append(time.perf_counter() - start)
  return statistics.median(samples) * 1000


# --------------------------------------------------------------------------- workers (one process each)
def tinycore_schedule_and_plan(roots: list) -> dict[str, float]:
  """Kernels, scheduler ms and planner ms for a graph whose kernels are compiled already (a warm plan)."""
  from tinycore.engine.plan import RunPlan
  from tinycore.schedule import create_schedule
  from tinycore.schedule.keys import graph_key
  from tinycore.uop.ops import Ops
  key = graph_key(roots)
  start = time.perf_counter()
  linear, _ = create_schedule(list(key.graph.src))
  schedule_ms = (time.perf_counter() - start) * 1000
  start = time.perf_counter()
  RunPlan(linear).steps()
  plan_ms = (time.perf_counter() - start) * 1000
  kernels = sum(call.src[0].op is Ops.SINK for call in linear.src)
  return {"kernels": kernels, "schedule_ms": schedule_ms, "plan_ms": plan_ms}


def forward_worker(lib_name: str, model: str, layers: int, repeat: int) -> dict[str, Any]:
  rng = np.random.default_rng(0)
  if lib_name == "torch": return torch_forward(model, layers, repeat, rng)
  lib = importlib.import_module(lib_name)
  Tensor = lib.Tensor
  if model == "transformer":
    net = Transformer(lib, transformer_weights(layers), layers)
    for t in net.params.values(): t.requires_grad = False
    Tensor.realize(*net.params.values())

    def graph():
      return net(Tensor(rng.integers(0, 256, (FORWARD_BATCH, FORWARD_SEQ)).astype(np.int32)))
  else:
    state = importlib.import_module(f"{lib_name}.nn.state")
    path = pathlib.Path(tempfile.mkdtemp()) / "encoder.safetensors"
    from safetensors.numpy import save_file
    save_file(encoder_weights(layers), str(path))
    params = {k: v.to(lib.Device.DEFAULT) for k, v in state.safe_load(str(path)).items()}
    net = Encoder(params, layers)
    mask = np.ones((ENCODER_BATCH, ENCODER_SEQ), np.int32)
    mask[:, ENCODER_SEQ * 3 // 4:] = 0

    def graph():
      tokens = Tensor(rng.integers(0, 1000, (ENCODER_BATCH, ENCODER_SEQ)).astype(np.int32))
      return net(tokens, Tensor(mask))
  start = time.perf_counter()
  graph().numpy()
  result: dict[str, Any] = {"first_s": time.perf_counter() - start}
  graph().numpy()
  result["repeat_ms"] = median_ms(lambda: graph().numpy(), repeat)
  if lib_name == "tinycore": result |= tinycore_schedule_and_plan([graph().uop])
  return result


def torch_forward(model: str, layers: int, repeat: int, rng) -> dict[str, Any]:
  import torch
  torch.manual_seed(0)
  if model == "transformer":
    forward, _ = torch_transformer(transformer_weights(layers), layers)
    def run():
      with torch.no_grad(): forward(torch.tensor(rng.integers(0, 256, (FORWARD_BATCH, FORWARD_SEQ))))
  else:
    forward = torch_encoder(encoder_weights(layers), layers)
    mask = torch.ones((ENCODER_BATCH, ENCODER_SEQ), dtype=torch.int32)
    mask[:, ENCODER_SEQ * 3 // 4:] = 0
    def run():
      with torch.no_grad(): forward(torch.tensor(rng.integers(0, 1000, (ENCODER_BATCH, ENCODER_SEQ))), mask)
  start = time.perf_counter()
  run()
  first = time.perf_counter() - start
  run()
  return {"first_s": first, "repeat_ms": median_ms(run, repeat)}


def train_worker(lib_name: str, layers: int, repeat: int) -> dict[str, Any]:
  rng = np.random.default_rng(0)
  weights = transformer_weights(layers, seq=TRAIN_SEQ)
  if lib_name == "torch": return torch_train(weights, layers, repeat, rng)
  lib = importlib.import_module(lib_name)
  Tensor, optim = lib.Tensor, importlib.import_module(f"{lib_name}.nn.optim")
  result: dict[str, Any] = {}
  for mode in ("eager", "jit"):
    net = Transformer(lib, weights, layers)
    opt = optim.Adam(list(net.params.values()), lr=1e-3)

    def step(tokens, targets):
      opt.zero_grad()
      loss = net(tokens).sparse_categorical_crossentropy(targets)
      loss.backward()
      opt.step()
      return loss.realize()
    if mode == "jit": step = lib.TinyJit(step)

    def run():
      tokens = Tensor(rng.integers(0, 256, (TRAIN_BATCH, TRAIN_SEQ)).astype(np.int32))
      targets = Tensor(rng.integers(0, 256, (TRAIN_BATCH, TRAIN_SEQ)).astype(np.int32))
      return step(tokens, targets).item()
    with lib.Context(TRAINING=1):
      start = time.perf_counter()
      run()
      if mode == "eager": result["first_s"] = time.perf_counter() - start
      for _ in range(2): run()
      result[f"{mode}_ms"] = median_ms(run, repeat)
      if mode == "eager" and lib_name == "tinycore":
        opt.zero_grad()
        tokens, targets = (Tensor(rng.integers(0, 256, (TRAIN_BATCH, TRAIN_SEQ)).astype(np.int32)) for _ in range(2))
        net(tokens).sparse_categorical_crossentropy(targets).backward()
        result |= tinycore_schedule_and_plan([t.uop for t in opt.schedule_step()])
  return result


def torch_train(weights: dict, layers: int, repeat: int, rng) -> dict[str, Any]:
  import torch
  import torch.nn.functional as F
  forward, params = torch_transformer(weights, layers)
  opt = torch.optim.Adam(params, lr=1e-3)

  def run():
    tokens = torch.tensor(rng.integers(0, 256, (TRAIN_BATCH, TRAIN_SEQ)))
    targets = torch.tensor(rng.integers(0, 256, (TRAIN_BATCH, TRAIN_SEQ)))
    opt.zero_grad()
    loss = F.cross_entropy(forward(tokens).reshape(-1, 256), targets.reshape(-1))
    loss.backward()
    opt.step()
    return loss.item()
  start = time.perf_counter()
  run()
  first = time.perf_counter() - start
  for _ in range(2): run()
  return {"first_s": first, "eager_ms": median_ms(run, repeat)}


def worker_main(args: argparse.Namespace) -> None:
  lib_name, model, layers = args.worker
  if model == "train": result = train_worker(lib_name, int(layers), args.repeat)
  else: result = forward_worker(lib_name, model, int(layers), args.repeat)
  print("RESULT " + json.dumps(result), flush=True)


# --------------------------------------------------------------------------- the driver
def run_worker(lib_name: str, model: str, layers: int, args: argparse.Namespace) -> dict[str, Any] | None:
  """One measurement in a fresh process, with empty compile caches; None when it failed (the error is printed)."""
  cache = tempfile.mkdtemp(prefix="bench-scale-")
  env = dict(os.environ, TINYCORE_CACHE_DIR=cache, CACHEDB=os.path.join(cache, "tinygrad.db"))
  if args.device: env["DEV" if lib_name == "tinygrad" else "TINYCORE_DEVICE"] = args.device
  command = [sys.executable, __file__, "--worker", lib_name, model, str(layers), "--repeat", str(args.repeat)]
  try:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
  except subprocess.TimeoutExpired:
    print(f"  {lib_name} {model} {layers}: no result within {args.timeout} s", file=sys.stderr)
    return None
  for line in done.stdout.splitlines():
    if line.startswith("RESULT "): return json.loads(line[len("RESULT "):])
  print(f"  {lib_name} {model} {layers} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
  return None


def fmt(value: Any, spec: str) -> str:
  return "-" if value is None else format(value, spec)


# (header, library, result field, format) of the forward tables and of the training table
FORWARD_COLUMNS = [("kernels", "tinycore", "kernels", "d"), ("sched ms", "tinycore", "schedule_ms", ".1f"),
                   ("plan ms", "tinycore", "plan_ms", ".1f"), ("ms/kernel", "tinycore", "per_kernel", ".3f"),
                   ("first s", "tinycore", "first_s", ".2f"), ("repeat ms", "tinycore", "repeat_ms", ".1f"),
                   ("| torch ms", "torch", "repeat_ms", ".1f"), ("| tinygrad first s", "tinygrad", "first_s", ".2f"),
                   ("repeat ms", "tinygrad", "repeat_ms", ".1f")]
TRAIN_COLUMNS = [*FORWARD_COLUMNS[:5], ("eager ms", "tinycore", "eager_ms", ".1f"),
                 ("jit ms", "tinycore", "jit_ms", ".1f"), ("| torch ms", "torch", "eager_ms", ".1f"),
                 ("| tinygrad eager ms", "tinygrad", "eager_ms", ".1f"), ("jit ms", "tinygrad", "jit_ms", ".1f")]


def print_table(title: str, columns: list[tuple[str, str, str, str]], rows: list[tuple[int, dict]]) -> None:
  """One row per depth; ms/kernel is (scheduler + planner) / kernels, flat when both grow linearly."""
  print(f"\n{title}")
  print(f"{'layers':>6} " + " ".join(f"{header:>{max(9, len(header))}}" for header, _, _, _ in columns))
  for layers, results in rows:
    ours = results.get("tinycore") or {}
    if ours.get("kernels"): ours["per_kernel"] = (ours["schedule_ms"] + ours["plan_ms"]) / ours["kernels"]
    cells = [fmt((results.get(lib) or {}).get(field), spec).rjust(max(9, len(header)))
             for header, lib, field, spec in columns]
    print(f"{layers:>6} " + " ".join(cells))


TITLES = {"transformer": f"transformer forward (d_model 64, 4 heads, batch {FORWARD_BATCH} x {FORWARD_SEQ})",
          "encoder": f"BERT-style encoder forward (hidden 384, 12 heads, batch {ENCODER_BATCH} x {ENCODER_SEQ})",
          "train": f"transformer training step (d_model 64, 4 heads, batch {TRAIN_BATCH} x {TRAIN_SEQ}, Adam)"}


def installed(name: str) -> bool:
  return importlib.util.find_spec(name) is not None


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--layers", default="1,2,4,8,12,24", help="depths, comma-separated")
  parser.add_argument("--models", default="transformer,encoder,train", help="tables: transformer, encoder, train")
  parser.add_argument("--peers", default="torch,tinygrad", help="peer libraries measured when installed ('' for none)")
  parser.add_argument("--repeat", type=int, default=5)
  parser.add_argument("--device", default=None, help="tinycore's device (default: Device.DEFAULT)")
  parser.add_argument("--timeout", type=int, default=900, help="seconds one measurement may take")
  parser.add_argument("--worker", nargs=3, metavar=("LIB", "MODEL", "LAYERS"), help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker: return worker_main(args)
  layers = [int(x) for x in args.layers.split(",") if x]
  peers = [p for p in args.peers.split(",") if p and installed(p)]
  print(f"tinycore vs {', '.join(peers) or 'no peers'}; each measurement in a fresh process with empty caches")
  for model in [m for m in args.models.split(",") if m]:
    rows = []
    for depth in layers:
      results = {lib: run_worker(lib, model, depth, args) for lib in ["tinycore", *peers]}
      rows.append((depth, results))
    print_table(TITLES[model], TRAIN_COLUMNS if model == "train" else FORWARD_COLUMNS, rows)
    sys.stdout.flush()


if __name__ == "__main__":
  main()
