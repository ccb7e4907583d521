"""The NV device: HCQ2 on the CUDA driver (a compute stream and a copy stream as the device's two queues).

Memory: buffers are device memory (cuMemAlloc); the host reaches them only through the copy stream. The queues also
address, in place, the host memory of the kinds in `host_devs` (the core's PYTHON memory, where the staging ring
lives, and CPU's), pinned and mapped for the GPU when first used (`host_register`), and the core's signal pages,
registered the same way. Other host memory (numpy arrays, DISK) is staged by the core through its ring.

Command format (what a queue's `submit` decodes into driver calls; 64-bit little-endian words, like SIM's, so the
core's input-address and variable patches land in words):

    word 0 of a record: opcode | (number of operand words << 8), then the operands
    EXEC      = 1: program id, grid x, y, z, block x, y, z, then the kernel's arguments (buffer addresses, then
                   scalar words): they are, as they stand, cuLaunchKernel's packed parameter buffer
    COPY      = 2: destination address, source address, byte count     (cuMemcpyAsync on the queue's stream)
    SIGNAL    = 3: signal address, value      (cuStreamWriteValue64: signal := value after the work before it)
    WAIT      = 4: signal address, value      (cuStreamWaitValue64 GEQ: later work waits until signal >= value)
    TIMESTAMP = 5: signal address             (a 1-thread kernel stores %globaltimer, in ns)

Signal addresses in records are device addresses. A barrier writes nothing: a CUDA stream runs in order and a
kernel's or copy's writes are visible to the work after it on the stream.

Without 64-bit stream memory operations (device attribute 122, CAN_USE_64_BIT_STREAM_MEM_OPS, is 0), SIGNAL is a
1-thread kernel that stores the value and then records a CUDA event for that signal; WAIT makes the stream wait for
the latest event recorded for a signal with a value >= the one wanted, or, when the signal is written by someone
else (the host, another device), the host polls the signal at submit time with the queue timeout.

Replay of compiled linears re-issues the recorded records (the core patches input addresses and scalar words into
them): one cuLaunchKernel per kernel from a prepared parameter buffer. CUDA graphs (cuGraphExecKernelNodeSetParams)
were not used: they would need capture per batch and per-node updates for every patched word, and no GPU was
available to measure whether they are faster.
"""
from __future__ import annotations
import ctypes
import functools
import struct
import threading
import time
from typing import Any, Sequence
import attrs
from tinycore.plugin import (HOST_DEVICE, Barrier, BufferSpec, BufferStorage, CommandWriter, Copy, Encoded, Exec,
                             HCQDevice, HCQTimeoutError, HWQueue, LRUAllocator, SignalStore, SignalWait, Timestamp,
                             Value, raise_timeout_hint, view_address, wait_for_queues)
from tiny_nv.compiler import NVCompiler
from tiny_nv.driver import CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, pack_params
from tiny_nv.renderer import CUDARenderer

EXEC, COPY, SIGNAL, WAIT, TIMESTAMP = 1, 2, 3, 4, 5
PAGE = 4096
# the context current on each thread (CUDA's is per thread, not per device: with two GPUs a thread that used NV:1
# must make NV's context current again before it calls the driver for NV)
current_context = threading.local()
# the device's own helper kernels: the timestamp (%globaltimer is the GPU's nanosecond clock) and the signal store
# used when the driver has no 64-bit stream memory operations
HELPER_SOURCE = r"""
extern "C" __global__ void tc_timestamp(unsigned long long* out) {
  unsigned long long now; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); *out = now;
}
extern "C" __global__ void tc_store_u64(unsigned long long* out, unsigned long long value) {
  __threadfence_system(); *(volatile unsigned long long*)out = value;
}
"""


class NVMemory:
  """Memory the device addresses: `addr` is its device address. `host_addr` is set for host memory (pinned by
  host_alloc, or registered when `registered`); `base` is the allocation a view belongs to."""
  __slots__ = ("addr", "nbytes", "host_addr", "registered", "base")

  def __init__(self, addr: int, nbytes: int, host_addr: int | None = None, registered: bool = False,
               base: NVMemory | None = None):
    self.addr, self.nbytes, self.host_addr, self.registered, self.base = addr, nbytes, host_addr, registered, base

  def __repr__(self) -> str: return f"<NVMemory {self.addr:#x} {self.nbytes} bytes>"


class NVAllocator(LRUAllocator[NVMemory]):
  """Device memory from cuMemAlloc (pinned host memory for BufferSpec(host=True)); copies in and out run on the
  device's copy stream."""

  def _alloc(self, nbytes: int, spec: BufferSpec) -> NVMemory:
    driver = self.device.bound_driver()
    try:
      if spec.host:
        host, device = driver.host_alloc(nbytes)
        return NVMemory(device, nbytes, host_addr=host)
      return NVMemory(driver.mem_alloc(nbytes), nbytes)
    except Exception as error:
      if "OUT_OF_MEMORY" in str(error): raise MemoryError(f"{self.device.device}: {error}") from error
      raise

  def _free(self, handle: NVMemory, spec: BufferSpec) -> None:
    driver = self.device.bound_driver()
    if handle.host_addr is not None: driver.host_free(handle.host_addr)
    else: driver.mem_free(handle.addr)

  def _offset(self, handle: NVMemory, nbytes: int, offset: int) -> NVMemory:
    host = None if handle.host_addr is None else handle.host_addr + offset
    return NVMemory(handle.addr + offset, nbytes, host_addr=host, base=handle.base or handle)

  def _copyin(self, dst: NVMemory, src: memoryview) -> None:
    bounce = ctypes.create_string_buffer(bytes(src), len(src))
    self.device.copy_now(dst.addr, ctypes.addressof(bounce), len(src))

  def _copyout(self, dst: memoryview, src: NVMemory) -> None:
    bounce = ctypes.create_string_buffer(len(dst))
    self.device.copy_now(ctypes.addressof(bounce), src.addr, len(dst))
    dst[:] = bounce.raw[:len(dst)]

  def _map(self, buf: Any) -> BufferStorage:
    """Memory the queues address in place: another NV device's memory (one unified address space) or host memory
    with a host view (pinned and mapped for the GPU here, released in `_unmap`)."""
    if isinstance(handle := buf.get_buf(), NVMemory): return BufferStorage(handle, handle, buf.host)
    if (host := buf.host) is None:
      raise RuntimeError(f"{self.device.device} cannot address {buf.device} memory: it has no host view")
    address = view_address(host)
    memory = NVMemory(self.device.register_host(address, host.nbytes), host.nbytes, address, True)
    return BufferStorage(memory, memory, host)

  def _unmap(self, mapping: BufferStorage) -> None:
    memory = mapping.meta
    if isinstance(memory, NVMemory) and memory.registered: self.device.unregister_host(memory.host_addr)


@attrs.define
class HostRegistration:
  """Host memory pinned and mapped for the GPU (cuMemHostRegister): its length, device address and how many
  mappings use it."""
  nbytes: int
  device_addr: int
  users: int = 1


class NVProgram:
  """A kernel loaded from a cubin (PTX on the mock): launched by EXEC records, or called directly."""

  def __init__(self, device: NVDevice, name: str, lib: bytes):
    self.device, self.name = device, name
    driver = device.bound_driver()
    self.module = driver.module_load(lib)
    self.function = driver.get_function(self.module, name)
    self.id = device.register_program(self)

  def __call__(self, *bufs: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    wait_for_queues()
    start = time.perf_counter()
    grid, block = launch_shape(global_size, local_size)
    driver = self.device.bound_driver()
    stream = self.device.queues["compute"].stream
    driver.launch(self.function, grid, block, 0, stream, pack_params([b.addr for b in bufs] + list(vals)))
    if not wait: return None
    self.device.finish_stream("compute")
    return time.perf_counter() - start


def launch_shape(global_size: Sequence[int], local_size: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """CUDA's (grid, block) from the renderer's global and local sizes in threads (global is a multiple of local)."""
  block = tuple(int(x) for x in (*local_size, 1, 1, 1)[:3])
  grid = tuple(-(-int(g) // b) for g, b in zip((*global_size, 1, 1, 1)[:3], block))
  return grid, block


class NVQueue(HWQueue):
  """One CUDA stream as an HCQ2 queue: commands are encoded as records and `submit` turns them into driver calls
  on this stream, in order."""

  def __init__(self, device: NVDevice, kind: str, stream: Any):
    super().__init__(device, kind)
    self.stream = stream
    self.submitted = 0

  @staticmethod
  def _record(out: CommandWriter, opcode: int, operands: Sequence[Value]) -> None:
    out.words([opcode | (len(operands) << 8), *operands])

  def exec(self, out: CommandWriter, command: Exec) -> None:
    grid, block = launch_shape(command.global_size, command.local_size)
    self._record(out, EXEC, [command.program.program.id, *grid, *block, *command.buffers, *command.vals])

  def copy(self, out: CommandWriter, command: Copy) -> None:
    self._record(out, COPY, [command.dst, command.src, command.nbytes])

  def signal(self, out: CommandWriter, command: SignalStore) -> None:
    self._record(out, SIGNAL, [self.device.signal_address(command.signal.addr), command.value])

  def wait(self, out: CommandWriter, command: SignalWait) -> None:
    self._record(out, WAIT, [self.device.signal_address(command.signal.addr), command.value])

  def timestamp(self, out: CommandWriter, command: Timestamp) -> None:
    self._record(out, TIMESTAMP, [self.device.signal_address(command.signal.addr)])

  def barrier(self, out: CommandWriter, command: Barrier) -> None:
    """Nothing: a stream runs in order and each kernel's or copy's writes are visible to the work after it."""

  def submit(self, encoded: Encoded, values: dict[Any, int]) -> None:
    if not encoded.blob: return
    blob = bytes(encoded.patched(values))
    words = struct.unpack(f"<{len(blob) // 8}Q", blob)
    self.device.bound_driver()
    i = 0
    while i < len(words):
      opcode, count = words[i] & 0xFF, words[i] >> 8
      self.run_record(opcode, words[i + 1:i + 1 + count], blob[8 * (i + 1):8 * (i + 1 + count)])
      i += 1 + count
    self.submitted += 1

  def run_record(self, opcode: int, operands: Sequence[int], raw: bytes) -> None:
    """One record as a driver call on this queue's stream."""
    device, driver = self.device, self.device.driver
    if opcode == EXEC:
      program = device.programs[operands[0]]
      driver.launch(program.function, operands[1:4], operands[4:7], 0, self.stream, raw[7 * 8:])
    elif opcode == COPY: driver.memcpy_async(operands[0], operands[1], operands[2], self.stream)
    elif opcode == SIGNAL: device.store_signal(self, operands[0], operands[1])
    elif opcode == WAIT: device.wait_signal(self, operands[0], operands[1])
    elif opcode == TIMESTAMP: device.launch_helper("tc_timestamp", self.stream, [operands[0]])
    else: raise RuntimeError(f"{device.device} {self.kind} queue: unknown record opcode {opcode}")

  def __repr__(self) -> str: return f"submitted={self.submitted}"


class NVDevice(HCQDevice):
  """An NVIDIA GPU (ordinal `ordinal` of `driver`) on HCQ2: device memory, a compute stream and a copy stream.
  `emulated`: the driver is the mock (kernels are compiled to PTX for it instead of cubins)."""
  host_devs = frozenset({HOST_DEVICE, "CPU"})
  # cuLaunchKernel's parameter buffer holds 4 KiB on every GPU and driver (newer ones allow 32 KiB): 8 bytes a pointer
  # or 64-bit scalar
  max_kernel_args = 4096 // 8

  def __init__(self, name: str, ordinal: int, driver: Any, emulated: bool = False):
    self.driver, self.ordinal, self.emulated = driver, ordinal, emulated
    self.context = driver.open_context(ordinal)
    current_context.context = self.context
    self.arch = driver.compute_capability(ordinal)
    self.gpu_name = driver.name(ordinal)
    self.programs: list[NVProgram] = []
    self.memory_ops = driver.attribute(ordinal, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) != 0
    self.host_registrations: dict[int, HostRegistration] = {}  # by host address: host memory the GPU addresses
    self.signal_pages: dict[int, int] = {}                     # host page of core signals -> its device address
    self.signal_events: dict[int, tuple[int, Any]] = {}  # without memory ops: signal -> (value, event)
    compiler = NVCompiler(self.arch, ptx=self.emulated)
    super().__init__(name, NVAllocator(), CUDARenderer(self.arch), compiler, functools.partial(NVProgram, self))
    self.queues = {"compute": NVQueue(self, "compute", driver.stream_create()),
                   "copy": NVQueue(self, "copy", driver.stream_create())}
    self.helpers = driver.module_load(compiler.compile_cached(HELPER_SOURCE))
    self.helper_functions = {name: driver.get_function(self.helpers, name) for name in ("tc_timestamp", "tc_store_u64")}
    # where the host learns that a copy it waits for (copyin / copyout) finished: pinned host memory
    self.copy_done_host, self.copy_done_addr = driver.host_alloc(PAGE)
    self.copy_done = ctypes.c_uint64.from_address(self.copy_done_host)
    self.copy_done.value = 0
    self.copies_waited = 0

  # ------------------------------------------------------------------ driver access from any thread
  def bound_driver(self) -> Any:
    """The driver, with this device's context current on the calling thread (the CUDA driver API needs it)."""
    if getattr(current_context, "context", None) is not self.context:
      self.driver.set_current(self.context)
      current_context.context = self.context
    return self.driver

  def register_program(self, program: NVProgram) -> int:
    self.programs.append(program)
    return len(self.programs) - 1

  # ------------------------------------------------------------------ host memory the GPU addresses in place
  def register_host(self, address: int, nbytes: int) -> int:
    """Pin and map host memory for the GPU (once: memory inside a registration shares it); its device address.
    A registration that overlaps without containing the range is stale (its memory was freed without an unmap, and
    the address reused): it is released first, as CUDA refuses overlapping registrations."""
    for start, registration in list(self.host_registrations.items()):
      if start <= address and address + nbytes <= start + registration.nbytes:
        registration.users += 1
        return registration.device_addr + (address - start)
      if start < address + nbytes and address < start + registration.nbytes: self.release_registration(start)
    device_addr = self.bound_driver().host_register(address, nbytes)
    self.host_registrations[address] = HostRegistration(nbytes, device_addr)
    return device_addr

  def unregister_host(self, address: int) -> None:
    """One mapping of registered host memory is gone; the last one unpins it."""
    for start, registration in self.host_registrations.items():
      if start <= address < start + registration.nbytes:
        registration.users -= 1
        if registration.users <= 0: self.release_registration(start)
        return

  def release_registration(self, start: int) -> None:
    del self.host_registrations[start]
    try: self.bound_driver().host_unregister(start)
    except Exception: pass  # stale: the memory may already be unmapped, which ended the registration

  # ------------------------------------------------------------------ signals
  def signal_address(self, host_addr: int) -> int:
    """The device address of a signal word in the core's host memory: its page is pinned and mapped once."""
    page = host_addr & ~(PAGE - 1)
    if (device_page := self.signal_pages.get(page)) is None:
      device_page = self.signal_pages[page] = self.register_host(page, PAGE)
    return device_page + (host_addr - page)

  def host_signal(self, device_addr: int) -> ctypes.c_uint64:
    """The host view of a signal given by its device address (for the polling fallback)."""
    for page, device_page in self.signal_pages.items():
      if device_page <= device_addr < device_page + PAGE:
        return ctypes.c_uint64.from_address(page + device_addr - device_page)
    if device_addr == self.copy_done_addr: return self.copy_done
    raise RuntimeError(f"{self.device}: {device_addr:#x} is not a signal this device registered")

  def store_signal(self, queue: NVQueue, addr: int, value: int) -> None:
    if self.memory_ops: return self.driver.stream_write_value64(queue.stream, addr, value)
    self.launch_helper("tc_store_u64", queue.stream, [addr, value])
    event = self.driver.event_create()
    self.driver.event_record(event, queue.stream)
    if (old := self.signal_events.get(addr)) is not None: self.driver.event_destroy(old[1])
    self.signal_events[addr] = (value, event)

  def wait_signal(self, queue: NVQueue, addr: int, value: int) -> None:
    if self.memory_ops: return self.driver.stream_wait_value64(queue.stream, addr, value)
    if (recorded := self.signal_events.get(addr)) is not None and recorded[0] >= value:
      return self.driver.stream_wait_event(queue.stream, recorded[1])
    self.poll(self.host_signal(addr), value, queue.kind)

  def poll(self, word: ctypes.c_uint64, value: int, queue: str) -> None:
    """Wait on the host until `word` >= value; HCQTimeoutError naming the device, queue and value."""
    start, spins = time.perf_counter(), 0
    while word.value < value:
      if time.perf_counter() - start > self.wait_timeout_ms / 1000:
        raise HCQTimeoutError(f"{self.device}: {queue} queue made no progress for {self.wait_timeout_ms} ms: signal "
                              f"is {word.value}, waiting for {value}; {self.queue_state()}; {raise_timeout_hint()}")
      spins += 1
      if spins > 64: time.sleep(0.00005)

  def launch_helper(self, name: str, stream: Any, args: list[int]) -> None:
    self.driver.launch(self.helper_functions[name], (1, 1, 1), (1, 1, 1), 0, stream, pack_params(args))

  # ------------------------------------------------------------------ host access to device memory
  def copy_now(self, dst: int, src: int, nbytes: int) -> None:
    """A copy on the copy stream, waited for by the host (how the host reads and writes device memory)."""
    wait_for_queues()
    driver, queue = self.bound_driver(), self.queues["copy"]
    driver.memcpy_async(dst, src, nbytes, queue.stream)
    self.finish_stream("copy")

  def finish_stream(self, kind: str) -> None:
    """Wait until everything on one stream finished: the stream stores a fresh value into a pinned word the host
    polls (with the queue timeout, unlike cuStreamSynchronize)."""
    self.copies_waited += 1
    self.store_signal(self.queues[kind], self.copy_done_addr, self.copies_waited)
    self.poll(self.copy_done, self.copies_waited, kind)

  # ------------------------------------------------------------------ what `tinycore devices` shows, and exit
  def capabilities(self) -> dict[str, Any]:
    caps = super().capabilities()
    caps.update(gpu=self.gpu_name.replace(" ", "_"), arch=f"sm_{self.arch[0]}{self.arch[1]}",
                stream_memory_ops=self.memory_ops)
    if self.emulated: caps["emulated"] = True
    return caps

  @property
  def status_note(self) -> str | None:  # type: ignore[override]
    """"emulated" on the mock driver (what `tinycore devices` shows after "ok")."""
    return "emulated" if self.emulated else None

  @property
  def times_kernels(self) -> bool:  # type: ignore[override]
    """The mock's run times (a PTX interpreter) say nothing of a GPU's: a kernel search skips it."""
    return not self.emulated

  def finalize(self) -> None:
    try:
      driver = self.bound_driver()
      for queue in self.queues.values(): driver.stream_destroy(queue.stream)
    except Exception: pass  # at exit the driver may already be shutting down
