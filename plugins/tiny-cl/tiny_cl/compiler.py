"""CLCompiler: OpenCL C source -> the device's program binary, built by the OpenCL driver."""
from __future__ import annotations
from typing import Any
from tinycore.plugin import Compiler


def build_options(device: Any) -> list[str]:
  """Build options that keep results IEEE like numpy's: correctly rounded float division and sqrt where the device
  can do it (OpenCL otherwise allows 2.5 ulp for division and 3 ulp for sqrt)."""
  import pyopencl as cl
  options = []
  if device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
    options.append("-cl-fp32-correctly-rounded-divide-sqrt")
  return options


POCL_BINARY_MAGIC = b"poclbin\0"


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
    self.cachekey = (f"tiny-cl|{platform.name.strip()}|{platform.version.strip()}|{device.name.strip()}|"
                     f"{device.driver_version.strip()}|{' '.join(self.options)}|{self.BINARY_FORMAT}")

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
