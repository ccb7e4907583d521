"""The CPU's hot kernels: register tiles and strips shaped by the machine (KernelTarget), fused multiply-add
accumulation, NaN-keeping vectorized max with both compilers, and linking with the system linker."""
from __future__ import annotations
import os
import re
import shutil
import subprocess
import sys
import attrs
import numpy as np
import pytest
from tinycore import Tensor
from tinycore.codegen.c_style import CStyleRenderer
from tinycore.codegen.optimize import DEFAULT_TARGET, KernelTarget, optimize_kernel, register_tile, strip_widths
from tinycore.uop.ops import Ops

pytest.importorskip("tiny_cpu", reason="tiny-cpu is not installed")
from tiny_cpu.compiler import CPUCompiler, find_c_compiler, find_linker  # noqa: E402
from tiny_cpu.device import CPUProgram  # noqa: E402
from tiny_cpu.renderer import CPURenderer, host_target  # noqa: E402

pytestmark = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler (install clang or gcc, or set CC)")
AVX512 = KernelTarget(vector_lanes=16, vector_registers=32, cores=2, strip_vectors=32)


def kernel_of(t: Tensor):
  return next(call.src[0] for call in t.schedule_linear().src if call.src[0].op is Ops.SINK)


def upcast_sizes(sink) -> list[int]:
  ranges = sorted((u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] == "upcast"), key=lambda r: r.arg[0])
  return [r.src[0].arg for r in ranges]


def test_register_tile_and_strips_follow_the_target():
  assert register_tile(AVX512) == (32, 8)                       # two 16-lane vectors per row, 8 rows in 32 registers
  assert register_tile(KernelTarget(8, 16)) == (16, 4)
  assert strip_widths(4096, AVX512)[0] == 512                   # 32 vectors of accumulators
  assert strip_widths(512, AVX512)[0] == 256                    # ... but one strip per core
  assert register_tile(DEFAULT_TARGET) == (16, 4)               # other devices keep the tiles they had


def test_matmul_tile_puts_the_contiguous_dim_innermost_and_columns_outside():
  a, b = Tensor(np.ones((64, 96), np.float32)).realize(), Tensor(np.ones((96, 128), np.float32)).realize()
  tiled = optimize_kernel(kernel_of(a @ b), AVX512)
  assert upcast_sizes(tiled) == [8, 32]                         # rows, then columns (whole vectors innermost)
  loops = sorted((u for u in tiled.toposort() if u.op is Ops.RANGE and u.arg[1] == "loop"), key=lambda r: r.arg[0])
  assert [r.src[0].arg for r in loops] == [128 // 32, 64 // 8]  # the column-panel loop is the outer one


def test_column_sum_strip_is_a_vectorized_loop():
  m = Tensor(np.ones((64, 4096), np.float32)).realize()
  source = CPURenderer(2, AVX512).render("colsum", optimize_kernel(kernel_of(m.sum(0)), AVX512)).source
  assert "[512];" in source and "#pragma omp simd\n" in source and "#pragma GCC unroll" not in source


def test_a_scan_block_is_a_strip_of_outputs_sharing_each_load():
  """A block scan out[i] = sum over j of where(j <= i, x[j], 0) reads x[j] for every i: with broadcast strips the
  32 outputs of a block are one upcast dim (each loaded value added into all of them); without, one output per pass
  over the block. Values (with inf, NaN and a length that is no whole number of blocks) match numpy's cumsum."""
  x = Tensor(np.ones((64, 1024), np.float32)).realize()
  [scan] = [call.src[0] for call in x.cumsum(1).schedule_linear().src
            if call.src[0].op is Ops.SINK and any(u.op is Ops.REDUCE for u in call.src[0].toposort())][:1]
  assert 32 in upcast_sizes(optimize_kernel(scan, attrs.evolve(AVX512, broadcast_strips=True)))
  assert 32 not in upcast_sizes(optimize_kernel(scan, AVX512))
  values = np.random.default_rng(1).standard_normal((5, 1000)).astype(np.float32)
  values[1, 10], values[2, 500], values[3, 999] = np.inf, np.nan, -np.inf
  for axis in (0, 1):
    np.testing.assert_allclose(Tensor(values).cumsum(axis).numpy(), np.cumsum(values, axis), rtol=1e-4, atol=1e-3)


def test_a_cat_is_one_copy_loop_per_piece():
  """A cat's kernel reads where(r < 1024, a, -0) + where(1024 <= r < 2048, b, -0) + ...: cut at its gates it is one
  loop per piece, each a plain copy with no gate left; values (with -0.0, NaN, inf, odd widths, a pad's borders and
  a reflect pad) match numpy."""
  pieces = [Tensor(np.ones((64, 1024), np.float32)).realize() for _ in range(4)]
  target = attrs.evolve(AVX512, split_gates=True)
  sink = optimize_kernel(kernel_of(pieces[0].cat(*pieces[1:], dim=1)), target)
  parts = sorted(r.src[0].arg for r in sink.toposort() if r.op is Ops.RANGE and r.arg[1] == "part")
  assert parts == [1024] * 4
  source = CPURenderer(2, target).render("cat", sink).source
  loops = source[source.index("for (long long ridx0"):]
  assert "?" not in loops and loops.count("for (long long ridx") == 5
  assert not any(r.arg[1] == "part" for r in optimize_kernel(kernel_of(pieces[0].cat(pieces[1], dim=1)), AVX512)
                 .toposort() if r.op is Ops.RANGE)
  rng = np.random.default_rng(3)
  a, b, c = (rng.standard_normal((3, w)).astype(np.float32) for w in (5, 17, 40))
  a[0, 0], b[1, 3], c[2, 39] = -0.0, np.nan, -np.inf
  got = Tensor(a).cat(Tensor(b), Tensor(c), dim=1).numpy()
  np.testing.assert_array_equal(got, np.concatenate([a, b, c], 1))
  assert np.signbit(got[0, 0])
  x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
  np.testing.assert_array_equal(Tensor(x).pad((2, 3, 1, 1), value=-1.5).numpy(),
                                np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 3)), constant_values=-1.5))
  np.testing.assert_array_equal(Tensor(x).pad((2, 3, 1, 1), mode="reflect").numpy(),
                                np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 3)), mode="reflect"))
  np.testing.assert_array_equal(Tensor(x)[:, :, :, 2:9].pad((1, 1)).numpy(),
                                np.pad(x[..., 2:9], [(0, 0)] * 3 + [(1, 1)]))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float16, np.float32])
def test_a_table_lookup_of_any_dtype_is_one_load_per_element(dtype):
  """t[ids] is a select-and-sum over the table's rows; summed in the table's own dtype (one term is not zero, so it is
  exact) the codegen reads it as one load at the picked row. Summed widened (uint8 in uint32, as .sum() does) it was
  a compare per table row: a (32000, 1152) uint8 table, 16 rows picked, took 35 ms instead of 2 us."""
  rng = np.random.default_rng(5)
  table = rng.integers(-100, 100, (300, 24)).astype(dtype)
  ids = np.array([[0, 299, 7], [-1, 150, 3]], np.int32)
  picked = Tensor(table)[Tensor(ids)]
  sink = optimize_kernel(kernel_of(picked), attrs.evolve(AVX512, gathers=True))
  assert not any(u.op is Ops.REDUCE for u in sink.toposort())
  np.testing.assert_array_equal(picked.numpy(), table[ids])


def test_a_cat_along_the_outer_dim_is_cut_and_each_piece_is_threaded():
  """A cat along rows and a stack are cut at their outermost loop too (a masked-off lane of a vectorized gated load
  outside its buffer costs the CPU a microcode assist: such a cat ran 80 ms for 16 MB): one copy loop per input,
  each piece's first loop shared by the threads; a pad of the rows only keeps the columns innermost."""
  pieces = [Tensor(np.arange(i * 4096, (i + 1) * 4096, dtype=np.float32).reshape(64, 64)).realize() for i in range(4)]
  for t in (pieces[0].cat(*pieces[1:], dim=0), pieces[0].stack(*pieces[1:])):
    sink = optimize_kernel(kernel_of(t), attrs.evolve(AVX512, split_gates=True))
    assert not any(r.op is Ops.RANGE and r.arg[1] == "loop" for r in sink.toposort())
    renderer = CPURenderer(2, attrs.evolve(AVX512, split_gates=True))
    renderer.parallel_threshold = 1
    source = renderer.render("cat", sink).source
    assert not re.search(r"\? data\d\[", source) and source.count("= core_id * tc_share") == 4  # no gated load
    np.testing.assert_array_equal(t.numpy(), np.arange(4 * 4096, dtype=np.float32).reshape(t.shape))
  x = Tensor(np.ones((2, 3, 8, 16), np.float32)).realize()
  source = render_tiled(x.pad((0, 0, 1, 1)).contiguous(), attrs.evolve(AVX512, split_gates=True))
  innermost = re.findall(r"for \(long long ridx\d+ = 0; ridx\d+ < (\d+)ll", source)
  assert innermost[-1] == "16"                               # the last piece's columns: whole rows, not a stride
  expected = np.pad(np.ones((2, 3, 8, 16)), [(0, 0), (0, 0), (1, 1), (0, 0)])
  np.testing.assert_array_equal(x.pad((0, 0, 1, 1)).numpy(), expected)


@pytest.mark.parametrize("dim", [0, 1])
def test_every_load_at_a_gathered_address_is_gated_by_its_range(dim):
  """A scatter picks, per output element, the last index row that names it (a max over positions: -1 when none
  does) and reads the values there: that read, at an address computed from the pick, must be gated by
  0 <= pick < rows, not only by the element's own bounds (ungated, an unmatched element read data1[-4 + col], before
  the buffer: a segfault when the page before was unmapped)."""
  rng = np.random.default_rng(dim)
  x, index = rng.standard_normal((4, 5)).astype(np.float32), rng.integers(0, (4, 5)[dim], size=(3, 4))
  src = rng.standard_normal((3, 4)).astype(np.float32)
  out = Tensor(x).scatter(dim, Tensor(index), Tensor(src))
  sinks = [optimize_kernel(call.src[0], attrs.evolve(AVX512, gathers=True)) for call in out.schedule_linear().src
           if call.src[0].op is Ops.SINK]
  gathered = [u for sink in sinks for u in sink.toposort()
              if u.op is Ops.INDEX and any(v.op is Ops.LOAD for v in u.src[1].toposort())]
  assert gathered
  for index_node in gathered:
    picks = {v for v in index_node.src[1].toposort() if v.op is Ops.LOAD}
    assert len(index_node.src) == 3 and picks & set(index_node.src[2].toposort()), index_node
  expected = x.copy()
  for i in range(3):
    for j in range(4):
      expected[(index[i, j], j) if dim == 0 else (i, index[i, j])] = src[i, j]
  np.testing.assert_array_equal(out.numpy(), expected)


def test_matmul_accumulates_with_fused_multiply_add():
  a, b = Tensor(np.ones((8, 16), np.float32)).realize(), Tensor(np.ones((16, 32), np.float32)).realize()
  source = CPURenderer(1, AVX512).render("mm", optimize_kernel(kernel_of(a @ b), AVX512)).source
  assert "tc_fmaf(" in source


def test_sum_of_products_hoisted_out_of_the_reduce_loop():
  """A product that does not depend on the inner reduced axis is computed once, in its own block, and accumulated
  from that block's array (it is no fused multiply-add of factors out of scope there: that did not compile)."""
  a = np.arange(8, dtype=np.float32).reshape(2, 4, 1) + 1
  b = np.array([1, -2, 3, 0.5], np.float32).reshape(1, 4, 1)
  out = (Tensor(a).expand(2, 4, 3) * Tensor(b).expand(2, 4, 3)).sum([0, 2]).numpy()
  np.testing.assert_allclose(out, (np.broadcast_to(a, (2, 4, 3)) * b).sum((0, 2)), rtol=1e-6)


@pytest.mark.parametrize("n", [256, 384])
def test_matmul_values_with_the_machine_tile(n):
  rng = np.random.default_rng(n)
  x, y = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)
  batched = rng.standard_normal((3, 64, n)).astype(np.float32)
  np.testing.assert_allclose((Tensor(batched) @ Tensor(y)).numpy(), batched @ y, rtol=1e-4, atol=1e-4)


def test_column_and_row_sums_match_numpy():
  m = np.random.default_rng(1).standard_normal((1024, 2048)).astype(np.float32)
  t = Tensor(m)
  np.testing.assert_allclose(t.sum(0).numpy(), m.sum(0), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(t.sum(1).numpy(), m.sum(1), rtol=1e-4, atol=1e-3)


def test_row_reductions_use_lane_accumulators():
  m = Tensor(np.ones((8, 4096), np.float32)).realize()
  source = CPURenderer(2, AVX512).render("rowsum", optimize_kernel(kernel_of(m.sum(1)), AVX512)).source
  assert "float acc2_lanes[64];" in source and "ridx1_lane" in source and "reduction(" not in source
  odd = Tensor(np.ones((8, 100), np.float32)).realize()  # not a multiple of the lanes: the omp simd reduction
  assert "_lanes" not in CPURenderer(2, AVX512).render("odd", kernel_of(odd.sum(1))).source


def test_lane_accumulators_keep_nan_inf_and_integer_wrapping():
  rng = np.random.default_rng(3)
  m = rng.standard_normal((6, 1024)).astype(np.float32)
  m[1, 5], m[2, 700], m[3, 63], m[4, 64] = np.nan, np.inf, -np.inf, np.nan
  m[5, :] = -np.inf
  t = Tensor(m)
  np.testing.assert_allclose(t.sum(1).numpy(), m.sum(1), rtol=1e-5, atol=1e-4)
  np.testing.assert_equal(t.max(1).numpy(), m.max(1))
  np.testing.assert_equal(t.min(1).numpy(), m.min(1))
  big = np.full((2, 1024), 2 ** 30, np.int32)
  np.testing.assert_equal(Tensor(big).sum(1, dtype="int32").numpy(), big.sum(1, dtype=np.int32))


def test_host_target_reads_the_cpu():
  target = host_target(3)
  assert target.cores == 3 and target.vector_lanes in (4, 8, 16) and target.vector_registers in (16, 32)


MAX_WITH_NAN = """
import numpy as np
from tinycore import Tensor
x = np.arange(4096, dtype=np.float32); x[1234] = np.nan
rows = np.ones((4, 4096), np.float32); rows[2, 7] = np.nan
cube = np.ones((6, 5, 64), np.float32); cube[3, 1, 9] = np.nan   # a max over two loops that do not merge
print(np.isnan(Tensor(cube).max((0, 2)).numpy()).tolist())
print(np.isnan(Tensor(x).max().numpy()), np.isnan(Tensor(rows).max(1).numpy()).tolist(), Tensor(-x).min().numpy())
"""


@pytest.mark.parametrize("compiler", ["clang", "gcc"])
def test_vectorized_max_keeps_nan_with_each_compiler(compiler, tmp_path):
  if shutil.which(compiler) is None: pytest.skip(f"{compiler} is not installed")
  env = dict(os.environ, CC=compiler, TINYCORE_DEVICE="CPU", TINYCORE_CACHE_DIR=str(tmp_path))
  out = subprocess.run([sys.executable, "-c", MAX_WITH_NAN], env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr
  first, second = out.stdout.strip().splitlines()
  assert first == "[False, True, False, False, False]"
  assert second.split("[")[0].strip() == "True"
  assert "[False, False, True, False]" in second and second.endswith("nan")


ADD_ONE = ("void add_one(float* restrict data0, const float* restrict data1) { data0[0] = sqrtf(data1[0]) + 1.0f; }\n"
           "void add_one_args(const unsigned long long *a, long long core, long long cores) "
           "{ add_one((float*)a[0], (const float*)a[1]); }")


@pytest.mark.parametrize("linker", ["ld", "driver"])
def test_kernels_link_with_the_system_linker_or_the_driver(linker, monkeypatch, tmp_path):
  if linker == "ld" and shutil.which("ld") is None: pytest.skip("no system linker")
  monkeypatch.setenv("TINYCORE_CPU_LINKER", linker)
  monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
  compiler = CPUCompiler()
  assert (compiler.linker is None) == (linker == "driver") and (find_linker() is None) == (linker == "driver")
  program = CPUProgram("add_one", compiler.compile("#include <math.h>\n" + ADD_ONE))
  src, dst = np.array([16.0], np.float32), np.zeros(1, np.float32)
  program.run_words([dst.ctypes.data, src.ctypes.data])
  assert dst[0] == 5.0


PACKING = KernelTarget(vector_lanes=16, vector_registers=32, cores=2, strip_vectors=32, panel_bytes=512 * 1024)


def render_tiled(t: Tensor, target: KernelTarget = PACKING) -> str:
  return CPURenderer(2, target).render("k", optimize_kernel(kernel_of(t), target)).source


def test_strided_matmul_panel_is_packed_once_per_column_panel():
  a, b = Tensor(np.ones((64, 512), np.float32)).realize(), Tensor(np.ones((512, 1024), np.float32)).realize()
  source = render_tiled(a @ b)
  # B's 32-column panel (rows 1024 floats apart) is copied into a contiguous [K][32] buffer, A's rows are not
  assert source.count("__attribute__((aligned(64)))") == 1 and "[512][32] __attribute__" in source
  assert source.index("panel") < source.index("acc")      # the copy comes before the row-block loop's accumulators
  assert "panel" not in render_tiled(a @ b, AVX512)        # a target with no panel budget packs nothing
  small = KernelTarget(16, 32, 2, 32, panel_bytes=512 * 32 * 4 - 4)
  assert "panel" not in render_tiled(a @ b, small)        # nor one whose budget the panel exceeds


def test_narrow_matmul_is_not_packed():
  a, b = Tensor(np.ones((64, 512), np.float32)).realize(), Tensor(np.ones((512, 64), np.float32)).realize()
  assert "panel" not in render_tiled(a @ b)               # rows 64 floats apart: already cache friendly


@pytest.mark.parametrize("shape", [(96, 512, 320), (40, 300, 288), (8, 1024, 256)])
def test_packed_matmul_values(shape):
  m, k, n = shape
  rng = np.random.default_rng(k)
  x, y = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)
  batched = rng.standard_normal((3, m, k)).astype(np.float32)
  np.testing.assert_allclose((Tensor(batched) @ Tensor(y)).numpy(), batched @ y, rtol=1e-4, atol=1e-4)


def test_cache_sizes_and_panel_budget():
  from tiny_cpu.renderer import l2_cache_bytes, panel_budget, parse_cache_size
  assert parse_cache_size("1024K\n") == 1 << 20 and parse_cache_size("2M") == 2 << 20 and parse_cache_size("512") == 512
  assert l2_cache_bytes() >= 64 * 1024
  assert panel_budget(256 * 1024) == 192 * 1024 and panel_budget(32 << 20) == 1024 * 1024
  assert host_target(1).panel_bytes == panel_budget(l2_cache_bytes())


def test_padded_conv_packs_its_masked_input_and_drops_the_repeated_mask():
  x, w = Tensor(np.ones((2, 16, 12, 12), np.float32)).realize(), Tensor(np.ones((32, 16, 3, 3), np.float32)).realize()
  source = render_tiled(x.conv2d(w, padding=1))
  tile = source[source.index("acc"):]
  # the padding mask is evaluated once per element while packing: the register tile reads the panel unmasked
  assert "panel" in source and " ? " in source[:source.index("acc")] and " ? " not in tile
  assert " ? " in render_tiled(x.conv2d(w, padding=1), AVX512)  # without packing the gated load stays in the tile
  # the copy's innermost loop (an image row, 12 here: a vector and a remainder) is an `omp simd` loop, which gcc's -O2
  # cost model would otherwise leave scalar
  copy = source[:source.index("acc")]
  assert copy.count("#pragma omp simd") == 1
  assert re.search(r"#pragma omp simd\n *for \(long long ridx\d+ = 0; ridx\d+ < 12ll", copy)


@pytest.mark.parametrize("shape", [(2, 16, 12, 12, 32, 1), (1, 8, 28, 28, 16, 1), (2, 4, 9, 10, 8, 2),
                                   (1, 3, 8, 8, 4, 0)])
def test_packed_conv_values(shape):
  check_conv3x3(shape, seed=shape[1])


def check_conv3x3(shape: tuple[int, ...], seed: int, strides: tuple[int, ...] = (1,)) -> None:
  """conv2d of random (n, cin, h, w) images with (cout, cin, 3, 3) weights against numpy, at each stride."""
  n, cin, h, wd, cout, pad = shape
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, cin, h, wd)).astype(np.float32)
  w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
  for stride in strides:
    expected = np.einsum("nchwij,ocij->nohw", windows[:, :, ::stride, ::stride], w)
    np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=pad, stride=stride).numpy(), expected,
                               rtol=1e-4, atol=1e-4)


def test_where_of_a_load_under_the_same_gate_is_the_load():
  from tinycore.codegen.optimize import gated_loads
  from tinycore.uop.pattern import graph_rewrite
  x = Tensor(np.ones((2, 3, 5, 5), np.float32)).realize()
  kernel = kernel_of(x.pad(((0, 0), (0, 0), (1, 1), (1, 1))) * 2)
  wheres = lambda k: [u for u in k.toposort() if u.op is Ops.WHERE]  # noqa: E731
  rewritten = graph_rewrite(kernel, gated_loads)
  assert len(wheres(kernel)) == 1 and not wheres(rewritten)                          # pad's mask, once
  assert any(u.op is Ops.INDEX and len(u.src) > 2 for u in rewritten.toposort())   # the load keeps its gate


def test_a_long_dim_no_tile_width_divides_is_tiled_with_a_ragged_last_block():
  """x @ w.T over a vocabulary of 50257 (a model's head) has no width dividing its columns: tiled anyway over its
  packed panel, the last block's loads and stores gated to the size (untiled it read all of w once per row of x)."""
  rng = np.random.default_rng(5)
  x, w = rng.standard_normal((24, 96)).astype(np.float32), rng.standard_normal((531, 96)).astype(np.float32)
  sink = optimize_kernel(kernel_of(Tensor(x).realize() @ Tensor(w).realize().T), PACKING)
  assert upcast_sizes(sink) == [8, 32]
  source = CPURenderer(2, PACKING).render("k", sink).source
  assert "<531ll)" in source and re.search(r"if \(\w+\[ridx\d+\]\[ridx\d+\]\) data0\[", source)  # a gated store
  np.testing.assert_allclose((Tensor(x) @ Tensor(w).T).numpy(), x @ w.T, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((Tensor(x) @ Tensor(w.T.copy())).numpy(), x @ w.T, rtol=1e-4, atol=1e-4)
  short = optimize_kernel(kernel_of(Tensor(x).realize() @ Tensor(w[:131]).realize().T), PACKING)
  assert upcast_sizes(short) == []                           # short dims stay untiled (RAGGED_TILE_MIN)


def test_matmul_with_a_transposed_operand_tiles_over_its_packed_panel():
  a, b = Tensor(np.ones((64, 256), np.float32)).realize(), Tensor(np.ones((128, 256), np.float32)).realize()
  kernel = kernel_of(a @ b.T)                                 # both operands run along k: no contiguous output dim
  assert upcast_sizes(optimize_kernel(kernel, AVX512)) == []  # without packing: one dot product per output
  assert upcast_sizes(optimize_kernel(kernel, PACKING)) == [8, 32]
  tiled = optimize_kernel(kernel, PACKING)
  outermost = min((u for u in tiled.toposort() if u.op is Ops.RANGE and u.arg[1] == "loop"), key=lambda r: r.arg[0])
  assert outermost.src[0].arg == 128 // 32  # the column blocks: each panel is packed once, not once per row block
  source = render_tiled(a @ b.T)
  assert "[256][32] __attribute__((aligned(64)))" in source and "tc_fmaf(" in source
  assert source.index("panel") < source.index("acc")
  long = Tensor(np.ones((64, 8192), np.float32)).realize()  # a [8192][32] panel exceeds the budget: 16 columns
  assert upcast_sizes(optimize_kernel(kernel_of(long @ long.T), PACKING)) == [8, 16]
  longer = Tensor(np.ones((64, 16384), np.float32)).realize()  # [16384][16] too: no tile
  assert upcast_sizes(optimize_kernel(kernel_of(longer @ longer.T), PACKING)) == []


@pytest.mark.parametrize("shape", [(64, 256, 128), (24, 100, 96), (3, 64, 32), (16, 8192, 32)])
def test_transposed_matmul_values(shape):
  m, k, n = shape
  atol = 1e-4 * max(1.0, (k / 256) ** 0.5)  # float32 sums of k products: the rounding grows with sqrt(k)
  rng = np.random.default_rng(m)
  x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x) @ Tensor(w).T).numpy(), x @ w.T, rtol=1e-4, atol=atol)
  batched = rng.standard_normal((2, m, k)).astype(np.float32)
  np.testing.assert_allclose((Tensor(batched) @ Tensor(w).T).numpy(), batched @ w.T, rtol=1e-4, atol=atol)


def test_an_image_row_narrower_than_the_tile_is_one_tile_row():
  x, w = Tensor(np.ones((2, 16, 28, 28), np.float32)).realize(), Tensor(np.ones((32, 16, 3, 3), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(x.conv2d(w, padding=1)), AVX512)) == [8, 28]  # not 8 x 4
  a, b = Tensor(np.ones((64, 96), np.float32)).realize(), Tensor(np.ones((96, 24), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(a @ b), AVX512)) == [8, 24]
  rng = np.random.default_rng(24)
  x, y = rng.standard_normal((40, 96)).astype(np.float32), rng.standard_normal((96, 24)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)


def test_image_rows_stack_into_whole_vectors_where_the_panel_is_packed():
  # 4 rows of 28 are 7 whole vectors (no 8- and 4-lane parts), 4 output channels beside them fill the 32 registers
  x, w = Tensor(np.ones((2, 16, 28, 28), np.float32)).realize(), Tensor(np.ones((32, 16, 3, 3), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(x.conv2d(w, padding=1)), PACKING)) == [4, 4, 28]
  wide, w8 = Tensor(np.ones((1, 8, 56, 56), np.float32)).realize(), Tensor(np.ones((8, 8, 3, 3), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(wide.conv2d(w8, padding=1)), PACKING)) == [4, 2, 56]  # 2 rows of 56
  source = render_tiled(x.conv2d(w, padding=1))
  assert "[16][3][3][4][28] __attribute__" in source  # the packed panel: 4 image rows per input channel and tap
  # 14 rows of 28: no row count that divides 14 makes whole vectors within the tile, so one row as before
  odd = Tensor(np.ones((1, 16, 14, 28), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(odd.conv2d(w, padding=1)), PACKING)) == [8, 28]
  # an AVX2-sized register file has no room for a second tile row beside 7 vectors: 4 x 4 as before
  avx2 = KernelTarget(vector_lanes=8, vector_registers=16, cores=2, strip_vectors=32, panel_bytes=512 * 1024)
  assert upcast_sizes(optimize_kernel(kernel_of(x.conv2d(w, padding=1)), avx2)) == [4, 4]


@pytest.mark.parametrize("shape", [(2, 16, 28, 28, 32, 1, 1), (1, 8, 56, 56, 8, 1, 1), (2, 8, 12, 28, 4, 0, 1),
                                   (1, 4, 28, 28, 8, 0, 1), (1, 6, 20, 20, 8, 1, 1), (1, 8, 28, 28, 8, 1, 2)])
def test_stacked_row_conv_values(shape):
  # stacked tiles (with a fused bias and relu) with padding, without, a 1x1 kernel, rows of 20 (4 of them: 5 vectors)
  # and groups
  n, cin, h, wd, cout, pad, groups = shape
  rng = np.random.default_rng(h + wd)
  size = 1 if wd == 28 and pad == 0 and cin == 4 else 3
  x = rng.standard_normal((n, cin, h, wd)).astype(np.float32)
  w = rng.standard_normal((cout, cin // groups, size, size)).astype(np.float32)
  bias = rng.standard_normal(cout).astype(np.float32)
  padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (size, size), axis=(2, 3))
  per_group = cin // groups
  expected = np.concatenate([np.einsum("nchwij,ocij->nohw", windows[:, g * per_group:(g + 1) * per_group],
                                       w[g * (cout // groups):(g + 1) * (cout // groups)]) for g in range(groups)], 1)
  expected = np.maximum(expected + bias[None, :, None, None], 0)
  got = Tensor(x).conv2d(Tensor(w), Tensor(bias), padding=pad, groups=groups).relu().numpy()
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_a_gated_load_in_a_register_tile_selects_its_address():
  # a padded conv whose input panel is not packed reads the input, gated, inside the unrolled tile: one load from the
  # element or from a zero cell, no branch around it (which kept both compilers' SLP vectorizer out)
  x, w = Tensor(np.ones((2, 16, 12, 12), np.float32)).realize(), Tensor(np.ones((32, 16, 3, 3), np.float32)).realize()
  source = render_tiled(x.conv2d(w, padding=1), AVX512)
  tile = source[source.index("acc"):]
  assert "? data1 + " in tile and ": &tc_zero_float)" in tile and "? data1[" not in tile
  # outside a tile (an elementwise pad) the gated load stays a conditional read
  assert "? data1[" in render_tiled(x.pad(((0, 0), (0, 0), (1, 1), (1, 1))) + 1, AVX512)


def test_a_tile_stored_with_a_stride_is_staged_contiguously_first():
  # output channels as the tile's columns (196 floats apart in the output): the accumulators are copied into a
  # contiguous array, kept by an empty asm, and stored from it (gcc vectorizes the tile from that copy)
  x, w = Tensor(np.ones((8, 32, 14, 14), np.float32)).realize(), Tensor(np.ones((32, 32, 3, 3), np.float32)).realize()
  source = render_tiled(x.conv2d(w, padding=1))
  stored = source[source.index("__asm__ volatile"):]
  assert re.search(r"= stage\d+\[ridx\d+\]\[ridx\d+\];", stored) and "= acc" not in stored
  a, b = Tensor(np.ones((64, 1024), np.float32)).realize(), Tensor(np.ones((1024, 64), np.float32)).realize()
  assert "stage" not in render_tiled(a @ b)  # a contiguous tile row is stored straight from its accumulators
  plain = CStyleRenderer().render("k", optimize_kernel(kernel_of(x.conv2d(w, padding=1)), PACKING)).source
  assert "stage" not in plain  # a renderer without a staging statement stores as before


@pytest.mark.parametrize("shape", [(2, 32, 14, 14, 32, 1), (3, 8, 7, 9, 16, 1), (2, 16, 14, 14, 32, 2)])
def test_conv_with_a_gated_tile_load_values(shape):
  check_conv3x3(shape, seed=shape[2] * shape[3], strides=(1, 2))


def test_a_narrow_row_with_no_tile_rows_is_left_alone():
  m = np.random.default_rng(17).standard_normal((33, 17)).astype(np.float32)
  assert upcast_sizes(optimize_kernel(kernel_of(Tensor(m).max(0)), PACKING)) == []   # 17 columns: no strip of 17
  np.testing.assert_allclose(Tensor(m).max(0).numpy(), m.max(0))
  np.testing.assert_allclose(Tensor(m).softmax(0).numpy(), np.exp(m - m.max(0)) / np.exp(m - m.max(0)).sum(0),
                             rtol=1e-5, atol=1e-6)


def test_register_tile_loads_the_lane_invariant_factor_first():
  # gcc's SLP vectorizer needs the factor shared by a tile row's lanes (the weight) written before each lane's own
  x, w = Tensor(np.ones((8, 64, 28, 28), np.float32)).realize(), Tensor(np.ones((64, 64, 3, 3), np.float32)).realize()
  source = render_tiled(x.conv2d(w, padding=1), host_target(2))
  tile = source[source.index("for (long long ridx4"):]
  tile = tile[tile.index("#pragma GCC unroll"):]
  assert tile.index("data2[") < tile.index("panel")


@pytest.mark.skipif(shutil.which("gcc") is None or sys.platform != "linux", reason="needs gcc on Linux")
def test_gcc_vectorizes_every_row_of_the_conv_tile(tmp_path):
  with open("/proc/cpuinfo") as cpuinfo: flags = next((line for line in cpuinfo if line.startswith("flags")), "")
  if not {"avx512f", "fma"} <= set(flags.split()): pytest.skip("the tile shape checked here is AVX-512's")
  x, w = Tensor(np.ones((8, 64, 28, 28), np.float32)).realize(), Tensor(np.ones((64, 64, 3, 3), np.float32)).realize()
  source_path = tmp_path / "conv.c"
  source_path.write_text(render_tiled(x.conv2d(w, padding=1), host_target(2)))
  flags_c = [f for f in CPUCompiler(["gcc"]).flags if f not in ("-shared", "-fPIC")]
  out = subprocess.run(["gcc", *flags_c, "-S", "-o", "-", str(source_path)], capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  # every multiply-add of the 8x28 tile is a vector one (a row left scalar showed as 16 vfmadd231ss)
  assert "vfmadd231ps" in out.stdout and "vfmadd231ss" not in out.stdout and "vfmadd213ss" not in out.stdout


def reduce_rows_and_loads(sink) -> tuple[list[int], int]:
  """The trip counts of the REDUCE's ranges and how many LOADs its value reads."""
  x = next(u for u in sink.toposort() if u.op is Ops.REDUCE)
  return [r.src[0].arg for r in x.src[1:]], sum(1 for u in x.src[0].toposort() if u.op is Ops.LOAD)


def test_column_sum_strip_adds_four_rows_per_pass():
  m = Tensor(np.ones((64, 4096), np.float32)).realize()
  tiled = optimize_kernel(kernel_of(m.sum(0)), AVX512)
  assert reduce_rows_and_loads(tiled) == ([16], 4)                      # 64 rows: 16 passes of 4 rows
  source = CPURenderer(2, AVX512).render("colsum", tiled).source
  strip = source[source.index("for (long long ridx1 = 0; ridx1 < 16ll"):]
  assert strip.count("data1[") == 4 and "acc" in strip.split("data1[")[-1]  # 4 loads, then the one update
  one_row = attrs.evolve(AVX512, strip_rows=1)
  assert reduce_rows_and_loads(optimize_kernel(kernel_of(m.sum(0)), one_row)) == ([64], 1)


def test_column_sum_rows_left_over_after_the_passes():
  m = np.random.default_rng(7).standard_normal((67, 64)).astype(np.float32)
  tiled = optimize_kernel(kernel_of(Tensor(m).realize().sum(0)), AVX512)
  assert reduce_rows_and_loads(tiled) == ([16], 4)                      # 67 = 16 * 4 + 3
  assert sum(1 for u in tiled.toposort() if u.op is Ops.LOAD) == 4 + 3  # the 3 left over, after the loop
  np.testing.assert_allclose(Tensor(m).sum(0).numpy(), m.sum(0), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(Tensor(m).max(0).numpy(), m.max(0))


def test_column_sum_of_a_symbolic_row_count_adds_row_by_row():
  from tinycore import Variable
  m = np.random.default_rng(8).standard_normal((40, 64)).astype(np.float32)
  rows = Variable("rows", 1, 40)
  for n in (3, 37):
    np.testing.assert_allclose(Tensor(m)[:rows.bind(n)].sum(0).numpy(), m[:n].sum(0), rtol=1e-5, atol=1e-5)


def test_a_row_of_no_whole_vectors_is_one_strip():
  # 503 floats: no halving of the strip divides it, but the whole row is one (the compiler handles the remainder)
  m = np.random.default_rng(9).standard_normal((256, 503)).astype(np.float32)
  assert upcast_sizes(optimize_kernel(kernel_of(Tensor(m).realize().sum(0)), AVX512)) == [503]
  np.testing.assert_allclose(Tensor(m).sum(0).numpy(), m.sum(0), rtol=1e-4, atol=1e-4)
  # ... but never a matmul tile's columns
  a, b = Tensor(np.ones((64, 96), np.float32)).realize(), Tensor(np.ones((96, 130), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(a @ b), AVX512)) == []


SHARES_SCRIPT = r"""
import numpy as np
from tinycore import Tensor
from tinycore.device.registry import Device
import os
assert Device["CPU"].renderer.threads == min(3, len(os.sched_getaffinity(0)))  # (capped at the cores)
rng = np.random.default_rng(5)
for rows in (3, 4, 5, 7, 8, 9, 11, 12, 13, 40):  # fewer, as many and more rows than shares (threads x 4)
  x = rng.standard_normal((rows, 1 << 16)).astype(np.float32)
  t = Tensor(x)
  np.testing.assert_allclose(t.sum(1).numpy(), x.sum(1), rtol=1e-4, atol=1e-2)
  np.testing.assert_allclose((t * 2 + 1).max(1).numpy(), (x * 2 + 1).max(1))
print("shares ok")
"""


def test_threaded_kernels_give_every_share_of_the_outer_loop_to_one_thread(run_scenario):
  # the threads (three where there are three cores) take the shares of each kernel's outer loop from one counter
  # (tc_parallel): every row is reduced exactly once whether the loop has fewer, as many or more rows than shares
  result = run_scenario(SHARES_SCRIPT, timeout=240, env={"TINYCORE_CPU_THREADS": "3", "TINYCORE_DEVICE": "CPU"})
  assert result.returncode == 0 and "shares ok" in result.stdout, result.stdout + result.stderr[-3000:]


def test_a_transpose_runs_in_blocks_that_read_and_write_whole_cache_lines():
  from tinycore.codegen.optimize import Block, decide_block, prepared_kernel
  data = np.arange(256 * 128, dtype=np.float32).reshape(256, 128)
  x = Tensor(data).realize()
  target = attrs.evolve(AVX512, blocks=True)
  prepared = prepared_kernel(kernel_of(x.T.contiguous()), target)
  block = decide_block(prepared, target)
  assert block == Block(0, 1, 32)
  assert decide_block(prepared, AVX512) is None  # (a target without inner loops to spare: a grid)
  assert decide_block(prepared_kernel(kernel_of(x * 2), target), target) is None  # nothing transposed
  np.testing.assert_array_equal(x.T.contiguous().numpy(), data.T)
  np.testing.assert_array_equal(x.reshape(16, 16, 128).permute(2, 0, 1).contiguous().numpy(),
                                data.reshape(16, 16, 128).transpose(2, 0, 1))


@pytest.mark.parametrize("compiler", ["clang", "gcc"])
def test_lane_accumulators_take_a_row_that_is_no_whole_number_of_blocks(compiler, monkeypatch, tmp_path):
  """A reduction over 1000 elements runs its whole blocks of lanes (15 x 64 with AVX-512) and then the 40 left one at a
  time: NaN and -inf in the left-over elements count as anywhere else, with either compiler."""
  if shutil.which(compiler) is None: pytest.skip(f"{compiler} is not installed")
  monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
  x = np.random.default_rng(5).standard_normal((4, 1000)).astype(np.float32)
  x[0, 995] = np.nan
  x[1, :] = -np.inf
  x[2, 999] = 50.0
  source = CPURenderer(1, AVX512).render("rowmax", optimize_kernel(kernel_of(Tensor(x).max(1)), AVX512)).source
  assert "_lanes[64]" in source and "for (long long ridx1 = 960ll; ridx1 < 1000ll; ridx1++)" in source
  try: program = CPUProgram("rowmax", CPUCompiler([compiler]).compile(source))
  except RuntimeError as error:
    if "-march=native" in str(error) or "unsupported" in str(error):
      pytest.skip(f"{compiler} cannot build AVX-512 here")
    raise
  out = np.zeros(4, np.float32)
  program.run_words([out.ctypes.data, x.ctypes.data])
  np.testing.assert_array_equal(out, x.max(1))


def test_a_wrapped_inner_loop_is_split_into_two_affine_loops():
  """repeat(2, 2) reads x[r % 1024] in a loop of 2048: two loops, 2 x 1024, and no remainder left in the addresses."""
  from tinycore.codegen.optimize import split_wrapped_loop
  data = np.arange(12 * 8, dtype=np.float32).reshape(12, 8)
  x = Tensor(data).realize()
  sink = split_wrapped_loop(kernel_of(x.repeat(3, 2).contiguous()))
  ranges = sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  assert [r.src[0].arg for r in ranges[-2:]] == [2, 8]
  # (the rows' r % 12 stays: once per row, outside the inner loop)
  assert not any(u.op is Ops.MOD and ranges[-1] in u.toposort() for u in sink.toposort())
  np.testing.assert_array_equal(x.repeat(3, 2).numpy(), np.tile(data, (3, 2)))
  np.testing.assert_array_equal(x.reshape(12, 1, 8).expand(12, 3, 8).reshape(12, 24).numpy(),
                                np.repeat(data[:, None, :], 3, axis=1).reshape(12, 24))


def test_a_sort_stage_reads_its_partners_at_affine_addresses():
  """A bitonic stage pairs element i with i ^ 8 (or, mirrored, its mirror in a block of 16): the loop of 1024 is split
  while it wraps (64 x 2 x 8), the loop of 2 is written out (each store once, the partner's remainder resolved), and
  a mirror's (16 * i + 1023 * j + 15) % 1024 is 16 * i - j + 15: no remainder or quotient is left per element (a
  sort of (256, 1024): 23 -> 12 ms)."""
  from tinycore.codegen.optimize import prepared_kernel
  from tinycore.tensor_sort import _partner
  keys = Tensor(np.random.default_rng(5).integers(0, 1 << 40, (4, 1024))).realize()
  for half, mirrored in ((8, False), (8, True), (1, False), (256, True)):
    stage = (keys < _partner(keys, half, mirrored)).where(keys, _partner(keys, half, mirrored))
    kernel = prepared_kernel(kernel_of(stage.contiguous()), PACKING)
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in kernel.toposort()), (half, mirrored)
  data = np.random.default_rng(6).standard_normal((8, 1000)).astype(np.float32)
  np.testing.assert_array_equal(Tensor(data).sort(1)[0].numpy(), np.sort(data, 1))
  np.testing.assert_array_equal(Tensor(data).argsort(1, descending=True).numpy(), np.argsort(-data, 1, kind="stable"))


# ---------------------------------------------------------------------------------------------------- a ResNet's convs
def test_late_resnet_convs_tile_rows_of_a_7_or_14_wide_image():
  # 14 and 7 are no multiple of 4: the rows of the tile are 7 of them (its largest divisor up to 8), beside a packed
  # panel of output channels; over 512 input channels a panel of 32 would pass the budget, so 16
  x = Tensor(np.ones((1, 256, 14, 14), np.float32)).realize()
  w = Tensor(np.ones((256, 256, 3, 3), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(x.conv2d(w, padding=1)), PACKING)) == [7, 32]
  x, w = Tensor(np.ones((1, 512, 7, 7), np.float32)).realize(), Tensor(np.ones((512, 512, 3, 3), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(x.conv2d(w, padding=1)), PACKING)) == [7, 16]
  # the tile's one row block (7 rows of 7) sits inside the 7 image rows that reuse the panel: it is packed
  source = render_tiled(x.conv2d(w, padding=1))
  assert "panel" in source and "[512][3][3][16] __attribute__" in source


def residual_block(seed: int, image: tuple[int, int, int], channels: int) -> tuple[Tensor, Tensor]:
  """relu(3x3 conv of y (image: channels, height, width) + strided 1x1 conv of x, twice as large and half as deep):
  a ResNet block's conv and its shortcut, one kernel of two reductions; (the lazy block, its numpy value)."""
  c, h, wd = image
  rng = np.random.default_rng(seed)
  xs = rng.standard_normal((1, c // 2, 2 * h, 2 * wd)).astype(np.float32)
  ys = rng.standard_normal((1, c, h, wd)).astype(np.float32)
  ws = rng.standard_normal((channels, c, 3, 3)).astype(np.float32)
  ss = rng.standard_normal((channels, c // 2, 1, 1)).astype(np.float32)
  block = (Tensor(ys).conv2d(Tensor(ws), padding=1) + Tensor(xs).conv2d(Tensor(ss), stride=2)).relu()
  windows = np.lib.stride_tricks.sliding_window_view(np.pad(ys, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  expected = np.einsum("nchwij,ocij->nohw", windows, ws)
  expected += np.einsum("nchw,oc->nohw", xs[:, :, ::2, ::2], ss[:, :, 0, 0])
  return block, np.maximum(expected, 0)


def test_a_conv_and_its_shortcut_in_one_kernel_tile_with_both_panels_and_stage_the_first():
  # a residual block's 3x3 conv and its strided 1x1 shortcut conv are one kernel with two reductions: the panel per
  # column is their sum (256 * 9 + 128), not their product; the first tile's accumulators are staged before the
  # second reduction, so the compiler keeps each tile in full-width registers
  block, expected = residual_block(3, (256, 14, 14), 256)
  assert upcast_sizes(optimize_kernel(kernel_of(block), PACKING)) == [7, 32]
  source = render_tiled(block)
  second = source.index("acc", source.index("__asm__ volatile"))
  assert re.search(r"float stage\d+\[7\]\[32\];", source[:second]) and source.count("panel") >= 2
  np.testing.assert_allclose(block.numpy(), expected, rtol=1e-4, atol=1e-3)


def test_a_batch_of_one_splits_the_next_loop_across_the_cores():
  # the outer loop of a batch of 1 runs once: the loop inside it (image rows) is the one the threads share (a conv
  # beside its strided shortcut, rows of 32: whole vectors, so the rows are the tile's columns)
  y, w = Tensor(np.ones((1, 32, 32, 32), np.float32)).realize(), Tensor(np.ones((64, 32, 3, 3), np.float32)).realize()
  x = Tensor(np.ones((1, 16, 64, 64), np.float32)).realize()
  shortcut = Tensor(np.ones((64, 16, 1, 1), np.float32)).realize()
  source = render_tiled(y.conv2d(w, padding=1) + x.conv2d(shortcut, stride=2))
  assert "long long core_id" in source and source.index("ridx0 < 1ll") < source.index("tc_share")
  assert re.search(r"for \(long long ridx1 = tc_start; ridx1 < tc_end; ridx1\+\+\)", source)


def test_a_packed_weight_panel_is_reused_by_every_image_of_a_batch():
  # the column-block loop (output channels, whose weights are packed) is the outermost, outside the batch: each
  # panel is packed once for all 16 images, not once per image (a strided conv: 221 -> 22 ms at 256 -> 512)
  x, w = Tensor(np.ones((16, 64, 14, 14), np.float32)).realize(), Tensor(np.ones((128, 64, 3, 3), np.float32)).realize()
  kernel = optimize_kernel(kernel_of(x.conv2d(w, padding=1, stride=2)), PACKING)
  loops = sorted((u for u in kernel.toposort() if u.op is Ops.RANGE and u.arg[1] == "loop"), key=lambda r: r.arg[0])
  assert [r.src[0].arg for r in loops][:2] == [4, 16]  # 4 blocks of 32 channels, then the 16 images
  source = render_tiled(x.conv2d(w, padding=1, stride=2))
  assert source.index("panel") < source.index("ridx1 < 16ll")  # packed outside the batch loop
  check_conv3x3((16, 64, 14, 14, 128, 1), seed=5, strides=(2,))


def test_a_28_wide_conv_beside_its_shortcut_tiles_over_the_packed_channels():
  # rows of 28 (16 + 8 + 4 lanes) tile well only stacked, and the strided shortcut's load reads them with a stride:
  # with two reductions the tile is 4 rows of 28 by 32 packed output channels instead (a ResNet's layer 2 block:
  # 6.4 -> 2.3 ms at batch 1)
  block, expected = residual_block(4, (32, 28, 28), 64)
  assert upcast_sizes(optimize_kernel(kernel_of(block), PACKING)) == [4, 32]
  y, w = Tensor(np.ones((1, 32, 28, 28), np.float32)).realize(), Tensor(np.ones((64, 32, 3, 3), np.float32)).realize()
  assert upcast_sizes(optimize_kernel(kernel_of(y.conv2d(w, padding=1)), PACKING)) == [4, 4, 28]  # alone: stacked
  np.testing.assert_allclose(block.numpy(), expected, rtol=1e-4, atol=1e-3)


def blocked_weight(w: np.ndarray, block: int) -> Tensor:
  """(O, I, kh, kw) weights stored as (O / block, I, kh, kw, block) and read back through a view of the ONNX shape."""
  o, i, kh, kw = w.shape
  stored = Tensor(np.ascontiguousarray(w.reshape(o // block, block, i, kh, kw).transpose(0, 2, 3, 4, 1))).realize()
  return stored.permute(0, 4, 1, 2, 3).reshape(o, i, kh, kw)


def test_a_blocked_weight_is_read_in_place_as_the_tiles_panel():
  # the weight's view reads its output channel o as o // 32 and o % 32: that loop is split into blocks and offsets,
  # the offsets are the tile's columns (32 floats contiguous in every block), and no weight panel is copied (a 3x3
  # conv of 512 channels over 7x7: 2.9 ms (O, I, kh, kw) with its panel packed per call, 1.7 ms blocked)
  from tinycore.codegen.optimize import split_blocked_loops
  rng = np.random.default_rng(21)
  xs = rng.standard_normal((1, 256, 7, 7)).astype(np.float32)
  ws = rng.standard_normal((64, 256, 3, 3)).astype(np.float32)
  conv = Tensor(xs).realize().conv2d(blocked_weight(ws, 32), padding=1)
  split, offsets = split_blocked_loops(kernel_of(conv))
  assert [r.src[0].arg for r in split.toposort() if r.op is Ops.RANGE and r.arg[0] in offsets] == [32]
  assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in split.toposort())
  assert upcast_sizes(optimize_kernel(kernel_of(conv), PACKING)) == [7, 32]
  assert "[3][3][32] __attribute__" not in render_tiled(conv)  # (the padded input may still be packed)
  padded = np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
  np.testing.assert_allclose(conv.numpy(), np.einsum("nchwij,ocij->nohw", windows, ws), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape", [(2, 32, 14, 14, 64), (1, 16, 28, 28, 32), (3, 8, 9, 5, 48)])
def test_blocked_weight_conv_values(shape):
  # wide images (a stacked-rows tile: the split is kept only where it gives the only tile with rows), a block of 16
  n, cin, h, wd, cout = shape
  rng = np.random.default_rng(cout)
  xs = rng.standard_normal((n, cin, h, wd)).astype(np.float32)
  ws = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  windows = np.lib.stride_tricks.sliding_window_view(np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  expected = np.einsum("nchwij,ocij->nohw", windows, ws)
  for block in (16, cout):
    got = Tensor(xs).conv2d(blocked_weight(ws, block), padding=1).relu().numpy()
    np.testing.assert_allclose(got, np.maximum(expected, 0), rtol=1e-4, atol=1e-3)


def test_a_tile_stored_through_an_epilogue_is_staged_first():
  # a conv's bias and relu computed on the way to a strided store: the accumulators are staged all the same (a ResNet
  # conv with its folded batch norm and relu ran 2.5x slower reading them from registers through the epilogue)
  x, w = Tensor(np.ones((8, 32, 14, 14), np.float32)).realize(), Tensor(np.ones((32, 32, 3, 3), np.float32)).realize()
  bias = Tensor(np.ones((32,), np.float32)).realize()
  source = render_tiled((x.conv2d(w, bias, padding=1)).relu())
  stored = source[source.index("__asm__ volatile"):]
  assert "acc" not in stored and re.search(r"stage\d+\[ridx\d+\]\[ridx\d+\]", stored)
