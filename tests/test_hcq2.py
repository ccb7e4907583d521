"""HCQ2: command queues, staging, dependency tracking and replay, on the simulated queue device (SIM, which has a
copy queue and memory the host cannot address) and on the CPU (which runs on a worker thread, without one)."""
import random
import time
from unittest.mock import patch
import numpy as np
import pytest
from tinycore import GlobalCounters, Tensor
from tinycore.device.buffer import Buffer
from tinycore.device.registry import Device
from tinycore.dtype import dtypes
from tinycore.device.buffers import attach_buffer, linear_buffers
from tinycore.engine.realize import run_linear
from tinycore.hcq import HCQTimeoutError, SignalWait, staging
from tinycore.hcq.commands import InputAddress, Variable
from tinycore.engine.plan import BatchStep, PlanCacheStats, plan_for, plans
from tinycore.hcq.runtime import call_is_hcq, compile_linear
from tinycore.uop.ops import Ops, UOp
from stalled_queue import stall_compute_queue


def _has(prefix: str) -> bool: return any(spec.prefix == prefix for spec in Device.specs())


needs_sim = pytest.mark.skipif(not _has("SIM"), reason="the simulated queue device (tests/hcq_sim) is not installed")


def copy_linear(dst: UOp, src: UOp) -> UOp:
  callee = UOp(Ops.COPY, dst.dtype, (UOp(Ops.PARAM, src.dtype, (), 1),), dst.device)
  return UOp(Ops.LINEAR, None, (UOp(Ops.CALL, None, (callee, dst, src)),))


def host_buffer(kind: str, data: bytes, tmp_path) -> UOp:
  device = f"DISK:{tmp_path / 'host.bin'}" if kind == "DISK" else kind
  uop = UOp.new_buffer(device, len(data), dtypes.uint8)
  if kind == "NPY":
    attach_buffer(uop, Buffer("NPY", len(data), dtypes.uint8, opaque=np.frombuffer(bytearray(data), np.uint8)))
  else:
    attach_buffer(uop, Buffer(device, len(data), dtypes.uint8, initial_value=data))
  return uop


@needs_sim
@pytest.mark.parametrize("host_kind", ["CPU", "NPY", "DISK"])
@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.parametrize("upload", [False, True])
def test_host_copies(host_kind, direct, upload, tmp_path):
  if host_kind == "DISK" and not _has("DISK"): pytest.skip("tiny-disk is not installed")
  if host_kind == "DISK" and direct:
    pytest.skip("DISK memory is not host-addressable (files are read and written with preadv/pwrite, never mapped), "
                "so no queue device can address it in place")
  dev = Device["SIM"]
  payload = bytes(random.Random(7).randrange(256) for _ in range(4))
  host = host_buffer(host_kind, payload if upload else bytes(4), tmp_path)
  gpu = UOp.new_buffer("SIM", 4, dtypes.uint8)
  if not upload:
    from tinycore.device.buffers import buffer_of
    buffer_of(gpu).ensure_allocated().copyin(memoryview(payload))
  src, dst = (host, gpu) if upload else (gpu, host)
  linear = copy_linear(dst, src)
  with patch.object(dev, "host_devs", frozenset({"CPU", host_kind}) if direct else frozenset({"CPU"})):
    compiled = compile_linear(linear, input_uops=[host, gpu])
    assert len(compiled.src) == (1 if direct or host_kind == "CPU" else 2)
    assert sum(call_is_hcq(call) for call in compiled.src) == 1
    run_linear(compiled, wait=True)
  from tinycore.device.buffers import buffer_of
  assert bytes(buffer_of(dst).as_memoryview()) == payload


@needs_sim
@pytest.mark.parametrize("npdt", [np.uint8, np.float32])
def test_staged_copy_roundtrip(npdt):
  # a host buffer the device cannot read copies in chunks through a small ring of staging slots: every rotation
  # must land bit-exact, in both directions
  stage = Buffer("CPU", size := 1 << 16, dtypes.uint8, preallocate=True)
  n = (size // 2 // np.dtype(npdt).itemsize) * 9 + 7  # nine rotations of a two-slot ring, plus a short tail
  data = np.arange(n, dtype=np.int64).astype(npdt)
  with patch.object(staging, "STAGING_SIZE", size), patch.object(staging, "STAGING_SLOTS", 2), \
       patch.object(staging, "_staging", lambda: stage):
    GlobalCounters.reset()
    on_device = Tensor(data, device="NPY").to("SIM").contiguous().realize()
    assert GlobalCounters.copy_count == 10  # ten host memcpys into the ring: nine rotations and the tail
    back = Tensor.empty(n, dtype=on_device.dtype, device="NPY")
    out = np.frombuffer(bytearray(data.nbytes), dtype=npdt)
    from tinycore.device.buffers import attach_buffer as attach
    attach(back.uop.base, Buffer("NPY", n, on_device.dtype, opaque=out.view(np.uint8)))
    back.assign(on_device).realize()
    Device["SIM"].synchronize()
    assert GlobalCounters.copy_count == 20  # and ten host memcpys out of it
  np.testing.assert_equal(out, data)


def chain(device: str, n: int) -> tuple[Tensor, UOp, list[UOp]]:
  x = Tensor.arange(17 * 33, device=device).float().reshape(17, 33).realize()
  y = x
  for _ in range(n): y = (y + 1).contiguous()
  linear = y.schedule_linear()
  return y, linear, linear_buffers(linear)


@pytest.mark.parametrize("device", ["CPU", pytest.param("SIM", marks=needs_sim)])
def test_runtime_patches_are_input_addresses_and_variables_only(device):
  _, linear, inputs = chain(device, 3)
  compiled = compile_linear(linear, input_uops=inputs)
  batches = [call.src[0].arg for call in compiled.src if call_is_hcq(call)]
  assert batches and all(batch.patches for batch in batches)
  assert all(isinstance(ref, (InputAddress, Variable)) for batch in batches for ref in batch.patches)
  # compiled once, run twice with new buffers: both right
  run_linear(compiled, wait=True)
  y, linear2, inputs2 = chain(device, 3)
  run_linear(compile_linear(linear2, input_uops=inputs2), wait=True)
  np.testing.assert_equal(y.numpy(), np.arange(17 * 33, dtype=np.float32).reshape(17, 33) + 3)


def test_compiling_a_compiled_linear_returns_it():
  _, linear, inputs = chain("CPU", 2)
  compiled = compile_linear(linear, input_uops=inputs)
  assert compile_linear(compiled, input_uops=inputs) is compiled
  assert compile_linear(compiled) is compiled
  baked = compile_linear(linear)  # JIT use: every address written at compile time
  assert all(not call.src[0].arg.patches for call in baked.src if call_is_hcq(call))


@pytest.mark.parametrize("length", [3, 65])
def test_a_repeated_eager_graph_reuses_its_compiled_batches(length):
  """Small and large schedules alike: a graph of the same shape on new buffers finds its plan, whose compiled batch
  serves every call (only the buffers' addresses are patched in)."""
  plan_count, misses = len(plans), PlanCacheStats.misses
  batches = []
  for _ in range(2):
    y, _, _ = chain("CPU", length)
    plan, _ = plan_for([y.uop])
    batches.append([step.batch for step in plan.run_plan.steps() if type(step) is BatchStep])
    np.testing.assert_equal(y.numpy(), np.arange(17 * 33, dtype=np.float32).reshape(17, 33) + length)
  assert batches[0] and [id(b) for b in batches[0]] == [id(b) for b in batches[1]]
  assert len(plans) <= plan_count + 2 and PlanCacheStats.misses <= misses + 2  # (the graph and its read-back)


@needs_sim
def test_map_cpu_buffer_preserves_contents():
  src = Buffer("CPU", 16, dtypes.uint8, preallocate=True)
  data = bytes(range(16))
  src.as_memoryview(force_zero_copy=True)[:] = data
  mapping = src.get_storage("SIM")
  assert mapping.buf.addr == src.get_buf().addr == Device["SIM"].device_address(src)  # used in place, not copied
  assert src.get_storage("SIM") is mapping  # mapped once, then cached on the buffer
  assert bytes(src.as_memoryview(force_zero_copy=True)) == data


@needs_sim
def test_kernel_waits_for_a_copy_queue_write_and_the_reverse():
  a = Tensor.zeros(64, device="SIM").contiguous().realize()
  host = Tensor(np.arange(64, dtype=np.float32), device="CPU").realize()
  a.assign(host)                 # a copy on SIM's copy queue writes a
  b = (a * 2).contiguous()       # a kernel on SIM's compute queue reads a
  c = Tensor.empty(64, device="CPU").assign(b)  # the copy queue reads what the kernel wrote
  linear = c.schedule_linear()
  compiled = compile_linear(linear, input_uops=linear_buffers(linear))
  batch = next(call.src[0].arg for call in compiled.src if call_is_hcq(call))
  plan = batch.plan
  compute_waits = [cmd for cmd in plan[(Device["SIM"], "compute")] if isinstance(cmd, SignalWait)]
  copy_waits = [cmd for cmd in plan[(Device["SIM"], "copy")] if isinstance(cmd, SignalWait)]
  assert compute_waits and copy_waits
  run_linear(compiled)
  np.testing.assert_equal(c.numpy(), np.arange(64, dtype=np.float32) * 2)


@needs_sim
def test_random_interleavings_of_kernels_and_copies_match_numpy():
  rng = random.Random(1234)
  size = 16
  for trial in range(1000):
    reference = [np.full(size, float(i), np.float32) for i in range(3)]
    tensors = [Tensor(r.copy(), device="CPU").to("SIM").contiguous().realize() for r in reference]
    for _ in range(rng.randrange(2, 7)):
      dst, src = rng.sample(range(3), 2)
      if rng.random() < 0.5:   # a kernel: dst = src * 2 + dst (compute queue)
        tensors[dst].assign(tensors[src] * 2 + tensors[dst])
        reference[dst] = reference[src] * 2 + reference[dst]
      else:                    # a copy through a CPU buffer (copy queue both ways)
        tensors[dst].assign(tensors[src].to("CPU").to("SIM"))
        reference[dst] = reference[src].copy()
      if rng.random() < 0.3: Tensor.realize(*tensors)
    Tensor.realize(*tensors)
    for t, r in zip(tensors, reference):
      np.testing.assert_equal(t.numpy(), r, err_msg=f"trial {trial}")


@pytest.mark.parametrize("device", ["CPU", pytest.param("SIM", marks=needs_sim)])
def test_a_wait_nobody_signals_times_out_with_a_clear_error(device):
  dev = Device[device]
  signal = stall_compute_queue(dev)
  start = time.perf_counter()
  with pytest.raises(HCQTimeoutError, match=f"{device}.*no progress.*timeline"):
    dev.synchronize(timeout_ms=300)
  assert time.perf_counter() - start < 5
  signal.value = 1  # release the queue
  dev.synchronize()


def test_cpu_returns_before_a_long_kernel_finishes():
  x = Tensor.rand(1024, 1024).realize()
  Device["CPU"].synchronize()
  start = time.perf_counter()
  y = (x @ x @ x @ x).realize()
  launched = time.perf_counter() - start
  busy = Device["CPU"].in_flight
  Device["CPU"].synchronize()
  finished = time.perf_counter() - start
  assert busy or launched < finished
  assert y.shape == (1024, 1024)


def test_cpu_kernel_count_counts_calls_inside_a_batch():
  a = Tensor.arange(10).float().realize()
  GlobalCounters.reset()
  ((a + 1).contiguous() * 2).realize()
  assert GlobalCounters.kernel_count == 2
