"""The core LLVM IR renderer, proven on this machine: kernels rendered to IR, optimized and JIT-compiled by llvmlite
(tests/llvm_host_device.py, device "LLVMHOST"), results compared with numpy. The whole conformance suite runs on it in
the `llvm` tox env; here: the numerics rules, the IR math a GPU target gets, and what an amdgcn target's IR declares."""
from __future__ import annotations
import math
import struct
import numpy as np
import pytest

llvmlite = pytest.importorskip("llvmlite")
import llvm_host_device  # noqa: E402  (tests/ is on the path: rootdir conftest)
from tinycore import Tensor, dtypes  # noqa: E402
from tinycore.codegen.llvm_ir import LLVMRenderer, LLVMTarget, float_literal, literal  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def llvm_host():
  from tinycore.plugin.manager import register_plugin, unregister_plugin
  register_plugin(llvm_host_device, "llvm-host-test")
  yield
  unregister_plugin(llvm_host_device)


def on_host(array: np.ndarray) -> Tensor: return Tensor(array, device="LLVMHOST")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64])
def test_integer_arithmetic_wraps_and_divides_like_numpy(dtype):
  info = np.iinfo(dtype)
  a = np.array([info.min, info.max, -1 if info.min else 3, 7, 0, 5], dtype=dtype)
  b = np.array([-1 if info.min else 1, 2, 0, 3, 0, info.max], dtype=dtype)
  ta, tb = on_host(a), on_host(b)
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    np.testing.assert_array_equal((ta * tb).numpy(), a * b)
    np.testing.assert_array_equal((ta - tb).numpy(), a - b)
    expected_div = np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b)))
    np.testing.assert_array_equal((ta // tb).numpy(), expected_div)


def test_shifts_by_every_count():
  a = np.array([-8, 8, -1, 1 << 30], dtype=np.int32)
  for count in (0, 1, 31, 32, 40):
    c = np.full(4, count, dtype=np.int32)
    np.testing.assert_array_equal((on_host(a) << on_host(c)).numpy(), np.where(c >= 32, 0, a << np.minimum(c, 31)))
    np.testing.assert_array_equal((on_host(a) >> on_host(c)).numpy(),
                                  np.where(c >= 32, np.where(a < 0, -1, 0), a >> np.minimum(c, 31)))


def test_float_edges_max_nan_and_casts():
  x = np.array([np.nan, 1.0, -np.inf, 3e9, -3e9, 2.5, -0.5, np.inf], dtype=np.float32)
  y = np.array([0.0, np.nan, 1.0, 1.0, 1.0, -2.5, 0.5, 0.0], dtype=np.float32)
  np.testing.assert_array_equal(on_host(x).maximum(on_host(y)).numpy(), np.maximum(x, y))
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal(on_host(x).cast(dtypes.int32).numpy(), x.astype(np.int32))
    np.testing.assert_array_equal(on_host(x).cast(dtypes.uint8).numpy(), x.astype(np.uint8))
    np.testing.assert_array_equal(on_host(x).cast(dtypes.float16).numpy(), x.astype(np.float16))
  d = np.array([1 + 2 ** -11 + 2 ** -40, 65519.99, 1e-8, -3.3], dtype=np.float64)  # round-to-odd keeps one rounding
  np.testing.assert_array_equal(on_host(d).cast(dtypes.float16).numpy(), d.astype(np.float16))


def test_16bit_floats_round_after_every_op():
  a = np.array([0.1, 100.5, -3.3, 250], dtype=np.float16)
  np.testing.assert_array_equal((on_host(a) * on_host(a) + on_host(a)).numpy(), a * a + a)
  bf = on_host(np.array([1.0, 3.0, 1e-3], dtype=np.float32)).cast(dtypes.bfloat16)
  got = (bf / 3).cast(dtypes.float32).numpy()
  bits = np.array([1 / 3, 1.0, 1e-3 / 3], dtype=np.float32).view(np.uint32)
  rounded = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).view(np.float32)
  np.testing.assert_allclose(got, rounded, rtol=2 ** -7)


def _jit_math(name: str, values: np.ndarray, arity: int = 1) -> np.ndarray:
  """Call one of the renderer's IR math helpers (what a GPU target gets instead of libm) on each value."""
  from tinycore.codegen.llvm_ir import helper_definitions
  body, declares = helper_definitions({name})
  params = ", ".join(f"double %a{i}" for i in range(arity))
  args = ", ".join(f"double %a{i}" for i in range(arity))
  text = "\n".join(sorted(declares) + body + [f"define double @entry({params}) {{",
                                               f"  %r = call double @{name}({args})", "  ret double %r", "}"])
  llvm = llvm_host_device.llvm_binding()
  module = llvm.parse_assembly(text)
  machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine()
  engine = llvm.create_mcjit_compiler(module, machine)
  engine.finalize_object()
  import ctypes
  fn = ctypes.CFUNCTYPE(ctypes.c_double, *[ctypes.c_double] * arity)(engine.get_function_address("entry"))
  out = np.array([fn(*map(float, v)) if arity > 1 else fn(float(v)) for v in values])
  engine.close()
  return out


def test_float64_math_in_ir_is_accurate():
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.uniform(-1000, 1000, 200), rng.uniform(-5, 5, 200), [0.0, -0.0, 1e-300, 1022.5, -1074.0]])
  np.testing.assert_allclose(_jit_math("tc_exp2_f64", x), np.exp2(x), rtol=4e-16, atol=0)
  pos = np.abs(x) + 1e-300
  np.testing.assert_allclose(_jit_math("tc_log2_f64", pos), np.log2(pos), rtol=4e-16, atol=1e-16)
  sin_error = np.abs(_jit_math("tc_sin_f64", x) - np.sin(x))
  assert (sin_error <= 4e-16 * np.maximum(1, np.abs(x))).all(), sin_error.max()
  special = _jit_math("tc_log2_f64", np.array([0.0, -1.0, np.inf, np.nan]))
  assert special[0] == -np.inf and math.isnan(special[1]) and special[2] == np.inf and math.isnan(special[3])
  base = np.array([2.0, -2.0, -2.0, 0.5, 1.0, -8.0, 0.0, 10.0])
  exponent = np.array([10.0, 3.0, 2.0, -3.5, np.nan, 1 / 3, -1.0, 0.0])
  with np.errstate(all="ignore"):
    np.testing.assert_allclose(_jit_math("tc_pow_f64", np.stack([base, exponent], 1), 2), np.power(base, exponent),
                               rtol=1e-15)


def test_amdgcn_ir_uses_the_targets_address_spaces_and_intrinsics():
  target = LLVMTarget(triple="amdgcn-amd-amdhsa", global_addrspace=1, private_addrspace=5,
                      calling_convention="amdgpu_kernel", workgroup_id="llvm.amdgcn.workgroup.id.{axis}",
                      workitem_id="llvm.amdgcn.workitem.id.{axis}", grid_dims=3, math_in_ir=True)
  from tinycore.device.registry import Device
  renderer = Device["PYTHON"].renderer
  seen = []
  original = type(renderer).render
  renderer.render = lambda name, sink: (seen.append((name, sink)), original(renderer, name, sink))[1]
  try: (Tensor(np.arange(300, dtype=np.float64), device="PYTHON").reshape(3, 100).sum(1).exp2() + 0.25).realize()
  finally: del renderer.render
  name, sink = seen[-1]
  rendered = LLVMRenderer(target).render(name, sink)
  ir = rendered.source
  assert f"define amdgpu_kernel void @{name}(ptr addrspace(1) noalias %data0" in ir
  assert "@llvm.amdgcn.workgroup.id.x" in ir and "addrspace(5)" in ir and "@tc_exp2_f64" in ir
  assert "@llvm.exp2.f64" not in ir  # no libm on a GPU
  assert rendered.global_size[0] % rendered.local_size[0] == 0


def test_literals_are_exact():
  assert literal(-1, dtypes.uint8) == "-1" and literal(255, dtypes.uint8) == "-1"
  assert literal(True, dtypes.bool) == "true"
  assert float_literal(0.1, dtypes.float32) == f"0x{struct.unpack('<Q', struct.pack('<d', np.float32(0.1)))[0]:016X}"
  assert float_literal(1e300, dtypes.float32) == "0x7FF0000000000000"
  assert float_literal(float("nan"), dtypes.float64) == "0x7FF8000000000000"
