"""Allreduce over CPU devices, naive vs ring, beside numpy summing the same shards. Asserts nothing.

    python bench/bench_allreduce.py [--mib 64] [--devices 2,4] [--repeat 3]

Each of N devices holds one shard of `--mib` MiB (float32); `t.sum(0)` over the sharded axis leaves the sum of all
shards on every device. GB/s is the shard size over the wall time (the "algorithm bandwidth" of NCCL's tests), so
naive and ring read the same; numpy's column sums the N shards in host memory once (no copies, one result).
"""
from __future__ import annotations
import argparse
import numpy as np
from tinycore import Context, GlobalCounters, Tensor
from timing import median_time


def measure(count: int, numel: int, kind: str, repeat: int) -> tuple[float, int]:
  """(seconds, calls per allreduce) for one allreduce of `numel` float32 per shard over CPU:0..count-1."""
  devices = tuple(f"CPU:{i}" for i in range(count))
  shards = Tensor.rand(count, numel).shard(devices, axis=0).realize()
  settings = {"naive": {"RING": 0, "ALL2ALL": 0}, "ring": {"RING": 2, "ALL2ALL": 0}}[kind]
  with Context(**settings):
    seconds = median_time(lambda: shards.sum(0).contiguous().realize(), repeat)
    GlobalCounters.reset()
    shards.sum(0).contiguous().realize()
  return seconds, GlobalCounters.kernel_count


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--mib", type=int, default=64, help="shard size per device in MiB")
  parser.add_argument("--devices", default="2,4", help="comma-separated device counts")
  parser.add_argument("--repeat", type=int, default=3)
  args = parser.parse_args()
  numel = args.mib * 1024 * 1024 // 4
  gb = numel * 4 / 1e9
  print(f"allreduce of {args.mib} MiB float32 per device (median of {args.repeat})")
  print(f"{'devices':>8} {'kind':>6} {'ms':>9} {'GB/s':>7} {'calls':>6}")
  for count in (int(c) for c in args.devices.split(",")):
    for kind in ("naive", "ring"):
      seconds, calls = measure(count, numel, kind, args.repeat)
      print(f"{count:>8} {kind:>6} {seconds * 1e3:9.1f} {gb / seconds:7.2f} {calls:>6}")
    host = np.random.default_rng(0).random((count, numel), dtype=np.float32)
    seconds = median_time(lambda: host.sum(0), args.repeat)
    print(f"{count:>8} {'numpy':>6} {seconds * 1e3:9.1f} {gb / seconds:7.2f} {'-':>6}")


if __name__ == "__main__":
  main()
