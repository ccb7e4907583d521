"""The device object (`Compiled`) and the compile/run interfaces a device plugin implements."""
from __future__ import annotations
import hashlib
import os
import pathlib
import tempfile
from typing import Any, Callable, Protocol, Sequence
from tinycore.device.allocator import Allocator


def seconds_setting(name: str, default: float) -> float:
  """A timeout in seconds from the environment variable `name` (`default` when unset); anything but a positive
  number is a ValueError naming the variable."""
  raw = os.environ.get(name, "").strip()
  if not raw: return default
  try: value = float(raw)
  except ValueError: value = float("nan")
  if not value > 0: raise ValueError(f"{name}={raw!r} is not a positive number of seconds")
  return value


COMPILE_TIMEOUT_ENV = "TINYCORE_COMPILE_TIMEOUT"
DEFAULT_COMPILE_TIMEOUT_S = 600.0


def compile_timeout_s() -> float:
  """How long one run of a device's compiler may take: $TINYCORE_COMPILE_TIMEOUT seconds (default 600)."""
  return seconds_setting(COMPILE_TIMEOUT_ENV, DEFAULT_COMPILE_TIMEOUT_S)


def cache_dir() -> pathlib.Path:
  """Where compiled programs are cached on disk: $TINYCORE_CACHE_DIR, else ~/.cache/tinycore."""
  root = os.environ.get("TINYCORE_CACHE_DIR")
  if not root: root = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tinycore")
  return pathlib.Path(root)


class Compiler:
  """Turns rendered source into a binary the device's runtime loads. Subclasses implement `compile(src) -> bytes`
  and set `cachekey` (a string naming the compiler, its version and flags), or None to disable the disk cache."""
  cachekey: str | None = None

  def compile(self, src: str) -> bytes: raise NotImplementedError(f"{type(self).__name__} cannot compile")

  def compile_cached(self, src: str) -> bytes:
    """`compile` with an on-disk cache keyed by (cachekey, source). Set TINYCORE_DISABLE_COMPILER_CACHE=1 to skip it."""
    if self.cachekey is None or os.environ.get("TINYCORE_DISABLE_COMPILER_CACHE") == "1": return self.compile(src)
    key = hashlib.sha256(f"{self.cachekey}\0{src}".encode()).hexdigest()
    path = cache_dir() / "compiled" / key[:2] / key
    try: return path.read_bytes()
    except OSError: pass
    lib = self.compile(src)
    try:
      path.parent.mkdir(parents=True, exist_ok=True)
      # write to a temporary file and rename, so a concurrent reader never sees half a binary
      with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as f:
        f.write(lib)
      os.replace(f.name, path)
    except OSError: pass  # a read-only cache is not an error
    return lib


class Program(Protocol):
  """A loaded kernel. Called with the buffers' device handles (destination first) and the symbolic variable values;
  `wait=True` blocks until it finished and returns the elapsed seconds."""
  def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None: ...


class Compiled:
  """A device: its allocator, renderer and compiler (None for devices that only store bytes) and a runtime that turns
  a compiled binary into a `Program` (`runtime(name, lib)`)."""

  def __init__(self, device: str, allocator: Allocator, renderer: Any = None, compiler: Compiler | None = None,
               runtime: Callable[[str, bytes], Program] | None = None):
    self.device, self.allocator = device, allocator
    self.renderer, self.compiler, self.runtime = renderer, compiler, runtime
    if allocator.device is None: allocator.device = self
    prefix, _, idx = device.partition(":")
    self.device_id = int(idx) if idx.isdigit() else 0

  @property
  def can_compute(self) -> bool:
    return self.renderer is not None and self.compiler is not None and self.runtime is not None

  def synchronize(self) -> None:
    """Wait until every queued operation on this device finished. Synchronous devices do nothing."""

  def finalize(self) -> None:
    """Release device resources at exit."""

  def capabilities(self) -> dict[str, Any]:
    """What `tinycore devices` shows: supported dtypes, whether it computes, ..."""
    caps: dict[str, Any] = {"compute": self.can_compute}
    if self.renderer is not None: caps["dtypes"] = sorted(d.name for d in self.renderer.supported_dtypes)
    return caps
