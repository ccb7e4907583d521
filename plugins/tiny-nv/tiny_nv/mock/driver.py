"""MockCudaDriver: the CUDA driver object's methods (see tiny_nv/driver.py) on host memory, worker-thread streams and
the PTX interpreter. Test equipment for machines without an NVIDIA GPU (TINYCORE_NV_EMULATE=1).

Like the real driver it wants `init()` first and a current context on the calling thread for everything that
touches memory, streams or modules; errors inside a stream are sticky and raised by the next synchronize, as CUDA
reports asynchronous errors.
"""
from __future__ import annotations
import collections
import ctypes
import threading
import time
from typing import Callable
import attrs
from tiny_nv.mock.memory import DeviceMemory
from tiny_nv.mock.ptx import PTXKernel, PTXModule, load_module

DEVICE_NAME = "emulated NVIDIA (PTX interpreter)"
COMPUTE_CAPABILITY = (9, 0)
TOTAL_MEMORY = 16 << 30
WAIT_TIMEOUT_S = 30.0
# CUdevice_attribute numbers the mock answers (anything else is 0)
ATTRIBUTES = {1: 1024, 2: 1024, 3: 1024, 4: 64, 5: 2**31 - 1, 6: 65535, 7: 65535, 8: 48 << 10, 9: 64 << 10,
              10: 32, 12: 65536, 13: 1_980_000, 16: 132, 41: 1, 75: COMPUTE_CAPABILITY[0],
              76: COMPUTE_CAPABILITY[1], 81: 228 << 10, 82: 65536, 97: 227 << 10, 122: 1}

class MockCudaError(RuntimeError):
  """A failed mock driver call, named like the CUDA error it stands for."""

@attrs.define(eq=False)
class MockContext:
  """The primary context of the one emulated device."""
  ordinal: int

class MockStream:
  """An in-order stream: one worker thread runs the stream's operations in submission order."""
  def __init__(self, name: str):
    self.name = name
    self._work: collections.deque[tuple[str, Callable[[], None]]] = collections.deque()
    self._condition = threading.Condition()
    self._submitted = self._finished = 0
    self._closing = False
    self.error: BaseException | None = None
    self._thread = threading.Thread(target=self._serve, name=f"mock-cuda-{name}", daemon=True)
    self._thread.start()

  def submit(self, what: str, operation: Callable[[], None]) -> None:
    with self._condition:
      if self._closing: raise MockCudaError(f"CUDA_ERROR_INVALID_HANDLE: {self.name} was destroyed")
      self._work.append((what, operation))
      self._submitted += 1
      self._condition.notify_all()

  def _serve(self) -> None:
    while True:
      with self._condition:
        while not self._work and not self._closing: self._condition.wait()
        if not self._work: return
        what, operation = self._work.popleft()
      if self.error is None:   # after an error the stream only drains (CUDA's sticky error)
        try: operation()
        except BaseException as error:   # noqa: BLE001 - reported by the next synchronize
          self.error = MockCudaError(f"{self.name}: {what} failed: {type(error).__name__}: {error}")
      with self._condition:
        self._finished += 1
        self._condition.notify_all()

  def synchronize(self) -> None:
    with self._condition:
      target = self._submitted
      while self._finished < target: self._condition.wait()
    if self.error is not None: raise self.error

  def close(self) -> None:
    with self._condition:
      self._closing = True
      self._condition.notify_all()
    self._thread.join()

class MockCudaDriver:
  """The driver seam's methods, emulated: one device, memory = host memory, kernels = interpreted PTX.

  Counters for tests: `copy_engine_ops` (memcpy_async operations executed) and `kernel_launches` (kernels run)."""
  def __init__(self, wait_timeout_s: float = WAIT_TIMEOUT_S):
    self.memory = DeviceMemory()
    self.wait_timeout_s = wait_timeout_s
    self.copy_engine_ops = 0
    self.kernel_launches = 0
    self._initialized = False
    self._context: MockContext | None = None
    self._current = threading.local()
    self._streams: list[MockStream] = []
    self._stream_count = 0
    self._host: set[int] = set()
    self._lock = threading.Lock()

  # ----- device queries (no context needed)
  def init(self) -> None:
    """cuInit."""
    self._initialized = True

  def device_count(self) -> int:
    self._require_init()
    return 1

  def name(self, ordinal: int) -> str:
    self._device(ordinal)
    return DEVICE_NAME

  def compute_capability(self, ordinal: int) -> tuple[int, int]:
    self._device(ordinal)
    return COMPUTE_CAPABILITY

  def attribute(self, ordinal: int, attr: int) -> int:
    """A CUdevice_attribute value (122, CAN_USE_64_BIT_STREAM_MEM_OPS, is 1)."""
    self._device(ordinal)
    return ATTRIBUTES.get(int(attr), 0)

  def total_memory(self, ordinal: int) -> int:
    self._device(ordinal)
    return TOTAL_MEMORY

  # ----- contexts
  def open_context(self, ordinal: int) -> MockContext:
    """Retain the primary context and make it current on this thread."""
    self._device(ordinal)
    if self._context is None: self._context = MockContext(ordinal)
    self._current.context = self._context
    return self._context

  def set_current(self, ctx: MockContext) -> None:
    if not isinstance(ctx, MockContext): raise MockCudaError(f"CUDA_ERROR_INVALID_CONTEXT: {ctx!r} is not a context")
    self._current.context = ctx

  # ----- memory
  def mem_alloc(self, nbytes: int) -> int:
    self._require_context("mem_alloc")
    if nbytes <= 0: raise MockCudaError(f"CUDA_ERROR_INVALID_VALUE: mem_alloc({nbytes})")
    return self.memory.allocate(nbytes)

  def mem_free(self, dptr: int) -> None:
    self._require_context("mem_free")
    if dptr in self._host: raise MockCudaError(f"CUDA_ERROR_INVALID_VALUE: mem_free({dptr:#x}) of pinned host memory")
    self._free(dptr, "mem_free")

  def host_alloc(self, nbytes: int) -> tuple[int, int]:
    """Pinned, device-mapped host memory: (host address, device address), the same number in the mock."""
    self._require_context("host_alloc")
    if nbytes <= 0: raise MockCudaError(f"CUDA_ERROR_INVALID_VALUE: host_alloc({nbytes})")
    address = self.memory.allocate(nbytes)
    self._host.add(address)
    return address, address

  def host_free(self, host_addr: int) -> None:
    self._require_context("host_free")
    if host_addr not in self._host: raise MockCudaError(f"CUDA_ERROR_INVALID_VALUE: host_free({host_addr:#x})")
    self._host.discard(host_addr)
    self._free(host_addr, "host_free")

  def host_register(self, host_addr: int, nbytes: int) -> int:
    """Existing host memory made device-addressable (cuMemHostRegister): its device address, the same number."""
    self._require_context("host_register")
    try: self.memory.register(host_addr, nbytes)
    except ValueError as error: raise MockCudaError(f"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: {error}") from None
    return host_addr

  def host_unregister(self, host_addr: int) -> None:
    self._require_context("host_unregister")
    self._free(host_addr, "host_unregister")

  def _free(self, address: int, call: str) -> None:
    try: self.memory.free(address)
    except ValueError as error: raise MockCudaError(f"CUDA_ERROR_INVALID_VALUE: {call}: {error}") from None

  # ----- streams
  def stream_create(self) -> MockStream:
    """A non-blocking stream with its own in-order worker."""
    self._require_context("stream_create")
    with self._lock:
      stream = MockStream(f"stream {self._stream_count}")
      self._stream_count += 1
      self._streams.append(stream)
    return stream

  def stream_destroy(self, stream: MockStream) -> None:
    """Finish the stream's work, then stop its worker."""
    self._require_context("stream_destroy")
    self._stream(stream).close()
    with self._lock: self._streams.remove(stream)

  def stream_synchronize(self, stream: MockStream) -> None:
    self._require_context("stream_synchronize")
    self._stream(stream).synchronize()

  def synchronize(self) -> None:
    """Wait for every stream (cuCtxSynchronize); raises the first stream error."""
    self._require_context("synchronize")
    for stream in list(self._streams): stream.synchronize()

  def memcpy_async(self, dst: int, src: int, nbytes: int, stream: MockStream) -> None:
    """Copy on the stream (the copy engine): any mix of device and host addresses."""
    self._require_context("memcpy_async")
    if nbytes < 0: raise MockCudaError(f"CUDA_ERROR_INVALID_VALUE: memcpy_async of {nbytes} bytes")
    self._check_known_range(dst, nbytes, "memcpy_async destination")
    self._check_known_range(src, nbytes, "memcpy_async source")

    def copy() -> None:
      self.memory.copy(dst, src, nbytes)
      self.copy_engine_ops += 1
    self._stream(stream).submit(f"memcpy_async({dst:#x} <- {src:#x}, {nbytes})", copy)

  def stream_wait_value64(self, stream: MockStream, addr: int, value: int) -> None:
    """Block the stream until the u64 at `addr` is >= `value`; a wait past the timeout fails the stream."""
    self._require_context("stream_wait_value64")
    cell = self._u64(addr, "stream_wait_value64")
    target = self._stream(stream)

    def wait() -> None:
      deadline, pause = time.monotonic() + self.wait_timeout_s, 0.0
      while cell.value < value:
        if time.monotonic() > deadline:
          raise TimeoutError(f"{target.name} waited {self.wait_timeout_s:g} s for the value at {addr:#x} to reach "
                             f"{value} (it is {cell.value})")
        time.sleep(pause)
        pause = min(pause * 2 + 1e-5, 1e-3)
    target.submit(f"stream_wait_value64({addr:#x} >= {value})", wait)

  def stream_write_value64(self, stream: MockStream, addr: int, value: int) -> None:
    """Write the u64 at `addr` once the stream's earlier work is done."""
    self._require_context("stream_write_value64")
    cell = self._u64(addr, "stream_write_value64")

    def write() -> None: cell.value = value
    self._stream(stream).submit(f"stream_write_value64({addr:#x} = {value})", write)

  # ----- modules and kernels
  def module_load(self, image: bytes) -> PTXModule:
    """Load PTX text (a NUL at the end is fine): every kernel is parsed and decoded now."""
    self._require_context("module_load")
    if bytes(image[:4]) == b"\x7fELF":
      raise MockCudaError("CUDA_ERROR_INVALID_IMAGE: the mock driver runs PTX, not cubins (compile for compute_90)")
    try: return load_module(bytes(image))
    except Exception as error:
      raise MockCudaError(f"CUDA_ERROR_INVALID_PTX: {type(error).__name__}: {error}") from error

  def module_unload(self, module: PTXModule) -> None:
    self._require_context("module_unload")
    if not isinstance(module, PTXModule): raise MockCudaError(f"CUDA_ERROR_INVALID_HANDLE: {module!r}")

  def get_function(self, module: PTXModule, name: str) -> PTXKernel:
    self._require_context("get_function")
    try: return module.kernel(name)
    except KeyError as error: raise MockCudaError(f"CUDA_ERROR_NOT_FOUND: {error.args[0]}") from None

  def launch(self, function: PTXKernel, grid: tuple, block: tuple, shared_bytes: int, stream: MockStream,
             params: bytes) -> None:
    """Queue the kernel on the stream; `params` is the packed argument buffer (cuLaunchKernel's `extra`)."""
    self._require_context("launch")
    if not isinstance(function, PTXKernel): raise MockCudaError(f"CUDA_ERROR_INVALID_HANDLE: {function!r}")
    params = bytes(params)

    def run() -> None:
      function.launch(self.memory, tuple(grid), tuple(block), shared_bytes, params)
      self.kernel_launches += 1
    self._stream(stream).submit(f"kernel {function.name} grid {tuple(grid)} block {tuple(block)}", run)

  # ----- checks
  def _require_init(self) -> None:
    if not self._initialized: raise MockCudaError("CUDA_ERROR_NOT_INITIALIZED: call init() first")

  def _device(self, ordinal: int) -> None:
    self._require_init()
    if ordinal != 0: raise MockCudaError(f"CUDA_ERROR_INVALID_DEVICE: ordinal {ordinal} (the mock has one device)")

  def _require_context(self, call: str) -> None:
    self._require_init()
    if getattr(self._current, "context", None) is None:
      raise MockCudaError(f"CUDA_ERROR_INVALID_CONTEXT: {call} on a thread with no current context "
                          "(call set_current first)")

  def _stream(self, stream) -> MockStream:
    if not isinstance(stream, MockStream) or stream not in self._streams:
      raise MockCudaError(f"CUDA_ERROR_INVALID_HANDLE: {stream!r} is not a live stream")
    return stream

  def _u64(self, addr: int, call: str) -> ctypes.c_uint64:
    if addr % 8: raise MockCudaError(f"CUDA_ERROR_INVALID_VALUE: {call} at {addr:#x}, not 8-byte aligned")
    self._check_known_range(addr, 8, call, required=True)
    return ctypes.c_uint64.from_address(addr)

  def _check_known_range(self, address: int, nbytes: int, what: str, required: bool = False) -> None:
    """An address inside an allocation must stay inside it; `required`: it must be inside one."""
    try: self.memory.region(address, address + max(nbytes, 1), what)
    except Exception as error:
      if required or self.memory.contains(address): raise MockCudaError(f"CUDA_ERROR_INVALID_VALUE: {error}") from None
