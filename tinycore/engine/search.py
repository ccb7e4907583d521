"""Kernel search (BEAM): the shape of each new kernel chosen by timing candidates on its device.

The optimizer's rules pick one `KernelOpts` per kernel (its register tile, the rows a column strip adds per pass) and
each renderer a few settings of its own (a GPU's work-group size, whether a CPU kernel splits across threads, how many
vector accumulators a reduction keeps); `KernelOpts` is that whole space. With `BEAM=N` (`JITBEAM=N`: only for the
kernels TinyJit captures) a run plan's new kernels are searched before they are compiled:

1. the rules' opts are the first candidate; each round, every neighbour of the `N` fastest so far (one choice changed:
   another tile from `tile_options`, strip rows, a loop block from `block_options`, or a value of one renderer
   setting from its `search_space`) that renders to new source is compiled, side by side (one compiler per core);
2. each runs on the device through the run plan (so a queue device runs it as it runs any kernel, threads and all),
   with buffers of the call's sizes filled with random values: first once, its outputs checked against the rules'
   kernel (a candidate that differs, or fails to render, compile or run, is dropped), then timed (best of
   `TIMED_RUNS`; one far slower than the best so far is not run again);
3. the rounds stop after `SEARCH_ROUNDS` or when one finds nothing faster (a kernel that runs in under
   `MIN_SEARCHED_SECONDS` is not searched at all: its time is mostly its launch); the fastest opts are kept in memory
   and on disk (a signed entry of the compile cache, keyed by the device's compiler, renderer and target, the width
   and the rules' source), so a later process searches nothing.

A device whose run times say nothing of real hardware (`Compiled.times_kernels` False: the emulators) keeps the rules'
opts, with a note. A line per searched kernel goes to stderr: its name, candidates tried, best time and the rules'.
"""
from __future__ import annotations
import concurrent.futures
import hashlib
import json
import sys
from typing import Any, Callable
import attrs
import numpy as np
from tinycore.dtype import FP8S, DType, dtypes, fp8_encode, to_np_dtype
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.scalars import call_buffers
from tinycore.codegen import DEFAULT_TARGET, kernel_name
from tinycore.codegen.optimize import (Block, KernelOpts, Tile, apply_opts, block_options, decide_opts, prepared_kernel,
                                       tile_options)
from tinycore.device.buffer import Buffer
from tinycore.device.compiled import read_signed_entry, write_signed_entry
from tinycore.device.kernels import RenderedSource, compile_threads
from tinycore.device.registry import Device
from tinycore.helpers import IGNORE_BEAM_CACHE

SEARCH_ROUNDS = 3
TIMED_RUNS = 3
# a candidate whose first run takes this many times the best time so far is not timed again
SLOW_CANDIDATE = 3.0
# a kernel that runs in less than this keeps the rules' opts untried: its time is mostly the launch, and a search
# would cost more than it could ever save
MIN_SEARCHED_SECONDS = 50e-6
# how close a candidate's float outputs must be to the rules' kernel's (sums may be added in another order)
RTOL, ATOL = 1e-3, 1e-4

# (device, kernel SINK, width) -> the opts the search chose, for this process
searched: dict[tuple[str, UOp, int], KernelOpts] = {}
_skipped_devices: set[str] = set()

CallRunner = Callable[[UOp], Callable[[Any], float]]


@attrs.frozen
class SearchReport:
  """What one kernel's search found: the chosen opts, the rules' time and the best time (seconds), and how many
  candidates ran."""
  name: str
  opts: KernelOpts
  default_s: float
  best_s: float
  tried: int


reports: list[SearchReport] = []  # every search of this process, in order (for tests and benchmarks)


def search_linear(linear: UOp, width: int, binding: Any, runner: CallRunner) -> UOp:
  """`linear` with each kernel call's SINK carrying the opts a search of width `width` chose for it (as its arg; the
  device layer compiles such a SINK with those opts). `binding` gives the calls' scalar values; `runner(call)`
  returns a function that runs that one call with a binding and returns the seconds it took."""
  calls = []
  for call in linear.src:
    if call.src[0].op is Ops.SINK and not isinstance(call.src[0].arg, KernelOpts):
      opts = searched_opts(call, width, binding, runner)
      if opts is not None: call = call.replace(src=(call.src[0].replace(arg=opts), *call.src[1:]))
    calls.append(call)
  return linear.replace(src=tuple(calls))


def searched_opts(call: UOp, width: int, binding: Any, runner: CallRunner) -> KernelOpts | None:
  """The opts for the kernel of `call`: from this process's searches, the disk cache, or a search now. None where
  the device cannot time kernels. IGNORE_BEAM_CACHE searches anew (and stores the new choice)."""
  sink, device = call.src[0], call_buffers(call)[0].device
  use_cache = not IGNORE_BEAM_CACHE
  if use_cache and (hit := searched.get((device, sink, width))) is not None: return hit
  dev = Device[device]
  if not dev.times_kernels:
    if device not in _skipped_devices:
      _skipped_devices.add(device)
      print(f"BEAM: {device} is skipped: its run times say nothing of the real device (an emulator)", file=sys.stderr)
    return None
  target = getattr(dev.renderer, "kernel_target", DEFAULT_TARGET)
  prepared = prepared_kernel(sink, target)
  rules = decide_opts(prepared, target)
  key = cache_key(device, sink.replace(arg=rules), width)
  stored = read_signed_entry("searched", key) if use_cache else None
  if stored is not None and (opts := decode_opts(stored)) is not None:
    searched[(device, sink, width)] = opts
    return opts
  report = KernelSearch(call, binding, runner, prepared, rules).run(width)
  reports.append(report)
  if report.tried > 1:
    print(f"BEAM {report.name}: {report.tried} candidates, best {report.best_s * 1e3:.3f} ms, rules' "
          f"{report.default_s * 1e3:.3f} ms ({report.default_s / max(report.best_s, 1e-12):.2f}x)", file=sys.stderr)
  write_signed_entry("searched", key, encode_opts(report.opts))
  searched[(device, sink, width)] = report.opts
  return report.opts


def cache_key(device: str, rules_sink: UOp, width: int) -> str:
  """The disk key of a search: the device's compiler and renderer (with its target), the width, and the source the
  rules' opts render to (which names the kernel exactly)."""
  dev = Device[device]
  source = RenderedSource(device, rules_sink).source
  described = (f"{type(dev.compiler).__name__}{getattr(dev.compiler, 'cachekey', '')}\0{type(dev.renderer).__name__}"
               f"{getattr(dev.renderer, 'kernel_target', None)!r}\0{width}\0{source}")
  return hashlib.sha256(described.encode()).hexdigest()


class KernelSearch:
  """One kernel's search: its call on test buffers, the rules' outputs to check candidates against, and every
  candidate's time."""

  def __init__(self, call: UOp, binding: Any, runner: CallRunner, prepared: UOp, rules: KernelOpts):
    self.call, self.binding, self.runner, self.prepared, self.rules = call, binding, runner, prepared, rules
    self.sink, self.device = call.src[0], call_buffers(call)[0].device
    self.renderer = Device[self.device].renderer
    self.target = getattr(self.renderer, "kernel_target", DEFAULT_TARGET)
    self.bases = list(dict.fromkeys(b.src[0] if b.op is Ops.BUFFER_VIEW else b for b in call_buffers(call)))
    rng = np.random.default_rng(0)
    self.initial = [random_bytes(rng, b.dtype, b.arg) for b in self.bases]
    self.buffers = [Buffer(self.device, b.arg, b.dtype).ensure_allocated() for b in self.bases]
    self.written = written_slots(self.sink, call)
    self.times: dict[KernelOpts, float] = {}
    self.sources: set[str] = set()
    self.expected: list[np.ndarray] = []

  def run(self, width: int) -> SearchReport:
    rules_s = self.evaluate([self.rules], reference=True)[self.rules]
    frontier, best = [self.rules], rules_s
    # (a rules' kernel that failed here leaves nothing to check candidates against: it stays)
    for _ in range(SEARCH_ROUNDS if MIN_SEARCHED_SECONDS <= rules_s < float("inf") else 0):
      candidates = list(dict.fromkeys(n for opts in frontier for n in self.neighbours(opts) if n not in self.times))
      self.evaluate(candidates)
      ranked = sorted((t, i, opts) for i, (opts, t) in enumerate(self.times.items()) if t < float("inf"))
      frontier = [opts for _, _, opts in ranked[:width]]
      if not ranked or ranked[0][0] >= best: break
      best = ranked[0][0]
    chosen = min(self.times, key=lambda opts: self.times[opts])
    return SearchReport(kernel_name(apply_opts(self.prepared, chosen)), chosen, rules_s, self.times[chosen],
                        len(self.times))

  def neighbours(self, opts: KernelOpts) -> list[KernelOpts]:
    """The opts one choice away from `opts`: another tile (or none), other strip rows, another value of one renderer
    setting."""
    out = [attrs.evolve(opts, tile=tile) for tile in [None, *tile_options(self.prepared, self.target)]
           if tile != opts.tile]
    out += [attrs.evolve(opts, strip_rows=rows) for rows in (1, 2, 4, 8) if rows != opts.strip_rows]
    out += [attrs.evolve(opts, block=block) for block in [None, *block_options(self.prepared)] if block != opts.block]
    try: space = self.renderer.search_space(apply_opts(self.prepared, opts)) if hasattr(self.renderer,
                                                                                        "search_space") else {}
    except Exception: space = {}
    for name, values in space.items():
      out += [opts.with_setting(name, value) for value in values if value != opts.setting(name)]
    return out

  def evaluate(self, candidates: list[KernelOpts], reference: bool = False) -> dict[KernelOpts, float]:
    """Compile the candidates that render to new source side by side, then run and time each (inf: dropped)."""
    fresh: dict[KernelOpts, RenderedSource] = {}
    for opts in candidates:
      try: rendered = RenderedSource(self.device, self.sink.replace(arg=opts))
      except Exception:
        self.times[opts] = float("inf")
        continue
      if rendered.source in self.sources and not reference:
        self.times[opts] = float("inf")  # the same kernel as one already timed
        continue
      self.sources.add(rendered.source)
      fresh[opts] = rendered
    for opts, error in build_side_by_side(list(fresh.values())).items(): self.times[opts] = float("inf")
    for opts in fresh:
      if opts not in self.times: self.times[opts] = self.time(opts, reference)
    return {opts: self.times[opts] for opts in candidates}

  def time(self, opts: KernelOpts, reference: bool) -> float:
    call = self.call.replace(src=(self.sink.replace(arg=opts), *self.call.src[1:]))
    binding = type(self.binding)(self.binding.uops, dict(zip(self.bases, self.buffers)), self.binding.var_vals)
    try:
      run = self.runner(call)
      self.reset_buffers()
      first = run(binding)
      outputs = [self.buffers[i].numpy().copy() for i in self.written]
    except Exception: return float("inf")
    if reference: self.expected = outputs
    elif not all(same_values(a, b) for a, b in zip(outputs, self.expected)): return float("inf")
    best_so_far = min(self.times.values(), default=first)
    if first > SLOW_CANDIDATE * best_so_far: return first
    return min([first, *(run(binding) for _ in range(TIMED_RUNS))])

  def reset_buffers(self) -> None:
    for buffer, data in zip(self.buffers, self.initial): buffer.copyin(memoryview(data))


def build_side_by_side(rendered: list[RenderedSource]) -> dict[KernelOpts, Exception]:
  """Compile and load the rendered candidates, one compiler per core; the ones that fail, with their errors."""
  failed: dict[KernelOpts, Exception] = {}
  def build(r: RenderedSource) -> bytes | Exception:
    try: return r.build()
    except Exception as error: return error
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(rendered), compile_threads()))) as pool:
    built = list(pool.map(build, rendered))
  for r, lib in zip(rendered, built):
    try:
      if isinstance(lib, Exception): raise lib
      r.load(lib, True)
    except Exception as error: failed[r.sink.arg] = error
  return failed


def written_slots(sink: UOp, call: UOp) -> list[int]:
  """The indexes (into the call's distinct base buffers) of the buffers the kernel stores into."""
  buffers = call_buffers(call)
  bases = list(dict.fromkeys(b.src[0] if b.op is Ops.BUFFER_VIEW else b for b in buffers))
  slots = {p.arg for store in sink.toposort() if store.op is Ops.STORE for p in store.src[0].toposort()
           if p.op is Ops.PARAM}
  written = {buffers[i].src[0] if buffers[i].op is Ops.BUFFER_VIEW else buffers[i] for i in slots if i < len(buffers)}
  return [bases.index(b) for b in written]


def random_bytes(rng: np.random.Generator, dtype: DType, size: int) -> bytes:
  """Test contents: floats uniform in [-1, 1), integers 1 to 3 (never a zero divisor; an index tensor's picks are
  gated to their bounds), booleans at random."""
  if dtypes.is_float(dtype):
    values = rng.uniform(-1, 1, size)
    if dtype is dtypes.bfloat16: return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    if dtype in FP8S: return fp8_encode(values, dtype).tobytes()
    return values.astype(to_np_dtype(dtype)).tobytes()
  if dtype is dtypes.bool: return rng.integers(0, 2, size).astype(np.bool_).tobytes()
  return rng.integers(1, 4, size).astype(to_np_dtype(dtype)).tobytes()


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
  if a.dtype.kind == "f": return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True))
  return bool(np.array_equal(a, b))


# --------------------------------------------------------------------------- opts on disk
def encode_opts(opts: KernelOpts) -> bytes:
  tile = attrs.asdict(opts.tile) if opts.tile is not None else None
  block = attrs.asdict(opts.block) if opts.block is not None else None
  fields = {"tile": tile, "strip_rows": opts.strip_rows, "renderer": [list(p) for p in opts.renderer], "block": block}
  return json.dumps(fields).encode()


def decode_opts(data: bytes) -> KernelOpts | None:
  """The opts `encode_opts` wrote (lists back to tuples); None for an entry this version cannot read."""
  def tupled(value: Any) -> Any: return tuple(tupled(v) for v in value) if isinstance(value, list) else value
  try:
    raw = json.loads(data)
    tile = Tile(**raw["tile"]) if raw["tile"] is not None else None
    block = Block(**raw["block"]) if raw["block"] is not None else None
    return KernelOpts(tile, int(raw["strip_rows"]), tuple((str(k), tupled(v)) for k, v in raw["renderer"]), block)
  except (ValueError, KeyError, TypeError): return None
