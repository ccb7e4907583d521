"""The OpenCL C renderer: tinycore's C-style renderer with OpenCL C's qualifiers, types, builtins and work-items.

What differs from C, and why:
- ``__kernel void name(__global T* restrict data0, ...)``; the outer output loops become ``get_global_id(d)``.
- OpenCL C type names (char, uchar, ..., long, ulong). ``bool`` is not allowed in kernel arguments, so bool buffers
  are ``uchar`` (one byte, 0 or 1, as numpy stores them); bool values inside the kernel are ``bool``.
- Math builtins are overloaded on the argument type: ``exp2(x)``, not ``exp2f(x)``.
- Bit reinterpretation with ``as_<type>()`` (no ``__builtin_memcpy``, no statement expressions).
- float16 and bfloat16 are stored as 16-bit words and computed in float, like the C renderer does it, so they need
  no ``cl_khr_fp16``: float16 converts with the core builtins ``vload_half`` / ``vstore_half_rte`` (which work on a
  ``half*`` without the extension), bfloat16 and the 8-bit floats with bit manipulation.
- ``#pragma OPENCL FP_CONTRACT OFF``: no fused multiply-add contraction, so results match numpy's IEEE arithmetic
  (the CPU device compiles with -ffp-contract=off for the same reason).
"""
from __future__ import annotations
from typing import Any, Sequence
from tinycore.plugin import FP8S, NARROW_FLOATS, CStyleRenderer, DType, LinearKernel, Ops, dtypes

CL_HALF_HELPERS = r"""
float tc_half_to_float(ushort h) { return vload_half(0, (const __private half*)&h); }
ushort tc_float_to_half(float f) {
  if (isnan(f)) return (ushort)(((as_uint(f) >> 16) & 0x8000u) | 0x7e00u);  /* one NaN, as the C renderer's */
  ushort h; vstore_half_rte(f, 0, (__private half*)&h); return h;
}
float tc_round_half(float f) { return tc_half_to_float(tc_float_to_half(f)); }
float tc_bf16_to_float(ushort h) { return as_float((uint)h << 16); }
ushort tc_float_to_bf16(float f) {
  uint x = as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40);
  return (ushort)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
float tc_round_bf16(float f) { return tc_bf16_to_float(tc_float_to_bf16(f)); }
"""

# double -> float by round-to-odd, so that a cast from double to a 16-bit float rounds once (see CStyleRenderer)
CL_ROUND_ODD_HELPER = r"""
float tc_float_round_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  uint bits = as_uint(f);
  if (fabs((double)f) > fabs(d)) bits -= 1u;
  return as_float(bits | 1u);
}
"""


class CLRenderer(CStyleRenderer):
  """Renders a kernel as an OpenCL C ``__kernel``.

  fp64: whether the device has ``cl_khr_fp64`` (float64 is in ``supported_dtypes`` only then).
  fp16: whether the device has ``cl_khr_fp16`` (reported, not needed: 16-bit floats compute in float).
  max_local_size / max_work_item_sizes: the device's work-group limits, respected by ``launch_dims``.
  """
  device = "CL"
  kernel_qualifier = "__kernel"
  buffer_qualifier = "__global"
  index_type = "long"
  global_dims = 3
  type_names: dict[DType, str] = {
    dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
    dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float32: "float",
    dtypes.float64: "double", dtypes.float16: "float", dtypes.bfloat16: "float",
    **{d: "float" for d in FP8S}}   # narrow floats compute in float
  storage_names: dict[DType, str] = {dtypes.bool: "uchar", dtypes.float16: "ushort", dtypes.bfloat16: "ushort",
                                     **{d: "uchar" for d in FP8S}}
  half_helpers = CL_HALF_HELPERS
  float_bits_helpers = ("uint tc_bits_of(float f) { return as_uint(f); }\n"
                        "float tc_float_of(uint u) { return as_float(u); }\n")
  helper_qualifier = ""
  rint_function = "rint"
  unroll_pragma = "#pragma unroll"  # OpenCL compilers (clang, NVIDIA, AMD, Intel) know this spelling, not GCC's

  def __init__(self, fp64: bool = True, fp16: bool = False, max_local_size: int = 256,
               max_work_item_sizes: Sequence[int] = (256, 256, 256)):
    self.fp64, self.fp16 = fp64, fp16
    self.max_local_size = max(1, int(max_local_size))
    self.max_work_item_sizes = tuple(max(1, int(size)) for size in max_work_item_sizes) or (1,)
    self.supported_dtypes = CStyleRenderer.supported_dtypes - (set() if fp64 else {dtypes.float64})
    pragmas = ["#pragma OPENCL FP_CONTRACT OFF"]
    if fp64: pragmas.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")  # needed before OpenCL C 1.2
    self.prelude = "\n".join(pragmas) + "\n"
    self.half_helpers = CL_HALF_HELPERS + (CL_ROUND_ODD_HELPER if fp64 else "")

  @property
  def unsupported_reasons(self) -> dict[str, str]:
    """Why each dtype missing from ``supported_dtypes`` is missing."""
    return {} if self.fp64 else {"float64": "the device has no cl_khr_fp64 (no double precision)"}

  # ------------------------------------------------------------------ literals, math, casts
  def _literal(self, value: Any, dtype: DType) -> str:
    if dtypes.is_int(dtype) and dtype.itemsize == 8:
      if dtypes.is_unsigned(dtype): return f"{value}UL"
      return f"({value + 1}L-1)" if value == dtypes.min(dtypes.int64) else f"{value}L"
    return super()._literal(value, dtype)

  def float_for_narrow(self, expr: str, src: DType) -> str:
    # without cl_khr_fp64 there is no double: a 32/64-bit int rounds to float to nearest first
    return super().float_for_narrow(expr, src) if self.fp64 else f"(float)({expr})"

  def math_call(self, op: Ops, dtype: DType, args: list[str]) -> str:
    return f"{self.math_functions[op]}({', '.join(args)})"  # overloaded builtins: no "f" suffix

  def bitcast(self, expr: str, src: DType, dst: DType) -> str:
    """Reinterpret bits with as_<type>(); narrow floats go through their storage form."""
    if src in NARROW_FLOATS: expr = self.store_value(expr, src)
    else: expr = f"({self.storage_type(src)})({expr})"  # as_<type> needs an operand of exactly the source size
    return self.load_word(f"as_{self.storage_type(dst)}({expr})", dst)

  # ------------------------------------------------------------------ work-items
  def global_id(self, dim: int) -> str: return f"get_global_id({dim})"

  def launch_dims(self, kernel: LinearKernel) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The base class's power-of-two local sizes, clamped to the device's per-dimension work-item limits (the
    total is already within ``max_local_size``). Halving a power of two keeps the global size a multiple of it."""
    global_size, local_size = super().launch_dims(kernel)
    local = list(local_size)
    for dim, width in enumerate(local):
      limit = self.max_work_item_sizes[dim] if dim < len(self.max_work_item_sizes) else 1
      while width > limit: width //= 2
      local[dim] = width
    return global_size, tuple(local)
