"""The ctypes driver (tiny_nv.driver) checked on paper against CUDA 13's cuda.h, without a GPU or libcuda.

HEADER_PROTOTYPES and HEADER_CONSTANTS below were taken from cuda.h (the nvidia-cuda-runtime 13.5.37 wheel,
CUDA_VERSION 13050), not from the code under test: each prototype is written with the symbol its macro resolves to
(`#define cuMemAlloc cuMemAlloc_v2`; `__CUDA_API_PTSZ(x)` is `x` without per-thread default streams), which is what
libcuda exports and CUDA 13.0's headers resolve to as well. The tests parse them into ctypes shapes and compare with
the driver's declarations, then run the driver's methods against a fake libcuda that records what each call gets.
With TINYCORE_CUDA_H=/path/to/cuda.h the table itself is checked against that header.
"""
from __future__ import annotations
import ctypes
import os
import re
import threading
import pytest
from tiny_nv import driver as cuda

HEADER_PROTOTYPES = [
  "CUresult cuInit(unsigned int Flags);",
  "CUresult cuDriverGetVersion(int *driverVersion);",
  "CUresult cuDeviceGetCount(int *count);",
  "CUresult cuDeviceGet(CUdevice *device, int ordinal);",
  "CUresult cuDeviceGetName(char *name, int len, CUdevice dev);",
  "CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);",
  "CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);",
  "CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);",
  "CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);",
  "CUresult cuCtxSetCurrent(CUcontext ctx);",
  "CUresult cuCtxSynchronize(void);",
  "CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);",
  "CUresult cuMemFree_v2(CUdeviceptr dptr);",
  "CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);",
  "CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags);",
  "CUresult cuMemFreeHost(void *p);",
  "CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);",
  "CUresult cuMemHostUnregister(void *p);",
  "CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);",
  "CUresult cuStreamDestroy_v2(CUstream hStream);",
  "CUresult cuStreamSynchronize(CUstream hStream);",
  "CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);",
  "CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags);",
  "CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags);",
  "CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);",
  "CUresult cuEventRecord(CUevent hEvent, CUstream hStream);",
  "CUresult cuEventDestroy_v2(CUevent hEvent);",
  "CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);",
  "CUresult cuModuleLoadData(CUmodule *module, const void *image);",
  "CUresult cuModuleUnload(CUmodule hmod);",
  "CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);",
  "CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, "
  "unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, "
  "CUstream hStream, void **kernelParams, void **extra);",
  "CUresult cuGetErrorName(CUresult error, const char **pStr);",
  "CUresult cuGetErrorString(CUresult error, const char **pStr);",
]
# enumerators and #defines of cuda.h the driver passes
HEADER_CONSTANTS = {
  "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": 75, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": 76,
  "CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS": 122, "CU_STREAM_NON_BLOCKING": 0x1,
  "CU_MEMHOSTALLOC_PORTABLE": 0x01, "CU_MEMHOSTALLOC_DEVICEMAP": 0x02,
  "CU_MEMHOSTREGISTER_PORTABLE": 0x01, "CU_MEMHOSTREGISTER_DEVICEMAP": 0x02,
  "CU_STREAM_WAIT_VALUE_GEQ": 0x0, "CU_STREAM_WRITE_VALUE_DEFAULT": 0x0, "CU_EVENT_DISABLE_TIMING": 0x2,
  "CU_LAUNCH_PARAM_END": 0x00, "CU_LAUNCH_PARAM_BUFFER_POINTER": 0x01, "CU_LAUNCH_PARAM_BUFFER_SIZE": 0x02,
}
# cuda.h's types as (kind, bytes): CUdevice and enums are int, CUdeviceptr is unsigned long long on 64-bit hosts,
# handles (CUcontext, CUstream, ...) are pointers to opaque structs
C_TYPES = {"int": ("int", 4), "unsigned int": ("uint", 4), "CUdevice": ("int", 4), "CUdevice_attribute": ("int", 4),
           "CUresult": ("int", 4), "size_t": ("uint", 8), "CUdeviceptr": ("uint", 8), "cuuint64_t": ("uint", 8),
           "char": ("char", 1), "void": ("void", 0)}
HANDLES = ("CUcontext", "CUstream", "CUevent", "CUmodule", "CUfunction")


def c_shape(c_type: str) -> str:
  """A C parameter type as a comparable shape: 'int4', 'uint8', 'ptr', 'ptr(ptr)', 'str', 'ptr(str)'."""
  c_type = c_type.replace("const ", "").strip()
  if c_type.endswith("*"):
    inner = c_type[:-1].strip()
    if inner == "char": return "str"
    if inner in ("void",) + HANDLES: return "ptr" if inner == "void" else "ptr(ptr)"
    return f"ptr({c_shape(inner)})"
  if c_type in HANDLES: return "ptr"
  kind, size = C_TYPES[c_type]
  return f"{kind}{size}"


def ctypes_shape(ctype) -> str:
  """The same shape for a ctypes type."""
  if ctype in (ctypes.c_void_p,): return "ptr"
  if ctype is ctypes.c_char_p: return "str"
  if hasattr(ctype, "contents"): return f"ptr({ctypes_shape(ctype._type_)})"
  signed = ctype(-1).value < 0
  return f"{'int' if signed else 'uint'}{ctypes.sizeof(ctype)}"


def parse_prototype(line: str) -> tuple[str, list[str]]:
  match = re.fullmatch(r"CUresult (\w+)\((.*)\);", line)
  assert match, line
  params = [] if match.group(2) == "void" else [p.strip() for p in match.group(2).split(",")]
  # drop each parameter's name: "unsigned int Flags" -> "unsigned int", "void **pp" -> "void**"
  return match.group(1), [re.sub(r"\s*\*", "*", re.sub(r"\s*\b\w+$", "", p)).strip() for p in params]


HEADER = dict(parse_prototype(line) for line in HEADER_PROTOTYPES)


def test_every_call_uses_the_symbol_and_signature_of_cuda_h():
  assert len(cuda.SIGNATURES) == len(HEADER_PROTOTYPES)
  for call, (symbol, argtypes) in cuda.SIGNATURES.items():
    assert symbol in HEADER, f"{call}: libcuda symbol {symbol} is not what cuda.h (CUDA 13) resolves {call} to"
    assert symbol.split("_v")[0] == call
    expected = [c_shape(c_type) for c_type in HEADER[symbol]]
    assert [ctypes_shape(t) for t in argtypes] == expected, f"{symbol}: argtypes differ from cuda.h"


def test_the_constants_are_cuda_h_values():
  for name, value in HEADER_CONSTANTS.items(): assert getattr(cuda, name) == value, name


@pytest.mark.skipif(not os.environ.get("TINYCORE_CUDA_H"), reason="TINYCORE_CUDA_H=/path/to/cuda.h not set")
def test_the_table_matches_a_real_cuda_h():
  header = open(os.environ["TINYCORE_CUDA_H"]).read()
  for call in cuda.SIGNATURES:
    define = re.search(rf"^\s*#define {call}\s+(\S+)", header, re.M)
    symbol = re.sub(r"__CUDA_API_PTSZ\((\w+)\)", r"\1", define.group(1)) if define else call
    prototype = re.search(rf"^CUresult CUDAAPI {call}\((.*?)\);", header, re.M | re.S)
    assert prototype, call
    assert parse_prototype(f"CUresult {symbol}({' '.join(prototype.group(1).split())});") == (symbol, HEADER[symbol])
  for name, value in HEADER_CONSTANTS.items():
    found = re.search(rf"\b{name}(?:_AS_INT)?\s*=?\s*(0x[0-9a-fA-F]+|\d+)", header)
    assert found and int(found.group(1), 0) == value, name


class FakeFunction:
  """A libcuda function: records its arguments, fills its output argument, returns CUDA_SUCCESS (or `status`)."""

  def __init__(self, lib: FakeLibcuda, symbol: str):
    self.lib, self.symbol, self.argtypes, self.restype = lib, symbol, None, None

  def __call__(self, *args):
    self.lib.log.append((self.symbol, args))
    if self.symbol == "cuLaunchKernel":  # read the packed parameters while the caller's buffers are alive
      extra = list(args[10])
      size = ctypes.c_size_t.from_address(extra[3]).value
      self.lib.launched.append((extra, size, ctypes.string_at(extra[1], size)))
    elif self.symbol in ("cuGetErrorName", "cuGetErrorString"):
      args[1]._obj.value = b"CUDA_ERROR_INVALID_VALUE" if self.symbol == "cuGetErrorName" else b"invalid argument"
    elif args and isinstance(args[0], type(ctypes.byref(ctypes.c_int()))):
      out = args[0]._obj
      out.value = 0x7000 if isinstance(out, ctypes.c_void_p) else 3
    return self.lib.status.get(self.symbol, 0)


class FakeLibcuda:
  """Exports exactly the symbols of HEADER_PROTOTYPES, like a CUDA 13 libcuda."""

  def __init__(self):
    self.log: list[tuple[str, tuple]] = []
    self.status: dict[str, int] = {}
    self.launched: list[tuple[list, int, bytes]] = []  # cuLaunchKernel's `extra`, buffer size and buffer bytes
    self.functions = {symbol: FakeFunction(self, symbol) for symbol in HEADER}

  def __getattr__(self, symbol: str):
    try: return self.__dict__["functions"][symbol]
    except KeyError: raise AttributeError(symbol) from None

  def calls(self, symbol: str) -> list[tuple]: return [args for name, args in self.log if name == symbol]


@pytest.fixture
def fake(monkeypatch):
  lib = FakeLibcuda()
  monkeypatch.setattr(cuda, "load_libcuda", lambda: lib)
  driver = cuda.CudaDriver()
  driver.init()
  return driver, lib


def test_init_declares_every_function_returning_curesult(fake):
  driver, lib = fake
  assert lib.calls("cuInit") == [(0,)]
  for call, (symbol, argtypes) in cuda.SIGNATURES.items():
    assert lib.functions[symbol].argtypes == argtypes and lib.functions[symbol].restype is ctypes.c_int


def test_stream_memory_operations_wait_geq_and_write_default(fake):
  driver, lib = fake
  driver.stream_wait_value64("stream", 0x1000, 5)
  driver.stream_write_value64("stream", 0x1008, 6)
  assert lib.calls("cuStreamWaitValue64_v2") == [("stream", 0x1000, 5, 0x0)]  # GEQ, not EQ (0x1)
  assert lib.calls("cuStreamWriteValue64_v2") == [("stream", 0x1008, 6, 0x0)]


def test_pinned_memory_is_portable_and_mapped(fake):
  driver, lib = fake
  assert driver.host_alloc(4096) == (0x7000, 3)
  assert lib.calls("cuMemHostAlloc")[0][1:] == (4096, 0x1 | 0x2)
  assert lib.calls("cuMemHostGetDevicePointer_v2")[0][2] == 0  # Flags must be 0
  driver.host_register(0x10000, 8192)
  assert lib.calls("cuMemHostRegister_v2")[0] == (0x10000, 8192, 0x1 | 0x2)


def test_launch_packs_the_arguments_in_one_buffer(fake):
  driver, lib = fake
  params = cuda.pack_params([0xDEAD0000, 7, -1])
  driver.launch("function", (4, 2, 1), (64, 1, 1), 0, "stream", params)
  (args,) = lib.calls("cuLaunchKernel")
  assert args[:9] == ("function", 4, 2, 1, 64, 1, 1, 0, "stream") and args[9] is None
  ((extra, size, buffer),) = lib.launched
  assert extra[0] == 1 and extra[2] == 2 and extra[4] is None  # BUFFER_POINTER, BUFFER_SIZE, END (NULL)
  assert size == 24 and buffer == params
  assert params == (0xDEAD0000).to_bytes(8, "little") + (7).to_bytes(8, "little") + b"\xff" * 8


def test_a_failing_call_names_the_symbol_and_the_driver_error(fake):
  driver, lib = fake
  lib.status["cuMemAlloc_v2"] = 1
  with pytest.raises(cuda.CudaError, match=r"cuMemAlloc \(cuMemAlloc_v2\) failed: CUDA_ERROR_INVALID_VALUE \(1\): "
                                           r"invalid argument"):
    driver.mem_alloc(16)


def test_a_driver_without_a_cuda_13_symbol_is_named(monkeypatch):
  lib = FakeLibcuda()
  del lib.functions["cuStreamWaitValue64_v2"]
  monkeypatch.setattr(cuda, "load_libcuda", lambda: lib)
  with pytest.raises(cuda.CudaError, match="no cuStreamWaitValue64_v2"): cuda.CudaDriver().init()


def test_a_thread_makes_each_devices_primary_context_current_before_using_it(fake):
  """CUDA's current context is per thread: alternating between two GPUs on one thread switches every time, and a new
  thread sets its own."""
  from tiny_nv.device import NVDevice, current_context
  driver, lib = fake
  gpu0, gpu1 = NVDevice.__new__(NVDevice), NVDevice.__new__(NVDevice)
  gpu0.driver = gpu1.driver = driver
  gpu0.context, gpu1.context = driver.open_context(0), driver.open_context(1)
  assert [args[1] for args in lib.calls("cuDevicePrimaryCtxRetain")] == [3, 3]  # the device from cuDeviceGet
  current_context.context = None
  for gpu in (gpu0, gpu0, gpu1, gpu0): gpu.bound_driver()
  contexts = [args[0] for args in lib.calls("cuCtxSetCurrent")]
  assert contexts[2:] == [gpu0.context, gpu1.context, gpu0.context]  # after the two opens
  worker = threading.Thread(target=gpu1.bound_driver)
  worker.start()
  worker.join()
  assert lib.calls("cuCtxSetCurrent")[-1][0] is gpu1.context
