"""Codegen edges the conformance suite does not reach: integer division by constant 0 and -1, and the work-item grid
path of the C-style renderer (used by grid devices such as OpenCL), run here on the CPU through a small C driver that
calls the rendered kernel once per work-item."""
import ctypes
import subprocess
import numpy as np
import pytest
from tinycore import Tensor
from tinycore.dtype import dtypes
from tinycore.codegen import CodegenStats
from tinycore.codegen.c_style import CStyleRenderer
from tinycore.codegen.optimize import optimize_kernel
from tiny_cpu.compiler import find_c_compiler


def kernel_sink(t: Tensor):
  """The optimized SINK of the last kernel of t's schedule, and that call's buffers (destination first)."""
  call = t.schedule_linear().src[-1]
  return optimize_kernel(call.src[0]), call.src[1:]


@pytest.mark.parametrize("divisor", [0, -1, 1, 3])
def test_integer_division_and_remainder_by_a_constant(divisor):
  # numpy: x // 0 and x % 0 are 0 for integers; x // -1 is -x; x % -1 is 0
  x = np.array([7, -7, 0, 5, -1, 2147483647], np.int32)
  with np.errstate(divide="ignore"):
    np.testing.assert_equal((Tensor(x) // divisor).numpy(), x // divisor)
    np.testing.assert_equal((Tensor(x) % divisor).numpy(), x % divisor)


def test_unsigned_division_by_a_constant_zero_is_zero():
  x = np.array([7, 0, 4000000000], np.uint32)
  with np.errstate(divide="ignore"):
    np.testing.assert_equal((Tensor(x) // 0).numpy(), x // 0)
    np.testing.assert_equal((Tensor(x) % 0).numpy(), x % 0)


@pytest.mark.parametrize("dtype, np_dtype", [(dtypes.float32, np.float32), (dtypes.float64, np.float64)])
def test_a_large_float_casts_to_uint64_exactly(dtype, np_dtype):
  # above 2**63 a float does not fit int64, so it must not be converted through it
  x = np.array([1e19, 2.0 ** 63, 5.0, 1.8e19], np_dtype)
  np.testing.assert_equal(Tensor(x).cast(dtypes.uint64).numpy(), x.astype(np.uint64))


class GridRenderer(CStyleRenderer):
  """The C-style renderer launching a grid: work-item ids arrive as the kernel's last three arguments."""
  def __init__(self, global_dims: int, max_local_size: int = 256):
    self.global_dims, self.max_local_size = global_dims, max_local_size

  def global_id(self, dim: int) -> str: return f"tc_gid{dim}"
  def extra_params(self) -> list[str]: return ["long long tc_gid0", "long long tc_gid1", "long long tc_gid2"]


DRIVER = """
void tc_grid(float* out, const float* in, long long g0, long long g1, long long g2) {
  for (long long z = 0; z < g2; z++) for (long long y = 0; y < g1; y++) for (long long x = 0; x < g0; x++)
    kernel(out, in, x, y, z);
}
"""


def launch(renderer: CStyleRenderer, sink) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """The (global, local) sizes the renderer writes the kernel for."""
  rendered = renderer.render("kernel", sink)
  return tuple(rendered.global_size), tuple(rendered.local_size)


def run_on_grid(renderer: GridRenderer, sink, out: np.ndarray, src: np.ndarray, tmp_path) -> None:
  """Compile the rendered kernel with a driver that runs every work-item of launch_dims' global size."""
  compiler = find_c_compiler()
  if compiler is None: pytest.skip("no C compiler")
  global_size, _ = launch(renderer, sink)
  source = renderer.render("kernel", sink).source + DRIVER
  (tmp_path / "grid.c").write_text(source)
  subprocess.run([*compiler, "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "grid.so"), str(tmp_path / "grid.c"),
                  "-lm"], check=True)
  lib = ctypes.CDLL(str(tmp_path / "grid.so"))
  as_ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
  lib.tc_grid(as_ptr(out), as_ptr(src), *(ctypes.c_longlong(g) for g in global_size))


TRANSPOSE_LAUNCH = {1: ((32, 1, 1), (16, 1, 1)), 2: ((512, 20, 1), (256, 1, 1)), 3: ((512, 20, 1), (256, 1, 1))}


@pytest.mark.parametrize("global_dims", [1, 2, 3])
def test_grid_kernel_maps_outer_loops_to_work_items(global_dims, tmp_path):
  x = np.arange(6000, dtype=np.float32).reshape(300, 20)
  sink, _ = kernel_sink(Tensor(x).realize().T.contiguous())
  renderer = GridRenderer(global_dims)
  # the innermost mapped loop is dimension 0; global sizes are padded up to a multiple of the local size
  assert launch(renderer, sink) == TRANSPOSE_LAUNCH[global_dims]
  out = np.full((20, 300), -1, np.float32)
  run_on_grid(renderer, sink, out, x, tmp_path)
  np.testing.assert_equal(out, x.T)


def test_grid_local_size_respects_the_device_limit():
  sink, _ = kernel_sink(Tensor(np.zeros((300, 20), np.float32)).realize().T.contiguous())
  assert launch(GridRenderer(2, max_local_size=64), sink) == ((320, 20, 1), (64, 1, 1))
  assert launch(GridRenderer(2, max_local_size=1), sink) == ((300, 20, 1), (1, 1, 1))


def test_a_reduction_loop_never_becomes_work_items(tmp_path):
  x = np.random.default_rng(0).standard_normal((37, 50)).astype(np.float32)
  sink, _ = kernel_sink(Tensor(x).realize().sum(1))
  renderer = GridRenderer(3)
  assert launch(renderer, sink) == ((64, 1, 1), (32, 1, 1))
  out = np.zeros(37, np.float32)
  run_on_grid(renderer, sink, out, x, tmp_path)
  np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)


def test_a_renderer_without_a_grid_launches_one_work_item():
  sink, _ = kernel_sink(Tensor(np.zeros((300, 20), np.float32)).realize().T.contiguous())
  assert launch(CStyleRenderer(), sink) == ((1, 1, 1), (1, 1, 1))


@pytest.mark.parametrize("m, k, n", [(6, 48, 16), (5, 7, 3), (3, 16, 64), (9, 8, 12), (18, 5, 8), (1, 33, 128),
                                     (16, 8, 3), (64, 5, 6)])
def test_matmul_and_column_sums_whose_sizes_are_not_tile_multiples(m, k, n):
  # register tiles are 16/8/4 wide: the other output dim must only be tiled when its size divides evenly
  rng = np.random.default_rng(m * 100 + n)
  a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  # the transposed left operand reads the outer output dim contiguously: that dim is the one tiled 16 wide
  at = np.ascontiguousarray(a.T)
  np.testing.assert_allclose((Tensor(at).T @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(b).sum(0).numpy(), b.sum(0), rtol=1e-4, atol=1e-4)


def test_a_c_style_renderer_with_no_overrides_renders_a_runnable_kernel(tmp_path):
  # what a third-party C-family device inherits: no grid, no extra parameters, one call runs the whole kernel
  x = np.arange(6000, dtype=np.float32).reshape(300, 20)
  sink, _ = kernel_sink(Tensor(x).realize().T.contiguous())
  source = CStyleRenderer().render("kernel", sink).source
  assert "void kernel(float* restrict data0, const float* restrict data1)" in source
  compiler = find_c_compiler()
  if compiler is None: pytest.skip("no C compiler")
  (tmp_path / "k.c").write_text(source)
  subprocess.run([*compiler, "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.c"), "-lm"],
                 check=True)
  out = np.zeros((20, 300), np.float32)
  ctypes.CDLL(str(tmp_path / "k.so")).kernel(out.ctypes.data_as(ctypes.c_void_p), x.ctypes.data_as(ctypes.c_void_p))
  np.testing.assert_equal(out, x.T)


def test_codegen_counts_each_new_kernel_once():
  x = Tensor(np.linspace(0, 1, 7 * 11 * 3, dtype=np.float32).reshape(7, 11, 3)).realize()
  before = (CodegenStats.rendered, CodegenStats.compiled)
  first = (x.exp2() * x).sqrt().numpy()
  assert (CodegenStats.rendered, CodegenStats.compiled) == (before[0] + 1, before[1] + 1)
  again = (x.exp2() * x).sqrt().numpy()  # the same kernel: no codegen at all
  assert (CodegenStats.rendered, CodegenStats.compiled) == (before[0] + 1, before[1] + 1)
  np.testing.assert_equal(first, again)
