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
  a, b = Tensor(rng.standard_normal((4, 33)).astype(np.float32)), Tensor(rng.standard_normal((4, 33)).astype(np.float32))
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


def test_check_cubins_and_dump(monkeypatch, tmp_path):
  source = 'extern "C" __global__ void tc_probe(int* a) { a[threadIdx.x] = 2; }'
  monkeypatch.setenv("TINYCORE_NV_CHECK_CUBINS", "sm_80,sm_90")
  monkeypatch.setenv("TINYCORE_DUMP_BINARIES", str(tmp_path))
  compiler = NVCompiler((9, 0), ptx=True)
  assert compiler.check_archs == ("sm_80", "sm_90") and "checked sm_80,sm_90" in compiler.cachekey
  assert b".entry tc_probe" in compiler.compile(source)
  dumped = sorted(path.name.split("-")[1] for path in tmp_path.glob("tc_probe-sm_*.cubin"))
  assert dumped == ["sm_80", "sm_90"]
  assert all(path.read_bytes()[:4] == ELF_MAGIC for path in tmp_path.glob("*.cubin"))
  monkeypatch.setenv("TINYCORE_NV_CHECK_CUBINS", "compute_90")
  with pytest.raises(ValueError, match="not cubin targets"): NVCompiler((9, 0), ptx=True)
