"""The simulated HCQ2 device.

Memory: each allocation is private memory the host never reads or writes directly: the allocator has no zero-copy
view, and its copy-in/out go through the device's own copy queue. The device's queues address that memory and the
host memory of the kinds in `host_devs` (the core's PYTHON memory and CPU's); copies with any other host memory
are staged by the core.

Queues: "compute" and "copy", each a thread that decodes this command format (64-bit little-endian words):

    word 0 of a record: opcode | (number of operand words << 8), then the operands
    EXEC      = 1: entry point address, then the kernel's argument words (buffer addresses, then variable
                   values), which the entry point gets as one table
    COPY      = 2: destination address, source address, byte count
    SIGNAL    = 3: signal address, value            (signal := value)
    WAIT      = 4: signal address, value            (wait until signal >= value)
    TIMESTAMP = 5: signal address                   (signal := monotonic clock in ns)
    BARRIER   = 6: (no operands)

Kernels are compiled for the CPU (tiny-cpu's renderer and compiler); EXEC calls them on the compute thread.
"""
from __future__ import annotations
import ctypes
import mmap
import queue
import struct
import threading
import time
from typing import Any, Sequence
from tinycore.plugin import (HOST_DEVICE, Barrier, BufferStorage, BufferSpec, CommandWriter, Copy, Encoded, Exec,
                             HCQDevice, HWQueue, LRUAllocator, SignalStore, SignalWait, Timestamp, Value,
                             wait_for_queues)

EXEC, COPY, SIGNAL, WAIT, TIMESTAMP, BARRIER = 1, 2, 3, 4, 5, 6
ENTRY_POINT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


class SimMemory:
  """Private device memory: an address the queues use, kept alive by its mapping."""
  __slots__ = ("mapping", "addr", "nbytes")

  def __init__(self, mapping: Any, addr: int, nbytes: int):
    self.mapping, self.addr, self.nbytes = mapping, addr, nbytes


class SimAllocator(LRUAllocator[SimMemory]):
  def _alloc(self, nbytes: int, spec: BufferSpec) -> SimMemory:
    mapping = mmap.mmap(-1, nbytes)
    return SimMemory(mapping, ctypes.addressof(ctypes.c_char.from_buffer(mapping)), nbytes)

  def _free(self, handle: SimMemory, spec: BufferSpec) -> None: pass  # the mapping goes with the handle

  def _offset(self, handle: SimMemory, nbytes: int, offset: int) -> SimMemory:
    return SimMemory(handle.mapping, handle.addr + offset, nbytes)

  def _map(self, buf: Any) -> BufferStorage:
    """Memory the queues address in place: another SIM's private memory (one address space) or host memory."""
    if isinstance(handle := buf.get_buf(), SimMemory): memory = SimMemory(handle.mapping, handle.addr, handle.nbytes)
    elif (host := buf.host) is not None:
      from tinycore.plugin import view_address
      memory = SimMemory(host, view_address(host), host.nbytes)
    else: raise RuntimeError(f"{self.device.device} cannot address {buf.device} memory: it has no host view")
    return BufferStorage(memory, memory, buf.host)

  # the host reaches device memory only through the copy queue
  def _copyin(self, dst: SimMemory, src: memoryview) -> None:
    bounce = ctypes.create_string_buffer(bytes(src), len(src))
    self.device.run_copy_now(dst.addr, ctypes.addressof(bounce), len(src))

  def _copyout(self, dst: memoryview, src: SimMemory) -> None:
    bounce = ctypes.create_string_buffer(len(dst))
    self.device.run_copy_now(ctypes.addressof(bounce), src.addr, len(dst))
    dst[:] = bounce.raw


class SimQueue(HWQueue):
  """A queue whose thread decodes and runs submitted command buffers in order."""

  def __init__(self, device: SimDevice, kind: str):
    super().__init__(device, kind)
    self.pending: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    self.submitted = self.finished = 0
    self._submitting = threading.Lock()  # a submission's number is its place in `pending`: threads count in turn
    self._functions: dict[int, Any] = {}
    self.thread = threading.Thread(target=self._run, name=f"{device.device} {kind}", daemon=True)
    self.thread.start()

  @staticmethod
  def _record(out: CommandWriter, opcode: int, operands: Sequence[Value]) -> None:
    out.words([opcode | (len(operands) << 8), *operands])

  def exec(self, out: CommandWriter, command: Exec) -> None:
    self._record(out, EXEC, [command.program.program.address, *command.buffers, *command.vals])

  def copy(self, out: CommandWriter, command: Copy) -> None:
    self._record(out, COPY, [command.dst, command.src, command.nbytes])

  def signal(self, out: CommandWriter, command: SignalStore) -> None:
    self._record(out, SIGNAL, [command.signal.addr, command.value])

  def wait(self, out: CommandWriter, command: SignalWait) -> None:
    self._record(out, WAIT, [command.signal.addr, command.value])

  def timestamp(self, out: CommandWriter, command: Timestamp) -> None:
    self._record(out, TIMESTAMP, [command.signal.addr])

  def barrier(self, out: CommandWriter, command: Barrier) -> None:
    self._record(out, BARRIER, [])

  def submit(self, encoded: Encoded, values: dict[Any, int]) -> int:
    """Queues a command buffer; returns its number: it has run once `finished` reaches that number."""
    with self._submitting:
      if not encoded.blob: return self.submitted
      self.submitted += 1
      self.pending.put(bytes(encoded.patched(values)))
      return self.submitted

  def _run(self) -> None:
    while (blob := self.pending.get()) is not None:
      words = struct.unpack(f"<{len(blob) // 8}Q", blob)
      i = 0
      while i < len(words):
        opcode, count = words[i] & 0xFF, words[i] >> 8
        operands = words[i + 1:i + 1 + count]
        i += 1 + count
        if opcode == EXEC: self._entry_point(operands[0])((ctypes.c_uint64 * max(1, count - 1))(*operands[1:]), 0, 1)
        elif opcode == COPY: ctypes.memmove(operands[0], operands[1], operands[2])
        elif opcode == SIGNAL: ctypes.c_uint64.from_address(operands[0]).value = operands[1]
        elif opcode == WAIT:
          word = ctypes.c_uint64.from_address(operands[0])
          while word.value < operands[1]: time.sleep(0.00002)
        elif opcode == TIMESTAMP: ctypes.c_uint64.from_address(operands[0]).value = time.monotonic_ns()
        elif opcode != BARRIER: raise RuntimeError(f"SIM queue: unknown opcode {opcode}")
      self.finished += 1

  def _entry_point(self, address: int) -> Any:
    """A CPU kernel's entry point (tiny-cpu's `<name>_args`): (argument table, share, shares)."""
    if (fn := self._functions.get(address)) is None:
      fn = self._functions[address] = ENTRY_POINT(address)
    return fn

  def __repr__(self) -> str: return f"submitted={self.submitted} finished={self.finished}"

  def close(self) -> None: self.pending.put(None)


class SimDevice(HCQDevice):
  """Private memory, a compute queue and a copy queue; the core's host memory and CPU memory are addressed in
  place."""
  host_devs = frozenset({HOST_DEVICE, "CPU"})

  def __init__(self, name: str = "SIM"):
    from tiny_cpu.compiler import CPUCompiler
    from tiny_cpu.device import CPUProgram
    from tiny_cpu.renderer import CPURenderer
    super().__init__(name, SimAllocator(), CPURenderer(), CPUCompiler(), CPUProgram)
    self.queues = {"compute": SimQueue(self, "compute"), "copy": SimQueue(self, "copy")}

  def run_copy_now(self, dst: int, src: int, nbytes: int) -> None:
    """A copy on the copy queue, waited for (how the host reaches this device's memory). Another thread's copy may
    finish first: this waits for its own submission's number, not for one more finished buffer."""
    wait_for_queues()
    queue_ = self.queues["copy"]
    done = queue_.submit(queue_.encode([Copy(dst, src, nbytes)]), {})
    start = time.perf_counter()
    while queue_.finished < done:
      if time.perf_counter() - start > self.wait_timeout_ms / 1000: raise RuntimeError(f"{self.device}: copy timed out")
      time.sleep(0.00002)

  def finalize(self) -> None:
    for q in self.queues.values(): q.close()
