"""MockCudaDriver: the driver seam's methods, stream ordering and value64 waits/writes, copy-engine counting, the
%globaltimer clock, and the errors a real driver would give (no init, no context, cubins, timeouts)."""
from __future__ import annotations
import time
import numpy as np
import pytest
from mock_helpers import needs_nvrtc, pack_params
from tiny_nv.compiler import nvrtc_compile
from tiny_nv.mock import DEVICE_NAME, MockCudaDriver, MockCudaError

SCALE = r"""extern "C" __global__ void scale(float* out, const float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * factor; }"""
CLOCK = r"""extern "C" __global__ void clock(unsigned long long* at) {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); *at = t; }"""

@pytest.fixture
def driver():
  cuda = MockCudaDriver(wait_timeout_s=1.0)
  cuda.init()
  cuda.open_context(0)
  return cuda

def test_device_queries():
  cuda = MockCudaDriver()
  with pytest.raises(MockCudaError, match="NOT_INITIALIZED"): cuda.device_count()
  cuda.init()
  assert cuda.device_count() == 1 and cuda.name(0) == DEVICE_NAME == "emulated NVIDIA (PTX interpreter)"
  assert cuda.compute_capability(0) == (9, 0) and cuda.attribute(0, 122) == 1 and cuda.attribute(0, 10) == 32
  assert cuda.total_memory(0) > 1 << 30
  with pytest.raises(MockCudaError, match="INVALID_DEVICE"): cuda.name(1)

def test_calls_need_a_current_context_on_the_thread():
  cuda = MockCudaDriver()
  cuda.init()
  with pytest.raises(MockCudaError, match="INVALID_CONTEXT.*mem_alloc"): cuda.mem_alloc(16)
  ctx = cuda.open_context(0)
  address = cuda.mem_alloc(16)
  import threading
  seen = []
  def other_thread():
    try: cuda.mem_free(address)
    except MockCudaError as error: seen.append(str(error))
    cuda.set_current(ctx)
    cuda.mem_free(address)
    seen.append("freed")
  worker = threading.Thread(target=other_thread)
  worker.start(); worker.join()
  assert "INVALID_CONTEXT" in seen[0] and seen[1] == "freed"

def test_memory_host_and_device(driver):
  host, device = driver.host_alloc(4096)
  assert host == device
  dptr = driver.mem_alloc(100)
  with pytest.raises(MockCudaError, match="pinned host memory"): driver.mem_free(host)
  driver.host_free(host)
  driver.mem_free(dptr)
  with pytest.raises(MockCudaError, match="INVALID_VALUE"): driver.mem_free(dptr)

@needs_nvrtc
def test_copies_kernels_and_signals_in_stream_order(driver):
  """Upload on a copy stream, signal, compute stream waits, runs, signals, copy stream waits and downloads."""
  n = 1000
  copy, compute = driver.stream_create(), driver.stream_create()
  staging, _ = driver.host_alloc(2 * n * 4)
  signal, _ = driver.host_alloc(8)
  x, out = driver.mem_alloc(n * 4), driver.mem_alloc(n * 4)
  host = driver.memory.view(staging, 2 * n * 4).view(np.float32)
  host[:n] = np.arange(n, dtype=np.float32)
  function = driver.get_function(driver.module_load(nvrtc_compile(SCALE, "compute_90")), "scale")
  driver.stream_wait_value64(compute, signal, 1)           # queued before the data exists: must wait
  driver.launch(function, (4, 1, 1), (256, 1, 1), 0, compute,
                pack_params([np.uint64(out), np.uint64(x), np.float32(2.5), np.int32(n)]))
  driver.stream_write_value64(compute, signal, 2)
  time.sleep(0.05)
  assert driver.kernel_launches == 0                       # still waiting for the copy stream
  driver.memcpy_async(x, staging, n * 4, copy)
  driver.stream_write_value64(copy, signal, 1)
  driver.stream_wait_value64(copy, signal, 2)
  driver.memcpy_async(staging + n * 4, out, n * 4, copy)
  driver.stream_synchronize(copy)
  np.testing.assert_array_equal(host[n:], np.arange(n, dtype=np.float32) * np.float32(2.5))
  assert driver.copy_engine_ops == 2 and driver.kernel_launches == 1
  assert np.frombuffer(driver.memory.view(signal, 8), np.uint64)[0] == 2
  driver.synchronize()
  driver.stream_destroy(copy); driver.stream_destroy(compute)

def test_write_value_comes_after_earlier_work_on_the_stream(driver):
  stream = driver.stream_create()
  signal, _ = driver.host_alloc(8)
  source, destination = driver.host_alloc(1 << 20)[0], driver.mem_alloc(1 << 20)
  driver.memory.view(source, 1 << 20)[:] = 7
  for _ in range(4): driver.memcpy_async(destination, source, 1 << 20, stream)
  driver.stream_write_value64(stream, signal, 99)
  cell = np.frombuffer(driver.memory.view(signal, 8), np.uint64)
  deadline = time.monotonic() + 5
  while cell[0] != 99 and time.monotonic() < deadline: time.sleep(0.001)
  assert cell[0] == 99 and driver.copy_engine_ops == 4 and (driver.memory.view(destination, 1 << 20) == 7).all()

def test_a_wait_that_never_ends_times_out_naming_stream_and_value(driver):
  stream = driver.stream_create()
  signal, _ = driver.host_alloc(8)
  driver.stream_write_value64(stream, signal, 3)
  driver.stream_wait_value64(stream, signal, 4)
  driver.stream_write_value64(stream, signal, 10)          # never runs: the stream's error is sticky
  with pytest.raises(MockCudaError, match=r"stream \d+ waited 1 s for the value at 0x[0-9a-f]+ to reach 4 \(it is 3\)"):
    driver.stream_synchronize(stream)
  assert np.frombuffer(driver.memory.view(signal, 8), np.uint64)[0] == 3
  with pytest.raises(MockCudaError, match="reach 4"): driver.synchronize()

@needs_nvrtc
def test_globaltimer_is_monotonic_nanoseconds(driver):
  stream = driver.stream_create()
  stamps, _ = driver.host_alloc(16)
  function = driver.get_function(driver.module_load(nvrtc_compile(CLOCK, "compute_90")), "clock")
  before = time.monotonic_ns()
  driver.launch(function, (1, 1, 1), (1, 1, 1), 0, stream, pack_params([np.uint64(stamps)]))
  driver.launch(function, (1, 1, 1), (1, 1, 1), 0, stream, pack_params([np.uint64(stamps + 8)]))
  driver.stream_synchronize(stream)
  after = time.monotonic_ns()
  first, second = np.frombuffer(driver.memory.view(stamps, 16), np.uint64).tolist()
  assert before <= first <= second <= after

@needs_nvrtc
def test_module_errors(driver):
  with pytest.raises(MockCudaError, match="runs PTX, not cubins"):
    driver.module_load(nvrtc_compile(SCALE, "sm_90"))
  module = driver.module_load(nvrtc_compile(SCALE, "compute_90"))
  with pytest.raises(MockCudaError, match="NOT_FOUND.*no kernel 'nope'.*scale"): driver.get_function(module, "nope")

@needs_nvrtc
def test_a_faulting_kernel_fails_its_stream(driver):
  stream = driver.stream_create()
  function = driver.get_function(driver.module_load(nvrtc_compile(SCALE, "compute_90")), "scale")
  small = driver.mem_alloc(64)
  driver.launch(function, (1, 1, 1), (32, 1, 1), 0, stream,
                pack_params([np.uint64(small), np.uint64(small), np.float32(1), np.int32(100000)]))
  driver.launch(function, (1, 1, 1), (32, 1, 1), 0, stream,
                pack_params([np.uint64(small), np.uint64(small + (1 << 40)), np.float32(1), np.int32(8)]))
  with pytest.raises(MockCudaError, match="kernel scale .* failed: MemoryFault"): driver.stream_synchronize(stream)
  assert driver.kernel_launches == 1
