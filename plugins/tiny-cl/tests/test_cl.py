"""tiny-cl on a real OpenCL device (PoCL from `pip install tiny-cl[pocl]`, or a vendor driver): kernels against numpy,
copies between CPU and CL, the runtime pieces on their own (allocator, compiler, program), the compile cache,
fp16/fp64 detection, and the message `tinycore devices` gives without any OpenCL platform."""
from __future__ import annotations
import copy
import importlib.util
import os
import subprocess
import sys
import time
import numpy as np
import pytest

pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install tiny-cl)")
import pyopencl as cl  # noqa: E402
from tinycore import Device, Tensor, dtypes  # noqa: E402
from tiny_cl import platforms  # noqa: E402
from tiny_cl.platforms import NO_PLATFORM  # noqa: E402

HAVE_DEVICE = platforms.probe() is None
needs_device = pytest.mark.skipif(not HAVE_DEVICE, reason=f"no OpenCL device: {platforms.probe()}")
needs_tiny_cpu = pytest.mark.skipif(importlib.util.find_spec("tiny_cpu") is None, reason="tiny-cpu is not installed")

# out[i] = a[i] * scale + b[i] for i < count, written like the renderer's kernels: buffers first, then int64 values
AXPY_SOURCE = """
__kernel void axpy(__global float* restrict data0, __global const float* restrict data1,
                   __global const float* restrict data2, long var0, long var1) {
  long i = get_global_id(0);
  if (i >= var0) return;
  data0[i] = data1[i] * (float)var1 + data2[i];
}
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.delenv("TINYCORE_DISABLE_COMPILER_CACHE", raising=False)
  return tmp_path / "cache"


@pytest.fixture
def dev():
  return Device["CL"]


def salt() -> float:
  """A constant no earlier kernel used, so that the kernel is new to this process (no in-memory cache hit)."""
  return float(time.perf_counter_ns() % 1_000_003) + 0.5


# ---------------------------------------------------------------- the plugin module and the device list

def test_plugin_import_is_cheap():
  code = "import sys, tiny_cl.plugin; print('pyopencl' in sys.modules, 'tiny_cl.device' in sys.modules)"
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert result.stdout.split() == ["False", "False"]


def test_no_platform_is_unavailable_with_the_reason(monkeypatch):
  monkeypatch.setattr(cl, "get_platforms", lambda: [])
  assert platforms.probe() == NO_PLATFORM
  assert platforms.instance_names() == ["CL"]  # one row, so that `tinycore devices` says why


def test_platform_not_found_error_counts_as_no_platform(monkeypatch):
  def no_platform():  # what the ICD loader does when it finds no platform (CL_PLATFORM_NOT_FOUND_KHR)
    raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
  monkeypatch.setattr(cl, "get_platforms", no_platform)
  assert platforms.probe() == NO_PLATFORM


def test_cli_row_without_platform(monkeypatch):
  from tinycore.cli import collect_rows, format_table
  monkeypatch.setattr(cl, "get_platforms", lambda: [])
  rows = [row for row in collect_rows() if row.distribution == "tiny-cl"]
  assert [(row.name, row.status) for row in rows] == [("CL", f"unavailable: {NO_PLATFORM}")]
  assert "unavailable: no OpenCL platform (pip install tiny-cl[pocl], or a vendor driver)" in format_table(rows)


@needs_device
def test_cli_lists_every_device_with_platform_and_name():
  from tinycore.cli import collect_rows
  rows = {row.name: row for row in collect_rows() if row.distribution == "tiny-cl"}
  found = platforms.devices()
  assert list(rows) == ["CL"] + [f"CL:{index}" for index in range(1, len(found))]
  for index, (name, row) in enumerate(rows.items()):
    if row.status.startswith("unavailable:"):  # a driver that builds no kernel (PyPI's PoCL on a newer CPU)
      assert "builds no kernel" in row.status and "OCL_ICD_VENDORS" in row.status, row.status
      continue
    assert row.status == "ok", row.status
    assert row.capabilities["platform"] == found[index].platform.name.strip()
    assert row.capabilities["device"] == found[index].name.strip()
    assert row.capabilities["compute"] is True and "float32" in row.capabilities["dtypes"]


@needs_device
def test_unknown_index_names_the_devices_present():
  missing = f"CL:{len(platforms.devices()) + 3}"
  with pytest.raises(RuntimeError, match="there is no OpenCL device"):
    Device[missing]
  with pytest.raises(RuntimeError, match="non-negative integer"):
    Device["CL:01"]


# ---------------------------------------------------------------- kernels, for real, against numpy

@needs_device
def test_elementwise_and_reductions_against_numpy():
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((37, 53)).astype(np.float32), rng.standard_normal((37, 53)).astype(np.float32)
  tx, ty = Tensor(x, device="CL"), Tensor(y, device="CL")
  np.testing.assert_allclose(((tx * ty + 1).relu()).numpy(), np.maximum(x * y + 1, 0), rtol=1e-6)
  np.testing.assert_allclose(tx.exp().numpy(), np.exp(x), rtol=1e-5)
  np.testing.assert_allclose((tx / ty).numpy(), x / y, rtol=0)  # correctly rounded division, like numpy
  np.testing.assert_allclose(tx.abs().sqrt().numpy(), np.sqrt(np.abs(x)), rtol=0)
  np.testing.assert_allclose(tx.sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(tx.max(axis=0).numpy(), x.max(axis=0))
  np.testing.assert_allclose((tx @ ty.T).numpy(), x @ y.T, rtol=1e-4, atol=1e-4)


@needs_device
def test_integer_and_bool_kernels():
  rng = np.random.default_rng(1)
  a = rng.integers(-1000, 1000, size=(9, 11), dtype=np.int64)
  b = rng.integers(1, 50, size=(9, 11), dtype=np.int64)
  ta, tb = Tensor(a, device="CL"), Tensor(b, device="CL")
  np.testing.assert_array_equal((ta * tb + 3).numpy(), a * b + 3)
  mask = (ta > 0).numpy()
  assert mask.dtype == np.bool_
  np.testing.assert_array_equal(mask, a > 0)
  np.testing.assert_array_equal((ta > 0).where(ta, tb).numpy(), np.where(a > 0, a, b))


@pytest.fixture
def kernels(monkeypatch):
  """The kernels run from now on (CompiledKernel objects: source, global and local size), in order: each host kernel
  step of a run plan looks its kernel up when the plan is made."""
  import tinycore.engine.plan
  seen = []
  real = tinycore.engine.plan.compile_kernel
  def recording(device, sink):
    kernel = real(device, sink)
    seen.append(kernel)
    return kernel
  monkeypatch.setattr(tinycore.engine.plan, "compile_kernel", recording)
  return seen


@needs_device
def test_launches_a_grid_of_work_groups(kernels):
  x = np.arange(3000, dtype=np.float32).reshape(30, 100)
  np.testing.assert_array_equal((Tensor(x, device="CL") * 3.0).numpy(), x * 3)
  kernel = kernels[-1]
  assert "__kernel void" in kernel.source and "get_global_id(0)" in kernel.source
  assert kernel.local_size[0] > 1  # work-groups of more than one work-item
  assert all(size % width == 0 for size, width in zip(kernel.global_size, kernel.local_size))
  assert kernel.global_size[0] >= 3000


@needs_device
def test_rendered_source_is_opencl_c(kernels):
  Tensor([True, False, True], device="CL").logical_not().realize()
  assert "__global uchar* restrict data0" in kernels[-1].source and "_Bool" not in kernels[-1].source
  Tensor([1.0, 2.0], device="CL").exp2().realize()
  assert "exp2(" in kernels[-1].source and "exp2f" not in kernels[-1].source
  assert "long long" not in kernels[-1].source
  Tensor([1.5, 2.5], device="CL").cast(dtypes.float16).realize()
  assert "__builtin_memcpy" not in kernels[-1].source and "vstore_half_rte" in kernels[-1].source


# ---------------------------------------------------------------- copies between CPU and CL

@needs_device
@needs_tiny_cpu
def test_copies_between_cpu_and_cl():
  rng = np.random.default_rng(2)
  x = rng.standard_normal((17, 5)).astype(np.float32)
  on_cpu = Tensor(x, device="CPU")
  on_cl = on_cpu.to("CL")
  assert on_cl.device == "CL"
  np.testing.assert_array_equal(on_cl.numpy(), x)
  back = (on_cl * 2).to("CPU")
  assert back.device == "CPU"
  np.testing.assert_array_equal(back.numpy(), x * 2)
  np.testing.assert_array_equal((Tensor(x, device="CL").to("CPU") + 1).numpy(), x + 1)
  ints = np.arange(100, dtype=np.int16)
  np.testing.assert_array_equal(Tensor(ints, device="CPU").to("CL").to("CPU").numpy(), ints)


TWO_DEVICES = """
import numpy as np
from tinycore import Device, Tensor
x = np.arange(10, dtype=np.float32)
assert Device["CL"] is not Device["CL:1"] and Device["CL"].context is not Device["CL:1"].context
np.testing.assert_array_equal((Tensor(x, device="CL").to("CL:1") + 1).numpy(), x + 1)
np.testing.assert_array_equal((Tensor(x, device="CL:1") * 2).to("CL").numpy(), x * 2)
print("ok")
"""


@needs_device
def test_two_devices_and_copies_between_them(monkeypatch):
  """CL and CL:1 are separate devices (own context and queue); a copy between them goes through host memory. On a
  machine with one device, PoCL is asked for two (POCL_DEVICES) in a child process."""
  from tinycore.errors import DeviceUnavailable
  from tiny_cl.compiler import SYSTEM_POCL_ICD
  second_usable = len(platforms.devices()) >= 2
  if second_usable:
    try: Device["CL:1"]
    except RuntimeError as error:
      if not isinstance(error.__cause__, DeviceUnavailable): raise
      second_usable = False
      if not os.path.exists(SYSTEM_POCL_ICD): pytest.skip(f"CL:1 is unavailable ({error.__cause__})")
      monkeypatch.setenv("OCL_ICD_VENDORS", SYSTEM_POCL_ICD)  # the system's PoCL alone, asked for two devices
  if not second_usable:
    first = platforms.devices()[0]
    if "Portable Computing Language" not in first.platform.name: pytest.skip("only one OpenCL device")
    monkeypatch.setenv("POCL_DEVICES", " ".join([first.name.split("-")[0]] * 2))  # "pthread pthread"
  result = subprocess.run([sys.executable, "-c", TWO_DEVICES], capture_output=True, text=True)
  assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# ---------------------------------------------------------------- the runtime pieces on their own

@needs_device
def test_hand_written_kernel_on_allocator_buffers(dev, cache_dir):
  from tiny_cl.device import CLProgram
  allocator = dev.allocator
  program = CLProgram("axpy", dev.compiler.compile_cached(AXPY_SOURCE), device=dev)
  a = np.array([1.0, 2.0, 3.0, 4.5, -1.0], np.float32)
  b = np.array([10.0, 20.0, 30.0, 40.0, 50.0], np.float32)
  out, da, db = allocator.alloc(20), allocator.alloc(20), allocator.alloc(20)
  allocator._copyin(da, memoryview(a.copy()).cast("B"))  # asynchronous: the allocator keeps the copy alive
  allocator._copyin(db, memoryview(b.copy()).cast("B"))
  assert len(allocator.pending) >= 2
  elapsed = program(out, da, db, global_size=(8, 1, 1), local_size=(8, 1, 1), vals=(5, 3), wait=True)
  assert isinstance(elapsed, float) and elapsed >= 0  # from the queue's profiling events
  result = np.empty(5, np.float32)
  allocator._copyout(memoryview(result).cast("B"), out)  # waits for the kernel (in-order queue)
  np.testing.assert_array_equal(result, a * 3 + b)
  assert allocator.pending == []
  assert program(out, db, da, global_size=(8, 1, 1), local_size=(4, 1, 1), vals=(2, 0)) is None  # queued only
  dev.synchronize()
  allocator._copyout(memoryview(result).cast("B"), out)
  np.testing.assert_array_equal(result, [1.0, 2.0, 39.0, 53.5, 47.0])
  with pytest.raises(RuntimeError, match="takes 5 arguments"):
    program(out, da, global_size=(8, 1, 1), local_size=(8, 1, 1), vals=(5, 3))


@needs_device
def test_sub_buffer_views(dev, cache_dir):
  from tinycore.device.buffer import Buffer
  alignment = dev.allocator.alignment
  count = (3 * alignment) // 4
  base = Buffer("CL", count, dtypes.float32, initial_value=np.arange(count, dtype=np.float32).tobytes())
  aligned = base.view(count // 3, dtypes.float32, alignment)  # starts at element alignment/4
  first = alignment // 4
  np.testing.assert_array_equal(aligned.numpy(), np.arange(first, first + count // 3, dtype=np.float32))
  unaligned = base.view(3, dtypes.float32, 4)  # byte offset 4: copies still work
  np.testing.assert_array_equal(unaligned.numpy(), [1.0, 2.0, 3.0])
  unaligned.copyin(memoryview(np.array([7.0, 8.0, 9.0], np.float32)).cast("B"))
  np.testing.assert_array_equal(base.numpy()[:5], [0.0, 7.0, 8.0, 9.0, 4.0])
  # a kernel can take the aligned view (a sub-buffer), but not the unaligned one
  from tiny_cl.device import CLProgram
  program = CLProgram("axpy", dev.compiler.compile_cached(AXPY_SOURCE), device=dev)
  out = dev.allocator.alloc(12)
  program(out, aligned._buf, aligned._buf, global_size=(4, 1, 1), local_size=(4, 1, 1), vals=(3, 1))
  result = np.empty(3, np.float32)
  dev.allocator._copyout(memoryview(result).cast("B"), out)
  np.testing.assert_array_equal(result, 2 * aligned.numpy()[:3])
  with pytest.raises(NotImplementedError, match="base address alignment"):
    program(out, unaligned._buf, unaligned._buf, global_size=(4, 1, 1), local_size=(4, 1, 1), vals=(3, 1))


@needs_device
def test_build_error_has_the_log_and_the_source(dev):
  with pytest.raises(RuntimeError, match="failed to build") as info:
    dev.compiler.compile("__kernel void broken(__global float* data0) { data0[0] = undefined_name; }")
  assert "undefined_name" in str(info.value) and "--- source ---" in str(info.value)


# ---------------------------------------------------------------- the compile cache

@needs_device
def test_compile_cache_hit(dev, cache_dir, monkeypatch):
  compiler = dev.compiler
  builds = []
  real_compile = type(compiler).compile
  monkeypatch.setattr(type(compiler), "compile", lambda self, src: builds.append(src) or real_compile(self, src))
  source = AXPY_SOURCE.replace("axpy", f"axpy_{int(salt())}")
  first = compiler.compile_cached(source)
  assert len(builds) == 1 and list((cache_dir / "compiled").rglob("*"))
  assert compiler.compile_cached(source) == first and len(builds) == 1  # from the disk cache: no build
  # the key names the platform, the device and its driver: another driver version misses the cache
  for part in (dev.cl_device.platform.name.strip(), dev.cl_device.name.strip(), dev.cl_device.driver_version.strip()):
    assert part in compiler.cachekey
  monkeypatch.setattr(compiler, "cachekey", compiler.cachekey + "|another driver")
  compiler.compile_cached(source)
  assert len(builds) == 2


@needs_device
def test_an_incomplete_cached_pocl_binary_is_built_again(dev, cache_dir):
  # PoCL aborts the process (an assertion) loading its binary without program.bc; one in the cache, written by an
  # older tinycore, is built again and the cache entry does not reach the driver
  from tiny_cl.compiler import is_complete_binary
  from tiny_cl.device import CLProgram
  from tinycore.plugin import Compiler
  compiler = dev.compiler
  source = AXPY_SOURCE.replace("axpy", f"axpy_{int(salt())}")
  good = compiler.compile(source)
  assert is_complete_binary(good)
  if not good.startswith(b"poclbin"): pytest.skip("the driver is not PoCL")
  incomplete = good.replace(b"/program.bc", b"/missing.bc")
  assert not is_complete_binary(incomplete)
  stale = copy.copy(compiler)
  stale.compile = lambda src: incomplete  # the entry an older tinycore wrote, under the same key
  assert Compiler.compile_cached(stale, source) == incomplete
  assert Compiler.compile_cached(compiler, source) == incomplete
  lib = compiler.compile_cached(source)
  assert is_complete_binary(lib)
  program = CLProgram(source.split("(")[0].split()[-1], lib, device=dev)
  a, b = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
  out, da, db = (dev.allocator.alloc(16) for _ in range(3))
  dev.allocator._copyin(da, memoryview(a).cast("B"))
  dev.allocator._copyin(db, memoryview(b).cast("B"))
  program(out, da, db, global_size=(4, 1, 1), local_size=(4, 1, 1), vals=(4, 2), wait=True)
  result = np.empty(4, np.float32)
  dev.allocator._copyout(memoryview(result).cast("B"), out)
  np.testing.assert_array_equal(result, a * 2 + b)


COMPUTE = """
import sys
import numpy as np
import tiny_cl.compiler
from tinycore import Tensor
if sys.argv[1] == "no-build":  # a build now would mean the binary did not come from the cache
  def refuse(self, src): raise AssertionError("the kernel was built again instead of loaded from the cache")
  tiny_cl.compiler.CLCompiler.compile = refuse
print((Tensor(np.arange(5, dtype=np.float32), device="CL") * 3.25 + 1).numpy().tolist())
"""


@needs_device
def test_a_new_process_loads_cached_binaries(cache_dir):
  first = subprocess.run([sys.executable, "-c", COMPUTE, "build"], capture_output=True, text=True)
  assert first.returncode == 0, first.stderr
  assert list((cache_dir / "compiled").rglob("*"))
  second = subprocess.run([sys.executable, "-c", COMPUTE, "no-build"], capture_output=True, text=True)
  assert second.returncode == 0, second.stderr
  assert first.stdout == second.stdout == f"{[x * 3.25 + 1 for x in range(5)]}\n"


# ---------------------------------------------------------------- dtypes: fp16 / fp64 detection

@needs_device
def test_supported_dtypes_follow_the_extensions(dev):
  extensions = set(dev.cl_device.extensions.split())
  assert (dtypes.float64 in dev.renderer.supported_dtypes) == ("cl_khr_fp64" in extensions)
  assert dev.capabilities()["fp64"] == ("cl_khr_fp64" in extensions)
  assert dev.capabilities()["fp16"] == ("cl_khr_fp16" in extensions)
  # float16 and bfloat16 compute in float and convert with core OpenCL builtins: no extension needed
  assert {dtypes.float16, dtypes.bfloat16, dtypes.bool, dtypes.int64} <= dev.renderer.supported_dtypes


def test_renderer_without_fp64_leaves_float64_out():
  from tiny_cl.renderer import CLRenderer
  renderer = CLRenderer(fp64=False)
  assert dtypes.float64 not in renderer.supported_dtypes and dtypes.float32 in renderer.supported_dtypes
  assert "cl_khr_fp64" not in renderer.prelude and "float64" in renderer.unsupported_reasons
  assert dtypes.float64 in CLRenderer(fp64=True).supported_dtypes


@needs_device
def test_float64_on_a_device_without_fp64_is_a_clear_error(dev, monkeypatch):
  from tiny_cl.renderer import CLRenderer
  monkeypatch.setattr(dev, "renderer", CLRenderer(fp64=False))
  with pytest.raises(TypeError, match="dtype float64 is not supported on device CL"):
    (Tensor([1.0, 2.0], dtype=dtypes.float64, device="CL") * salt()).realize()


@needs_device
def test_float16_conversions_match_numpy_bit_for_bit():
  every_half = np.arange(1 << 16, dtype=np.uint16)
  finite = every_half[np.isfinite(every_half.view(np.float16))]
  as_float = Tensor(finite, device="CL").bitcast(dtypes.float16).cast(dtypes.float32).numpy()
  np.testing.assert_array_equal(as_float, finite.view(np.float16).astype(np.float32))
  rng = np.random.default_rng(3)
  x = np.concatenate([rng.standard_normal(5000), rng.standard_normal(5000) * 1e-5, rng.standard_normal(5000) * 6e4,
                      [65504.0, 65520.0, 1e6, -1e6, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26]]).astype(np.float32)
  rounded = Tensor(x, device="CL").cast(dtypes.float16).numpy()
  with np.errstate(over="ignore"):  # the values past 65504 overflow to inf, as they should
    expected = x.astype(np.float16)
  np.testing.assert_array_equal(rounded.view(np.uint16), expected.view(np.uint16))


@needs_device
def test_bfloat16_storage():
  x = np.array([1.0, -2.5, 3.140625, 1e-3, 65536.0], np.float32)
  t = Tensor(x, device="CL").cast(dtypes.bfloat16)
  upper = t.bitcast(dtypes.uint16).numpy()
  expected = ((x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16).astype(np.uint16)
  np.testing.assert_array_equal(upper, expected)


# ---------------------------------------------------------------------------- cross-device assigns (COPY rules)
@needs_device
@needs_tiny_cpu
@pytest.mark.parametrize("dst, src", [("CL", "CPU"), ("CPU", "CL")])
def test_cross_device_assign_whole_view_and_lazy(dst, src):
  from tinycore.uop.ops import Ops
  from tinycore.engine.realize import run_linear
  a = Tensor.zeros(5, device=dst).contiguous().realize()
  source = Tensor(np.arange(5, dtype=np.float32), device=src).realize()
  linear = Tensor.schedule_linear(a.assign(source))
  assert [call.src[0].op for call in linear.src] == [Ops.COPY]       # a realized cross-device assign is one copy
  assert (linear.src[0].src[1].device, linear.src[0].src[2].device) == (a.device, source.device)
  run_linear(linear)
  np.testing.assert_equal(a.numpy(), np.arange(5, dtype=np.float32))
  b = Tensor.zeros(8, device=dst).contiguous().realize()
  b[2:6].assign(Tensor([0., 1., 2., 3.], device=src).realize())    # a view: copied over, scattered locally
  np.testing.assert_equal(b.numpy(), np.array([0, 0, 0, 1, 2, 3, 0, 0], dtype=np.float32))
  c = Tensor.zeros(8, device=dst).contiguous().realize()
  c.assign(Tensor.ones(8, device=src) * 2)                          # computed on its own device, then copied
  np.testing.assert_equal(c.numpy(), np.full(8, 2.0, np.float32))
  assert c.device == Device.canonicalize(dst)


# ---------------------------------------------------------------- a driver that builds no kernel
@needs_device
def test_a_driver_that_builds_no_kernel_is_unavailable_with_the_remedy(dev, monkeypatch):
  from tinycore.errors import DeviceUnavailable
  from tiny_cl.compiler import CLCompiler, PROBE_SOURCE
  compiler = CLCompiler(dev.context, dev.cl_device)
  def refuse(self, src):
    raise RuntimeError("the OpenCL driver failed to build a kernel: error: unknown target CPU 'generic'\n"
                       f"--- source ---\n{src}")
  monkeypatch.setattr(CLCompiler, "compile", refuse)
  monkeypatch.setenv("TINYCORE_DISABLE_COMPILER_CACHE", "1")
  with pytest.raises(DeviceUnavailable, match="builds no kernel.*unknown target CPU 'generic'.*OCL_ICD_VENDORS"):
    compiler.check_builds()
  assert "tinycore_probe" in PROBE_SOURCE


@needs_device
def test_the_binary_cache_key_names_the_host_cpu_for_a_cpu_driver(dev):
  from tiny_cl.compiler import host_cpu_signature
  if dev.cl_device.type & cl.device_type.CPU: assert host_cpu_signature() in dev.compiler.cachekey


LIST_AND_CHECK = """
import subprocess, sys
result = subprocess.run([sys.executable, "-m", "tinycore", "devices", "--check"], capture_output=True, text=True)
print(result.stdout); print(result.stderr, file=sys.stderr); sys.exit(result.returncode)
"""


@needs_device
def test_every_cl_device_listed_ok_passes_its_check_with_every_installed_driver(tmp_path):
  # no OCL_ICD_VENDORS: the loader lists every driver installed (PyPI's PoCL beside the system's, on a machine with
  # both); one that cannot build is listed unavailable, so --check passes for every device listed ok
  env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OCL_ICD")}
  result = subprocess.run([sys.executable, "-c", LIST_AND_CHECK], capture_output=True, text=True, env=env, timeout=900)
  assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
  rows = [line for line in result.stdout.splitlines() if " tiny-cl " in line]
  assert rows and all(" ok " in row or "unavailable:" in row for row in rows), rows


@needs_device
def test_a_kernel_search_tries_work_group_sizes_and_keeps_the_values(cache_dir, monkeypatch):
  from tinycore import Context
  from tinycore.engine import search
  monkeypatch.setattr(search, "MIN_SEARCHED_SECONDS", 0.0)
  search.searched.clear()
  search.reports.clear()
  data = np.random.default_rng(7).uniform(-1, 1, (64, 4096)).astype(np.float32)
  x = Tensor(data, device="CL").realize()
  with Context(BEAM=2): out = (x.exp() * 3 - x).numpy()
  np.testing.assert_allclose(out, np.exp(data) * 3 - data, rtol=1e-5, atol=1e-6)
  (report,) = search.reports
  # the rules' local size and every other power of two of the grid were candidates; the choice is one of them
  assert report.tried > 4 and report.best_s <= report.default_s
  local = report.opts.setting("local")
  assert local is None or all(w & (w - 1) == 0 for w in local)


@needs_device
def test_a_run_shares_memory_between_intermediates_and_computes_the_same(cache_dir):
  from tinycore import Context, GlobalCounters
  data = np.random.default_rng(8).standard_normal((256, 1024)).astype(np.float32)
  x = Tensor(data, device="CL").realize()

  def chain() -> np.ndarray:
    y = x
    for i in range(8): y = (y * 1.01 + i).contiguous()
    GlobalCounters.reset()
    before = GlobalCounters.mem_used
    y.sum(axis=0).realize()
    peak = GlobalCounters.mem_peak - before
    return y.sum(axis=0).numpy(), peak
  planned, planned_peak = chain()
  with Context(TINYCORE_NO_MEMORY_PLANNER=1): unplanned, unplanned_peak = chain()
  np.testing.assert_array_equal(planned, unplanned)
  expected = data.astype(np.float64)
  for i in range(8): expected = expected * 1.01 + i
  np.testing.assert_allclose(planned, expected.sum(axis=0), rtol=1e-4)
  assert planned_peak < unplanned_peak
