"""DISK tensors vs numpy's tofile/fromfile: write and read a 1 GiB file, speed and peak memory. Prints a table;
asserts nothing about speed.

    python bench/bench_disk.py [--mb 1024] [--dir /tmp] [--repeat 3] [--cold]

Each measurement runs in a fresh child process, so its peak memory is its own: "peak +RSS" is how much the
process's peak resident set (VmHWM, reset just before; ru_maxrss where there is no /proc) grew during the operation,
beyond what it already held (imports, the source data). File pages mapped and written count in it;
"py peak" is the peak of Python-level allocations (tracemalloc, which numpy reports its arrays to). Writes are made
durable on both sides (tinycore's realize fsyncs the DISK file; numpy's side calls os.fsync) so they compare alike.
Reads come from the page cache unless --cold (root only: drops the caches before each read).
"""
from __future__ import annotations
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = "--child"


# ------------------------------------------------------------------ the measured operations (run in a child)
def _pattern(nbytes: int):
  import numpy as np
  return np.tile(np.arange(256, dtype=np.uint8), nbytes // 256 + 1)[:nbytes]


def tinycore_write(path: str, nbytes: int):
  from tinycore import Tensor, Device
  data = _pattern(nbytes)
  Device[f"DISK:{path}"]

  def run():  # numpy memory used in place (NPY): one copy, straight into the file
    Tensor(data, device=f"DISK:{path}").realize()
  return run, None


def tinycore_write_cpu(path: str, nbytes: int):
  from tinycore import Tensor, Device
  source = Tensor(_pattern(nbytes), device="CPU").realize()
  Device[f"DISK:{path}"]

  def run():  # a CPU tensor moved to DISK: one copy from CPU memory into the file
    source.to(f"DISK:{path}").realize()
  return run, None


def numpy_write(path: str, nbytes: int):
  data = _pattern(nbytes)

  def run():
    with open(path, "wb") as f:
      data.tofile(f)
      f.flush()
      os.fsync(f.fileno())
  return run, None


def tinycore_read(path: str, nbytes: int):
  import pathlib
  from tinycore import Tensor, Device
  Device["CPU"]
  Device[f"DISK:{path}"]
  Tensor([1, 2, 3]).to("CPU").realize()  # warm up the scheduler
  holder = {}

  def run():
    holder["t"] = Tensor(pathlib.Path(path)).to("CPU").realize()

  def check():
    t = holder["t"]
    return bytes(t[nbytes - 16:].numpy()) == bytes(_tail(nbytes))
  return run, check


def tinycore_read_numpy(path: str, nbytes: int):
  import pathlib
  from tinycore import Tensor, Device
  Device["CPU"]
  Device[f"DISK:{path}"]
  holder = {}

  def run():
    holder["a"] = Tensor(pathlib.Path(path)).numpy()

  def check(): return bytes(holder["a"][-16:]) == bytes(_tail(nbytes))
  return run, check


def numpy_read(path: str, nbytes: int):
  import numpy as np
  holder = {}

  def run():
    holder["a"] = np.fromfile(path, dtype=np.uint8)

  def check(): return bytes(holder["a"][-16:]) == bytes(_tail(nbytes))
  return run, check


def _tail(nbytes: int) -> list[int]: return [i % 256 for i in range(nbytes - 16, nbytes)]


OPERATIONS = {"tinycore_write": tinycore_write, "tinycore_write_cpu": tinycore_write_cpu, "numpy_write": numpy_write,
              "tinycore_read": tinycore_read, "tinycore_read_numpy": tinycore_read_numpy, "numpy_read": numpy_read}


def _status_bytes(field: str) -> int | None:
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith(field + ":"): return int(line.split()[1]) * 1024
  except OSError: pass
  return None


def _reset_peak_rss() -> bool:
  """Linux: make the peak RSS (VmHWM) start again from the current RSS."""
  try:
    with open("/proc/self/clear_refs", "w") as f: f.write("5")
    return True
  except OSError: return False


def _peak_rss() -> int:
  if (peak := _status_bytes("VmHWM")) is not None: return peak
  import resource
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def child(operation: str, path: str, nbytes: int) -> None:
  import tracemalloc
  run, check = OPERATIONS[operation](path, nbytes)
  # the growth of the peak RSS during the operation, over the RSS (imports, source data) it started with
  before = _status_bytes("VmRSS") if _reset_peak_rss() else None
  if before is None: before = _peak_rss()
  tracemalloc.start()
  start = time.perf_counter()
  run()
  seconds = time.perf_counter() - start
  _, traced_peak = tracemalloc.get_traced_memory()
  tracemalloc.stop()
  growth = _peak_rss() - before
  ok = check() if check is not None else True
  print(json.dumps({"seconds": seconds, "rss_growth": growth, "traced_peak": traced_peak, "ok": ok}))


# ------------------------------------------------------------------ the driver
def measure(operation: str, path: str, nbytes: int, cold: bool) -> dict:
  if cold: drop_caches()
  out = subprocess.run([sys.executable, __file__, CHILD, operation, path, str(nbytes)], capture_output=True, text=True)
  if out.returncode != 0: raise RuntimeError(f"{operation} failed:\n{out.stderr}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def drop_caches() -> None:
  os.sync()
  with open("/proc/sys/vm/drop_caches", "w") as f: f.write("3\n")


def best(samples: list[dict]) -> dict:
  """The median time, and the largest memory figures seen."""
  return {"seconds": statistics.median(s["seconds"] for s in samples),
          "rss_growth": max(s["rss_growth"] for s in samples),
          "traced_peak": max(s["traced_peak"] for s in samples), "ok": all(s["ok"] for s in samples)}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--mb", type=int, default=1024, help="file size in MiB (default 1024)")
  parser.add_argument("--dir", default=None, help="where the temporary files go (default: the system temp dir)")
  parser.add_argument("--repeat", type=int, default=3)
  parser.add_argument("--cold", action="store_true", help="drop the page cache before each read (needs root)")
  args = parser.parse_args()
  nbytes = args.mb << 20
  if args.cold:
    try: drop_caches()
    except OSError as error: sys.exit(f"--cold needs to write /proc/sys/vm/drop_caches: {error}")
  rows = []
  with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench_disk_") as directory:
    ours, theirs = os.path.join(directory, "tinycore.bin"), os.path.join(directory, "numpy.bin")
    pairs = [("write from numpy / tofile", "tinycore_write", ours, "numpy_write", theirs),
             ("write CPU tensor .to(DISK) / tofile", "tinycore_write_cpu", ours, "numpy_write", theirs),
             ("read -> CPU tensor / np.fromfile", "tinycore_read", ours, "numpy_read", theirs),
             ("read -> .numpy() / np.fromfile", "tinycore_read_numpy", ours, "numpy_read", theirs)]
    for label, op_a, path_a, op_b, path_b in pairs:
      a = best([measure(op_a, path_a, nbytes, args.cold and "read" in op_a) for _ in range(args.repeat)])
      b = best([measure(op_b, path_b, nbytes, args.cold and "read" in op_b) for _ in range(args.repeat)])
      if "write" in op_a:
        with open(path_a, "rb") as fa, open(path_b, "rb") as fb:
          identical = all(x == y for x, y in _blocks(fa, fb))
        a["ok"] = a["ok"] and identical
      rows.append((label, a, b))
  gb = nbytes / 1e9
  mib = lambda n: f"{n / 2**20:8.0f}"  # noqa: E731
  print(f"DISK vs numpy, {args.mb} MiB file, median of {args.repeat}{', cold cache' if args.cold else ', warm cache'}")
  header = f"{'operation':36} {'tinycore GB/s':>13} {'numpy GB/s':>10} " \
           f"{'tc peak +RSS MiB':>16} {'np peak +RSS MiB':>16} " \
           f"{'tc py peak MiB':>14} {'np py peak MiB':>14}  ok"
  print(header)
  print("-" * len(header))
  for label, a, b in rows:
    print(f"{label:36} {gb / a['seconds']:13.2f} {gb / b['seconds']:10.2f} {mib(a['rss_growth']):>16} "
          f"{mib(b['rss_growth']):>16} {mib(a['traced_peak']):>14} {mib(b['traced_peak']):>14}  "
          f"{'yes' if a['ok'] and b['ok'] else 'NO'}")


def _blocks(fa, fb, size: int = 64 << 20):
  while True:
    x, y = fa.read(size), fb.read(size)
    yield x, y
    if not x and not y: return


if __name__ == "__main__":
  if len(sys.argv) == 5 and sys.argv[1] == CHILD: child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
  else: main()
