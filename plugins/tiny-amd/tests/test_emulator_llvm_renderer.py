"""The core LLVM IR renderer's kernels compiled for gfx1100 and run on the interpreter (the AMDEMU test device in
emulated_llvm_device.py), against numpy: reductions, matmul, softmax, casts, integer math, where."""
import numpy as np
import pytest

pytest.importorskip("llvmlite.binding")
pytest.importorskip("tinycore.codegen.llvm_ir")


@pytest.fixture(scope="module")
def Tensor():
  import emulated_llvm_device
  from tinycore.plugin.manager import register_plugin
  try:
    register_plugin(emulated_llvm_device, "amd-emu-test")
  except ValueError:  # already registered (pytest -p emulated_llvm_device)
    pass
  from tinycore import Tensor
  return lambda data: Tensor(data, device="AMDEMU")


rng = np.random.default_rng(5)


def test_kernels_run_on_the_interpreter(Tensor):
  import emulated_llvm_device
  before = emulated_llvm_device.DISPATCHES
  np.testing.assert_array_equal((Tensor(np.arange(100, dtype=np.float32)) + 1).numpy(), np.arange(100) + 1)
  assert emulated_llvm_device.DISPATCHES > before


def test_matmul_and_reductions(Tensor):
  a, b = rng.standard_normal((33, 17)).astype(np.float32), rng.standard_normal((17, 9)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(Tensor(a).sum(axis=0).numpy(), a.sum(axis=0), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(Tensor(a).max(axis=1).numpy(), a.max(axis=1))


def test_softmax_and_transcendentals(Tensor):
  x = rng.standard_normal((8, 40)).astype(np.float32)
  e = np.exp(x - x.max(axis=1, keepdims=True))
  np.testing.assert_allclose(Tensor(x).softmax(axis=1).numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
  np.testing.assert_allclose(Tensor(np.abs(x) + 0.1).log().numpy(), np.log(np.abs(x) + 0.1), rtol=1e-5, atol=1e-6)


def test_casts_where_and_integer_math(Tensor):
  i = rng.integers(-1000, 1000, 300).astype(np.int32)
  j = rng.integers(1, 50, 300).astype(np.int32)
  np.testing.assert_array_equal((Tensor(i) // Tensor(j)).numpy(), i // j)
  np.testing.assert_array_equal((Tensor(i) % Tensor(j)).numpy(), i % j)
  h = rng.standard_normal(300).astype(np.float16)
  np.testing.assert_array_equal(Tensor(h).cast("float32").numpy(), h.astype(np.float32))
  np.testing.assert_array_equal((Tensor(i) > 0).where(Tensor(i), Tensor(j)).numpy(), np.where(i > 0, i, j))
  d = rng.standard_normal(300)
  np.testing.assert_array_equal((Tensor(d) * 3 + 1).numpy(), d * 3 + 1)
