"""Codegen on the CPU: loop merging, register tiles (upcast), vectorizable exp2, threaded kernels; values vs numpy."""
import numpy as np
import pytest
from tinycore import Tensor
from tinycore.device.kernels import compile_kernel
from tinycore.device.registry import Device
from tinycore.codegen.optimize import optimize_kernel
from tinycore.uop.ops import Ops


def kernel_of(t: Tensor):
  linear = t.schedule_linear()
  return compile_kernel(linear.src[-1].src[1].device, linear.src[-1].src[0])


def data(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_contiguous_elementwise_dims_merge_into_one_loop():
  a, b = Tensor(data(33, 17)).realize(), Tensor(data(33, 17, seed=1)).realize()
  kernel = kernel_of(a * b + 1)
  assert kernel.name == "E_561" and kernel.source.count("for (") <= 1
  np.testing.assert_allclose((a * b + 1).numpy(), data(33, 17) * data(33, 17, seed=1) + 1, rtol=1e-6)


def test_matmul_uses_register_tiles_and_is_right():
  x, y = data(64, 48), data(48, 80, seed=2)
  out = Tensor(x).realize() @ Tensor(y).realize()
  source = kernel_of(out).source
  assert "#pragma GCC unroll" in source and "acc" in source
  np.testing.assert_allclose(out.numpy(), x @ y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, op", [((512, 300), "elementwise"), ((1024, 513), "sum0"), ((300, 257), "softmax"),
                                       ((256, 256), "matmul")])
def test_large_kernels_split_across_threads(shape, op):
  x = data(*shape, seed=3)
  t = Tensor(x).realize()
  out, expected = {"elementwise": (lambda: (t * 2 + 1).exp2(), lambda: np.exp2(x * 2 + 1)),
                   "sum0": (lambda: t.sum(0), lambda: x.sum(0)),
                   "softmax": (lambda: t.softmax(-1), lambda: np.exp(x - x.max(-1, keepdims=True)) /
                               np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
                   "matmul": (lambda: t @ t, lambda: x @ x)}[op]
  result = out()
  threads = Device["CPU"].renderer.threads
  linear = result.schedule_linear()
  kernel = compile_kernel("CPU", linear.src[0].src[0])  # the bulk of the work (a column sum's per-core partials)
  # shares of the outer loop: at least one per thread, a few per thread where the loop is long enough
  if threads > 1: assert threads <= kernel.global_size[0] <= 4 * threads and "core_id" in kernel.source
  np.testing.assert_allclose(result.numpy(), expected(), rtol=1e-4, atol=1e-4)


def test_exp2_matches_libm_closely_and_keeps_special_values():
  x = np.concatenate([np.linspace(-149, 127.9, 20001, dtype=np.float32),
                      np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 200.0, -200.0], np.float32)])
  out = Tensor(x).exp2().numpy()
  reference = np.exp2(x.astype(np.float64))
  finite = np.isfinite(reference) & (reference > 1.2e-38) & (x < 128)
  assert (np.abs(out[finite] - reference[finite]) / reference[finite]).max() < 5e-7
  np.testing.assert_equal(out[-7:], np.array([np.inf, 0.0, np.nan, 1.0, 1.0, np.inf, 0.0], np.float32))


def test_dump_binaries_writes_every_compiled_program(tmp_path, monkeypatch):
  from tinycore.caches import clear_caches
  monkeypatch.setenv("TINYCORE_DUMP_BINARIES", str(tmp_path / "dump"))
  clear_caches()  # a kernel compiled earlier in this process would come from memory without passing the dump
  a = Tensor(data(5, 7)).realize()
  out = (a * 3 - 1).sum(axis=1)
  kernel = kernel_of(out)
  np.testing.assert_allclose(out.numpy(), (data(5, 7) * 3 - 1).sum(axis=1), rtol=1e-5)
  dumped = sorted((tmp_path / "dump").iterdir())
  mine = [p for p in dumped if p.name.startswith(kernel.name + "-")]
  assert len(mine) == 1 and mine[0].suffix == ".bin"
  # the file holds the very binary the device loaded: the compiler's output for this kernel's source
  assert mine[0].read_bytes() == Device[Device.DEFAULT].compiler.compile_cached(kernel.source)
  assert all(p.suffix == ".bin" and p.stat().st_size > 0 for p in dumped)  # no temporary file left behind


def test_dump_binaries_names_an_unwritable_directory(tmp_path, monkeypatch):
  from tinycore.caches import clear_caches
  blocker = tmp_path / "a-file"
  blocker.write_text("not a directory")
  monkeypatch.setenv("TINYCORE_DUMP_BINARIES", str(blocker))
  clear_caches()
  with pytest.raises(OSError, match="TINYCORE_DUMP_BINARIES"):
    (Tensor(data(3, 2)).realize() + 2).numpy()


def test_clear_caches_makes_the_next_realize_schedule_and_render_again():
  from tinycore.caches import BoundedCache, clear_caches
  from tinycore.codegen import CodegenStats
  from tinycore.engine.plan import PlanCacheStats
  a = Tensor(data(4, 9)).realize()
  (a * 2 + 5).numpy()
  misses, rendered = PlanCacheStats.misses, CodegenStats.rendered
  np.testing.assert_allclose((a * 2 + 5).numpy(), data(4, 9) * 2 + 5)
  assert (PlanCacheStats.misses, CodegenStats.rendered) == (misses, rendered)  # all from the caches
  clear_caches()
  np.testing.assert_allclose((a * 2 + 5).numpy(), data(4, 9) * 2 + 5)
  assert PlanCacheStats.misses == misses + 1 and CodegenStats.rendered > rendered
  # a bounded cache drops its oldest entry when full
  cache = BoundedCache("test", 2)
  for key in "abc": cache.put(key, key.upper())
  assert "a" not in cache and cache.get("b") == "B" and cache.get("c") == "C" and len(cache) == 2


def test_renderer_holds_no_per_kernel_state_and_linearizes_once(monkeypatch):
  import tinycore.codegen.c_style as c_style
  from tinycore.codegen.optimize import optimize_kernel

  class GridRenderer(c_style.CStyleRenderer):
    global_dims = 2
    def global_id(self, dim): return f"gid{dim}"

  reduce_sink = optimize_kernel(Tensor(data(6, 5)).realize().sum(axis=1).schedule_linear().src[-1].src[0])
  grid_sink = optimize_kernel((Tensor(data(6, 5)).realize().T * 2).schedule_linear().src[-1].src[0])
  calls = []
  real_linearize = c_style.linearize
  monkeypatch.setattr(c_style, "linearize", lambda sink: calls.append(sink) or real_linearize(sink))
  renderer = GridRenderer()
  before = dict(vars(renderer))
  first = renderer.render("k", grid_sink)
  assert len(calls) == 1  # source and launch dims from one loop tree
  # 6 and 5 work-items in groups of 4, padded up to 8
  assert "gid1" in first.source and first.global_size == (8, 8, 1) and first.local_size == (4, 4, 1)
  renderer.render("k", reduce_sink)
  assert vars(renderer) == before  # nothing of either kernel stayed on the renderer
  assert renderer.render("k", grid_sink) == first  # and the next render of the same kernel is the same


def test_index_tensor_reads_one_element_per_output_not_every_row():
  # t[idx] lowers to a sum over the rows of where(idx == row, t[row], 0); the code generator reads t[idx] directly
  # (a gated load), so the kernel has no loop over the table's rows, and NaN/inf in rows not picked stay out
  from tinycore import nn
  rng = np.random.default_rng(3)
  table = rng.standard_normal((1000, 8)).astype(np.float32)
  table[5, 2], table[7, 0] = np.nan, np.inf
  idx = np.array([[3, 999, -1], [0, 42, 3]], np.int32)
  t, i = Tensor(table), Tensor(idx)
  np.testing.assert_array_equal(t[i].numpy(), table[idx])
  linear = t[i].schedule_linear()
  kernels = [call.src[0] for call in linear.src if call.src[0].op is Ops.SINK]
  target = Device[Device.DEFAULT].renderer.kernel_target
  if target.gathers: assert not any(u.op is Ops.REDUCE for k in kernels for u in optimize_kernel(k, target).toposort())
  emb = nn.Embedding(1000, 8)
  emb.weight = t
  out = emb(Tensor(np.array([[3, 1000], [0, 42]], np.int32))).numpy()  # an index past the table reads zeros
  np.testing.assert_array_equal(out, np.stack([np.stack([table[3], np.zeros(8, np.float32)]), table[[0, 42]]]))
  grid = rng.standard_normal((6, 7)).astype(np.float32)
  rows, cols = np.array([0, 5, 2], np.int32), np.array([6, 0, 3], np.int32)
  np.testing.assert_array_equal(Tensor(grid)[Tensor(rows), Tensor(cols)].numpy(), grid[rows, cols])


def test_tile_address_used_inside_and_after_a_strip_loop_stays_in_scope():
  # the gradient of a global average pool: address arithmetic of the upcast tile used by loads in the row loop and
  # by the left-over rows after it (moving it into the loop left the after-loop reads without it: no compile)
  a = np.random.default_rng(0).uniform(-2, 2, (32, 2, 11, 28)).astype(np.float32)
  x = Tensor(a)
  pooled = x.avg_pool2d(kernel_size=(11, 28))
  np.testing.assert_allclose(pooled.numpy()[..., 0, 0], a.mean((2, 3)), atol=1e-6)
  (grad,) = pooled.sum().gradient(x)
  np.testing.assert_allclose(grad.numpy(), np.full(a.shape, 1 / (11 * 28), np.float32), rtol=1e-6)
