"""The tiny-cpu runtime without the code generator: a hand-written C kernel through CPUCompiler, CPUProgram and
CPUAllocator, the compile cache, and CPU device instances."""
from __future__ import annotations
import array
import importlib.util
import pytest
from tinycore.device.allocator import BufferSpec

pytest.importorskip("tiny_cpu", reason="tiny-cpu is not installed")
from tiny_cpu.compiler import CPUCompiler, find_c_compiler  # noqa: E402
from tiny_cpu.device import CPUAllocator, CPUProgram  # noqa: E402

pytestmark = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler (install clang or gcc, or set CC)")

# out[i] = a[i] * scale + b[i] for i < count; written like the renderer's kernels: pointers first, then int64 values,
# and the entry point `axpy_args` that reads them from an argument table
AXPY_SOURCE = """
void axpy(float* restrict data0, const float* restrict data1, const float* restrict data2, long long var0,
          long long var1) {
  for (long long i = 0; i < var0; i++) data0[i] = data1[i] * (float)var1 + data2[i];
}
void axpy_args(const unsigned long long *a, long long core_id, long long core_count) {
  axpy((float*)a[0], (const float*)a[1], (const float*)a[2], (long long)a[3], (long long)a[4]);
}
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.delenv("TINYCORE_DISABLE_COMPILER_CACHE", raising=False)
  return tmp_path / "cache"


def float_buffer(allocator: CPUAllocator, values: list[float]):
  handle = allocator.alloc(4 * len(values))
  allocator._copyin(handle, memoryview(array.array("f", values)).cast("B"))
  return handle


def read_floats(allocator: CPUAllocator, handle, count: int) -> list[float]:
  out = array.array("f", [0.0] * count)
  allocator._copyout(memoryview(out).cast("B"), handle)
  return out.tolist()


def test_hand_written_kernel_runs_on_allocator_buffers(cache_dir):
  compiler = CPUCompiler()
  program = CPUProgram("axpy", compiler.compile_cached(AXPY_SOURCE))
  allocator = CPUAllocator()
  a_values, b_values = [1.0, 2.0, 3.0, 4.5, -1.0], [10.0, 20.0, 30.0, 40.0, 50.0]
  out, a, b = allocator.alloc(20), float_buffer(allocator, a_values), float_buffer(allocator, b_values)
  assert out.addr % 4096 == 0  # mmap memory is page aligned
  elapsed = program(out, a, b, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(5, 3), wait=True)
  assert isinstance(elapsed, float) and elapsed >= 0
  assert read_floats(allocator, out, 5) == [a_value * 3 + b_value for a_value, b_value in zip(a_values, b_values)]
  # only the first 2 elements: the rest keeps its old values; and wait=False returns None
  assert program(out, b, a, vals=(2, 0)) is None
  assert read_floats(allocator, out, 5) == [1.0, 2.0, 39.0, 53.5, 47.0]


def test_sub_buffer_views_share_memory(cache_dir):
  allocator = CPUAllocator()
  base = float_buffer(allocator, [0.0] * 8)
  program = CPUProgram("axpy", CPUCompiler().compile_cached(AXPY_SOURCE))
  ones = float_buffer(allocator, [1.0] * 4)
  window = allocator._offset(base, 16, 8)  # elements 2..5
  assert window.addr == base.addr + 8
  program(window, ones, ones, vals=(4, 2))
  assert read_floats(allocator, base, 8) == [0.0, 0.0, 3.0, 3.0, 3.0, 3.0, 0.0, 0.0]
  assert allocator._as_buffer(base).tobytes() == bytes(allocator._as_buffer(base))


def test_memory_outlives_free_while_a_view_uses_it():
  import numpy as np
  allocator = CPUAllocator()
  base = float_buffer(allocator, [1.0, 2.0, 3.0, 4.0])
  window = allocator._offset(base, 8, 8)
  array_view = np.frombuffer(allocator._as_buffer(base), np.float32)  # a zero-copy export of the base's view
  allocator.free(base, 16, BufferSpec(nolru=True))  # cannot unmap yet: the window and the array still use it
  assert read_floats(allocator, window, 2) == [3.0, 4.0] and array_view.tolist() == [1.0, 2.0, 3.0, 4.0]
  unused = allocator.alloc(16, BufferSpec(nolru=True))
  allocator.free(unused, 16, BufferSpec(nolru=True))  # nothing uses this one: it is unmapped now
  assert unused.mm.closed


def test_freed_memory_is_reused_by_the_lru_cache():
  allocator = CPUAllocator()
  handle = allocator.alloc(64)
  allocator.free(handle, 64)
  assert allocator.alloc(64) is handle
  assert allocator.alloc(64, BufferSpec(nolru=True)) is not handle
  allocator.free(handle, 64)
  allocator.free_cache()
  assert allocator.cache == {}


def test_compile_cache_returns_identical_bytes_without_recompiling(cache_dir):
  class CountingCompiler(CPUCompiler):
    calls = 0

    def compile(self, src: str) -> bytes:
      CountingCompiler.calls += 1
      return super().compile(src)

  first = CountingCompiler().compile_cached(AXPY_SOURCE)
  second = CountingCompiler().compile_cached(AXPY_SOURCE)
  assert CountingCompiler.calls == 1 and first == second and first.startswith(b"\x7fELF")
  CountingCompiler().compile_cached(AXPY_SOURCE + "\n// another source\n")
  assert CountingCompiler.calls == 2
  # libraries are loaded from private files removed right after loading: nothing is left to be replaced
  CPUProgram("axpy", first)
  CPUProgram("axpy", second)
  assert not list((cache_dir / "so").glob("*.so"))


def test_cachekey_names_the_compiler_its_version_and_flags():
  compiler = CPUCompiler()
  assert compiler.command[0] in compiler.cachekey and "-ffp-contract=off" in compiler.cachekey
  assert "-ffast-math" not in compiler.cachekey


def test_bad_source_raises_with_the_compiler_message():
  with pytest.raises(RuntimeError) as error:
    CPUCompiler().compile("void broken(float* data0) { data0[0] = undefined_variable; }")
  message = str(error.value)
  assert "undefined_variable" in message and "error" in message.lower()
  assert "void broken(float* data0)" in message  # the source is part of the message


def test_missing_function_is_named(cache_dir):
  lib = CPUCompiler().compile_cached(AXPY_SOURCE)
  with pytest.raises(RuntimeError, match="no entry point named 'saxpy_args'"):
    CPUProgram("saxpy", lib)


def test_cc_that_does_not_exist_is_reported(monkeypatch):
  from tiny_cpu.plugin import probe_c_compiler
  monkeypatch.setenv("CC", "/nonexistent/cc-1234")
  assert "CC='/nonexistent/cc-1234'" in probe_c_compiler()
  with pytest.raises(RuntimeError, match="not an executable"):
    CPUCompiler()


def test_cpu_instance_names_are_checked():
  from tiny_cpu.plugin import tinycore_open_device
  assert tinycore_open_device(name="NPY") is None
  for bad_name in ("CPU:-1", "CPU:x", "CPU:01", "CPU:1.5"):
    with pytest.raises(ValueError, match="non-negative integer"):
      tinycore_open_device(name=bad_name)


def test_cpu_and_cpu1_are_distinct_devices_with_distinct_allocators():
  if importlib.util.find_spec("tinycore.codegen.c_style") is None:
    pytest.skip("tinycore.codegen.c_style (the renderer base class) does not exist yet")
  from tinycore.device import Device
  cpu, cpu0, cpu1 = Device["CPU"], Device["cpu:0"], Device["CPU:1"]
  assert cpu is cpu0 and cpu is not cpu1
  assert cpu.allocator is not cpu1.allocator
  assert (cpu.device, cpu.device_id, cpu1.device, cpu1.device_id) == ("CPU", 0, "CPU:1", 1)
  assert cpu.capabilities()["compiler"] in ("clang", "gcc", "cc") or cpu.capabilities()["compiler"]


def os_threads() -> int:
  import os
  return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_absurd_cpu_index_starts_no_threads():
  """CPU:N is a device with its own worker threads: an index past MAX_CPU_DEVICES is refused before anything starts."""
  from tiny_cpu.plugin import MAX_CPU_DEVICES, tinycore_open_device
  from tinycore.device import Device
  assert MAX_CPU_DEVICES == 64
  before = os_threads()
  for name in ("CPU:100000", f"CPU:{MAX_CPU_DEVICES}", "CPU:" + "9" * 40):
    with pytest.raises(ValueError, match=f"CPU:0 to CPU:{MAX_CPU_DEVICES - 1}"):
      tinycore_open_device(name=name)
    with pytest.raises(RuntimeError, match=f"cannot open device '{name}'.*CPU:0 to CPU:63"):
      Device[name]
  assert os_threads() == before
  if importlib.util.find_spec("tinycore.codegen.c_style") is None: return
  from tiny_cpu.device import cpu_threads
  last = Device[f"CPU:{MAX_CPU_DEVICES - 1}"]  # the last index opens: one worker and its helper threads
  assert last.device == "CPU:63" and 0 < os_threads() - before <= cpu_threads() + 1


def test_tiny_kernels_run_on_the_submitting_thread_only_when_the_worker_is_idle():
  import numpy as np
  from tinycore import Tensor
  from tinycore.device.registry import Device
  from tiny_cpu.queue import INLINE_MAX_ITERATIONS
  dev = Device["CPU"]
  queue = dev.queues["compute"]
  x = Tensor(np.zeros(16, np.float32), device="CPU").realize()
  dev.synchronize()
  put = queue.put
  for _ in range(5): x = (x + 1).realize()
  assert queue.put == put  # 16 elements: run inline, the ring untouched, and finished on return
  assert not dev.in_flight
  # a kernel too big to run inline goes through the ring; a tiny one submitted behind it keeps its order
  big = Tensor(np.ones(4 * INLINE_MAX_ITERATIONS, np.float32), device="CPU").realize()
  dev.synchronize()
  put = queue.put
  total = (big * 2).sum().realize()
  y = (x + total).realize()  # reads what the ring's kernel writes: inline only once the worker finished it
  x = (x * 3).realize()
  assert queue.put > put
  np.testing.assert_equal(y.numpy(), np.full(16, 5 + 8 * INLINE_MAX_ITERATIONS, np.float32))
  np.testing.assert_equal(x.numpy(), np.full(16, 15, np.float32))
