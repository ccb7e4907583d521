"""The AMD device on HCQ2: a PM4 compute queue and an SDMA copy queue over the driver object (`tiny_amd.driver`).

Memory: device buffers are driver allocations (VRAM on a real GPU, not host-visible); the host reaches them only
through the copy queue (a host-visible bounce buffer). Host memory the queues address in place (the core's PYTHON
memory, where the staging ring lives, and CPU memory) and the core's signal pages are pinned and mapped for the GPU
with `driver.map_host` at VA == host address.

Compute queue: each command buffer is copied into an indirect-buffer arena and the ring gets one INDIRECT_BUFFER
packet per buffer. A kernel launch is a record of PM4 packets, 16-byte aligned (type-2 fillers pad it):
    NOP [KERNARG_MAGIC, 0, 0, kernel arguments as 64-bit words ...]   the kernarg segment, inside the command buffer
    SET_SH_REG COMPUTE_PGM_LO/HI, PGM_RSRC1/2, PGM_RSRC3, TMPRING_SIZE, DISPATCH_SCRATCH_BASE_LO/HI, RESOURCE_LIMITS,
               START_X/Y/Z, NUM_THREAD_X/Y/Z
    SET_SH_REG COMPUTE_USER_DATA_0/1 = the kernarg address (filled in at submit, once the buffer's address is known)
    DISPATCH_DIRECT grid in work-groups
The kernel arguments are 64-bit words at 8-byte offsets, so the core patches run-time addresses and variables into
them like any other command word. A kernel with private memory (spills, private arrays: the descriptor's private
segment size, RSRC2.SCRATCH_EN) gets the device's scratch buffer: TMPRING_SIZE says how many waves may hold a slot
(WAVES) and each slot's size (WAVESIZE); gfx11 and gfx942 use architected flat scratch, so the CP sets each wave's
FLAT_SCRATCH to its slot and no user SGPR is involved.
Signals: RELEASE_MEM (end of pipe, cache flush, 64-bit value); waits: WAIT_REG_MEM64 >=; barrier: EVENT_WRITE
CS_PARTIAL_FLUSH + ACQUIRE_MEM; timestamp: RELEASE_MEM of the GPU clock.

Copy queue (SDMA): command buffers are written into the ring itself. COPY_LINEAR split at 4 MiB per packet; signals
are two FENCEs (high word, then low word) and a TRAP; waits POLL_REGMEM >= on the low 32 bits (so signal values
must stay below 2**32: the core's are batch counters); TIMESTAMP. A command buffer that does not fit before the
ring's end is preceded by a zero-filled tail (SDMA NOPs) and starts at offset 0.
"""
from __future__ import annotations
import functools
import struct
import threading
import time
from typing import Any, Sequence
import attrs
from tinycore.plugin import (HOST_DEVICE, Barrier, BufferStorage, BufferSpec, CommandWriter, Copy, Encoded, Exec,
                             HCQDevice, HCQTimeoutError, HWQueue, InputAddress, LRUAllocator, SignalStore, SignalWait,
                             Timestamp, Value, signal_pool, view_address, wait_for_queues)
from tiny_amd import pm4, sdma
from tiny_amd.compiler import WAVE_SIZE, AMDCompiler, AMDRenderer
from tiny_amd.elf import KernelDescriptor, load_code_object

PAGE = 4096
RING_BYTES = 1 << 16
IB_ARENA_BYTES = 8 << 20
BOUNCE_BYTES = 4 << 20
KERNARG_MAGIC = 0x4B415247  # "KARG": marks the NOP whose body is a kernarg segment
KERNEL_CODE_PROPERTY_KERNARG_PTR, KERNEL_CODE_PROPERTY_WAVE32 = 1 << 3, 1 << 10
KERNEL_CODE_PROPERTY_DYNAMIC_STACK = 1 << 11
SCRATCH_WAVES = 256           # scratch slots per shader engine: waves holding private memory at once (others wait)
MIN_SCRATCH_LANE_BYTES = 256  # the scratch buffer grows in powers of two per lane from here
MAX_SCRATCH_LANE_BYTES = 1 << 16


@attrs.define(eq=False)
class AMDMemory:
  """A handle: GPU address `addr` of `nbytes`, and the driver Memory it belongs to (None for views)."""
  addr: int
  nbytes: int
  memory: Any = None


def map_host(driver: Any, address: int, nbytes: int) -> Any:
  """Host memory made addressable by the GPU at its own address: `driver.map_host` (a real GPU pins and maps it);
  a driver without that method (the contract's emulator) addresses host memory directly, so nothing is mapped."""
  if hasattr(driver, "map_host"): return driver.map_host(address, nbytes)
  return None


class HostMappings:
  """Host memory pinned for the GPU, shared by the AMD devices of one driver: signal pages (kept for the process)
  and host buffers (counted: AMD and AMD:1 may map the same buffer; the driver sees it once)."""

  def __init__(self, driver: Any):
    self.driver, self.lock = driver, threading.Lock()
    self.pinned: dict[tuple[int, int], list] = {}   # (address, nbytes) -> [driver mapping, users]

  def ensure(self, address: int, nbytes: int = 8) -> None:
    """Keep the pages holding [address, address + nbytes) mapped (signals)."""
    start = address // PAGE * PAGE
    for page in range(start, address + nbytes, PAGE):
      if (page, PAGE) not in self.pinned: self.pin(page, PAGE)

  def pin(self, address: int, nbytes: int) -> Any:
    with self.lock:
      entry = self.pinned.get((address, nbytes))
      if entry is None: entry = self.pinned[(address, nbytes)] = [map_host(self.driver, address, nbytes), 0]
      entry[1] += 1
      return entry[0]

  def unpin(self, address: int, nbytes: int) -> None:
    with self.lock:
      entry = self.pinned[(address, nbytes)]
      entry[1] -= 1
      if entry[1] == 0:
        del self.pinned[(address, nbytes)]
        if entry[0] is not None: self.driver.unmap_host(entry[0])


class AMDAllocator(LRUAllocator[AMDMemory]):
  """Device memory from the driver; the host reaches it through the copy queue."""

  def _alloc(self, nbytes: int, spec: BufferSpec) -> AMDMemory:
    memory = self.device.driver.alloc(nbytes, host_visible=False)
    return AMDMemory(memory.va, nbytes, memory)

  def _free(self, handle: AMDMemory, spec: BufferSpec) -> None:
    if handle.memory is not None: self.device.driver.free(handle.memory)

  def _offset(self, handle: AMDMemory, nbytes: int, offset: int) -> AMDMemory:
    return AMDMemory(handle.addr + offset, nbytes)

  def _map(self, buf: Any) -> BufferStorage:
    """Memory the queues address in place: another AMD device's (one driver, one address space) or host memory,
    pinned for the GPU."""
    if isinstance(handle := buf.get_buf(), AMDMemory):
      return BufferStorage(AMDMemory(handle.addr, handle.nbytes), None, None)
    if (host := buf.host) is None:
      raise RuntimeError(f"{self.device.device} cannot address {buf.device} memory: it has no host view")
    address = view_address(host)
    self.device.host_mappings.pin(address, host.nbytes)
    return BufferStorage(AMDMemory(address, host.nbytes), (address, host.nbytes), host)

  def _unmap(self, mapping: BufferStorage) -> None:
    if mapping.meta is not None: self.device.host_mappings.unpin(*mapping.meta)

  def _copyin(self, dst: AMDMemory, src: memoryview) -> None:
    source = src if src.format == "B" else src.cast("B")
    for start in range(0, source.nbytes, BOUNCE_BYTES):
      chunk = source[start:start + BOUNCE_BYTES]
      self.device.bounce.view[:chunk.nbytes] = chunk
      self.device.copy_now(dst.addr + start, self.device.bounce.va, chunk.nbytes)

  def _copyout(self, dst: memoryview, src: AMDMemory) -> None:
    target = dst if dst.format == "B" else dst.cast("B")
    for start in range(0, target.nbytes, BOUNCE_BYTES):
      size = min(BOUNCE_BYTES, target.nbytes - start)
      self.device.copy_now(self.device.bounce.va, src.addr + start, size)
      target[start:start + size] = self.device.bounce.view[:size]


class AMDProgram:
  """A kernel loaded into executable GPU memory, with its dispatch registers precomputed from the descriptor."""

  def __init__(self, device: AMDDevice, name: str, lib: bytes):
    code = load_code_object(lib)
    if name not in code.descriptors:
      raise ValueError(f"the code object has no kernel {name!r} ({sorted(code.descriptors)})")
    self.device, self.name = device, name
    self.memory = device.driver.alloc(len(code.image), host_visible=True, executable=True)
    self.memory.view[:len(code.image)] = code.image
    kd_offset = code.descriptors[name]
    self.descriptor = kd = KernelDescriptor.parse(code.image[kd_offset:kd_offset + 64])
    self.code_address = self.memory.va + kd_offset + kd.code_offset
    check_descriptor(name, kd, self.code_address)
    self.wave32 = bool(kd.properties & KERNEL_CODE_PROPERTY_WAVE32)
    # private memory: the kernel's scratch slots (architected flat scratch: the CP gives each wave its slot)
    tmpring, scratch = device.scratch_for(kd.private_segment_bytes) if kd.private_segment_bytes else (0, 0)
    self.setup = (pm4.set_sh_reg(pm4.COMPUTE_PGM_LO, [(self.code_address >> 8) & 0xFFFFFFFF, self.code_address >> 40]) +
                  pm4.set_sh_reg(pm4.COMPUTE_PGM_RSRC1, [kd.rsrc1, kd.rsrc2]) +
                  pm4.set_sh_reg(pm4.COMPUTE_PGM_RSRC3, [kd.rsrc3]) +
                  pm4.set_sh_reg(pm4.COMPUTE_TMPRING_SIZE, [tmpring]) +
                  pm4.set_sh_reg(pm4.COMPUTE_DISPATCH_SCRATCH_BASE_LO, [(scratch >> 8) & 0xFFFFFFFF, scratch >> 40]) +
                  pm4.set_sh_reg(pm4.COMPUTE_RESOURCE_LIMITS, [0]) + pm4.set_sh_reg(pm4.COMPUTE_START_X, [0, 0, 0]))

  def __call__(self, *handles: Any, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    """Run once on the compute queue (outside a compiled batch) and, with wait=True, wait and return seconds."""
    start = time.perf_counter()
    holder = _ProgramHolder(self)
    self.device.run_now("compute", [Exec(holder, tuple(h.addr for h in handles), tuple(vals), tuple(global_size),
                                         tuple(local_size))], wait=wait)
    return time.perf_counter() - start if wait else None


@attrs.frozen
class _ProgramHolder:
  """What an Exec names as its program (the core passes a CompiledKernel, whose .program is the AMDProgram)."""
  program: AMDProgram


def check_descriptor(name: str, kd: KernelDescriptor, code_address: int) -> None:
  """Refuse kernels that need what this dispatch does not set up, with the reason."""
  if code_address % 256: raise ValueError(f"kernel {name}: code at 0x{code_address:x} is not 256-byte aligned")
  if kd.properties & 0x7F & ~KERNEL_CODE_PROPERTY_KERNARG_PTR:
    raise NotImplementedError(f"kernel {name} asks for user SGPRs other than the kernarg pointer "
                              f"(kernel_code_properties 0x{kd.properties:x})")
  if kd.properties & KERNEL_CODE_PROPERTY_DYNAMIC_STACK:
    raise NotImplementedError(f"kernel {name} uses a dynamic stack (recursion or variable-sized allocas): its scratch "
                              "size is unknown")
  if kd.private_segment_bytes > MAX_SCRATCH_LANE_BYTES:
    raise NotImplementedError(f"kernel {name} needs {kd.private_segment_bytes} bytes of scratch per lane; tiny-amd "
                              f"gives at most {MAX_SCRATCH_LANE_BYTES}")


def dwords_to_words(dwords: list[int]) -> list[int]:
  """Pairs of dwords as 64-bit words (low first); the list has an even length."""
  return [dwords[i] | dwords[i + 1] << 32 for i in range(0, len(dwords), 2)]


def pad_pm4(dwords: list[int], multiple: int = 4) -> list[int]:
  return dwords + [pm4.FILLER] * (-len(dwords) % multiple)


class Ring:
  """A ring buffer in host-visible driver memory with its read/write pointers (64-bit byte counters) and queue."""

  def __init__(self, device: AMDDevice, kind: str, filler: int):
    driver = device.driver
    self.device, self.driver, self.filler = device, driver, filler
    self.memory = driver.alloc(RING_BYTES, host_visible=True)
    self.pointers = driver.alloc(PAGE, host_visible=True)
    self.words = self.pointers.view.cast("Q")
    self.wptr = 0
    self.handle = driver.create_queue(kind, self.memory, self.pointers.va, self.pointers.va + 8)

  @property
  def rptr(self) -> int: return self.words[0]

  def wait_until(self, done: Any, what: str) -> None:
    last, since = self.rptr, time.perf_counter()
    while not done():
      if self.rptr != last: last, since = self.rptr, time.perf_counter()
      elif time.perf_counter() - since > self.device.wait_timeout_ms / 1000:
        raise HCQTimeoutError(f"{self.device.device}: {what}: the queue made no progress (rptr {self.rptr}, wptr "
                              f"{self.wptr})")
      time.sleep(0.00002)

  def write(self, data: bytes) -> None:
    """Append a command buffer (a multiple of 4 bytes) and ring the doorbell; wraps with a filler tail."""
    if len(data) > RING_BYTES // 2: raise ValueError(f"a command buffer of {len(data)} bytes does not fit the ring")
    position = self.wptr % RING_BYTES
    tail = RING_BYTES - position if position + len(data) > RING_BYTES else 0
    self.wait_until(lambda: self.wptr + tail + len(data) - self.rptr <= RING_BYTES, "waiting for ring space")
    view = self.memory.view
    if tail:
      view[position:] = struct.pack(f"<{tail // 4}I", *[self.filler] * (tail // 4))
      position = 0
    view[position:position + len(data)] = data
    self.wptr += tail + len(data)
    self.words[1] = self.wptr
    self.driver.ring_doorbell(self.handle, self.wptr)

  def idle(self) -> bool: return self.rptr >= self.wptr


class AMDComputeQueue(HWQueue):
  """The PM4 compute queue: command buffers run as indirect buffers."""

  def __init__(self, device: AMDDevice):
    super().__init__(device, "compute")
    self.ring = Ring(device, "compute", pm4.FILLER)
    self.arena = device.driver.alloc(IB_ARENA_BYTES, host_visible=True)
    self.cursor = 0

  def _record(self, out: CommandWriter, dwords: list[int]) -> None:
    out.words(dwords_to_words(pad_pm4(dwords)))

  def exec(self, out: CommandWriter, command: Exec) -> None:
    program: AMDProgram = command.program.program
    args: list[Value] = [*command.buffers, *command.vals]
    groups = tuple(g // max(l, 1) for g, l in zip(command.global_size, command.local_size))
    local = [*command.local_size, 1, 1][:3]
    kernarg_header = pm4.packet3(pm4.NOP, [KERNARG_MAGIC, 0, 0] + [0] * (2 * len(args)))[:4]
    launch = pad_pm4(program.setup + pm4.set_sh_reg(pm4.COMPUTE_NUM_THREAD_X, local) +
                     pm4.set_sh_reg(pm4.COMPUTE_USER_DATA_0, [0, 0]) +
                     pm4.dispatch_direct((*groups, 1, 1)[:3], program.wave32))
    out.words(dwords_to_words(kernarg_header) + args + dwords_to_words(launch))

  def signal(self, out: CommandWriter, command: SignalStore) -> None:
    self.device.host_mappings.ensure(command.signal.addr)
    self._record(out, pm4.release_mem(command.signal.addr, command.value))

  def wait(self, out: CommandWriter, command: SignalWait) -> None:
    self.device.host_mappings.ensure(command.signal.addr)
    self._record(out, pm4.wait_reg_mem64(command.signal.addr, command.value))

  def timestamp(self, out: CommandWriter, command: Timestamp) -> None:
    self.device.host_mappings.ensure(command.signal.addr)
    self._record(out, pm4.release_mem(command.signal.addr, 0, pm4.DATA_SEL_CLOCK_64))

  def barrier(self, out: CommandWriter, command: Barrier) -> None:
    self._record(out, pm4.barrier())

  def submit(self, encoded: Encoded, values: dict[Any, int]) -> None:
    blob = bytearray(encoded.patched(values))
    if not blob: return
    if len(blob) > IB_ARENA_BYTES // 2: raise ValueError(f"a command buffer of {len(blob)} bytes exceeds the IB arena")
    if self.cursor + len(blob) > IB_ARENA_BYTES:
      # reuse the arena from its start only once everything submitted so far has run
      self.ring.wait_until(self.ring.idle, "waiting for the indirect buffers to drain")
      self.device.wait_timeline()
      self.cursor = 0
    address = self.arena.va + self.cursor
    fill_kernarg_pointers(blob, address)
    self.arena.view[self.cursor:self.cursor + len(blob)] = blob
    self.cursor += -(-len(blob) // 256) * 256
    ib = bytearray()
    for start in range(0, len(blob), pm4.MAX_IB_DWORDS * 4 // 16 * 16):
      size = min(len(blob) - start, pm4.MAX_IB_DWORDS * 4 // 16 * 16)
      ib += struct.pack("<4I", *pm4.indirect_buffer(address + start, size // 4))
    self.ring.write(bytes(ib))

  def __repr__(self) -> str: return f"rptr={self.ring.rptr} wptr={self.ring.wptr}"


def fill_kernarg_pointers(blob: bytearray, address: int) -> None:
  """Point each launch's USER_DATA_0/1 at its kernarg segment, now that the buffer's GPU address is known."""
  dwords = memoryview(blob).cast("I")
  kernarg, at = None, 0
  while at < len(dwords):
    header = dwords[at]
    size = pm4.packet_size(header)
    op = (header >> 8) & 0xFF
    if header >> 30 == 3 and op == pm4.NOP and size > 2 and dwords[at + 1] == KERNARG_MAGIC:
      kernarg = address + 4 * at + 16
    elif header >> 30 == 3 and op == pm4.SET_SH_REG and dwords[at + 1] == pm4.COMPUTE_USER_DATA_0:
      if kernarg is None: raise AssertionError("a kernel launch without its kernarg segment")
      dwords[at + 2], dwords[at + 3] = kernarg & 0xFFFFFFFF, kernarg >> 32
      kernarg = None
    at += size


class AMDCopyQueue(HWQueue):
  """The SDMA copy queue: command buffers are written into its ring."""

  def __init__(self, device: AMDDevice):
    super().__init__(device, "copy")
    self.ring = Ring(device, "sdma", sdma.OP_NOP)

  def _record(self, out: CommandWriter, dwords: list[int]) -> None:
    out.words(dwords_to_words(dwords + [sdma.OP_NOP] * (len(dwords) % 2)))

  def copy(self, out: CommandWriter, command: Copy) -> None:
    nop, header = sdma.copy_linear_header()
    for start in range(0, command.nbytes, sdma.COPY_LINEAR_MAX_BYTES):
      size = min(sdma.COPY_LINEAR_MAX_BYTES, command.nbytes - start)
      out.words([nop | header << 32, size - 1, offset_value(command.src, start), offset_value(command.dst, start)])

  def signal(self, out: CommandWriter, command: SignalStore) -> None:
    self.device.host_mappings.ensure(command.signal.addr)
    addr, value = command.signal.addr, command.value
    self._record(out, sdma.fence(addr + 4, value >> 32) + sdma.fence(addr, value) + sdma.trap())

  def wait(self, out: CommandWriter, command: SignalWait) -> None:
    self.device.host_mappings.ensure(command.signal.addr)
    if command.value >= 1 << 32: raise ValueError("SDMA waits compare 32 bits: signal values must stay below 2**32")
    self._record(out, sdma.poll_regmem(command.signal.addr, command.value))

  def timestamp(self, out: CommandWriter, command: Timestamp) -> None:
    self.device.host_mappings.ensure(command.signal.addr)
    self._record(out, sdma.timestamp(command.signal.addr))

  def barrier(self, out: CommandWriter, command: Barrier) -> None:
    pass  # one engine runs its packets in order on coherent memory: nothing to write

  def submit(self, encoded: Encoded, values: dict[Any, int]) -> None:
    blob = encoded.patched(values)
    if blob: self.ring.write(bytes(blob))

  def __repr__(self) -> str: return f"rptr={self.ring.rptr} wptr={self.ring.wptr}"


def offset_value(value: Value, offset: int) -> Value:
  """An address `offset` bytes further (a run-time InputAddress keeps its slot)."""
  if offset == 0: return value
  if isinstance(value, InputAddress): return attrs.evolve(value, offset=value.offset + offset)
  if isinstance(value, int): return value + offset
  raise TypeError(f"cannot offset the copy address {value!r}")


class AMDDevice(HCQDevice):
  """An AMD GPU (or the emulated one) on the driver object `driver`."""
  host_devs = frozenset({HOST_DEVICE, "CPU"})
  timestamp_period_ns = 10.0  # RELEASE_MEM's and SDMA's clock is the 100 MHz SOC reference counter

  def __init__(self, name: str, driver: Any, host_mappings: HostMappings):
    arch = driver.gfx_target
    if arch not in WAVE_SIZE:
      raise RuntimeError(f"{name}: unsupported GPU {arch}; tiny-amd supports {sorted(WAVE_SIZE)}")
    self.driver, self.host_mappings, self.arch = driver, host_mappings, arch
    super().__init__(name, AMDAllocator(), AMDRenderer(arch), AMDCompiler(arch), functools.partial(AMDProgram, self))
    self.allocator.device = self
    self.host_mappings.ensure(self.timeline.addr)
    self.bounce = driver.alloc(BOUNCE_BYTES, host_visible=True)
    self.queues = {"compute": AMDComputeQueue(self), "copy": AMDCopyQueue(self)}
    self.host_signal = signal_pool.new(f"{name} host")
    self.host_mappings.ensure(self.host_signal.addr)
    self._done = 0
    self.scratch_buffers: list[Any] = []   # the newest is in use; older ones stay for the programs made before it
    self.scratch_lane_bytes = 0
    self.scratch_lock = threading.Lock()

  def scratch_for(self, lane_bytes: int) -> tuple[int, int]:
    """(COMPUTE_TMPRING_SIZE, scratch buffer address) for a kernel with `lane_bytes` of private memory per lane. The
    device has one scratch buffer of SCRATCH_WAVES slots per shader engine, each a wave's lanes times the per-lane
    size; it is reallocated larger (a power of two per lane) when a kernel needs more."""
    granule, lanes = pm4.SCRATCH_GRANULE[self.arch], WAVE_SIZE[self.arch]
    with self.scratch_lock:
      if self.scratch_lane_bytes < lane_bytes:
        self.scratch_lane_bytes = max(MIN_SCRATCH_LANE_BYTES, 1 << (lane_bytes - 1).bit_length())
        wave_bytes = -(-self.scratch_lane_bytes * lanes // granule) * granule
        engines = self.driver.properties.get("shader_engines", 1)
        self.scratch_buffers.append(self.driver.alloc(SCRATCH_WAVES * wave_bytes * engines, host_visible=False))
      wave_bytes = -(-self.scratch_lane_bytes * lanes // granule) * granule
      return pm4.tmpring_size(self.arch, SCRATCH_WAVES, wave_bytes), self.scratch_buffers[-1].va

  def run_now(self, kind: str, commands: list[Any], wait: bool = True) -> None:
    """Run commands on one queue outside a compiled batch and wait for them (the host's own copies)."""
    wait_for_queues()
    self._done += 1
    queue = self.queues[kind]
    queue.submit(queue.encode([*commands, SignalStore(self.host_signal, self._done)]), {})
    if wait: queue.ring.wait_until(lambda: self.host_signal.value >= self._done, f"{kind} work")

  def copy_now(self, dst: int, src: int, nbytes: int) -> None:
    """A copy on the SDMA queue, waited for."""
    self.run_now("copy", [Copy(dst, src, nbytes)])

  def wait_timeline(self) -> None:
    ring = self.queues["compute"].ring
    ring.wait_until(lambda: self.timeline.value >= self.epoch, "waiting for the device timeline")

  @property
  def status_note(self) -> str | None:  # type: ignore[override]
    """"emulated gfx1100" on the emulator (what `tinycore devices` shows after "ok")."""
    return None if type(self.driver).__name__ == "KFDDriver" else f"emulated {self.arch}"

  @property
  def times_kernels(self) -> bool:  # type: ignore[override]
    """The emulator's run times say nothing of a GPU's: a kernel search skips it."""
    return type(self.driver).__name__ == "KFDDriver"

  def capabilities(self) -> dict[str, Any]:
    return {**super().capabilities(), "arch": self.arch, "wave": WAVE_SIZE[self.arch]}
