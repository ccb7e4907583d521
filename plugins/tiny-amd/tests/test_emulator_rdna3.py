"""RDNA3 interpreter: real gfx1100 machine code (hand-written IR compiled by llvmlite) against numpy."""
import numpy as np
import pytest
from emulator_helpers import SCRATCH, Kernel, private_fill

TID = """declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workitem.id.y()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare void @llvm.amdgcn.s.barrier()
"""


def elementwise(body: str, out_t: str, in_ts: list[str], decls: str = "") -> str:
  """A kernel out[i] = body(in0[i], in1[i], ...) over a 1-D grid of 64-thread workgroups, guarded by i < n."""
  params = ", ".join(["ptr addrspace(1) noalias %out"] + [f"ptr addrspace(1) noalias %p{k}" for k in range(len(in_ts))])
  loads = "\n".join(f"  %g{k} = getelementptr {t}, ptr addrspace(1) %p{k}, i32 %k_i\n"
                    f"  %x{k} = load {t}, ptr addrspace(1) %g{k}" for k, t in enumerate(in_ts))
  return TID + decls + f"""
define amdgpu_kernel void @k({params}, i32 %n) {{
  %k_t = call i32 @llvm.amdgcn.workitem.id.x()
  %k_g = call i32 @llvm.amdgcn.workgroup.id.x()
  %k_b = mul i32 %k_g, 64
  %k_i = add i32 %k_b, %k_t
  %k_in = icmp slt i32 %k_i, %n
  br i1 %k_in, label %body, label %end
body:
{loads}
{body}
  %k_o = getelementptr {out_t}, ptr addrspace(1) %out, i32 %k_i
  store {out_t} %r, ptr addrspace(1) %k_o
  br label %end
end:
  ret void
}}"""


def run_elementwise(body, out_dtype, inputs, decls="", n=None):
  np_to_ir = {np.float32: "float", np.float16: "half", np.float64: "double", np.int32: "i32", np.uint32: "i32",
              np.int64: "i64", np.uint64: "i64", np.uint8: "i8", np.int8: "i8", np.int16: "i16", np.uint16: "i16"}
  ir = elementwise(body, np_to_ir[out_dtype], [np_to_ir[x.dtype.type] for x in inputs], decls)
  n = n or len(inputs[0])
  out = np.zeros(len(inputs[0]), out_dtype)
  Kernel(ir, "k")(out, *inputs, n, grid=(-(-n // 64), 1, 1), block=(64, 1, 1))
  return out


rng = np.random.default_rng(0)
F = rng.standard_normal(200).astype(np.float32) * 10
G = (rng.random(200).astype(np.float32) + 0.25) * np.where(rng.random(200) < 0.5, -1, 1).astype(np.float32)


def test_float_arith_and_division_exact():
  body = "  %m = fmul float %x0, %x1\n  %s = fsub float %m, %x0\n  %r = fdiv float %s, %x1"
  out = run_elementwise(body, np.float32, [F, G])
  np.testing.assert_array_equal(out, ((F * G) - F) / G)


def test_partial_last_workgroup_leaves_tail_untouched():
  out = run_elementwise("  %r = fadd float %x0, 1.0", np.float32, [F], n=150)
  np.testing.assert_array_equal(out[:150], F[:150] + 1)
  assert (out[150:] == 0).all()


@pytest.mark.parametrize("fn,ref,tol", [
  ("exp2", np.exp2, 1e-6), ("log2", np.log2, 1e-6), ("sqrt", np.sqrt, 1e-7), ("sin", np.sin, 2e-6),
  ("cos", np.cos, 2e-6), ("floor", np.floor, 0), ("trunc", np.trunc, 0), ("rint", np.rint, 0), ("fabs", np.abs, 0)])
def test_float_unary_math(fn, ref, tol):
  x = np.abs(F) + 0.5 if fn in ("log2", "sqrt") else F / 4
  out = run_elementwise(f"  %r = call float @llvm.{fn}.f32(float %x0)", np.float32, [x],
                        decls=f"declare float @llvm.{fn}.f32(float)\n")
  np.testing.assert_allclose(out, ref(x).astype(np.float32), rtol=tol, atol=tol)


def test_min_max_select_compare_nan():
  x = F.copy(); x[::7] = np.nan
  body = ("  %mx = call float @llvm.maxnum.f32(float %x0, float %x1)\n  %c = fcmp uno float %x0, %x0\n"
          "  %r = select i1 %c, float -1.0, float %mx")
  out = run_elementwise(body, np.float32, [x, G], decls="declare float @llvm.maxnum.f32(float, float)\n")
  np.testing.assert_array_equal(out, np.where(np.isnan(x), -1, np.fmax(x, G)).astype(np.float32))


def test_int_division_and_remainder():
  a = rng.integers(-2**31, 2**31 - 1, 200).astype(np.int32)
  b = rng.integers(1, 1000, 200).astype(np.int32) * np.where(rng.random(200) < 0.5, -1, 1).astype(np.int32)
  out = run_elementwise("  %q = sdiv i32 %x0, %x1\n  %m = srem i32 %x0, %x1\n  %r = add i32 %q, %m", np.int32, [a, b])
  q = np.trunc(a.astype(np.float64) / b).astype(np.int64)
  np.testing.assert_array_equal(out, (q + (a - q * b)).astype(np.int32))
  ua, ub = a.view(np.uint32), np.abs(b).astype(np.uint32)
  out = run_elementwise("  %r = udiv i32 %x0, %x1", np.uint32, [ua, ub])
  np.testing.assert_array_equal(out, ua // ub)


def test_int64_math():
  a = rng.integers(-2**62, 2**62, 200).astype(np.int64)
  b = rng.integers(-2**40, 2**40, 200).astype(np.int64)
  out = run_elementwise("  %m = mul i64 %x0, 3\n  %s = ashr i64 %x1, 5\n  %r = add i64 %m, %s", np.int64, [a, b])
  np.testing.assert_array_equal(out, a * 3 + (b >> 5))


def test_casts_f32_int_half():
  x = np.concatenate([F, [np.inf, -np.inf, 3e9, -3e9]]).astype(np.float32)
  out = run_elementwise("  %r = fptosi float %x0 to i32", np.int32, [x[:200]])
  np.testing.assert_array_equal(out, np.trunc(x[:200]).astype(np.int32))
  out = run_elementwise("  %r = fptrunc float %x0 to half", np.float16, [F * 100])
  np.testing.assert_array_equal(out, (F * 100).astype(np.float16))
  h = (F * 3).astype(np.float16)
  out = run_elementwise("  %e = fpext half %x0 to float\n  %r = fmul float %e, 3.0", np.float32, [h])
  np.testing.assert_array_equal(out, h.astype(np.float32) * 3)
  u = rng.integers(0, 2**32, 200, dtype=np.uint64).astype(np.uint32)
  out = run_elementwise("  %r = uitofp i32 %x0 to float", np.float32, [u])
  np.testing.assert_array_equal(out, u.astype(np.float32))


def test_half_arithmetic_true16():
  a, b = (F / 3).astype(np.float16), G.astype(np.float16)
  out = run_elementwise("  %m = fmul half %x0, %x1\n  %r = fadd half %m, 0xH3C00", np.float16, [a, b])
  np.testing.assert_array_equal(out, (a * b) + np.float16(1))


def test_double_arithmetic():
  a, b = F.astype(np.float64) * 1.1, G.astype(np.float64)
  out = run_elementwise("  %m = fmul double %x0, %x1\n  %r = fadd double %m, %x0", np.float64, [a, b])
  np.testing.assert_array_equal(out, a * b + a)


def test_byte_and_short_loads_stores():
  a = rng.integers(-128, 127, 200).astype(np.int8)
  out = run_elementwise("  %e = sext i8 %x0 to i32\n  %m = mul i32 %e, 3\n  %r = trunc i32 %m to i8", np.int8, [a])
  np.testing.assert_array_equal(out, (a.astype(np.int32) * 3).astype(np.int8))
  s = rng.integers(0, 65535, 200).astype(np.uint16)
  out = run_elementwise("  %e = zext i16 %x0 to i32\n  %r = add i32 %e, 70000", np.int32, [s])
  np.testing.assert_array_equal(out, s.astype(np.int32) + 70000)


LDS_SUM = TID + """
@buf = internal addrspace(3) global [256 x float] undef, align 4
define amdgpu_kernel void @lds_sum(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %g, 256
  %i = add i32 %base, %t
  %gp = getelementptr float, ptr addrspace(1) %in, i32 %i
  %v = load float, ptr addrspace(1) %gp
  %lp = getelementptr [256 x float], ptr addrspace(3) @buf, i32 0, i32 %t
  store float %v, ptr addrspace(3) %lp
  call void @llvm.amdgcn.s.barrier()
  br label %loop
loop:
  %s = phi i32 [128, %entry], [%s2, %next]
  %act = icmp ult i32 %t, %s
  br i1 %act, label %add, label %next
add:
  %o = add i32 %t, %s
  %op = getelementptr [256 x float], ptr addrspace(3) @buf, i32 0, i32 %o
  %a = load float, ptr addrspace(3) %lp
  %b = load float, ptr addrspace(3) %op
  %c = fadd float %a, %b
  store float %c, ptr addrspace(3) %lp
  br label %next
next:
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %s2 = lshr i32 %s, 1
  %more = icmp ne i32 %s2, 0
  br i1 %more, label %loop, label %done
done:
  %first = icmp eq i32 %t, 0
  br i1 %first, label %write, label %end
write:
  %r = load float, ptr addrspace(3) @buf
  %wp = getelementptr float, ptr addrspace(1) %out, i32 %g
  store float %r, ptr addrspace(1) %wp
  br label %end
end:
  ret void
}"""


def tree_sum(x: np.ndarray) -> np.ndarray:
  x = x.copy()
  s = x.shape[1] // 2
  while s:
    x[:, :s] = x[:, :s] + x[:, s:2 * s]
    s //= 2
  return x[:, 0]


def test_lds_tree_reduction_with_barriers():
  x = rng.standard_normal(16 * 256).astype(np.float32)
  out = np.zeros(16, np.float32)
  stats = Kernel(LDS_SUM, "lds_sum")(out, x, grid=(16, 1, 1), block=(256, 1, 1))
  np.testing.assert_array_equal(out, tree_sum(x.reshape(16, 256)))
  assert stats.waves == 16 * 8


MATMUL = TID + """
define amdgpu_kernel void @mm(ptr addrspace(1) noalias %c, ptr addrspace(1) noalias %a,
                              ptr addrspace(1) noalias %b, i32 %n) {
entry:
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %ty = call i32 @llvm.amdgcn.workitem.id.y()
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %col0 = mul i32 %gx, 8
  %col = add i32 %col0, %tx
  %row0 = mul i32 %gy, 4
  %row = add i32 %row0, %ty
  br label %loop
loop:
  %k = phi i32 [0, %entry], [%k2, %loop]
  %acc = phi float [0.0, %entry], [%acc2, %loop]
  %ai = mul i32 %row, %n
  %ai2 = add i32 %ai, %k
  %bi = mul i32 %k, %n
  %bi2 = add i32 %bi, %col
  %ap = getelementptr float, ptr addrspace(1) %a, i32 %ai2
  %bp = getelementptr float, ptr addrspace(1) %b, i32 %bi2
  %av = load float, ptr addrspace(1) %ap
  %bv = load float, ptr addrspace(1) %bp
  %acc2 = call float @llvm.fma.f32(float %av, float %bv, float %acc)
  %k2 = add i32 %k, 1
  %more = icmp slt i32 %k2, %n
  br i1 %more, label %loop, label %done
done:
  %ci = mul i32 %row, %n
  %ci2 = add i32 %ci, %col
  %cp = getelementptr float, ptr addrspace(1) %c, i32 %ci2
  store float %acc2, ptr addrspace(1) %cp
  ret void
}
declare float @llvm.fma.f32(float, float, float)
"""


def test_matmul_2d_grid_and_workgroup_ids():
  n = 16
  a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  c = np.zeros((n, n), np.float32)
  Kernel(MATMUL, "mm")(c, a, b, n, grid=(n // 8, n // 4, 1), block=(8, 4, 1))
  ref = np.zeros((n, n), np.float64)
  for k in range(n): ref = (a[:, k:k + 1].astype(np.float64) * b[k] + ref).astype(np.float32).astype(np.float64)
  np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


I32 = rng.integers(-2**31, 2**31 - 1, 200).astype(np.int32)
I32B = rng.integers(-1000, 1000, 200).astype(np.int32) | 1
U64 = rng.integers(0, 2**63, 200, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
I64 = rng.integers(-2**62, 2**62, 200).astype(np.int64)
BF = (F * 7).astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)


def bf16_to_f32(u16: np.ndarray) -> np.ndarray: return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_rne(x: np.ndarray) -> np.ndarray:
  u = x.view(np.uint32).astype(np.uint64)
  return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


CASES = {
  "i64_udiv_urem": ("  %q = udiv i64 %x0, %x1\n  %m = urem i64 %x0, %x1\n  %r = xor i64 %q, %m", np.uint64,
                    [U64, U64 >> np.uint64(20)], lambda a, b: (a // b) ^ (a % b)),
  "i64_sdiv": ("  %r = sdiv i64 %x0, %x1", np.int64, [I64, (I64 >> 30) | 1],
               lambda a, b: (np.abs(a) // np.abs(b)) * np.sign(a) * np.sign(b)),
  "f64_div_sqrt": ("  %d = fdiv double %x0, %x1\n  %r = call double @llvm.sqrt.f64(double %d)", np.float64,
                   [np.abs(F.astype(np.float64)) + 1, np.abs(G.astype(np.float64))], lambda a, b: np.sqrt(a / b)),
  "f64_to_i64": ("  %r = fptosi double %x0 to i64", np.int64, [F.astype(np.float64) * 1e9],
                 lambda a: a.astype(np.int64)),
  "i64_to_f32": ("  %r = sitofp i64 %x0 to float", np.float32, [I64], lambda a: a.astype(np.float32)),
  "u64_to_f64": ("  %r = uitofp i64 %x0 to double", np.float64, [U64], lambda a: a.astype(np.float64)),
  "f32_to_u8": ("  %r = fptoui float %x0 to i8", np.uint8, [np.abs(F) * 5], lambda a: a.astype(np.uint8)),
  "bf16_roundtrip": ("  %b = bitcast i16 %x0 to bfloat\n  %f = fpext bfloat %b to float\n  %m = fmul float %f, 3.0\n"
                     "  %t = fptrunc float %m to bfloat\n  %r = bitcast bfloat %t to i16", np.uint16,
                     [(BF >> np.uint32(16)).astype(np.uint16)], lambda a: f32_to_bf16_rne(bf16_to_f32(a) * 3)),
  "i32_mul_shift_bits": ("  %m = mul i32 %x0, %x1\n  %s = lshr i32 %m, 3\n  %a = ashr i32 %x0, 7\n"
                         "  %o = or i32 %s, %a\n  %c = call i32 @llvm.ctpop.i32(i32 %o)\n  %r = add i32 %o, %c",
                         np.int32, [I32, I32B], None),
  "i32_min_max_abs": ("  %a = call i32 @llvm.smax.i32(i32 %x0, i32 %x1)\n"
                      "  %b = call i32 @llvm.abs.i32(i32 %a, i1 false)\n"
                      "  %r = call i32 @llvm.umin.i32(i32 %b, i32 1000000)", np.int32, [I32, I32B],
                      lambda a, b: np.minimum(np.abs(np.maximum(a, b)).astype(np.uint32), 1000000).astype(np.int32)),
  "f32_recip_rsqrt_fast": ("  %q = fdiv afn float 1.0, %x0\n  %s = call afn float @llvm.sqrt.f32(float %q)\n"
                           "  %r = fmul float %s, 2.0", np.float32, [np.abs(F) + 1], lambda a: np.sqrt(1 / a) * 2),
  "f16_math": ("  %e = call half @llvm.exp2.f16(half %x0)\n  %s = call half @llvm.sqrt.f16(half %e)\n"
               "  %r = fdiv half %s, %x1", np.float16, [(F / 8).astype(np.float16), (G * 2).astype(np.float16)], None),
  "select_bool_compare_i8": ("  %c = icmp slt i8 %x0, %x1\n  %r = select i1 %c, i8 %x1, i8 %x0", np.int8,
                             [I32.astype(np.int8), I32B.astype(np.int8)], lambda a, b: np.maximum(a, b)),
  "f32_where_isinf_isnan": ("  %a = call float @llvm.fabs.f32(float %x0)\n"
                            "  %i = fcmp oeq float %a, 0x7FF0000000000000\n"
                            "  %r = select i1 %i, float 0.0, float %x0", np.float32,
                            [np.where(np.arange(200) % 5 == 0, np.inf, F).astype(np.float32)],
                            lambda a: np.where(np.isinf(a), 0, a).astype(np.float32)),
  "i16_arith": ("  %m = mul i16 %x0, %x1\n  %r = add i16 %m, 7", np.int16,
                [I32.astype(np.int16), I32B.astype(np.int16)],
                lambda a, b: a * b + np.int16(7)),
  "i32_to_f16": ("  %r = sitofp i32 %x0 to half", np.float16, [I32B * 3], lambda a: a.astype(np.float16)),
  "f64_exp_log_via_f32": ("  %f = fptrunc double %x0 to float\n  %l = call float @llvm.log.f32(float %f)\n"
                          "  %r = fpext float %l to double", np.float64, [np.abs(F.astype(np.float64)) + 0.5], None),
}
DECLS = """declare i32 @llvm.ctpop.i32(i32)
declare i32 @llvm.smax.i32(i32, i32)
declare i32 @llvm.abs.i32(i32, i1)
declare i32 @llvm.umin.i32(i32, i32)
declare float @llvm.sqrt.f32(float)
declare double @llvm.sqrt.f64(double)
declare half @llvm.exp2.f16(half)
declare half @llvm.sqrt.f16(half)
declare float @llvm.fabs.f32(float)
declare float @llvm.log.f32(float)
"""


def reference_for(name, inputs):
  body, out_dtype, _, ref = CASES[name]
  if ref is not None: return ref(*inputs)
  a = inputs
  if name == "i32_mul_shift_bits":
    m = (a[0].astype(np.int64) * a[1]).astype(np.int32)
    o = (m.view(np.uint32) >> 3) | (a[0] >> 7).view(np.uint32)
    return (o + np.array([bin(int(v)).count("1") for v in o], np.uint32)).view(np.int32)
  if name == "f16_math":
    e = np.exp2(a[0].astype(np.float32)).astype(np.float16)
    root = np.sqrt(e.astype(np.float32)).astype(np.float16).astype(np.float32)
    return (root / a[1].astype(np.float32)).astype(np.float16)
  if name == "f64_exp_log_via_f32": return np.log(a[0].astype(np.float32)).astype(np.float64)
  raise KeyError(name)


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_cases(name):
  body, out_dtype, inputs, _ = CASES[name]
  out = run_elementwise(body, out_dtype, inputs, decls=DECLS)
  ref = np.asarray(reference_for(name, inputs)).astype(out_dtype)
  if np.dtype(out_dtype).kind == "f":
    np.testing.assert_allclose(out, ref, rtol=2e-7 if out_dtype != np.float16 else 1e-3)
  else: np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("slots", [256, 2])
def test_private_array_in_scratch(slots):
  """A private array indexed by a loaded value lives in scratch; with 2 slots (COMPUTE_TMPRING_SIZE.WAVES) only one
  64-lane workgroup runs at a time, and the results are the same."""
  kernel = Kernel(SCRATCH, "priv")
  assert kernel.kernel.private_segment_size >= 64 and kernel.kernel.rsrc2 & 1  # SCRATCH_EN
  idx = rng.integers(0, 16, 256).astype(np.int32)
  out = np.zeros(256, np.int32)
  stats = kernel(out, idx, grid=(4, 1, 1), block=(64, 1, 1), scratch_waves=slots)
  np.testing.assert_array_equal(out, idx * np.arange(256))
  assert stats.waves == 8


def test_scratch_is_each_waves_slot_swizzled_by_dwords():
  """Lane l's private dword k of wave w is at base + w * WAVESIZE + k * 128 + 4 * l (the hardware's layout)."""
  from tiny_amd.emulator.rdna3 import DispatchRegisters, run_dispatch
  from tiny_amd.pm4 import tmpring_size
  kernel = Kernel(SCRATCH, "priv")
  k, memory = kernel.kernel, kernel.memory
  wave_bytes = -(-k.private_segment_size * 32 // 256) * 256
  scratch = memory.allocate(2 * wave_bytes)
  out, idx = memory.allocate(256), memory.allocate(256)
  args = memory.allocate(16)
  args.bytes[:16] = np.array([out.va, idx.va], np.uint64).view(np.uint8)
  regs = DispatchRegisters(k.code_address, k.rsrc1, k.rsrc2, k.rsrc3, (args.va & 0xFFFFFFFF, args.va >> 32) + (0,) * 14,
                           (64, 1, 1), (1, 1, 1), tmpring_size("gfx1100", 2, wave_bytes), scratch.va)
  run_dispatch(regs, memory)
  words = scratch.bytes[:2 * wave_bytes].view(np.uint32)
  arr_offset = next(o for o in range(0, k.private_segment_size, 4) if words[o // 4 * 32 + 5] == 5)  # arr[1], lane 5
  for wave in range(2):
    slot = words[wave * wave_bytes // 4:]
    for element in range(16):
      lanes = slot[(arr_offset - 4 + 4 * element) // 4 * 32:][:32]
      np.testing.assert_array_equal(lanes, element * (np.arange(32) + 32 * wave))


# 16-bit private elements: scratch_store_b16 / scratch_store_d16_hi_b16 and scratch_load_d16(_hi)_b16 (two halves
# gathered into one dword)
SCRATCH_D16 = TID + """define amdgpu_kernel void @h(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %idx) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
""" + private_fill("i16", "%t") + """  %ip = getelementptr i32, ptr addrspace(1) %idx, i32 %t
  %i = load i32, ptr addrspace(1) %ip
  %j = xor i32 %i, 5
  %q = getelementptr [16 x i16], ptr addrspace(5) %arr, i32 0, i32 %i
  %a = load volatile i16, ptr addrspace(5) %q
  %q2 = getelementptr [16 x i16], ptr addrspace(5) %arr, i32 0, i32 %j
  %b = load volatile i16, ptr addrspace(5) %q2
  %v0 = insertelement <2 x i16> undef, i16 %a, i32 0
  %v1 = insertelement <2 x i16> %v0, i16 %b, i32 1
  %w = bitcast <2 x i16> %v1 to i32
  %op = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 %w, ptr addrspace(1) %op
  ret void
}"""


def test_private_16_bit_halves_in_scratch():
  idx = rng.integers(0, 16, 64).astype(np.int32)
  out = np.zeros(64, np.uint32)
  Kernel(SCRATCH_D16, "h")(out, idx, block=(64, 1, 1))
  t = np.arange(64)
  want = ((idx * t) & 0xFFFF) | (((idx ^ 5) * t) & 0xFFFF) << 16
  np.testing.assert_array_equal(out, want.astype(np.uint32))


def test_scratch_without_slots_is_an_error():
  from tiny_amd.emulator.wave_state import EmulationError
  with pytest.raises(EmulationError, match="COMPUTE_TMPRING_SIZE"):
    Kernel(SCRATCH, "priv")(np.zeros(64, np.int32), np.zeros(64, np.int32), block=(64, 1, 1), scratch_waves=0)


def test_division_edge_cases_overflow_underflow_denormal():
  n = np.array([1, 1e30, 1e-30, 3e38, 1e-38, 1e-40, 1, 5, 0, np.inf, 1, -7, 1e38, 2e-38, -0.0, 6], np.float32)
  d = np.array([3, 1e-10, 1e10, 0.5, 1e10, 3, 1e-40, 3e38, 0, np.inf, 0, 1e-39, 1e-3, 3e-1, 5, -0.0], np.float32)
  out = run_elementwise("  %r = fdiv float %x0, %x1", np.float32, [n, d])
  with np.errstate(all="ignore"): np.testing.assert_array_equal(out, n / d)
  out = run_elementwise("  %r = fdiv double %x0, %x1", np.float64, [n.astype(np.float64) ** 3, d.astype(np.float64)])
  with np.errstate(all="ignore"): np.testing.assert_array_equal(out, n.astype(np.float64) ** 3 / d.astype(np.float64))


DIVERGENT = TID + """
define amdgpu_kernel void @div(ptr addrspace(1) noalias %out) {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %n = mul i32 %g, 3
  %odd = and i32 %g, 1
  %isodd = icmp ne i32 %odd, 0
  br i1 %isodd, label %loop, label %even
loop:
  %k = phi i32 [0, %entry], [%k2, %loop]
  %acc = phi i32 [0, %entry], [%acc2, %loop]
  %acc2 = add i32 %acc, %k
  %k2 = add i32 %k, 1
  %more = icmp slt i32 %k2, %n
  br i1 %more, label %loop, label %done
even:
  %neg = sub i32 0, %g
  br label %done
done:
  %r = phi i32 [%acc2, %loop], [%neg, %even]
  %r2 = add i32 %r, %t
  %base = mul i32 %g, 64
  %i = add i32 %base, %t
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %r2, ptr addrspace(1) %p
  ret void
}"""


def test_waves_with_different_scalar_paths_in_one_batch():
  out = np.zeros(12 * 64, np.int32)
  Kernel(DIVERGENT, "div")(out, grid=(12, 1, 1), block=(64, 1, 1))
  g = np.arange(12)[:, None]
  per_group = np.where(g % 2 == 1, (3 * g - 1) * (3 * g) // 2, -g)
  np.testing.assert_array_equal(out.reshape(12, 64), per_group + np.arange(64))


BPERMUTE = TID + """
declare i32 @llvm.amdgcn.ds.bpermute(i32, i32)
define amdgpu_kernel void @rot(ptr addrspace(1) noalias %out) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %n = add i32 %t, 1
  %src = and i32 %n, 31
  %addr = shl i32 %src, 2
  %v = mul i32 %t, 10
  %r = call i32 @llvm.amdgcn.ds.bpermute(i32 %addr, i32 %v)
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %t
  store i32 %r, ptr addrspace(1) %p
  ret void
}"""


def test_ds_bpermute_reads_another_lane():
  out = np.zeros(64, np.int32)
  Kernel(BPERMUTE, "rot")(out, grid=(1, 1, 1), block=(64, 1, 1))
  lanes = np.arange(64)
  np.testing.assert_array_equal(out, (lanes // 32 * 32 + (lanes + 1) % 32) * 10)
