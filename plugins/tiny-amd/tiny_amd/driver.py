"""The driver seam: the one object between the plugin and the GPU. `KFDDriver` talks to a real AMD GPU through the
amdgpu kernel driver's KFD interface (/dev/kfd ioctls and the render node, Linux include/uapi/linux/kfd_ioctl.h); the
emulator's `tiny_amd.emulator.MockKFD` has the same methods. Nothing above this object knows which one it has.

Protocol (both implement it):
  gfx_target: str; properties: {"wave_size", "lds_bytes", "compute_units", "shader_engines", "name"}
  alloc(nbytes, *, host_visible=True, executable=False) -> Memory (.va, .nbytes, .view or None); free(mem)
  map_host(address, nbytes) -> Memory: host memory (page-aligned) made addressable by the GPU at VA == address
  unmap_host(mem)
  create_queue(kind "compute" | "sdma", ring, rptr_addr, wptr_addr) -> queue; ring_doorbell(queue, wptr_bytes)
  destroy_queue(queue); close()
Host-visible memory is mapped at the same address in this process as on the GPU (VA == host address).

This module imports nothing heavy and opening it without /dev/kfd raises `DriverUnavailable` with the reason. The
real path cannot be exercised on machines without an AMD GPU: it is written from kfd_ioctl.h, like tinygrad's.
"""
from __future__ import annotations
import ctypes
import fcntl
import glob
import os
from typing import Any
import attrs

KFD_PATH, TOPOLOGY = "/dev/kfd", "/sys/devices/virtual/kfd/kfd/topology/nodes"
PAGE = 4096


class DriverUnavailable(RuntimeError):
  """No usable AMD GPU driver here (the message says why)."""


def _iowr(nr: int, size: int, read: bool = True, write: bool = True) -> int:
  direction = (1 if write else 0) | (2 if read else 0)  # _IOC_WRITE = 1, _IOC_READ = 2
  return direction << 30 | size << 16 | ord("K") << 8 | nr


class VersionArgs(ctypes.Structure):
  _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class AcquireVMArgs(ctypes.Structure):
  _fields_ = [("drm_fd", ctypes.c_uint32), ("gpu_id", ctypes.c_uint32)]


class AllocMemoryArgs(ctypes.Structure):
  _fields_ = [("va_addr", ctypes.c_uint64), ("size", ctypes.c_uint64), ("handle", ctypes.c_uint64),
              ("mmap_offset", ctypes.c_uint64), ("gpu_id", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


class FreeMemoryArgs(ctypes.Structure):
  _fields_ = [("handle", ctypes.c_uint64)]


class MapMemoryArgs(ctypes.Structure):
  _fields_ = [("handle", ctypes.c_uint64), ("device_ids_array_ptr", ctypes.c_uint64), ("n_devices", ctypes.c_uint32),
              ("n_success", ctypes.c_uint32)]


class CreateQueueArgs(ctypes.Structure):
  _fields_ = [("ring_base_address", ctypes.c_uint64), ("write_pointer_address", ctypes.c_uint64),
              ("read_pointer_address", ctypes.c_uint64), ("doorbell_offset", ctypes.c_uint64),
              ("ring_size", ctypes.c_uint32), ("gpu_id", ctypes.c_uint32), ("queue_type", ctypes.c_uint32),
              ("queue_percentage", ctypes.c_uint32), ("queue_priority", ctypes.c_uint32), ("queue_id", ctypes.c_uint32),
              ("eop_buffer_address", ctypes.c_uint64), ("eop_buffer_size", ctypes.c_uint64),
              ("ctx_save_restore_address", ctypes.c_uint64), ("ctx_save_restore_size", ctypes.c_uint32),
              ("ctl_stack_size", ctypes.c_uint32)]


class DestroyQueueArgs(ctypes.Structure):
  _fields_ = [("queue_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


GET_VERSION = _iowr(0x01, ctypes.sizeof(VersionArgs), write=False)
CREATE_QUEUE, DESTROY_QUEUE = _iowr(0x02, ctypes.sizeof(CreateQueueArgs)), _iowr(0x03, ctypes.sizeof(DestroyQueueArgs))
ACQUIRE_VM = _iowr(0x15, ctypes.sizeof(AcquireVMArgs), read=False)
ALLOC_MEMORY, FREE_MEMORY = _iowr(0x16, ctypes.sizeof(AllocMemoryArgs)), _iowr(0x17, 8, read=False)
MAP_MEMORY, UNMAP_MEMORY = _iowr(0x18, ctypes.sizeof(MapMemoryArgs)), _iowr(0x19, ctypes.sizeof(MapMemoryArgs))
MEM_VRAM, MEM_GTT, MEM_USERPTR = 1 << 0, 1 << 1, 1 << 2
MEM_WRITABLE, MEM_EXECUTABLE, MEM_PUBLIC, MEM_COHERENT, MEM_UNCACHED = 1 << 31, 1 << 30, 1 << 29, 1 << 26, 1 << 25
QUEUE_TYPE = {"compute": 0, "sdma": 1}
EOP_BYTES, CWSR_BYTES = 0x1000, 0x2C02000  # the compute queue's end-of-pipe buffer and its context-save area


@attrs.define(eq=False)
class KFDMemory:
  """A GPU allocation: `va` (== its host address when host-visible), `nbytes`, `view` (or None), the KFD handle."""
  va: int
  nbytes: int
  view: memoryview | None
  handle: int
  mapping: Any = None


@attrs.define(eq=False)
class KFDQueue:
  queue_id: int
  doorbell: Any   # a ctypes c_uint64 in the mapped doorbell page
  kind: str
  extra: list = attrs.field(factory=list)   # the EOP and context-save memory of a compute queue


def _node() -> tuple[int, str, dict[str, int]]:
  """(gpu_id, gfx target, properties) of the first GPU node in the KFD topology."""
  for node in sorted(glob.glob(f"{TOPOLOGY}/*")):
    try: gpu_id = int(open(f"{node}/gpu_id").read())
    except (OSError, ValueError): continue
    if gpu_id == 0: continue  # the CPU node
    pairs = [line.split() for line in open(f"{node}/properties")]
    props = {pair[0]: int(pair[1]) for pair in pairs if len(pair) == 2}
    version = props.get("gfx_target_version", 0)
    target = f"gfx{version // 10000}{(version // 100) % 100:x}{version % 100:x}"
    return gpu_id, target, props
  raise DriverUnavailable("no GPU node in the KFD topology")


class KFDDriver:
  """The real driver over /dev/kfd (amdgpu kernel driver; no ROCm userspace needed)."""

  def __init__(self) -> None:
    if not os.path.exists(KFD_PATH): raise DriverUnavailable(f"no {KFD_PATH} (the amdgpu kernel driver is not loaded)")
    try: self.kfd = os.open(KFD_PATH, os.O_RDWR | os.O_CLOEXEC)
    except OSError as error: raise DriverUnavailable(f"cannot open {KFD_PATH}: {error}") from error
    self.gpu_id, self.gfx_target, props = _node()
    render = glob.glob(f"{TOPOLOGY}/*/drm_render_minor")
    minor = next(int(open(p).read()) for p in render
                 if int(open(p.replace("drm_render_minor", "gpu_id")).read()) == self.gpu_id)
    self.drm = os.open(f"/dev/dri/renderD{minor}", os.O_RDWR | os.O_CLOEXEC)
    self._ioctl(ACQUIRE_VM, AcquireVMArgs(drm_fd=self.drm, gpu_id=self.gpu_id))
    arrays_per_engine = max(props.get("simd_arrays_per_engine", 1), 1)
    self.properties = {"wave_size": 32 if self.gfx_target.startswith("gfx1") else 64,
                       "lds_bytes": props.get("lds_size_in_kb", 64) * 1024,
                       "compute_units": props.get("simd_count", 0) // max(props.get("simd_per_cu", 1), 1),
                       "shader_engines": max(props.get("array_count", 1) // arrays_per_engine, 1),
                       "name": f"AMD {self.gfx_target}"}
    self._doorbells: Any = None

  def _ioctl(self, request: int, args: ctypes.Structure) -> ctypes.Structure:
    fcntl.ioctl(self.kfd, request, args)
    return args

  def _map_to_gpu(self, handle: int) -> None:
    ids = (ctypes.c_uint32 * 1)(self.gpu_id)
    self._ioctl(MAP_MEMORY, MapMemoryArgs(handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1))

  def alloc(self, nbytes: int, *, host_visible: bool = True, executable: bool = False) -> KFDMemory:
    size = -(-nbytes // PAGE) * PAGE
    flags = MEM_WRITABLE | (MEM_EXECUTABLE if executable else 0)
    flags |= (MEM_GTT | MEM_COHERENT | MEM_UNCACHED) if host_visible else (MEM_VRAM | MEM_PUBLIC)
    va = _libc_mmap(0, size, 0, 0x22 | 0x4000, -1, 0)  # PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE
    args = self._ioctl(ALLOC_MEMORY, AllocMemoryArgs(va_addr=va, size=size, gpu_id=self.gpu_id, flags=flags))
    view = None
    if host_visible:
      _libc_mmap(va, size, 3, 0x01 | 0x10, self.drm, args.mmap_offset)  # PROT_RW, MAP_SHARED|MAP_FIXED
      view = memoryview((ctypes.c_char * size).from_address(va)).cast("B")[:nbytes]
    self._map_to_gpu(args.handle)
    return KFDMemory(va, nbytes, view, args.handle)

  def map_host(self, address: int, nbytes: int) -> KFDMemory:
    """Pin host memory and map it for the GPU at the same address (a userptr allocation)."""
    start, end = address // PAGE * PAGE, -(-(address + nbytes) // PAGE) * PAGE
    flags = MEM_USERPTR | MEM_WRITABLE | MEM_COHERENT
    args = self._ioctl(ALLOC_MEMORY, AllocMemoryArgs(va_addr=start, size=end - start, mmap_offset=start,
                                                      gpu_id=self.gpu_id, flags=flags))
    self._map_to_gpu(args.handle)
    return KFDMemory(address, nbytes, None, args.handle)

  def free(self, mem: KFDMemory) -> None:
    ids = (ctypes.c_uint32 * 1)(self.gpu_id)
    self._ioctl(UNMAP_MEMORY, MapMemoryArgs(handle=mem.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1))
    self._ioctl(FREE_MEMORY, FreeMemoryArgs(handle=mem.handle))

  unmap_host = free

  def create_queue(self, kind: str, ring: KFDMemory, rptr_addr: int, wptr_addr: int) -> KFDQueue:
    if kind not in QUEUE_TYPE: raise ValueError(f"unknown queue kind {kind!r}: expected 'compute' or 'sdma'")
    extra = ([self.alloc(EOP_BYTES, host_visible=False), self.alloc(CWSR_BYTES, host_visible=False)]
             if kind == "compute" else [])
    args = CreateQueueArgs(ring_base_address=ring.va, ring_size=ring.nbytes, gpu_id=self.gpu_id,
                           queue_type=QUEUE_TYPE[kind], queue_percentage=100, queue_priority=7,
                           write_pointer_address=wptr_addr, read_pointer_address=rptr_addr)
    if extra:
      args.eop_buffer_address, args.eop_buffer_size = extra[0].va, EOP_BYTES
      args.ctx_save_restore_address, args.ctx_save_restore_size = extra[1].va, CWSR_BYTES
    self._ioctl(CREATE_QUEUE, args)
    base = args.doorbell_offset & ~0x1FFF
    if self._doorbells is None: self._doorbells = _libc_mmap(0, 0x2000, 3, 0x01, self.kfd, base)
    doorbell = ctypes.c_uint64.from_address(self._doorbells + (args.doorbell_offset - base))
    return KFDQueue(args.queue_id, doorbell, kind, extra)

  def ring_doorbell(self, queue: KFDQueue, wptr_bytes: int) -> None:
    queue.doorbell.value = wptr_bytes

  def destroy_queue(self, queue: KFDQueue) -> None:
    self._ioctl(DESTROY_QUEUE, DestroyQueueArgs(queue_id=queue.queue_id))
    for mem in queue.extra: self.free(mem)

  def close(self) -> None:
    os.close(self.drm)
    os.close(self.kfd)


def _libc_mmap(address: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
  libc = ctypes.CDLL(None, use_errno=True)
  libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                           ctypes.c_int, ctypes.c_int, ctypes.c_long]
  result = libc.mmap(address or None, size, prot, flags, fd, offset)
  if result in (None, ctypes.c_void_p(-1).value): raise OSError(ctypes.get_errno(), "mmap failed")
  return result


def open_driver(emulate: bool) -> Any:
  """The driver object: the emulator's MockKFD when `emulate`, else the real KFD (DriverUnavailable if absent)."""
  if emulate:
    from tiny_amd.emulator import MockKFD
    return MockKFD()
  return KFDDriver()


def kfd_absent_reason() -> str | None:
  """Why the real driver cannot be used here, or None when /dev/kfd exists."""
  return None if os.path.exists(KFD_PATH) else "no /dev/kfd"
