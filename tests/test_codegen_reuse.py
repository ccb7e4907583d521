"""Row buffers (codegen.reuse): a reduction loop's per-element value that a later loop of the same row computes again
(softmax's exp) is computed once, written to a stack buffer and read back, with the same results bit for bit."""
from __future__ import annotations
import numpy as np
import pytest
from tinycore import Tensor, Variable
from tinycore.codegen.c_style import CStyleRenderer
from tinycore.codegen.linearize import linearize
from tinycore.codegen.optimize import KernelTarget, optimize_kernel
from tinycore.codegen.reuse import find_reused_values
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.scalars import call_scalars, scalar_value, scalar_word

pytest.importorskip("tiny_cpu", reason="tiny-cpu is not installed")
from tiny_cpu.compiler import CPUCompiler, find_c_compiler  # noqa: E402
from tiny_cpu.device import CPUProgram  # noqa: E402
from tiny_cpu.renderer import CPURenderer  # noqa: E402

AVX512 = KernelTarget(vector_lanes=16, vector_registers=32, cores=2, strip_vectors=32)
KERNEL_START = "void kernel("


class RecomputingRenderer(CPURenderer):
  """The CPU renderer with row buffers off: every loop computes its values itself (the reference)."""
  scratch_bytes = 0


def kernel_call(t: Tensor):
  return next(call for call in t.schedule_linear().src if call.src[0].op is Ops.SINK)


def body_of(source: str) -> str:
  return source[source.index(KERNEL_START):]


def rendered_sink(sink, renderer: CPURenderer | None = None) -> str:
  return body_of((renderer or CPURenderer(1, AVX512)).render("kernel", optimize_kernel(sink, AVX512)).source)


def rendered(t: Tensor, renderer: CPURenderer | None = None) -> str:
  return rendered_sink(kernel_call(t).src[0], renderer)


def test_softmax_computes_each_exp_once():
  source = rendered(Tensor(np.ones((8, 1024), np.float32)).softmax(-1))
  assert source.count("tc_exp2f(") == 1 and "float row1[1024] __attribute__((aligned(64)));" in source
  # the sum loop writes each exp beside its accumulation; the output loop divides what it reads back
  assert "row1[ridx3] = v12;" in source and "(row1[ridx1]/acc7)" in source
  recomputed = rendered(Tensor(np.ones((8, 1024), np.float32)).softmax(-1), RecomputingRenderer(1, AVX512))
  assert recomputed.count("tc_exp2f(") == 2


def run_both(t: Tensor, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, str]:
  """Runs t's kernel rendered with and without row buffers on `inputs`: (with, without, the source with)."""
  call = kernel_call(t)
  sink = optimize_kernel(call.src[0], AVX512)
  words = [scalar_word(scalar_value(s), s.dtype) for s in call_scalars(call)]
  outputs, sources = [], []
  for renderer in (CPURenderer(1, AVX512), RecomputingRenderer(1, AVX512)):
    source = renderer.render("kernel", sink).source
    program = CPUProgram("kernel", CPUCompiler().compile(source))
    out = np.zeros(t.shape, inputs[0].dtype)
    program.run_words([out.ctypes.data, *(x.ctypes.data for x in inputs), *words])
    outputs.append(out)
    sources.append(body_of(source))
  return outputs[0], outputs[1], sources[0]


@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler (install clang or gcc, or set CC)")
@pytest.mark.parametrize("width", [1024, 1000])
def test_softmax_with_a_row_buffer_is_bit_identical(width):
  rng = np.random.default_rng(width)
  x = (rng.standard_normal((6, width)) * 30).astype(np.float32)
  x[1, 3], x[2, 5], x[3, 7], x[4, :] = np.nan, np.inf, -np.inf, -np.inf
  kept, recomputed, source = run_both(Tensor(x).softmax(-1), [x])
  assert "float row" in source  # 1000: no lane accumulators (not a multiple of the lanes), still one exp
  np.testing.assert_array_equal(kept.view(np.uint32), recomputed.view(np.uint32))
  assert np.isnan(kept[1]).all() and np.isnan(kept[4]).all() and kept[3, 7] == 0.0
  with np.errstate(invalid="ignore"):
    expected = np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
  np.testing.assert_allclose(kept, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler (install clang or gcc, or set CC)")
def test_float16_rows_keep_the_float_value():
  x = (np.random.default_rng(16).standard_normal((4, 1024)) * 4).astype(np.float16)
  kept, recomputed, source = run_both(Tensor(x).softmax(-1), [x])
  assert "float row" in source and source.count("tc_exp2f(") == 1
  np.testing.assert_array_equal(kept.view(np.uint16), recomputed.view(np.uint16))


def test_long_rows_and_symbolic_rows_compute_twice():
  too_long = rendered(Tensor(np.ones((2, 8192), np.float32)).softmax(-1))   # 32 KiB: more than the stack budget
  assert "row" not in too_long and too_long.count("tc_exp2f(") == 2
  n = Variable("n", 1, 2048).bind(1000)
  symbolic = rendered(Tensor(np.ones((2, 2048), np.float32))[:, :n].softmax(-1))
  assert "row" not in symbolic and symbolic.count("tc_exp2f(") == 2
  np.testing.assert_allclose(Tensor(np.zeros((2, 8192), np.float32)).softmax(-1).numpy(), 1 / 8192)


def test_cheap_shared_parts_are_recomputed():
  # log_softmax's output loop shares only x - max with the exp-sum loop: a subtraction costs less than a store
  source = rendered(Tensor(np.ones((8, 1024), np.float32)).log_softmax(-1))
  assert "row" not in source
  # a layernorm's variance loop and output share x - mean, also cheap
  x = Tensor(np.ones((8, 1024), np.float32))
  assert "row" not in rendered(x.layernorm())


def test_the_plan_names_the_value_its_readers_and_what_they_no_longer_compute():
  assert CStyleRenderer.scratch_bytes == 0  # other C-family renderers (OpenCL) keep computing twice
  call = kernel_call(Tensor(np.ones((4, 256), np.float32)).softmax(-1))
  plan = find_reused_values(linearize(call.src[0]), 0, lambda dtype: dtype.itemsize)
  assert not plan.values and not plan.replaced
  plan = find_reused_values(linearize(call.src[0]), 16 * 1024, lambda dtype: dtype.itemsize)
  (reused,) = plan.values
  assert reused.value.op is Ops.EXP2 and reused.size == 256 and len(reused.readers) == 1
  # the reading loop no longer needs its own load, subtraction, scaling and exp
  assert {u.op for u in plan.unused} >= {Ops.LOAD, Ops.SUB, Ops.MUL} and dtypes.float32 is reused.value.dtype


def test_one_row_softmax_split_across_threads():
  # one row: the reduction loops run in every thread (each fills its own buffer), the output loop is split
  x = np.random.default_rng(1).standard_normal(4096).astype(np.float32) * 5
  source = rendered(Tensor(x).softmax(), CPURenderer(2, AVX512))
  assert "tc_start" in source and "float row1[4096]" in source and source.count("tc_exp2f(") == 1
  expected = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
  np.testing.assert_allclose(Tensor(x).softmax().numpy(), expected, rtol=1e-5, atol=1e-8)


def test_softmax_backward_reads_its_exp_from_a_row_buffer():
  # the fused backward kernel has the exp in its sum loop and again in two later loops (the max it shifts by has no
  # gradient): it is computed once, the later loops reading it from a row buffer
  rng = np.random.default_rng(5)
  x, g = rng.standard_normal((16, 1024)).astype(np.float32), rng.standard_normal((16, 1024)).astype(np.float32)
  xt = Tensor(x, requires_grad=True)
  (xt.softmax(-1) * Tensor(g)).sum().backward()
  sinks = [call.src[0] for call in xt.grad.schedule_linear().src if call.src[0].op is Ops.SINK]
  fused = next(sink for sink in sinks if "row1[" in rendered_sink(sink))
  assert rendered_sink(fused).count("tc_exp2f(") == 1 and "float row1[1024]" in rendered_sink(fused)
  assert rendered_sink(fused, RecomputingRenderer(1, AVX512)).count("tc_exp2f(") == 3
  s = np.exp(x - x.max(1, keepdims=True))
  s /= s.sum(1, keepdims=True)
  np.testing.assert_allclose(xt.grad.numpy(), s * (g - (s * g).sum(1, keepdims=True)), rtol=1e-4, atol=1e-6)


def test_backward_of_a_softmax_written_out_chains_row_buffers():
  # written out, the max's gradient stays: the exp is in the sum loop and three later loops, and the output loop
  # repeats the loop before it's per-element divisions: each is computed once, the later loops reading two row
  # buffers (the second one's value reads the first)
  rng = np.random.default_rng(5)
  x, g = rng.standard_normal((16, 1024)).astype(np.float32), rng.standard_normal((16, 1024)).astype(np.float32)
  xt = Tensor(x, requires_grad=True)
  e = (xt - xt.max(-1, keepdim=True)).exp()
  (e / e.sum(-1, keepdim=True) * Tensor(g)).sum().backward()
  sinks = [call.src[0] for call in xt.grad.schedule_linear().src if call.src[0].op is Ops.SINK]
  fused = next(sink for sink in sinks if "row1[" in rendered_sink(sink))
  assert rendered_sink(fused).count("tc_exp2f(") == 1 and "float row2[1024]" in rendered_sink(fused)
  assert rendered_sink(fused, RecomputingRenderer(1, AVX512)).count("tc_exp2f(") == 4
  s = np.exp(x - x.max(1, keepdims=True))
  s /= s.sum(1, keepdims=True)
  np.testing.assert_allclose(xt.grad.numpy(), s * (g - (s * g).sum(1, keepdims=True)), rtol=1e-4, atol=1e-5)
