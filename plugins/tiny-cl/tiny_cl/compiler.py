"""CLCompiler: OpenCL C source -> the device's program binary, built by the OpenCL driver."""
from __future__ import annotations
import functools
import hashlib
import os
import platform
from typing import Any
from tinycore.plugin import Compiler, DeviceUnavailable


def build_options(device: Any) -> list[str]:
  """Build options that keep results IEEE like numpy's: correctly rounded float division and sqrt where the device
  can do it (OpenCL otherwise allows 2.5 ulp for division and 3 ulp for sqrt)."""
  import pyopencl as cl
  options = []
  if device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
    options.append("-cl-fp32-correctly-rounded-divide-sqrt")
  return options


POCL_BINARY_MAGIC = b"poclbin\0"
# a kernel every working driver builds: opening a device builds it once (then it is in the compile cache)
PROBE_SOURCE = "__kernel void tinycore_probe(__global float *out) { out[get_global_id(0)] = 1.0f; }\n"
SYSTEM_POCL_ICD = "/etc/OpenCL/vendors/pocl.icd"


def pocl_remedy() -> str:
  """What to do about a PoCL that builds no kernel (PyPI's, on a CPU its LLVM does not know)."""
  use_it = f"point the OpenCL loader at it alone (OCL_ICD_VENDORS={SYSTEM_POCL_ICD})"
  if os.path.exists(SYSTEM_POCL_ICD): return f"the system's PoCL is installed: {use_it}"
  return f"install the system's PoCL (apt-get install pocl-opencl-icd) and {use_it}"


@functools.cache
def host_cpu_signature() -> str:
  """What a CPU driver compiles for: the machine, and on Linux the CPU's vendor, family, model and a digest of its
  feature flags. A binary built for one CPU is never loaded on another (a cache directory shared between hosts)."""
  fields: dict[str, str] = {}
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if not line.strip(): break  # the first processor's block
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
  except OSError: pass
  flags = hashlib.sha256(fields.get("flags", "").encode()).hexdigest()[:12]
  return "|".join([platform.machine(), fields.get("vendor_id", ""), fields.get("cpu family", ""),
                   fields.get("model", ""), flags])


def is_complete_binary(lib: bytes) -> bool:
  """False for a PoCL program binary without its LLVM bitcode (program.bc). PoCL's binary is a snapshot of its own
  kernel-cache directory (~/.cache/pocl/kcache/<hash>/) taken when the binary is read, and that directory is shared
  by every process building the same source: a snapshot taken while it lacked program.bc loads as a program that PoCL
  aborts the whole process on (SIGABRT: "pocl_binary_get_kernels_metadata: Assertion `len > 0'"). Other drivers'
  binaries are taken as they are."""
  return not lib.startswith(POCL_BINARY_MAGIC) or b"/program.bc" in lib


def _build_program(context: Any, device: Any, src: str, options: list[str]) -> Any:
  """Build `src` for `device`; returns the built program, raises pyopencl.Error with the build log attached to the
  unbuilt program (``error.program``). pyopencl's `Program` would add its own on-disk build cache (and build options
  of its own); tinycore caches binaries itself (Compiler.compile_cached), so the plain `_cl._Program` is used when
  this pyopencl has it."""
  import pyopencl as cl
  raw = getattr(getattr(cl, "_cl", None), "_Program", None)
  program = raw(context, src) if raw is not None else cl.Program(context, src)
  try:
    if raw is not None: program.build(" ".join(options).encode(), [device])
    else: program.build(options=options, devices=[device])
  except cl.Error as error:
    error.program = program
    raise
  return program


class CLCompiler(Compiler):
  """Builds OpenCL C for one device and returns the program binary (``clGetProgramInfo(CL_PROGRAM_BINARIES)``).

  The cache key names the platform (name and version), the device, its driver version and the build options, so a
  binary is never loaded by a different driver or device than the one that built it. Binaries are checked
  (`is_complete_binary`) before they are cached and again when read from the cache: an incomplete one is built again,
  never loaded. A source that does not build raises RuntimeError with the driver's build log and the source.
  """
  # entries written before binaries were checked may be incomplete PoCL snapshots: a key of their own skips them
  BINARY_FORMAT = "checked-1"

  def __init__(self, context: Any, device: Any):
    self.context, self.device = context, device
    self.options = build_options(device)
    platform = device.platform
    import pyopencl as cl
    host = f"|{host_cpu_signature()}" if device.type & cl.device_type.CPU else ""  # a CPU driver builds for this one
    self.cachekey = (f"tiny-cl|{platform.name.strip()}|{platform.version.strip()}|{device.name.strip()}|"
                     f"{device.driver_version.strip()}|{' '.join(self.options)}|{self.BINARY_FORMAT}{host}")

  def check_builds(self) -> None:
    """Raise DeviceUnavailable naming the cause and the remedy when this driver cannot build a kernel at all (PyPI's
    PoCL 3.0 on a CPU its LLVM 14 does not know: "unknown target CPU 'generic'"): such a device is unavailable, not
    a device whose every kernel fails. A driver that built the probe once answers from the compile cache."""
    try: self.compile_cached(PROBE_SOURCE)
    except RuntimeError as error:
      log = str(error).split("--- source ---")[0].strip()
      cause = log.splitlines()[-1] if log.splitlines() else log
      remedy = pocl_remedy() if "Portable Computing Language" in self.device.platform.name else \
        "update or reinstall its OpenCL driver"
      raise DeviceUnavailable(f"the OpenCL driver {self.device.platform.name.strip()} "
                         f"{self.device.driver_version.strip()} ({self.device.name.strip()}) builds no kernel "
                         f"({cause[:300]}): {remedy}") from error

  def compile_cached(self, src: str) -> bytes:
    lib = super().compile_cached(src)
    # an incomplete binary in the cache (written by another tinycore sharing it) is built again, never loaded
    return lib if is_complete_binary(lib) else self.compile(src)

  def compile(self, src: str) -> bytes:
    import pyopencl as cl
    try:
      program = _build_program(self.context, self.device, src, self.options)
    except cl.Error as error:
      message = str(error)
      log = self.build_log(getattr(error, "program", None))
      if log and log not in message: message += "\n" + log
      raise RuntimeError(f"the OpenCL driver ({self.device.platform.name.strip()}, {self.device.name.strip()}) failed "
                         f"to build a kernel: {message}\n--- source ---\n{src}") from error
    binaries = program.get_info(cl.program_info.BINARIES)
    if not binaries or not binaries[0]:
      raise RuntimeError(f"the OpenCL driver ({self.device.name.strip()}) returned no program binary")
    lib = bytes(binaries[0])
    if not is_complete_binary(lib):  # PoCL's kernel cache changed under it: the build again rewrites program.bc
      lib = bytes(_build_program(self.context, self.device, src, self.options).get_info(cl.program_info.BINARIES)[0])
    if not is_complete_binary(lib):
      raise RuntimeError(f"the OpenCL driver ({self.device.name.strip()}) returned a program binary without its "
                         "bitcode (program.bc): PoCL's kernel cache (~/.cache/pocl, or $POCL_CACHE_DIR) is damaged; "
                         "remove it and run again")
    return lib

  def build_log(self, program: Any) -> str:
    import pyopencl as cl
    if program is None: return ""
    try: return str(program.get_build_info(self.device, cl.program_build_info.LOG)).strip()
    except Exception as error: return f"(no build log: {type(error).__name__}: {error})"
