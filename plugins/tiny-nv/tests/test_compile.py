"""Compile-only checks (no GPU, no mock): kernels of a representative set of programs, rendered as CUDA C and compiled
by NVRTC to sm_90 and sm_80 cubins (real ELF files) and to PTX; NVRTC errors carry the log; the dump of binaries."""
from __future__ import annotations
import numpy as np
import pytest
from tiny_nv.compiler import NVCompiler, NVRTCError, nvrtc_compile, nvrtc_missing

pytestmark = pytest.mark.skipif(nvrtc_missing() is not None, reason=f"{nvrtc_missing()}")
ELF_MAGIC = b"\x7fELF"


def representative_programs() -> None:
  """Programs that between them make kernels with every dtype, cast, ALU op, reduction and scalar parameter."""
  from tinycore import Tensor, dtypes
  rng = np.random.default_rng(0)
  a = Tensor(rng.standard_normal((4, 33)).astype(np.float32))
  b = Tensor(rng.standard_normal((4, 33)).astype(np.float32))
  outs = [a + b, a * b - a / b, a.exp2(), a.log2(), a.sin(), a.sqrt(), a.trunc(), a.pow(b), a.maximum(b), a.exp(),
          a.relu(), a.sigmoid(), a.softmax(-1), a.sum(), a.max(axis=1), a.mean(axis=0), a @ b.T, (a < b).where(a, b),
          a * 0.25, a.reciprocal(), -a, a.abs(), a.cumsum(1)]
  ints = Tensor(rng.integers(-50, 50, (5, 7)).astype(np.int32))
  outs += [ints // 3, ints % 4, ints // (ints + 100), ints << 2, ints >> 1, ints & 5, ints | 6, ints ^ 7, ints.sum(),
           ints.max(), ints * 3 + 1]
  for dtype in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
    cast = a.cast(dtype)
    outs += [cast, cast.cast(dtypes.float32), cast + cast, cast.sum() if dtype is not dtypes.bool else cast]
  outs += [a.bitcast(dtypes.int32), ints.bitcast(dtypes.float32), a.cast(dtypes.float16).bitcast(dtypes.int16),
           Tensor.arange(1000), Tensor.full((3, 3), 2.5, dtype=dtypes.float16) * a.cast(dtypes.float16)[:3, :3],
           Tensor.ones(70000, 2).sum(1), a.reshape(2, 2, 33).permute(2, 0, 1).contiguous()]
  for out in outs: out.realize()


@pytest.fixture(scope="module")
def kernel_sources() -> list[str]:
  """CUDA C of every kernel the representative programs make (captured from the CPU device's renders)."""
  from tinycore import Device
  from tinycore.caches import clear_caches
  from tiny_nv.renderer import CUDARenderer
  cpu, renderer, sources = Device["CPU"], CUDARenderer(), {}
  original = cpu.renderer.render

  def render_both(name, sink):
    sources[renderer.render(name, sink).source] = None
    return original(name, sink)
  clear_caches()
  cpu.renderer.render = render_both
  try: representative_programs()
  finally: del cpu.renderer.render
  assert len(sources) > 50
  return list(sources)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_every_kernel_compiles_to_a_cubin(kernel_sources, arch):
  for source in kernel_sources:
    cubin = nvrtc_compile(source, arch)
    assert cubin[:4] == ELF_MAGIC, source


def test_ptx_for_the_mock(kernel_sources):
  ptx = nvrtc_compile(kernel_sources[0], "compute_90").rstrip(b"\0").decode()
  assert ".target sm_90" in ptx and ".visible .entry" in ptx


def test_compile_error_carries_the_nvrtc_log():
  with pytest.raises(NVRTCError, match="undefined_thing") as info:
    nvrtc_compile('extern "C" __global__ void k(float* a) { a[0] = undefined_thing; }', "sm_90")
  assert "--- source ---" in str(info.value)


def test_compiler_targets_and_cache_key():
  real, mock = NVCompiler((9, 0)), NVCompiler((9, 0), ptx=True)
  assert real.target == "sm_90" and mock.target == "compute_90" and real.cachekey != mock.cachekey
  assert real.binary_extension == ".cubin" and mock.binary_extension == ".ptx"
  assert real.compile('extern "C" __global__ void k(int* a) { a[threadIdx.x] = 1; }')[:4] == ELF_MAGIC


def test_check_cubins_in_the_background_and_dump(monkeypatch, tmp_path):
  """With TINYCORE_NV_CHECK_CUBINS the PTX compiler hands each distinct kernel, cached or not, to a CubinCheck that
  compiles it to every arch named; the cubins land in TINYCORE_DUMP_BINARIES and the report counts them."""
  from tiny_nv import cubin_check
  monkeypatch.setattr(cubin_check, "_checks", {})
  monkeypatch.setenv("TINYCORE_NV_CHECK_CUBINS", "sm_80,sm_90")
  monkeypatch.setenv("TINYCORE_DUMP_BINARIES", str(tmp_path))
  compiler = NVCompiler((9, 0), ptx=True)
  assert compiler.cubin_check is not None and compiler.cubin_check.archs == ("sm_80", "sm_90")
  sources = [f'extern "C" __global__ void tc_probe{i}(int* a) {{ a[threadIdx.x] = {i}; }}' for i in range(3)]
  for source in sources + sources[:1]:  # the repeat is checked once
    assert b".entry tc_probe" in compiler.compile_cached(source)
  report = compiler.cubin_check.finish()
  assert report.kernels == 3 and report.cubins == {"sm_80": 3, "sm_90": 3} and report.failures == []
  assert "3 distinct kernels" in report.summary()
  dumped = sorted(path.name.rsplit("-", 1)[0] for path in tmp_path.glob("tc_probe*.cubin"))
  assert dumped == [f"tc_probe{i}-{arch}" for i in range(3) for arch in ("sm_80", "sm_90")]
  assert all(path.read_bytes()[:4] == ELF_MAGIC for path in tmp_path.glob("*.cubin"))


def test_a_kernel_that_fails_the_cubin_check_is_reported_and_fails_the_next_compile(monkeypatch):
  from tiny_nv import cubin_check
  monkeypatch.setattr(cubin_check, "_checks", {})
  monkeypatch.setenv("TINYCORE_NV_CHECK_CUBINS", "sm_90")
  compiler = NVCompiler((9, 0), ptx=True)
  compiler.cubin_check.submit('extern "C" __global__ void tc_broken(int* a) { a[0] = undefined_thing; }')
  report = compiler.cubin_check.finish()
  assert report.kernels == 1 and [f.kernel for f in report.failures] == ["tc_broken"]
  assert "undefined_thing" in report.failures[0].error and "1 FAILED: tc_broken (sm_90)" in report.summary()
  with pytest.raises(NVRTCError, match="tc_broken to a sm_90 cubin"):  # a good kernel: the earlier failure is raised
    compiler.compile_cached('extern "C" __global__ void tc_fine(int* a) { a[0] = 1; }')


def test_bad_check_archs_are_refused(monkeypatch):
  monkeypatch.setenv("TINYCORE_NV_CHECK_CUBINS", "compute_90")
  with pytest.raises(ValueError, match="not cubin targets"): NVCompiler((9, 0), ptx=True)


@pytest.mark.parametrize("broken", [False, True])
def test_the_pytest_plugin_reports_the_count_and_fails_on_an_nvrtc_error(tmp_path, broken):
  """`pytest -p tiny_nv.pytest_cubins --nv-check-cubins=sm_90` on NV (the mock): the summary counts the kernels, and
  one kernel NVRTC cannot compile to a cubin fails the whole run."""
  import os
  import subprocess
  import sys
  bad = ('extern "C" __global__ void tc_broken(int* a) { a[0] = undefined_thing; }' if broken else "")
  (tmp_path / "test_two_kernels.py").write_text(f'''
from tinycore import Tensor
from tiny_nv.compiler import NVCompiler
def test_kernels():
  assert (Tensor([1.0, 2.0], device="NV") * 3).tolist() == [3.0, 6.0]
  assert Tensor([1, 2, 3], device="NV").sum().item() == 6
  if {broken!r}: NVCompiler((9, 0), ptx=True).cubin_check.submit({bad!r})
''')
  env = {**os.environ, "TINYCORE_NV_EMULATE": "1", "TINYCORE_DUMP_BINARIES": str(tmp_path / "bin")}
  env.pop("TINYCORE_NV_CHECK_CUBINS", None)
  command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tiny_nv.pytest_cubins",
             "--nv-check-cubins=sm_90", str(tmp_path)]
  result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)
  summary = [line for line in result.stdout.splitlines() if "distinct kernels compiled" in line]
  assert len(summary) == 1, result.stdout + result.stderr
  kernels = int(summary[0].split("tiny-nv: ")[1].split()[0])
  cubins = list((tmp_path / "bin").glob("*-sm_90-*.cubin"))
  assert kernels >= 3 and len(cubins) == kernels - broken  # the helpers and two kernels, each one cubin
  assert (result.returncode != 0) == broken, result.stdout
  if broken: assert "FAILED: tc_broken (sm_90)" in summary[0] and "undefined_thing" in result.stdout
