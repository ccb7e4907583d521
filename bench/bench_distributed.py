"""Collectives across processes (tinycore.distributed over tiny-mpi) beside raw mpi4py in the same run. Asserts
nothing.

    python bench/bench_distributed.py [--processes 2,4] [--train-processes 1,2,4] [--most-mib 256] [--tcp]

It launches itself under `mpiexec -n N` (tiny-mpi[mpich]'s, every process on this machine) for each N and prints:
- allreduce of float32 from 1 KiB to --most-mib MiB per process: raw mpi4py `Allreduce` on numpy arrays, tinycore's
  `distributed.all_reduce(x)` under TinyJit (the whole jitted call) and eagerly (`.realize()`: graph key, plan, run),
  and the collective alone (its CALL, as the profiler's collective track times it: header exchange and payload),
  measured in turns; each time is the slowest process's, median of repeats. Bus bandwidth as NCCL's tests define
  it: bytes / time * 2 (N - 1) / N;
- the training step of examples/train_digits.py (--models: its MLP, a latency-bound 0.5 ms step, and its convnet;
  global batch --batch split over the processes, Adam, TinyJit) at each process count, and at 1 process the same
  step without its gradient allreduce, the two alternating step by step in one process.
TINYCORE_CPU_THREADS=1 in every process (a 2-core machine is oversubscribed from 2 processes on).
"""
from __future__ import annotations
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve()
SIZES_KIB = [1, 16, 256, 4096, 65536, 262144]


# ---------------------------------------------------------------------------- workers (inside mpiexec)
def slowest(comm, seconds: float) -> float:
  """The slowest process's time (what a collective costs the job)."""
  return comm.allreduce(seconds, op=__import__("mpi4py").MPI.MAX)


def timed_chunk(comm, fn, count: int) -> float:
  """The slowest process's time per call of `count` calls, after a barrier."""
  comm.Barrier()
  start = time.perf_counter()
  for _ in range(count): fn()
  return slowest(comm, (time.perf_counter() - start) / count)


def profiled_calls(comm, fn, count: int) -> float:
  """The median time of the collective CALLs of `count` calls of fn, as the profiler's collective track records
  them (the slowest process's)."""
  from tinycore import profiler
  profiler.clear()
  comm.Barrier()
  with profiler.profile():
    for _ in range(count): fn()
    spans = [e["dur"] * 1e-6 for e in profiler.trace()["traceEvents"] if e.get("cat") == "collective"]
  return slowest(comm, statistics.median(spans))


def allreduce_worker(most_kib: int) -> None:
  """Each size: raw mpi4py, the jitted call, the eager realize and the profiled CALL, measured in turns (every
  repeat runs each once), so all four see the same moments of a shared machine; medians over the repeats."""
  import numpy as np
  from mpi4py import MPI
  from tinycore import Tensor, TinyJit, distributed
  distributed.init()
  comm = MPI.COMM_WORLD
  for kib in [k for k in SIZES_KIB if k <= most_kib]:
    numel = kib * 256
    raw_in, raw_out = np.ones(numel, np.float32), np.empty(numel, np.float32)
    x = Tensor(np.ones(numel, np.float32)).realize()
    jitted = TinyJit(lambda t: distributed.all_reduce(t).realize())
    for _ in range(3): jitted(x)
    count, repeats = (100, 15) if kib <= 16 else (10, 9) if kib <= 4096 else (1, 7)
    variants = {"raw": lambda: timed_chunk(comm, lambda: comm.Allreduce(raw_in, raw_out), count),
                "jit": lambda: timed_chunk(comm, lambda: jitted(x), count),
                "eager": lambda: timed_chunk(comm, lambda: distributed.all_reduce(x).realize(), count),
                "call": lambda: profiled_calls(comm, lambda: jitted(x), count)}
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
      for name, measure in variants.items(): samples[name].append(measure())
    assert float(jitted(x).numpy()[0]) == comm.Get_size()
    row = {"kib": kib, **{name: statistics.median(times) for name, times in samples.items()}}
    if comm.Get_rank() == 0: print(json.dumps(row), flush=True)


def train_worker(model_kind: str, batch: int, steps: int) -> None:
  """The jitted train step with its gradient allreduce; in a job of one process also the same step without it,
  the two alternating step by step (so both see the same machine)."""
  import numpy as np
  from mpi4py import MPI
  from tinycore import Tensor, TinyJit, distributed
  from tinycore.nn import optim
  from tinycore.nn.state import get_parameters
  sys.path.insert(0, str(HERE.parent.parent / "examples"))
  import train_digits
  distributed.init()
  rank, world = distributed.rank(), distributed.world_size()
  x_train, y_train, _, _ = train_digits.load_split(1337)
  variants = {}
  for with_allreduce in ((False, True) if world == 1 else (True,)):
    Tensor.manual_seed(0)
    model = train_digits.build_model(model_kind)
    distributed.broadcast_parameters(get_parameters(model))
    opt = optim.Adam(get_parameters(model), lr=1e-3)
    variants[with_allreduce] = TinyJit(train_digits.make_train_step(model, opt, distributed=with_allreduce))
  rng = np.random.default_rng(0)
  local = batch // world
  samples: dict[bool, list[float]] = {v: [] for v in variants}
  with Tensor.train():
    for i in range(steps + 3):
      idx = rng.integers(0, len(y_train), batch)[rank * local:(rank + 1) * local]
      x, y = Tensor(x_train[idx]).realize(), Tensor(y_train[idx]).realize()
      for with_allreduce, step in variants.items():
        distributed.barrier()
        start = time.perf_counter()
        loss, _ = step(x, y)
        loss.item()
        if i >= 3: samples[with_allreduce].append(time.perf_counter() - start)
  for with_allreduce, times in samples.items():
    seconds = MPI.COMM_WORLD.allreduce(statistics.median(times), op=MPI.MAX)
    if rank == 0: print(json.dumps({"processes": world, "allreduce": with_allreduce, "step": seconds}), flush=True)


# ---------------------------------------------------------------------------- the driver
# MPICH with UCX: no shared memory between the processes, UCX's TCP transport (through this machine's own address)
TCP_SETTINGS = {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp,self"}


def launch(processes: int, *arguments: str, tcp: bool = False) -> list[dict]:
  mpiexec = shutil.which("mpiexec")
  if mpiexec is None: raise SystemExit("no mpiexec on PATH: pip install -e plugins/tiny-mpi[mpich]")
  env = {**os.environ, "TINYCORE_CPU_THREADS": "1", **(TCP_SETTINGS if tcp else {})}
  result = subprocess.run([mpiexec, "-n", str(processes), sys.executable, str(HERE), "--worker", *arguments],
                          capture_output=True, text=True, env=env, timeout=3600)
  if result.returncode != 0: raise SystemExit(f"the {processes}-process run failed:\n{result.stdout}{result.stderr}")
  return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def size_text(kib: int) -> str: return f"{kib // 1024} MiB" if kib >= 1024 else f"{kib} KiB"


def print_allreduce(processes: int, rows: list[dict], transport: str) -> None:
  print(f"\nallreduce float32, {processes} processes over {transport} (us: median, slowest process; then busbw GB/s)")
  print(f"{'size':>8} | {'raw mpi4py':>19} | {'TinyJit call':>19} | {'eager realize':>19} | {'the CALL alone':>19} |"
        f" {'call/raw':>8}")
  factor = 2 * (processes - 1) / processes
  for row in rows:
    nbytes = row["kib"] * 1024
    cells = [f"{row[k] * 1e6:9.1f} us {nbytes * factor / row[k] / 1e9:6.2f}" for k in ("raw", "jit", "eager", "call")]
    print(f"{size_text(row['kib']):>8} | " + " | ".join(cells) + f" | {row['call'] / row['raw']:8.2f}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--processes", default="2,4", help="process counts for the allreduce table")
  parser.add_argument("--train-processes", default="1,2,4", help="process counts for the training step")
  parser.add_argument("--most-mib", type=int, default=256, help="largest allreduce, MiB per process")
  parser.add_argument("--batch", type=int, default=256, help="the training step's global batch")
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--models", default="mlp,conv", help="the train_digits models whose step is timed")
  parser.add_argument("--tcp", action="store_true", help="also 2 processes over TCP (MPICH with UCX: "
                      "MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self)")
  parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker:
    kind, *rest = args.worker
    if kind == "allreduce": allreduce_worker(int(rest[0]))
    else: train_worker(rest[0], int(rest[1]), int(rest[2]))
    return
  for processes in (int(p) for p in args.processes.split(",") if p):
    print_allreduce(processes, launch(processes, "allreduce", str(args.most_mib * 1024)), "shared memory")
  if args.tcp: print_allreduce(2, launch(2, "allreduce", str(args.most_mib * 1024), tcp=True), "TCP")
  for model_kind in (m for m in args.models.split(",") if m):
    print(f"\ntraining step (train_digits {model_kind}, Adam, TinyJit, global batch {args.batch}; median of "
          f"{args.steps}, slowest process)")
    print(f"{'processes':>9} {'gradient allreduce':>19} {'ms/step':>8} {'images/s':>9}")
    for processes in (int(p) for p in args.train_processes.split(",") if p):
      for row in launch(processes, "train", model_kind, str(args.batch), str(args.steps)):
        print(f"{processes:>9} {'yes' if row['allreduce'] else 'no':>19} {row['step'] * 1e3:8.2f} "
              f"{args.batch / row['step']:9.0f}")


if __name__ == "__main__":
  main()
