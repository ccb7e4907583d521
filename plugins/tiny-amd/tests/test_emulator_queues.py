"""MockKFD and the PM4/SDMA packet processors, driven by packets encoded here from the Linux headers' layouts."""
import struct
import time

import numpy as np
import pytest

from tiny_amd.emulator import MockKFD, PacketError


def pkt3(op: int, *body: int) -> list[int]:
  """PACKET3(op, n) as soc15d.h builds it, with the compute shader-type bit."""
  return [(3 << 30) | ((len(body) - 1) << 16) | (op << 8) | 2, *body]


def lo_hi(x: int) -> list[int]: return [x & 0xFFFFFFFF, x >> 32]


def wait_until(cond, timeout=20.0):
  deadline = time.monotonic() + timeout
  while not cond():
    assert time.monotonic() < deadline, "timed out waiting for the emulated queue"
    time.sleep(0.001)


class Ring:
  """Test-side writer of one queue: ring, rptr/wptr words, doorbell."""

  def __init__(self, kfd: MockKFD, kind: str, ring_bytes: int = 4096):
    self.kfd, self.ring = kfd, kfd.alloc(ring_bytes)
    self.ptrs = kfd.alloc(16)
    self.queue = kfd.create_queue(kind, self.ring, self.ptrs.va, self.ptrs.va + 8)
    self.wptr = 0

  @property
  def rptr(self) -> int: return struct.unpack_from("<Q", self.ptrs.view, 0)[0]

  def submit(self, words: list[int], wrap_with_zero_tail: bool = False) -> None:
    data = struct.pack(f"<{len(words)}I", *words)
    off = self.wptr % self.ring.nbytes
    if off + len(data) > self.ring.nbytes:
      assert wrap_with_zero_tail
      tail = self.ring.nbytes - off
      self.ring.view[off:] = bytes(tail)
      self.wptr += tail
      off = 0
    self.ring.view[off:off + len(data)] = data
    self.wptr += len(data)
    struct.pack_into("<Q", self.ptrs.view, 8, self.wptr)
    self.kfd.ring_doorbell(self.queue, self.wptr)

  def drain(self) -> None: wait_until(lambda: self.rptr >= self.wptr or self.queue.error is not None)


@pytest.fixture
def kfd():
  k = MockKFD()
  yield k
  k.close()


def sdma_copy(dst: int, src: int, nbytes: int) -> list[int]: return [1, nbytes - 1, 0, *lo_hi(src), *lo_hi(dst)]
def sdma_fence(addr: int, value: int) -> list[int]: return [5, *lo_hi(addr), value]
def sdma_poll_geq(addr: int, value: int) -> list[int]:
  return [8 | 5 << 28 | 1 << 31, *lo_hi(addr), value, 0xFFFFFFFF, 10]  # mem_poll, function GEQ


def test_driver_properties_and_memory(kfd):
  assert kfd.gfx_target == "gfx1100" and kfd.properties["wave_size"] == 32
  m = kfd.alloc(100)
  m.view[:4] = b"abcd"
  assert kfd.memory.read(m.va, 4) == b"abcd"
  hidden = kfd.alloc(64, host_visible=False)
  assert hidden.view is None
  kfd.free(m)
  with pytest.raises(ValueError): kfd.free(m)


def test_sdma_copy_fence_and_counts(kfd):
  ring = Ring(kfd, "sdma")
  src, dst, sig = kfd.alloc(1 << 20), kfd.alloc(1 << 20), kfd.alloc(8)
  payload = np.random.default_rng(1).integers(0, 255, 1 << 20, dtype=np.uint8)
  src.view[:] = payload.tobytes()
  ring.submit(sdma_copy(dst.va, src.va, 1 << 19) + sdma_copy(dst.va + (1 << 19), src.va + (1 << 19), 1 << 19)
              + sdma_fence(sig.va, 7) + [6, 0])
  ring.drain()
  assert bytes(dst.view) == payload.tobytes()
  assert struct.unpack_from("<I", sig.view)[0] == 7
  assert kfd.packet_counts["sdma.COPY"] == 2 and kfd.packet_counts["sdma.FENCE"] == 1
  assert kfd.packet_counts["sdma.TRAP"] == 1


def test_sdma_poll_waits_for_the_host_and_ring_wraps(kfd):
  ring = Ring(kfd, "sdma", ring_bytes=256)
  sig, out = kfd.alloc(8), kfd.alloc(8)
  for value in range(1, 9):  # 8 x 40 bytes through a 256-byte ring: wraps with a zero tail
    ring.submit(sdma_poll_geq(sig.va, value) + sdma_fence(out.va, value * 10), wrap_with_zero_tail=True)
    time.sleep(0.01)
    assert struct.unpack_from("<I", out.view)[0] == (value - 1) * 10  # still blocked on the poll
    struct.pack_into("<Q", sig.view, 0, value)
    ring.drain()
    assert struct.unpack_from("<I", out.view)[0] == value * 10
  assert kfd.packet_counts["sdma.NOP"] > 0  # the zero tail


def test_sdma_timestamp_is_monotonic(kfd):
  ring = Ring(kfd, "sdma")
  ts = kfd.alloc(16)
  ring.submit([13 | 2 << 8, *lo_hi(ts.va)] + [13 | 2 << 8, *lo_hi(ts.va + 8)])
  ring.drain()
  t0, t1 = struct.unpack_from("<QQ", ts.view)
  assert 0 < t0 <= t1


def test_unknown_packets_name_the_opcode_and_queue(kfd):
  ring = Ring(kfd, "sdma")
  ring.submit([0x3F])
  wait_until(lambda: ring.queue.error is not None)
  with pytest.raises(PacketError, match="sdma queue 0: unknown SDMA opcode 63"):
    kfd.alloc(8)
  kfd2 = MockKFD()
  try:
    ring2 = Ring(kfd2, "compute")
    ring2.submit(pkt3(0x77, 0))
    wait_until(lambda: ring2.queue.error is not None)
    with pytest.raises(PacketError, match="compute queue 0: unknown PM4 opcode 0x77"):
      kfd2.raise_queue_errors()
  finally:
    kfd2.close()


def test_pm4_release_mem_wait_reg_mem64_and_indirect_buffer(kfd):
  ring = Ring(kfd, "compute")
  sig, out, ib = kfd.alloc(8), kfd.alloc(32), kfd.alloc(256)
  wait = pkt3(0x93, 0x15 | 1 << 4 | 5, *lo_hi(sig.va), *lo_hi(5 << 32), 0xFFFFFFFF, 0xFFFFFFFF, 4)
  release = pkt3(0x49, 0x14 | 5 << 8, 2 << 29, *lo_hi(out.va), *lo_hi(0x1122334455667788), 0)
  stamp = pkt3(0x49, 0x14 | 5 << 8, 3 << 29, *lo_hi(out.va + 8), 0, 0, 0)
  words = wait + pkt3(0x58, 0, 0, 0, 0, 0, 0, 0) + release + stamp + pkt3(0x10, 0)
  ib.view[:4 * len(words)] = struct.pack(f"<{len(words)}I", *words)
  ring.submit(pkt3(0x3F, *lo_hi(ib.va), len(words)))
  time.sleep(0.02)
  assert struct.unpack_from("<Q", out.view)[0] == 0  # blocked: signal below 5 << 32
  struct.pack_into("<Q", sig.view, 0, 5 << 32)
  ring.drain()
  value, clock = struct.unpack_from("<QQ", out.view)
  assert value == 0x1122334455667788 and clock > 0
  assert kfd.packet_counts["pm4.INDIRECT_BUFFER"] == 1 and kfd.packet_counts["pm4.WAIT_REG_MEM64"] == 1


def test_pm4_dispatch_runs_the_kernel_from_registers(kfd):
  from emulator_helpers import compile_gfx1100
  from tiny_amd.emulator.loader import load_code_object
  ir = """declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
define amdgpu_kernel void @scale(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in, float %k) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %g, 128
  %i = add i32 %b, %t
  %p = getelementptr float, ptr addrspace(1) %in, i32 %i
  %x = load float, ptr addrspace(1) %p
  %y = fmul float %x, %k
  %q = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %y, ptr addrspace(1) %q
  ret void
}"""
  _, kernels = load_code_object(compile_gfx1100(ir), kfd.memory)
  k = kernels["scale"]
  n = 1024
  x = np.arange(n, dtype=np.float32)
  src, dst, args, sig = kfd.alloc(4 * n), kfd.alloc(4 * n), kfd.alloc(64), kfd.alloc(8)
  src.view[:] = x.tobytes()
  struct.pack_into("<QQf", args.view, 0, dst.va, src.va, 2.5)
  sh = lambda reg, *vals: pkt3(0x76, reg, *vals)  # noqa: E731
  words = (sh(0x20C, *lo_hi(k.code_address >> 8)) + sh(0x212, k.rsrc1, k.rsrc2) + sh(0x228, k.rsrc3)
           + sh(0x240, *lo_hi(args.va)) + sh(0x207, 128, 1, 1) + pkt3(0x15, n // 128, 1, 1, 1)
           + pkt3(0x49, 0x14 | 5 << 8, 2 << 29, *lo_hi(sig.va), 1, 0, 0))
  ib = kfd.alloc(4 * len(words))
  ib.view[:] = struct.pack(f"<{len(words)}I", *words)
  ring.submit(pkt3(0x3F, *lo_hi(ib.va), len(words))) if (ring := Ring(kfd, "compute")) else None
  wait_until(lambda: struct.unpack_from("<Q", sig.view)[0] == 1 or ring.queue.error is not None)
  kfd.raise_queue_errors()
  np.testing.assert_array_equal(np.frombuffer(dst.view, np.float32), x * np.float32(2.5))
  assert kfd.packet_counts["pm4.DISPATCH_DIRECT"] == 1 and kfd.dispatch_stats[0].waves == n // 32


def test_two_devices_share_one_address_space_for_peer_copies():
  a, b = MockKFD(), MockKFD()
  try:
    ring = Ring(a, "sdma")
    src, dst = a.alloc(4096), b.alloc(4096)
    src.view[:] = bytes(range(256)) * 16
    ring.submit(sdma_copy(dst.va, src.va, 4096))
    ring.drain()
    a.raise_queue_errors()
    assert bytes(dst.view) == bytes(range(256)) * 16
  finally:
    a.close()
    b.close()
