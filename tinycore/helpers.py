"""Process-wide settings as in tinygrad: `ContextVar`s read from the environment, changed for a block by `Context`;
and the small pure-Python helpers that tinygrad users import from `tinygrad.helpers` (prod, flatten, dedup, argfix,
make_tuple, all_int, round_up, ceildiv, Timing, colored, ...).

    from tinycore.helpers import Context, TRAINING
    with Context(TRAINING=1): ...      # BatchNorm uses batch statistics, optimizers may step
"""
from __future__ import annotations
import contextlib
import functools
import itertools
import operator
import os
import platform
import sys
import time
from typing import Any, Callable, ClassVar, Iterable, Sequence, TypeVar

T = TypeVar("T")
U = TypeVar("U")
OSX, WIN = platform.system() == "Darwin", sys.platform == "win32"


def getenv(key: str, default: Any = 0) -> Any:
  """The environment variable `key` converted to the type of `default` (default when unset)."""
  value = os.environ.get(key)
  if value is None: return default
  return type(default)(value) if not isinstance(default, bool) else value not in ("", "0", "false", "False")


class ContextVar:
  """A named setting whose start value comes from the environment; `Context` changes it for a block."""
  registry: ClassVar[dict[str, ContextVar]] = {}

  def __init__(self, key: str, default: Any):
    if key in ContextVar.registry: raise RuntimeError(f"ContextVar {key} already exists")
    ContextVar.registry[key] = self
    self.key, self.value = key, getenv(key, default)

  def __bool__(self) -> bool: return bool(self.value)
  def __eq__(self, other: Any) -> bool: return self.value == other
  def __hash__(self) -> int: return hash(self.key)
  def __int__(self) -> int: return int(self.value)
  # ordered like its value, so `if DEBUG >= 2:` reads as in tinygrad
  def __ge__(self, other: Any) -> bool: return self.value >= other
  def __gt__(self, other: Any) -> bool: return self.value > other
  def __le__(self, other: Any) -> bool: return self.value <= other
  def __lt__(self, other: Any) -> bool: return self.value < other
  def __repr__(self) -> str: return f"{self.key}={self.value!r}"


class Context(contextlib.ContextDecorator):
  """`with Context(TRAINING=1):` sets ContextVars for the block (or the decorated function) and restores them."""

  def __init__(self, **settings: Any):
    unknown = [k for k in settings if k not in ContextVar.registry]
    if unknown: raise KeyError(f"unknown Context settings {unknown}; known: {sorted(ContextVar.registry)}")
    self.settings = settings
    self.saved: list[dict[str, Any]] = []

  def __enter__(self) -> Context:
    self.saved.append({k: ContextVar.registry[k].value for k in self.settings})
    for k, v in self.settings.items(): ContextVar.registry[k].value = v
    return self

  def __exit__(self, *exc: Any) -> None:
    for k, v in self.saved.pop().items(): ContextVar.registry[k].value = v


# training mode: BatchNorm normalizes with batch statistics (and updates its running ones), dropout drops
TRAINING = ContextVar("TRAINING", 0)
# multi-device allreduce: RING>=2 (ALL2ALL>=2) forces a ring (all-to-all) allreduce, >=1 allows it on more than two
# devices past 256k elements; ALLREDUCE_CAST keeps float16/bfloat16 data in that dtype while it is copied
RING = ContextVar("RING", 1)
ALL2ALL = ContextVar("ALL2ALL", 0)
ALLREDUCE_CAST = ContextVar("ALLREDUCE_CAST", 1)
# the verbosity a user's own script reads (`if DEBUG >= 2: print(...)`); tinycore's own diagnostics use their own
# settings (TINYCORE_PROFILE, the cli), so DEBUG changes nothing inside tinycore
DEBUG = ContextVar("DEBUG", 0)
# kernel search: BEAM=N times the candidate shapes of every new kernel on its device and keeps the N best each round
# (tinycore.engine.search); JITBEAM=N does it only for the kernels TinyJit captures
BEAM = ContextVar("BEAM", 0)
JITBEAM = ContextVar("JITBEAM", 0)
# IGNORE_BEAM_CACHE=1: a kernel is searched again even where this process or the disk cache already has its choice
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0)
# tinygrad's other kernel-tuning and optimizer knobs, accepted so code and tests written for tinygrad run (`with
# Context(NOOPT=1):`): tinycore has no tensor cores or image dtypes; its kernels are shaped by the device's
# KernelTarget (and BEAM), so these change nothing here
TINYGRAD_TUNING = {name: ContextVar(name, 0) for name in ("NOOPT", "IMAGE", "WINO", "TC", "TC_OPT",
                                                            "NOLOCALS", "SPLIT_REDUCEOP", "TRANSCENDENTAL",
                                                            "FUSE_OPTIM", "CACHELEVEL", "JIT_BATCH_SIZE")}


# ---------------------------------------------------------------------------- small helpers (tinygrad.helpers names)
def prod(xs: Iterable[T]) -> T | int:
  """The product of the items (1 for none)."""
  return functools.reduce(operator.mul, xs, 1)


def flatten(nested: Iterable[Iterable[T]]) -> list[T]:
  """One level of nesting removed: [[1, 2], [3]] -> [1, 2, 3]."""
  return [item for inner in nested for item in inner]


def fully_flatten(nested: Any) -> list[Any]:
  """Every level of (list/tuple/array) nesting removed; a scalar becomes [scalar]."""
  if isinstance(nested, str) or not hasattr(nested, "__len__") or not hasattr(nested, "__getitem__"): return [nested]
  if getattr(nested, "shape", None) == (): return [nested[()]]
  return [leaf for item in nested for leaf in fully_flatten(item)]


def dedup(items: Iterable[T]) -> list[T]:
  """The items without repeats, in first-seen order."""
  return list(dict.fromkeys(items))


def argfix(*args: Any) -> tuple:
  """Arguments given either spread out (f(2, 3)) or as one list/tuple (f((2, 3))) as one tuple."""
  if args and isinstance(args[0], (tuple, list)):
    if len(args) != 1: raise ValueError(f"pass either one sequence or separate values, got {args}")
    return tuple(args[0])
  return args


def make_tuple(x: int | Sequence[int], count: int) -> tuple[int, ...]:
  """An int repeated `count` times, or the sequence as a tuple."""
  return (x,) * count if isinstance(x, int) else tuple(x)


def to_tuple(x: T | tuple[T, ...]) -> tuple[T, ...]: return x if isinstance(x, tuple) else (x,)
def all_int(items: Sequence[Any]) -> bool: return all(isinstance(x, int) for x in items)
def all_same(items: Sequence[Any]) -> bool: return all(x == items[0] for x in items)
def round_up(num: int, multiple: int) -> int: return -(-num // multiple) * multiple
def round_down(num: int, multiple: int) -> int: return num - num % multiple
def ceildiv(num: int, divisor: int) -> int: return -(-num // divisor)


def unwrap(x: T | None) -> T:
  """x, which must not be None."""
  if x is None: raise ValueError("unwrap: got None")
  return x


def partition(items: Iterable[T], predicate: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  """(the items for which predicate holds, the others)."""
  yes: list[T] = []
  no: list[T] = []
  for item in items: (yes if predicate(item) else no).append(item)
  return yes, no


def merge_dicts(dicts: Iterable[dict[T, U]]) -> dict[T, U]:
  """One dict with every key; the same key with two different values is an error."""
  merged: dict[T, U] = {}
  for d in dicts:
    for k, v in d.items():
      if k in merged and merged[k] != v: raise ValueError(f"merge_dicts: key {k!r} has values {merged[k]!r} and {v!r}")
      merged[k] = v
  return merged


def strides_for_shape(shape: Sequence[int]) -> tuple[int, ...]:
  """The element strides of a dense row-major array of `shape` (0 for a dim of size 1, as tinygrad)."""
  strides = tuple(itertools.accumulate(reversed(tuple(shape)[1:]), operator.mul, initial=1))[::-1]
  return tuple(0 if size == 1 else stride for size, stride in zip(shape, strides))


ANSI_COLORS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


def colored(text: Any, color: str | None, background: bool = False) -> str:
  """text in an ANSI terminal color (an upper-case name: the bright variant); as is when color is None or NO_COLOR
  is set."""
  if color is None or os.environ.get("NO_COLOR"): return str(text)
  code = 30 + ANSI_COLORS.index(color.lower()) + 10 * background + 60 * (color.upper() == color)
  return f"\x1b[{code}m{text}\x1b[0m"


class Timing(contextlib.ContextDecorator):
  """`with Timing("step "):` prints how long the block took in ms (plus on_exit(elapsed_ns), when given)."""

  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
    self.elapsed_ns = 0

  def __enter__(self) -> Timing:
    self.start = time.perf_counter_ns()
    return self

  def __exit__(self, *exc: Any) -> None:
    self.elapsed_ns = time.perf_counter_ns() - self.start
    if not self.enabled: return
    print(f"{self.prefix}{self.elapsed_ns * 1e-6:6.2f} ms" + (self.on_exit(self.elapsed_ns) if self.on_exit else ""))
