"""The CUDA C renderer: tinycore's C-style renderer with CUDA's qualifiers, types, builtins and thread ids.

What differs from C, and why:
- ``extern "C" __global__ void name(T* __restrict__ data0, ...)`` (C linkage: cuModuleGetFunction finds the plain
  name); the outer output loops become ``blockIdx * blockDim + threadIdx``.
- NVRTC has no system headers (no math.h, no cuda_fp16.h in its wheel): the math functions are CUDA's device
  builtins (exp2f, log2f, sinf, sqrtf, truncf, powf and their double forms), and float16/bfloat16 (the 8-bit floats)
  are stored as 16-bit words (bytes) and computed in float with the core's bit-level conversions, like the C and
  OpenCL renderers.
- Bits are reinterpreted with ``memcpy`` in a small template (NVRTC has neither ``__builtin_memcpy`` nor GNU
  statement expressions).
- Numerics come from the compiler options (tiny_nv.compiler.NUMERIC_OPTIONS): no fused multiply-add, IEEE division
  and sqrt, denormals kept.
- Grid dimensions y and z hold at most 65535 blocks: an outer loop too long for them stays a loop in the kernel.
"""
from __future__ import annotations
from tinycore.plugin import NARROW_FLOATS, CStyleRenderer, DType, LinearKernel, Loop, dtypes

# The core's float16/bfloat16 conversions (one algorithm for every C-family device), as CUDA device functions
CUDA_HALF_HELPERS = (CStyleRenderer.half_helpers.replace("static inline", "static __device__ __forceinline__")
                     .replace("__builtin_memcpy", "memcpy"))
CUDA_FLOAT_BITS = (CStyleRenderer.float_bits_helpers.replace("static inline", "static __device__ __forceinline__")
                   .replace("__builtin_memcpy", "memcpy"))
BITCAST_HELPER = ("template <typename D, typename S> static __device__ __forceinline__ D tc_bitcast(S s) {\n"
                  "  static_assert(sizeof(D) == sizeof(S), \"bitcast between types of one size\");\n"
                  "  D d; memcpy(&d, &s, sizeof(D)); return d;\n}\n")

MAX_GRID_YZ = 65535            # CUDA's limit on gridDim.y and gridDim.z
MAX_BLOCK_THREADS = 256        # threads per block we launch (every CUDA GPU allows 1024)


class CUDARenderer(CStyleRenderer):
  """Renders a kernel as a CUDA C ``__global__`` function for NVRTC (`arch`: the compute capability it targets)."""
  device = "NV"
  kernel_qualifier = 'extern "C" __global__'
  restrict = "__restrict__"
  index_type = "long long"
  global_dims = 3
  max_local_size = MAX_BLOCK_THREADS
  type_names: dict[DType, str] = {**CStyleRenderer.type_names, dtypes.bool: "bool"}
  prelude = BITCAST_HELPER
  half_helpers = CUDA_HALF_HELPERS
  float_bits_helpers = CUDA_FLOAT_BITS
  helper_qualifier = "static __device__ __forceinline__"
  unroll_pragma = "#pragma unroll"

  def __init__(self, arch: tuple[int, int] = (9, 0)):
    self.arch = arch

  def bitcast(self, expr: str, src: DType, dst: DType) -> str:
    """Reinterpret bits through memcpy; 16-bit floats go through their 16-bit storage form. A wider source is
    narrowed to the destination's size first (a scalar parameter's 64-bit word holding a float's bits)."""
    if src in NARROW_FLOATS: expr = self.store_value(expr, src)
    else: expr = f"({self.storage_type(src)})({expr})"
    return self.load_word(f"tc_bitcast<{self.storage_type(dst)}>({expr})", dst)

  def global_id(self, dim: int) -> str:
    axis = "xyz"[dim]
    return f"((long long)blockIdx.{axis} * blockDim.{axis} + threadIdx.{axis})"

  def parallel_loops(self, kernel: LinearKernel) -> list[Loop]:
    """The base's choice, minus outer loops whose grid dimension (y or z) could exceed CUDA's 65535 blocks: those
    stay loops inside the kernel (each thread runs them), the inner ones keep the grid."""
    chosen = super().parallel_loops(kernel)
    while len(chosen) > 1 and any(loop.range.src[0].arg > MAX_GRID_YZ for loop in chosen[:-1]): chosen = chosen[1:]
    return chosen
