"""The device object (`Compiled`) and the compile/run interfaces a device plugin implements."""
from __future__ import annotations
import atexit
import contextlib
import hashlib
import hmac
import os
import subprocess
import signal
import shlex
import pathlib
import shutil
import tempfile
import threading
import warnings
from stat import S_ISDIR, S_ISREG
from typing import Any, Callable, Protocol, Sequence
from tinycore.dtype import DTypeSet
from tinycore.errors import SettingError
from tinycore.device.allocator import Allocator


def seconds_setting(name: str, default: float) -> float:
  """A timeout in seconds from the environment variable `name` (`default` when unset); anything but a positive
  number is a ValueError naming the variable."""
  raw = os.environ.get(name, "").strip()
  if not raw: return default
  try: value = float(raw)
  except ValueError: value = float("nan")
  if not value > 0: raise SettingError(f"{name}={raw!r} is not a positive number of seconds")
  return value


def count_setting(name: str, default: int, most: int | None = None) -> int:
  """A positive whole number from the environment variable `name` (`default` when unset); anything else is a
  SettingError naming the variable. Above `most` it is `most`, with a warning saying so."""
  raw = os.environ.get(name, "").strip()
  if not raw: return default
  try: value = int(raw)
  except ValueError: value = 0
  if value < 1: raise SettingError(f"{name}={raw!r} is not a positive whole number")
  if most is not None and value > most:
    warnings.warn(f"{name}={value} is more than {most}, the most it can usefully be here: using {most}", stacklevel=2)
    return most
  return value


COMPILE_TIMEOUT_ENV = "TINYCORE_COMPILE_TIMEOUT"
DEFAULT_COMPILE_TIMEOUT_S = 600.0


def compile_timeout_s() -> float:
  """How long one run of a device's compiler may take: $TINYCORE_COMPILE_TIMEOUT seconds (default 600)."""
  return seconds_setting(COMPILE_TIMEOUT_ENV, DEFAULT_COMPILE_TIMEOUT_S)


def run_bounded(command: list[str], timeout_s: float, cwd: str | None = None) -> tuple[int, str]:
  """Run a command (a compiler) for at most `timeout_s` seconds: (exit code, stderr + stdout). On timeout the command
  and every process it started (its own session) are killed and subprocess.TimeoutExpired is raised."""
  return finish_bounded(start_bounded(command, cwd=cwd), timeout_s)


def start_bounded(command: list[str], cwd: str | None = None, stdin: bool = False) -> subprocess.Popen:
  """Start a command in a session of its own (so a timeout can kill everything it started) with its output piped,
  and its input too when `stdin`; `finish_bounded` feeds it and waits for it."""
  return subprocess.Popen(command, stdin=subprocess.PIPE if stdin else None, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=cwd, start_new_session=True)


def finish_bounded(process: subprocess.Popen, timeout_s: float, input: str | None = None) -> tuple[int, str]:
  """Give a process from `start_bounded` its `input` (then end of file) and wait at most `timeout_s` seconds for it to
  exit: (exit code, stderr + stdout). On timeout its whole session is killed and subprocess.TimeoutExpired raised."""
  with process:
    try: stdout, stderr = process.communicate(input, timeout=timeout_s)
    except subprocess.TimeoutExpired:
      try: os.killpg(process.pid, signal.SIGKILL)
      except ProcessLookupError: pass
      process.communicate()
      raise
  return process.returncode, stderr + stdout


def run_compiler(command: list[str], cwd: str | None = None) -> tuple[int, str]:
  """`run_bounded` under the compile time limit (`compile_timeout_s`): a compiler that runs longer is killed and a
  RuntimeError names it, the limit and the setting that raises it. An OSError (no such executable) passes through."""
  timeout = compile_timeout_s()
  try: return run_bounded(command, timeout, cwd=cwd)
  except subprocess.TimeoutExpired as error:
    raise RuntimeError(f"the compiler {shlex.join(command[:1])} did not finish within {timeout:g} s and was killed; "
                       f"if it is only slow, allow more time with {COMPILE_TIMEOUT_ENV}=<seconds>") from error


def cache_dir() -> pathlib.Path:
  """Where compiled programs are cached on disk: $TINYCORE_CACHE_DIR, else ~/.cache/tinycore. Use
  `trusted_cache_dir()` to read or write it."""
  root = os.environ.get("TINYCORE_CACHE_DIR")
  if not root: root = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tinycore")
  return pathlib.Path(root)


# --- trust: the cache holds code this process runs, so only the user may be able to write it
_trusted: dict[str, pathlib.Path] = {}
_trust_lock = threading.Lock()
_warned: set[str] = set()
ENTRY_MAGIC = b"TCC1"  # an entry is MAGIC, HMAC-SHA256 under the cache's secret of (entry name, payload), payload


def untrusted_reason(stat: os.stat_result, private: bool = False) -> str | None:
  """Why a file or directory with this stat may not be trusted (another user owns it, or group/others may write
  it; `private`: or read it), else None."""
  if stat.st_uid != os.geteuid(): return f"it is owned by uid {stat.st_uid}, not by you (uid {os.geteuid()})"
  if stat.st_mode & (0o077 if private else 0o022):
    return f"its mode {stat.st_mode & 0o777:o} lets other users {'use' if private else 'write'} it"
  return None


def trusted_cache_dir() -> pathlib.Path:
  """The cache directory, created private to the user (0700) when missing. One owned by another user or writable by
  group or others is refused with a warning (once per process), and a private temporary directory, removed at exit,
  is used instead."""
  configured = cache_dir()
  if (known := _trusted.get(str(configured))) is not None: return known
  with _trust_lock:
    if (known := _trusted.get(str(configured))) is not None: return known
    try:
      configured.mkdir(mode=0o700, parents=True, exist_ok=True)
      stat = os.stat(configured)
      reason = "it is not a directory" if not S_ISDIR(stat.st_mode) else untrusted_reason(stat)
      if reason is None and stat.st_mode & 0o077: os.chmod(configured, 0o700)  # ours: keep it private too
    except OSError as error: reason = f"it cannot be created ({error.strerror})"
    chosen = configured
    if reason is not None:
      chosen = pathlib.Path(tempfile.mkdtemp(prefix="tinycore-cache-"))
      atexit.register(shutil.rmtree, chosen, ignore_errors=True)
      warnings.warn(f"tinycore does not use the compile cache {configured}: {reason}. Using the private temporary "
                    f"cache {chosen} instead; make the directory yours and writable only by you (chmod 700), or set "
                    "TINYCORE_CACHE_DIR to one that is", RuntimeWarning, stacklevel=2)
    _trusted[str(configured)] = chosen
    return chosen


def warn_once(message: str) -> None:
  """A RuntimeWarning, given once per process for each distinct message."""
  if message in _warned: return
  _warned.add(message)
  warnings.warn(message, RuntimeWarning, stacklevel=3)


def cache_key_secret(root: pathlib.Path) -> bytes:
  """The per-cache secret that signs entries (root/key, 0600, created on first use). A missing, foreign or
  readable-by-others key is replaced: every entry signed with the old one is then recompiled. A missing key is created
  exclusively (the first of several threads or processes wins, the others read its key), so entries written at once
  by several compilers are all signed with the one that stays."""
  path = root / "key"
  with _secret_lock:
    if (secret := read_secret(path)) is not None: return secret
    secret = os.urandom(32)
    if os.path.lexists(path):
      write_private_file(path, secret)  # foreign or unreadable: replaced
      return secret
    fd, temporary = tempfile.mkstemp(dir=root, prefix=".tmp-")
    try:
      with os.fdopen(fd, "wb") as f: f.write(secret)
      try: os.link(temporary, path)
      except FileExistsError:  # another process made it first: its key is the one
        if (theirs := read_secret(path)) is not None: return theirs
        write_private_file(path, secret)
    finally:
      with contextlib.suppress(OSError): os.unlink(temporary)
    return secret


_secret_lock = threading.Lock()


def read_secret(path: pathlib.Path) -> bytes | None:
  """The 32-byte key at `path` if it is this user's and private, else None."""
  try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
      if untrusted_reason(os.fstat(f.fileno()), private=True) is None and len(secret := f.read(64)) == 32:
        return secret
  except OSError: pass
  return None


def write_private_file(path: pathlib.Path, data: bytes) -> None:
  """Write `data` to `path` atomically through a fresh 0600 file (mkstemp) renamed over it."""
  fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
  try:
    with os.fdopen(fd, "wb") as f: f.write(data)
    os.replace(temporary, path)
  except BaseException:
    with contextlib.suppress(OSError): os.unlink(temporary)
    raise


def read_cache_entry(path: pathlib.Path, secret: bytes) -> bytes | None:
  """The verified payload of a cache entry, or None (recompile): missing, not a regular file of this user that only
  they can write (warned once), or failing its signature (corrupt, truncated, tampered, or from another cache)."""
  try: fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO must not block
  except OSError: return None
  with os.fdopen(fd, "rb") as f:
    stat = os.fstat(f.fileno())
    reason = "it is not a regular file" if not S_ISREG(stat.st_mode) else untrusted_reason(stat)
    if reason is not None:
      warn_once(f"tinycore ignores the compile cache entry {path}: {reason}; the program is compiled again")
      return None
    data = f.read()
  mac, payload = data[len(ENTRY_MAGIC):len(ENTRY_MAGIC) + 32], data[len(ENTRY_MAGIC) + 32:]
  if not data.startswith(ENTRY_MAGIC) or not hmac.compare_digest(mac, entry_mac(secret, path.name, payload)):
    return None
  return payload


def entry_mac(secret: bytes, name: str, payload: bytes) -> bytes:
  """The signature of an entry: it binds the bytes to the entry's name, so a valid entry moved elsewhere fails."""
  return hmac.new(secret, name.encode() + b"\0" + payload, hashlib.sha256).digest()


class Compiler:
  """Turns rendered source into a binary the device's runtime loads. Subclasses implement `compile(src) -> bytes`
  and set `cachekey` (a string naming the compiler, its version and flags), or None to disable the disk cache."""
  cachekey: str | None = None

  def compile(self, src: str) -> bytes: raise NotImplementedError(f"{type(self).__name__} cannot compile")

  def compile_cached(self, src: str) -> bytes:
    """`compile` with an on-disk cache keyed by (cachekey, source), in `trusted_cache_dir()`. Each entry is signed
    with the cache's secret and checked before use; one that fails is compiled again and rewritten, never an error.
    Set TINYCORE_DISABLE_COMPILER_CACHE=1 to skip the cache."""
    if self.cachekey is None or os.environ.get("TINYCORE_DISABLE_COMPILER_CACHE") == "1": return self.compile(src)
    key = hashlib.sha256(f"{self.cachekey}\0{src}".encode()).hexdigest()
    if (lib := read_signed_entry("compiled", key)) is not None: return lib
    lib = self.compile(src)
    write_signed_entry("compiled", key, lib)
    return lib


def signed_entry_path(kind: str, key: str) -> pathlib.Path:
  # a suffix of its own: a tinycore from before signing, sharing this directory, never reads a signed entry
  return trusted_cache_dir() / kind / key[:2] / f"{key}.signed"


def read_signed_entry(kind: str, key: str) -> bytes | None:
  """The payload of the cache entry `key` (a hex digest) of `kind` ("compiled" programs, "searched" kernel opts), if
  it is there and its signature holds (`read_cache_entry`); None otherwise, and for a cache that cannot be read."""
  try: secret = cache_key_secret(trusted_cache_dir())
  except OSError: return None
  return read_cache_entry(signed_entry_path(kind, key), secret)


def write_signed_entry(kind: str, key: str, payload: bytes) -> None:
  """Store `payload` as the signed cache entry `key` of `kind`: a fresh file renamed into place, so a concurrent reader
  never sees half of it. A read-only cache is not an error: nothing is stored."""
  path = signed_entry_path(kind, key)
  try:
    secret = cache_key_secret(trusted_cache_dir())
    path.parent.parent.mkdir(mode=0o700, exist_ok=True)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    write_private_file(path, ENTRY_MAGIC + entry_mac(secret, path.name, payload) + payload)
  except OSError: pass


class Program(Protocol):
  """A loaded kernel. Called with the buffers' device handles (destination first) and its scalar arguments `vals`, each
  a 64-bit word (`tinycore.uop.scalars.scalar_word`); `wait=True` blocks until it finished and returns the elapsed
  seconds."""
  def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None: ...


class Compiled:
  """A device: its allocator, renderer and compiler (None for devices that only store bytes) and a runtime that turns
  a compiled binary into a `Program` (`runtime(name, lib)`)."""

  def __init__(self, device: str, allocator: Allocator, renderer: Any = None, compiler: Compiler | None = None,
               runtime: Callable[[str, bytes], Program] | None = None):
    self.device, self.allocator = device, allocator
    self.renderer, self.compiler, self.runtime = renderer, compiler, runtime
    if renderer is not None and isinstance(dtype_set := getattr(renderer, "supported_dtypes", None), frozenset):
      renderer.supported_dtypes = DTypeSet(dtype_set)  # also callable, as tinygrad's method
    if allocator.device is None: allocator.device = self
    prefix, _, idx = device.partition(":")
    self.device_id = int(idx) if idx.isdigit() else 0

  # capabilities of the opened device (what its DeviceSpec cannot know); queue devices (HCQDevice) override them
  has_copy_queue: bool = False                  # copies between it and host memory can run on its own DMA queue
  host_devs: frozenset[str] = frozenset()       # host device kinds whose memory its queues address in place
  # the most arguments (buffers and scalars) one kernel may take, where the device's launch has a fixed room for them
  # (OpenCL's max parameter size, CUDA's parameter buffer); None: any number. The scheduler splits a kernel that
  # would take more into several (`tinycore.schedule.realize_points.limit_kernel_arguments`).
  max_kernel_args: int | None = None
  # whether a kernel's run time here says how fast it is on the real device (a kernel search, BEAM, times candidate
  # kernels); an emulator's does not, and a search skips it with a note
  times_kernels: bool = True

  @property
  def can_compute(self) -> bool:
    return self.renderer is not None and self.compiler is not None and self.runtime is not None

  @property
  def zero_copy_host_view(self) -> bool:
    """Whether the host can read and write its buffers in place (the allocator offers `_as_buffer`)."""
    return self.allocator.supports_as_buffer

  def synchronize(self) -> None:
    """Wait until every queued operation on this device finished. Synchronous devices do nothing."""

  def finalize(self) -> None:
    """Release device resources at exit."""

  # a short note `tinycore devices` shows after "ok" (e.g. "emulated gfx1100"); None for none
  status_note: str | None = None

  def capabilities(self) -> dict[str, Any]:
    """What `tinycore devices` shows: supported dtypes, whether it computes, ..."""
    caps: dict[str, Any] = {"compute": self.can_compute, "zero_copy_host_view": self.zero_copy_host_view}
    if self.has_copy_queue:  # host_devs matter only to a copy queue (kernels use their own device's memory)
      caps["copy_queue"] = True
      caps["host_devs"] = sorted(self.host_devs)
    if self.renderer is not None: caps["dtypes"] = sorted(d.name for d in self.renderer.supported_dtypes)
    if self.max_kernel_args is not None: caps["max_kernel_args"] = self.max_kernel_args
    return caps
