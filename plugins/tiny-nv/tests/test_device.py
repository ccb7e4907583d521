"""The NV device: on a real NVIDIA GPU when this machine has one (scripts/gpu-check.sh), else on the mock CUDA driver
(TINYCORE_NV_EMULATE=1; test equipment that executes the kernels' PTX): copies and assigns between CPU and NV on the
copy stream (counted by the mock's copy engine), staged numpy and DISK copies, the record format and its patches,
timestamps, signal waits that time out with a clear message."""
from __future__ import annotations
import numpy as np
import pytest
from tiny_nv import plugin
from tiny_nv.compiler import nvrtc_missing


@pytest.fixture(scope="module", autouse=True)
def emulate_without_gpu():
  """A real GPU when one works here (and emulation was not asked for), else the mock driver."""
  patch = pytest.MonkeyPatch()
  if plugin.probe() is not None: patch.setenv(plugin.EMULATE_ENV, "1")
  if (reason := plugin.probe()) is not None: pytest.skip(f"NV unavailable: {reason}")
  yield
  patch.undo()


@pytest.fixture
def nv():
  from tinycore import Device
  return Device["NV"]


def copy_ops(nv) -> int:
  """Copy-engine operations so far: the mock counts them; a real driver does not (then 0, and the tests check the
  values only)."""
  nv.synchronize()
  return getattr(nv.driver, "copy_engine_ops", 0)


def counted(nv) -> bool: return hasattr(nv.driver, "copy_engine_ops")


pytestmark = pytest.mark.skipif(nvrtc_missing() is not None, reason=f"{nvrtc_missing()}")


def test_cli_row(nv):
  from tinycore.cli import collect_rows
  (row, *_) = [row for row in collect_rows() if row.distribution == "tiny-nv"]
  assert row.status == ("ok (emulated)" if nv.emulated else "ok") and row.ok
  assert row.capabilities["arch"] == f"sm_{nv.arch[0]}{nv.arch[1]}" and row.capabilities["copy_queue"]


def test_kernel_result_against_numpy(nv):
  from tinycore import Tensor
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((5, 37)).astype(np.float32), rng.standard_normal((37, 3)).astype(np.float32)
  out = ((Tensor(a, device="NV") @ Tensor(b, device="NV")).relu() * 0.5).numpy()
  np.testing.assert_allclose(out, np.maximum(a @ b, 0) * 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("direction", ["CPU->NV", "NV->CPU"])
def test_cpu_nv_copies_run_on_the_copy_engine(nv, direction):
  from tinycore import Tensor
  data = np.arange(1000, dtype=np.float32) * 0.5 - 7
  src, dst = direction.split("->")
  source = Tensor(data, device=src).realize()
  before = copy_ops(nv)
  moved = source.to(dst).realize()
  # one copy-engine operation, no staging (CPU memory is mapped for the GPU)
  assert copy_ops(nv) - before == counted(nv)
  np.testing.assert_array_equal(moved.numpy(), data)


@pytest.mark.parametrize("direction", ["CPU->NV", "NV->CPU"])
def test_assign_across_cpu_and_nv(nv, direction):
  from tinycore import Tensor
  src, dst = direction.split("->")
  target = Tensor.zeros(4, 5, device=dst).contiguous().realize()
  values = np.arange(20, dtype=np.float32).reshape(4, 5)
  before = copy_ops(nv)
  target.assign(Tensor(values, device=src).realize()).realize()
  assert copy_ops(nv) - before >= counted(nv)
  np.testing.assert_array_equal(target.numpy(), values)
  target[1:3, 2:4].assign(Tensor(np.full((2, 2), -1, np.float32), device=src).realize()).realize()
  values[1:3, 2:4] = -1
  np.testing.assert_array_equal(target.numpy(), values)


def test_numpy_upload_and_download_are_staged(nv):
  from tinycore import Tensor
  data = np.random.default_rng(2).integers(-100, 100, 3000).astype(np.int32)
  before = copy_ops(nv)
  on_nv = Tensor(data, device="NV").realize()
  back = on_nv.numpy()
  assert copy_ops(nv) - before >= 2 * counted(nv)  # up and down each cross the copy engine once
  np.testing.assert_array_equal(back, data)


def test_nv_to_disk_and_back(nv, tmp_path):
  pytest.importorskip("tiny_disk")
  from tinycore import Tensor
  data = np.linspace(-3, 3, 257, dtype=np.float32)
  disk = Tensor.empty(257, device=f"DISK:{tmp_path / 'x.bin'}")
  disk.assign(Tensor(data, device="NV")).realize()
  assert (tmp_path / "x.bin").read_bytes() == data.tobytes()
  np.testing.assert_array_equal(disk.to("NV").numpy(), data)


def test_records_patch_only_inputs_and_variables(nv):
  from tinycore.plugin import Copy, InputAddress, SignalStore, SignalWait, Variable
  from tinycore.hcq.signal import signal_pool
  from tiny_nv.device import COPY, SIGNAL, WAIT
  signal = signal_pool.new("test")
  queue = nv.queues["copy"]
  encoded = queue.encode([SignalWait(signal, 3), Copy(InputAddress(0, "NV"), 4096, Variable("n")),
                          SignalStore(signal, 4)])
  words = np.frombuffer(bytes(encoded.blob), np.uint64)
  assert [int(w) & 0xFF for w in (words[0], words[3], words[7])] == [WAIT, COPY, SIGNAL]
  assert [offset for offset, _ in encoded.patches] == [8 * 4, 8 * 6]
  assert int(words[1]) == nv.signal_address(signal.addr) and int(words[2]) == 3


def test_timestamp_is_the_device_clock(nv):
  from tinycore.plugin import Timestamp
  from tinycore.hcq.signal import signal_pool
  first, second = signal_pool.new("t0"), signal_pool.new("t1")
  queue = nv.queues["compute"]
  queue.submit(queue.encode([Timestamp(first)]), {})
  queue.submit(queue.encode([Timestamp(second)]), {})
  nv.finish_stream("compute")
  assert 0 < first.value <= second.value


def test_a_wait_nobody_signals_times_out_naming_device_queue_and_value(nv, monkeypatch):
  from tinycore.plugin import HCQTimeoutError, SignalStore, SignalWait
  from tinycore.hcq.signal import signal_pool
  monkeypatch.setenv("TINYCORE_QUEUE_TIMEOUT", "0.3")
  never = signal_pool.new("never")
  queue = nv.queues["copy"]
  queue.submit(queue.encode([SignalWait(never, 5)]), {})
  with pytest.raises(HCQTimeoutError, match=r"NV: copy queue made no progress .* waiting for \d+"):
    nv.finish_stream("copy")
  queue.submit(queue.encode([SignalStore(never, 5)]), {})  # nothing can release the wait but the signal itself
  never.value = 5
  monkeypatch.setenv("TINYCORE_QUEUE_TIMEOUT", "30")
  nv.finish_stream("copy")


def test_store_kernel_of_the_event_fallback_writes_the_signal(nv):
  """Without 64-bit stream memory operations a signal store is the device's 1-thread store kernel (then an event)."""
  from tinycore.hcq.signal import signal_pool
  signal = signal_pool.new("fallback")
  nv.launch_helper("tc_store_u64", nv.queues["compute"].stream, [nv.signal_address(signal.addr), 2**40 + 7])
  nv.finish_stream("compute")
  assert signal.value == 2**40 + 7


def test_programs_run_directly_too(nv):
  """A loaded kernel called like any Program (outside a queue batch) runs on the compute stream; wait=True times it."""
  source = ('extern "C" __global__ void fill(int* __restrict__ data0, long long var0) {\n'
            '  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n'
            '  if (i < 6) data0[i] = (int)var0 * i; }\n')
  program = nv.runtime("fill", nv.compiler.compile(source))
  handle = nv.allocator.alloc(6 * 4)
  elapsed = program(handle, global_size=(8, 1, 1), local_size=(4, 1, 1), vals=(7,), wait=True)
  out = memoryview(bytearray(6 * 4))
  nv.allocator._copyout(out, handle)
  assert elapsed > 0 and np.frombuffer(out, np.int32).tolist() == [0, 7, 14, 21, 28, 35]
  nv.allocator.free(handle, 6 * 4)
