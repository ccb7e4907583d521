"""The PTX interpreter against hand-computed values: integer and float semantics as PTX defines them, conversions
with every rounding mode, half/bfloat16, divergent control flow, shared memory with barriers, local memory, faults."""
from __future__ import annotations
import numpy as np
import pytest
from mock_helpers import HALF_HELPERS, KernelRunner, compile_ptx, needs_nvrtc, pack_params, run_kernel
from tiny_nv.mock.memory import DeviceMemory
from tiny_nv.mock.ptx import MemoryFault, PTXError, load_module

pytestmark = needs_nvrtc

def test_integer_division_and_remainder_truncate_toward_zero():
  src = r"""extern "C" __global__ void k(int* q, int* r, const int* a, const int* b, unsigned* uq, const unsigned* ua) {
    int i = threadIdx.x; q[i] = a[i] / b[i]; r[i] = a[i] % b[i]; uq[i] = ua[i] / (unsigned)b[i]; }"""
  a = np.array([7, -7, 7, -7, 0, -2147483647, 100], np.int32)
  b = np.array([2, 2, -2, -2, 5, 10, 7], np.int32)
  ua = np.array([4294967295, 7, 8, 9, 10, 11, 12], np.uint32)
  q, r, _, _, uq, _ = run_kernel(src, "k", [np.zeros(7, np.int32), np.zeros(7, np.int32), a, b, np.zeros(7, np.uint32),
                                            ua], block=(7, 1, 1))
  assert q.tolist() == [3, -3, -3, 3, 0, -214748364, 14]
  assert r.tolist() == [1, -1, 1, -1, 0, -7, 2]
  assert uq.tolist() == [2147483647, 3, 0, 0, 2, 1, 1]   # -2 as unsigned is huge

def test_shifts_wrapping_and_high_multiplies():
  src = r"""extern "C" __global__ void k(int* o, unsigned* u, long long* w, unsigned long long* h, const int* a,
                                         const int* s, const long long* b) {
    int i = threadIdx.x;
    o[i] = a[i] >> s[i];  u[i] = ((unsigned)a[i]) >> s[i];  w[i] = b[i] * b[i] + (b[i] << s[i]);
    h[i] = __umul64hi((unsigned long long)b[i], 0x9E3779B97F4A7C15ull) + (unsigned)__mulhi(a[i], 1000000007);
  }"""
  a = np.array([-16, 2147483647, -1, 12345678], np.int32)
  s = np.array([2, 31, 1, 4], np.int32)
  b = np.array([3037000500, -5, 1 << 40, 123456789123], np.int64)
  o, u, w, h, *_ = run_kernel(src, "k", [np.zeros(4, np.int32), np.zeros(4, np.uint32), np.zeros(4, np.int64),
                                         np.zeros(4, np.uint64), a, s, b], block=(4, 1, 1))
  assert o.tolist() == [-4, 0, -1, 771604]
  assert u.tolist() == [1073741820, 0, 2147483647, 771604]
  wrap = lambda x: (x + 2**63) % 2**64 - 2**63
  assert w.tolist() == [wrap(int(x) * int(x) + (int(x) << int(k))) for x, k in zip(b, s)]
  expected = [((int(x) % 2**64) * 0x9E3779B97F4A7C15 >> 64) + ((int(y) * 1000000007 >> 32) % 2**32)
              for x, y in zip(b, a)]
  assert h.tolist() == [e % 2**64 for e in expected]

def test_float_to_int_saturates_and_nan_is_zero():
  src = r"""extern "C" __global__ void k(int* s, unsigned* u, long long* l, const float* x) {
    int i = threadIdx.x; s[i] = (int)x[i]; u[i] = (unsigned)x[i]; l[i] = (long long)x[i]; }"""
  x = np.array([1e10, -1e10, np.nan, -1.9, 2.9, np.inf, -0.5], np.float32)
  s, u, l, _ = run_kernel(src, "k", [np.zeros(7, np.int32), np.zeros(7, np.uint32), np.zeros(7, np.int64), x],
                          block=(7, 1, 1))
  assert s.tolist() == [2147483647, -2147483648, 0, -1, 2, 2147483647, 0]
  assert u.tolist() == [4294967295, 0, 0, 0, 2, 4294967295, 0]
  assert l.tolist() == [10000000000, -10000000000, 0, -1, 2, 2**63 - 1, 0]

def test_rounding_modes_of_conversions_and_arithmetic():
  src = r"""extern "C" __global__ void k(int* r, float* f, const float* x, const float* y) {
    int i = threadIdx.x;
    r[4*i] = __float2int_rn(x[i]); r[4*i+1] = __float2int_rz(x[i]); r[4*i+2] = __float2int_rd(x[i]);
    r[4*i+3] = __float2int_ru(x[i]);
    f[4*i] = __fadd_rz(x[i], y[i]); f[4*i+1] = __fadd_ru(x[i], y[i]); f[4*i+2] = __fmul_rd(x[i], y[i]);
    f[4*i+3] = rintf(x[i]);
  }"""
  x = np.array([2.5, -2.5, 1.1, -1.5], np.float32)
  y = np.array([1e-8, 1e-8, 3.0, -1e-8], np.float32)
  r, f, _, _ = run_kernel(src, "k", [np.zeros(16, np.int32), np.zeros(16, np.float32), x, y], block=(4, 1, 1))
  assert r.reshape(4, 4).tolist() == [[2, 2, 2, 3], [-2, -2, -3, -2], [1, 1, 1, 2], [-2, -1, -2, -1]]
  f = f.reshape(4, 4)
  up = lambda v: np.nextafter(np.float32(v), np.float32(np.inf))
  def down(exact):   # round a float64 value toward -infinity into float32
    nearest = np.float32(exact)
    return np.nextafter(nearest, np.float32(-np.inf)) if nearest > exact else nearest
  assert f[0].tolist() == [2.5, up(2.5), down(2.5 * np.float64(y[0])), 2.0]
  assert f[1].tolist() == [up(-2.5), up(-2.5), down(-2.5 * np.float64(y[1])), -2.0]
  assert f[2, 2] == np.float32(3.3) and f[2, 2] <= np.float64(1.1) * 3   # 3.3000002 rounds down to 3.3000000
  assert f[3, 0] == -1.5 and f[3, 1] == -1.5 and f[3, 3] == -2.0

def test_min_max_return_the_number_and_comparisons_follow_c():
  src = r"""extern "C" __global__ void k(float* m, int* c, const float* a, const float* b) {
    int i = threadIdx.x; m[2*i] = fminf(a[i], b[i]); m[2*i+1] = fmaxf(a[i], b[i]);
    c[4*i] = a[i] == b[i]; c[4*i+1] = a[i] != b[i]; c[4*i+2] = a[i] < b[i]; c[4*i+3] = !(a[i] >= b[i]); }"""
  a = np.array([np.nan, 1.0, np.nan, -0.0, 3.0], np.float32)
  b = np.array([2.0, np.nan, np.nan, 1.0, 3.0], np.float32)
  m, c, _, _ = run_kernel(src, "k", [np.zeros(10, np.float32), np.zeros(20, np.int32), a, b], block=(5, 1, 1))
  m = m.reshape(5, 2)
  assert m[0].tolist() == [2.0, 2.0] and m[1].tolist() == [1.0, 1.0] and np.isnan(m[2]).all()
  assert m[3].tolist() == [-0.0, 1.0] and m[4].tolist() == [3.0, 3.0]
  assert c.reshape(5, 4).tolist() == [[0, 1, 0, 1], [0, 1, 0, 1], [0, 1, 0, 1], [0, 1, 1, 1], [1, 0, 0, 0]]

def test_correctly_rounded_and_approximate_float_ops():
  src = r"""extern "C" __global__ void k(float* o, const float* x, const float* y) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    o[8*i] = x[i] / y[i]; o[8*i+1] = sqrtf(x[i]); o[8*i+2] = 1.0f / y[i]; o[8*i+3] = fmaf(x[i], y[i], -1.0f);
    o[8*i+4] = exp2f(y[i]); o[8*i+5] = __log2f(x[i]); o[8*i+6] = __sinf(y[i]); o[8*i+7] = __cosf(y[i]); }"""
  rng = np.random.default_rng(1)
  x = rng.uniform(0.01, 100, 256).astype(np.float32)
  y = rng.uniform(-3, 3, 256).astype(np.float32)
  (o, _, _) = run_kernel(src, "k", [np.zeros(8 * 256, np.float32), x, y], grid=(4, 1, 1), block=(64, 1, 1))
  o = o.reshape(256, 8)
  np.testing.assert_array_equal(o[:, 0], x / y)
  np.testing.assert_array_equal(o[:, 1], np.sqrt(x))
  np.testing.assert_array_equal(o[:, 2], np.float32(1) / y)
  np.testing.assert_array_equal(o[:, 3], (x.astype(np.float64) * y - 1).astype(np.float32))
  np.testing.assert_allclose(o[:, 4], np.exp2(y), rtol=1e-6)
  np.testing.assert_allclose(o[:, 5], np.log2(x), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(o[:, 6:], np.stack([np.sin(y), np.cos(y)], 1), atol=1e-6)

def test_half_and_bfloat16_conversions_round_to_nearest_even():
  src = HALF_HELPERS + r"""extern "C" __global__ void k(unsigned short* h, unsigned short* hz, unsigned short* bf,
        float* back, unsigned short* hd, unsigned short* sum, const float* x, const double* d) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    h[i] = float_to_half(x[i]); hz[i] = float_to_half_rz(x[i]); bf[i] = float_to_bf16(x[i]);
    back[2*i] = half_to_float(h[i]); back[2*i+1] = bf16_to_float(bf[i]); hd[i] = double_to_half(d[i]);
    sum[i] = half_add(h[i], h[i]); }"""
  special = [1 + 2**-11, 1 + 3 * 2**-11, 65520.0, 1e-8, 6e-8, -0.0, np.inf, np.nan, 1 + 2**-8, 1 + 3 * 2**-9, 3e38,
             -70000.0]
  rng = np.random.default_rng(2)
  x = np.concatenate([np.array(special, np.float32), (rng.standard_normal(116) * 1000).astype(np.float32)])
  d = rng.standard_normal(128) * 10
  n = len(x)
  h, hz, bf, back, hd, total, _, _ = run_kernel(
    src, "k", [np.zeros(n, np.uint16), np.zeros(n, np.uint16), np.zeros(n, np.uint16), np.zeros(2 * n, np.float32),
               np.zeros(n, np.uint16), np.zeros(n, np.uint16), x, d], grid=(2, 1, 1), block=(64, 1, 1))
  with np.errstate(over="ignore"): np.testing.assert_array_equal(h, x.astype(np.float16).view(np.uint16))
  assert h[:3].view(np.float16).tolist() == [1.0, 1.001953125, np.inf] and h[4] == 1   # ties to even; subnormal
  assert hz[2] == 0x7BFF and hz[0] == 0x3C00          # rz: 65520 -> the largest finite half, not infinity
  assert bf[8] == 0x3F80 and bf[9] == 0x3F81 and bf[7] & 0x7FFF > 0x7F80   # bf16 ties to even, NaN stays NaN
  assert bf[10] == 0x7F62 and bf[11] == 0xC789
  np.testing.assert_array_equal(back[0::2], h.view(np.float16).astype(np.float32))
  assert back[1::2][:3].tolist() == [1.0, 1.0, 65536.0] and back[1::2][6] == np.inf
  np.testing.assert_array_equal(back[1::2][12:], (bf[12:].astype(np.uint32) << 16).view(np.float32))
  np.testing.assert_array_equal(hd, d.astype(np.float16).view(np.uint16))
  np.testing.assert_array_equal(total, (h.view(np.float16) + h.view(np.float16)).view(np.uint16))

def test_bit_operations():
  src = r"""extern "C" __global__ void k(unsigned* o, const unsigned* a, const unsigned* b) {
    int i = threadIdx.x; unsigned r;
    o[6*i] = __popc(a[i]); o[6*i+1] = __clz(a[i]); o[6*i+2] = __brev(a[i]); o[6*i+3] = __byte_perm(a[i], b[i], 0x7351);
    asm("bfe.u32 %0, %1, 4, 8;" : "=r"(r) : "r"(a[i])); o[6*i+4] = r;
    asm("bfi.b32 %0, %1, %2, 8, 12;" : "=r"(r) : "r"(b[i]), "r"(a[i])); o[6*i+5] = r; }"""
  a = np.array([0, 1, 0x80000000, 0xDEADBEEF], np.uint32)
  b = np.array([0x12345678, 0xFFFFFFFF, 0, 0xCAFEBABE], np.uint32)
  o, _, _ = run_kernel(src, "k", [np.zeros(24, np.uint32), a, b], block=(4, 1, 1))
  o = o.reshape(4, 6)
  brev = lambda v: int(f"{int(v):032b}"[::-1], 2)
  def perm(x, y, sel):
    source = (int(y) << 32) | int(x)
    return sum(((source >> (8 * ((sel >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))
  for i in range(4):
    assert o[i].tolist() == [bin(int(a[i])).count("1"), 32 - int(a[i]).bit_length(), brev(a[i]),
                             perm(a[i], b[i], 0x7351), (int(a[i]) >> 4) & 0xFF,
                             (int(a[i]) & ~(0xFFF << 8)) | ((int(b[i]) & 0xFFF) << 8)]

def test_divergent_branches_loops_and_early_exit():
  src = r"""extern "C" __global__ void k(int* o, const int* n) {
    int i = threadIdx.x;
    if (i >= n[0]) return;                       // some lanes leave early
    int acc = 0;
    if (i % 3 == 0) { for (int j = 0; j < i; j++) acc += j; }       // per-lane trip counts
    else if (i % 3 == 1) { acc = -i; while (acc < 100) { acc = acc < 0 ? acc + 7 : acc * 2; if (acc == 0) acc = 1; } }
    else { acc = 1000 + i; }
    __syncwarp();
    o[i] = acc + 1; }"""
  (o, _) = run_kernel(src, "k", [np.full(64, -5, np.int32), np.array([50], np.int32)], block=(64, 1, 1))
  def reference(i):
    if i % 3 == 0: return sum(range(i)) + 1
    if i % 3 == 1:
      acc = -i
      while acc < 100:
        acc = acc + 7 if acc < 0 else acc * 2
        acc = 1 if acc == 0 else acc
      return acc + 1
    return 1000 + i + 1
  assert o.tolist() == [reference(i) for i in range(50)] + [-5] * 14

def test_shared_memory_tree_reduction_per_block():
  src = r"""extern "C" __global__ void __launch_bounds__(128) k(float* out, const float* x) {
    __shared__ float part[128];
    int t = threadIdx.x;
    part[t] = x[blockIdx.x * 128 + t];
    __syncthreads();
    for (int s = 64; s > 0; s >>= 1) { if (t < s) part[t] += part[t + s]; __syncthreads(); }
    if (t == 0) out[blockIdx.x] = part[0]; }"""
  x = np.arange(128 * 300, dtype=np.float32) % 17
  out, _ = run_kernel(src, "k", [np.zeros(300, np.float32), x], grid=(300, 1, 1), block=(128, 1, 1))
  np.testing.assert_array_equal(out, x.reshape(300, 128).sum(1))

def test_dynamic_shared_memory_and_three_dimensional_indices():
  src = r"""extern "C" __global__ void k(int* out) {
    extern __shared__ int scratch[];
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    scratch[t] = t * 10 + b;
    __syncthreads();
    int n = blockDim.x * blockDim.y * blockDim.z;
    out[b * n + t] = scratch[n - 1 - t]; }"""
  grid, block = (2, 3, 2), (4, 2, 3)
  n, blocks = 24, 12
  (out,) = run_kernel(src, "k", [np.zeros(n * blocks, np.int32)], grid=grid, block=block, shared_bytes=n * 4)
  expected = [(n - 1 - t) * 10 + b for b in range(blocks) for t in range(n)]
  assert out.tolist() == expected

def test_local_memory_vector_loads_and_uniform_parameters():
  src = r"""extern "C" __global__ void k(float* o, const float4* v, const int* sel, int count, float scale) {
    int i = threadIdx.x; float tmp[4];
    float4 q = v[i]; tmp[0] = q.x; tmp[1] = q.y; tmp[2] = q.z; tmp[3] = q.w;
    o[i] = tmp[sel[i] & 3] * scale + count; }"""
  v = np.arange(32, dtype=np.float32)
  sel = np.array([0, 1, 2, 3, 7, 6, 5, 4], np.int32)
  o, _, _ = run_kernel(src, "k", [np.zeros(8, np.float32), v, sel], [np.int32(5), np.float32(0.5)], block=(8, 1, 1))
  assert o.tolist() == [v[4 * i + (s & 3)] * 0.5 + 5 for i, s in enumerate(sel)]

def test_parameters_follow_the_cuda_abi_layout():
  src = r"""extern "C" __global__ void k(long long* o, int a, int b, long long c, short d, double e) {
    o[0] = a; o[1] = b; o[2] = c; o[3] = d; o[4] = (long long)e; }"""
  module = compile_ptx(src)
  assert [p.offset for p in module.kernel("k").decoded.params] == [0, 8, 12, 16, 24, 32]
  args = [np.int32(-3), np.int32(4), np.int64(-(1 << 40)), np.int16(-7), np.float64(123.9)]
  assert len(pack_params([np.uint64(0)] + args)) == 40
  (o,) = run_kernel(src, "k", [np.zeros(5, np.int64)], args)
  assert o.tolist() == [-3, 4, -(1 << 40), -7, 123]

def test_out_of_bounds_access_is_a_fault_naming_the_kernel():
  src = r"""extern "C" __global__ void oob(float* o) { o[threadIdx.x + 5000] = 1.0f; }"""
  with pytest.raises(MemoryFault, match="oob.*outside every allocation"):
    run_kernel(src, "oob", [np.zeros(4, np.float32)], block=(4, 1, 1))

def test_unknown_instruction_names_itself_and_its_line():
  ptx = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
  .reg .b32 %r<3>;
  mov.u32 %r1, 1;
  frobnicate.b32 %r2, %r1;
  ret;
}"""
  with pytest.raises(PTXError, match=r"line 8: unsupported instruction 'frobnicate.b32 %r2, %r1'"):
    load_module(ptx)

def test_launch_rejects_a_short_parameter_buffer():
  module = compile_ptx(r"""extern "C" __global__ void k(int* o, int v) { o[0] = v; }""")
  with pytest.raises(ValueError, match="parameter buffer has 8 bytes, the kernel reads 12"):
    module.kernel("k").launch(DeviceMemory(), (1, 1, 1), (1, 1, 1), 0, bytes(8))

def test_device_function_calls_are_inlined():
  src = r"""__device__ __noinline__ int twice(int x) { return x * 2; }
  __device__ __noinline__ int twice_plus(int x, int y) { if (x < 0) return twice(y); return twice(x) + y; }
  extern "C" __global__ void k(int* o, double* p, const int* a, const double* b) {
    int i = threadIdx.x;
    o[i] = twice_plus(a[i], i) + twice(i);
    p[i] = pow(b[i], 3.0 - b[i]); }"""
  module = compile_ptx(src)
  assert "_Z5twicei" in module.parsed.functions   # NVRTC keeps a __noinline__ function as a .func
  a = np.array([5, -1, 7, -9, 0, 3], np.int32)
  b = np.array([2.0, 0.5, 3.0, 1.5, 10.0, 0.25])
  o, p, _, _ = KernelRunner().run(module, "k", [np.zeros(6, np.int32), np.zeros(6), a, b], block=(6, 1, 1))
  assert o.tolist() == [(2 * i if x < 0 else 2 * x + i) + 2 * i for i, x in enumerate(a)]
  np.testing.assert_allclose(p, np.power(b, 3.0 - b), rtol=1e-15)   # CUDA's pow: within 2 ulp

def test_recursion_is_refused():
  ptx = """.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 func_retval0) f(.param .b32 f_param_0)
{
  .reg .b32 %r<3>;
  ld.param.u32 %r1, [f_param_0];
  { .param .b32 param0; st.param.b32 [param0+0], %r1; .param .b32 retval0;
  call.uni (retval0), f, (param0); ld.param.b32 %r2, [retval0+0]; }
  st.param.b32 [func_retval0+0], %r2;
  ret;
}
.visible .entry k(.param .u64 k_param_0)
{
  .reg .b32 %r<3>;
  { .param .b32 param0; st.param.b32 [param0+0], %r1; .param .b32 retval0;
  call.uni (retval0), f, (param0); ld.param.b32 %r2, [retval0+0]; }
  ret;
}"""
  with pytest.raises(PTXError, match="line 9: recursive call of f"): load_module(ptx)
