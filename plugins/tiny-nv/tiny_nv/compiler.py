"""NVRTC through ctypes: CUDA C -> a cubin for the device's arch (real GPUs) or PTX (the mock driver).

libnvrtc is looked up in this order: $TINYCORE_NVRTC (a path), the `nvidia-cuda-nvrtc` wheel's files (the
`tiny-nv[nvrtc]` extra; libnvrtc.so.13 under nvidia/cu13/lib), the older `nvidia-cuda-nvrtc-cu12` wheel, then the
system's libnvrtc. Real GPUs get cubins, never PTX: PTX from an NVRTC newer than the driver is rejected by it.
"""
from __future__ import annotations
import ctypes
import ctypes.util
import functools
import os
import pathlib
from importlib import metadata
from tinycore.plugin import Compiler
from tiny_nv.cubin_check import archs_from_env, cubin_check

NVRTC_ENV = "TINYCORE_NVRTC"
NVRTC_WHEELS = ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12")
SYSTEM_NAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
# IEEE results like numpy's: no fused multiply-add contraction, correctly rounded division and sqrt, denormals kept
NUMERIC_OPTIONS = ("--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false")
# lean: no debug or line info; --minimal (NVRTC 12.4+) skips the texture, device-runtime and API-type declarations
# the kernels never use, about a fifth of each compile (dropped where this NVRTC does not know it)
BASE_OPTIONS = ("--std=c++17", "-default-device", *NUMERIC_OPTIONS)
MINIMAL_OPTION, MINIMAL_SINCE = "--minimal", (12, 4)


class NVRTCError(RuntimeError):
  """NVRTC is missing or failed to compile a kernel (the message holds its log)."""


def wheel_libraries() -> list[pathlib.Path]:
  """libnvrtc.so.* files of the installed NVRTC wheels, newest wheel first."""
  found = []
  for dist in NVRTC_WHEELS:
    try: files = metadata.distribution(dist).files or []
    except metadata.PackageNotFoundError: continue
    for file in files:
      name = pathlib.PurePath(str(file)).name
      if name.startswith("libnvrtc.so") and "builtins" not in name: found.append(pathlib.Path(file.locate()))
  return found


def nvrtc_candidates() -> list[str]:
  """Where libnvrtc may be, in the order tried."""
  candidates = [os.environ[NVRTC_ENV]] if os.environ.get(NVRTC_ENV) else []
  candidates += [str(path) for path in wheel_libraries() if path.exists()]
  if (system := ctypes.util.find_library("nvrtc")) is not None: candidates.append(system)
  return candidates + list(SYSTEM_NAMES)


@functools.cache
def load_nvrtc() -> ctypes.CDLL:
  """The NVRTC library with its function signatures declared; NVRTCError naming what was tried if none loads."""
  tried = []
  for candidate in nvrtc_candidates():
    try: lib = ctypes.CDLL(candidate)
    except OSError as error:
      tried.append(f"{candidate} ({error})")
      continue
    declare_nvrtc(lib)
    return lib
  raise NVRTCError("NVRTC not found: install it with `pip install tiny-nv[nvrtc]` (the nvidia-cuda-nvrtc wheel) or "
                   f"set {NVRTC_ENV}=/path/to/libnvrtc.so; tried: " + "; ".join(tried))


def nvrtc_missing() -> str | None:
  """None when NVRTC loads, else why not (for device probes)."""
  try: load_nvrtc()
  except NVRTCError as error: return str(error)
  return None


def declare_nvrtc(lib: ctypes.CDLL) -> None:
  c_int_p, c_size_p, handle = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p
  signatures = {
    "nvrtcVersion": [c_int_p, c_int_p],
    "nvrtcCreateProgram": [ctypes.POINTER(handle), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                           ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)],
    "nvrtcCompileProgram": [handle, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "nvrtcGetProgramLogSize": [handle, c_size_p], "nvrtcGetProgramLog": [handle, ctypes.c_char_p],
    "nvrtcGetCUBINSize": [handle, c_size_p], "nvrtcGetCUBIN": [handle, ctypes.c_char_p],
    "nvrtcGetPTXSize": [handle, c_size_p], "nvrtcGetPTX": [handle, ctypes.c_char_p],
    "nvrtcDestroyProgram": [ctypes.POINTER(handle)],
  }
  for name, argtypes in signatures.items():
    function = getattr(lib, name)
    function.argtypes, function.restype = argtypes, ctypes.c_int
  lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p


def nvrtc_version() -> tuple[int, int]:
  lib, major, minor = load_nvrtc(), ctypes.c_int(), ctypes.c_int()
  check(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
  return major.value, minor.value


def check(status: int, call: str, log: str = "") -> None:
  if status != 0:
    message = load_nvrtc().nvrtcGetErrorString(status).decode(errors="replace")
    raise NVRTCError(f"{call} failed: {message} ({status})" + (f"\n--- NVRTC log ---\n{log}" if log else ""))


def program_log(lib: ctypes.CDLL, program: ctypes.c_void_p) -> str:
  size = ctypes.c_size_t()
  if lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)) != 0 or size.value <= 1: return ""
  log = ctypes.create_string_buffer(size.value)
  lib.nvrtcGetProgramLog(program, log)
  return log.value.decode(errors="replace").strip()


@functools.cache
def compile_options() -> tuple[str, ...]:
  """The options every kernel is compiled with: BASE_OPTIONS, plus --minimal where this NVRTC has it."""
  return BASE_OPTIONS + ((MINIMAL_OPTION,) if nvrtc_version() >= MINIMAL_SINCE else ())


def nvrtc_compile(src: str, arch: str, options: tuple[str, ...] | None = None) -> bytes:
  """Compile CUDA C `src` with NVRTC for `arch`: "sm_90" gives a cubin, "compute_90" gives PTX (NUL-terminated).
  `options`: compile_options() unless given. Safe to call from several threads (NVRTC runs outside the GIL)."""
  options = compile_options() if options is None else options
  lib, program = load_nvrtc(), ctypes.c_void_p()
  check(lib.nvrtcCreateProgram(ctypes.byref(program), src.encode(), b"kernel.cu", 0, None, None), "nvrtcCreateProgram")
  try:
    flags = [f"--gpu-architecture={arch}".encode(), *(option.encode() for option in options)]
    status = lib.nvrtcCompileProgram(program, len(flags), (ctypes.c_char_p * len(flags))(*flags))
    log = program_log(lib, program)
    if status != 0:
      check(status, f"nvrtcCompileProgram ({arch}, {' '.join(options)})", f"{log}\n--- source ---\n{src}")
    kind = "CUBIN" if arch.startswith("sm_") else "PTX"
    size = ctypes.c_size_t()
    check(getattr(lib, f"nvrtcGet{kind}Size")(program, ctypes.byref(size)), f"nvrtcGet{kind}Size")
    out = ctypes.create_string_buffer(size.value)
    check(getattr(lib, f"nvrtcGet{kind}")(program, out), f"nvrtcGet{kind}")
    return out.raw
  finally:
    lib.nvrtcDestroyProgram(ctypes.byref(program))


class NVCompiler(Compiler):
  """CUDA C -> a cubin for `sm_XY` (`ptx=False`, real GPUs) or PTX for `compute_XY` (`ptx=True`, the mock driver).
  The cache key names NVRTC's version, the target and the options, like tiny-cl's names the driver and device.

  For PTX, TINYCORE_NV_CHECK_CUBINS="sm_90" (or "sm_80,sm_90") also hands every distinct kernel it is asked for,
  cached or not, to the process's CubinCheck (tiny_nv.cubin_check): a compile-only check of the real-GPU code on
  machines without a GPU, in the background; its first NVRTC error fails the next compile here."""

  def __init__(self, arch: tuple[int, int], ptx: bool = False):
    self.target = f"{'compute' if ptx else 'sm'}_{arch[0]}{arch[1]}"
    self.ptx = ptx
    archs = archs_from_env() if ptx else ()
    self.cubin_check = cubin_check(archs) if archs else None
    major, minor = nvrtc_version()
    self.cachekey = f"tiny-nv|nvrtc {major}.{minor}|{self.target}|{' '.join(compile_options())}"

  @property
  def binary_extension(self) -> str: return ".ptx" if self.ptx else ".cubin"

  def compile(self, src: str) -> bytes: return nvrtc_compile(src, self.target)

  def compile_cached(self, src: str) -> bytes:
    if self.cubin_check is not None:
      self.cubin_check.raise_first_error()
      self.cubin_check.submit(src)
    return super().compile_cached(src)
