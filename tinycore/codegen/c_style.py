"""The C-style renderer base: a linearized kernel -> source in a C-family language.

Subclasses for other C dialects (OpenCL C, CUDA C) override the type names, the function signature, the math
function names and how loops over the outermost dims map to work-items; the statement structure is shared.
float16 and bfloat16 are stored as 16-bit words (the 8-bit floats as bytes) and computed in float, rounded back after
every op, so results match numpy's per-op float16 rounding on any compiler (float has 24 >= 2*11+2 bits, so rounding
an op's result to float and then to 16 bits equals rounding it once); casts from double go through round-to-odd for
the same reason.
"""
from __future__ import annotations
import copy
import math
from typing import Any
import attrs
from tinycore.dtype import ALL, FP8_FORMATS, FP8S, NARROW_FLOATS, DType, dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp, identity_element
from tinycore.codegen.linearize import AccUpdate, LinearKernel, Loop, linearize, value_sources
from tinycore.codegen.optimize import DEFAULT_TARGET, GRID_TARGET, NO_OPTS, KernelOpts, KernelTarget, opts_of
from tinycore.codegen.reuse import ReusedValue, find_reused_values
from tinycore.uop.scalars import kernel_scalars
from tinycore.uop.symbolic import affine_terms

HALF_HELPERS = r"""
/* float16 conversions without branches, so a loop of them vectorizes (a float16 matmul's loads and a fused cast
   ran these per element, scalar: 1024 x 1024 took 4 s). Half to float: the exponent and mantissa moved into float
   position and scaled by 2^112 (a half denormal becomes the float it is), all-ones exponent for inf and NaN. Float
   to half, rounding to nearest even: a magnitude under 2^-14 (a half denormal) added to 0.5 so the FPU rounds the
   mantissa; a normal one rebiased with 0xfff plus the kept mantissa's low bit, so the carry rounds to even (and into
   infinity past 65504); from 65536 on infinity, NaN a quiet NaN. Equal to the branching versions on every input
   (all 65536 halves, all 2^32 floats, clang and gcc). */
static inline float tc_half_to_float(unsigned short h) {
  unsigned int magnitude = (unsigned int)(h & 0x7fff) << 13, sign = (unsigned int)(h & 0x8000) << 16, bits;
  float f; __builtin_memcpy(&f, &magnitude, 4);
  f *= 5.192296858534828e+33f;
  __builtin_memcpy(&bits, &f, 4);
  bits |= ((h & 0x7c00) == 0x7c00 ? 0x7f800000u : 0u) | sign;
  __builtin_memcpy(&f, &bits, 4); return f;
}
static inline unsigned short tc_float_to_half(float f) {
  unsigned int x; __builtin_memcpy(&x, &f, 4);
  unsigned int sign = (x >> 16) & 0x8000, magnitude = x & 0x7fffffffu;
  unsigned int special = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
  float small_f; __builtin_memcpy(&small_f, &magnitude, 4);
  small_f += 0.5f;
  unsigned int small; __builtin_memcpy(&small, &small_f, 4);
  small -= 0x3f000000u;
  unsigned int normal = (magnitude + 0xc8000fffu + ((magnitude >> 13) & 1)) >> 13;
  unsigned int half = magnitude >= 0x47800000u ? special : magnitude < 0x38800000u ? small : normal;
  return (unsigned short)(half | sign);
}
static inline float tc_round_half(float f) { return tc_half_to_float(tc_float_to_half(f)); }
static inline float tc_bf16_to_float(unsigned short h) {
  unsigned int bits = (unsigned int)h << 16; float f; __builtin_memcpy(&f, &bits, 4); return f;
}
static inline unsigned short tc_float_to_bf16(float f) {
  unsigned int x; __builtin_memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40);
  return (unsigned short)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
static inline float tc_round_bf16(float f) { return tc_bf16_to_float(tc_float_to_bf16(f)); }
static inline float tc_float_round_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  unsigned int bits; __builtin_memcpy(&bits, &f, 4);
  if (fabs((double)f) > fabs(d)) bits -= 1u;
  bits |= 1u; __builtin_memcpy(&f, &bits, 4); return f;
}
"""


# float bits <-> float in plain C (an OpenCL or CUDA renderer names its own: as_uint, __float_as_uint, ...)
C_FLOAT_BITS = r"""
static inline unsigned int tc_bits_of(float f) { unsigned int u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float tc_float_of(unsigned int u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
"""


def fp8_helpers(dtype: DType, qualifier: str, rint: str = "rintf") -> str:
  """C-family source of an 8-bit float's conversions (`tc_<name>_to_float`, `tc_float_to_<name>`, `tc_round_<name>`),
  written with `tc_bits_of` / `tc_float_of` (the dialect's float bit casts) and its `rint` (ties to even).

  To float: a normal byte's exponent and mantissa moved into float position, a subnormal one its mantissa times the
  step, then the format's NaN and infinity patterns. From float, rounding to nearest even and saturating as
  `tinycore.dtype.Float8Format` says: a magnitude below the smallest normal counts subnormal steps with rint; a
  normal one is rebiased and rounded on its bits (a carry rounds into the next exponent), then clamped to the
  largest finite byte."""
  f, name = FP8_FORMATS[dtype], dtype.name
  e_mask, m_mask, shift = (1 << f.exponent_bits) - 1, (1 << f.mantissa_bits) - 1, 23 - f.mantissa_bits
  subnormal_step = 2.0 ** (1 - f.bias - f.mantissa_bits)
  min_normal_bits = (128 - f.bias) << 23  # the float bits of 2**(1 - bias)
  specials = {"fn": "if ((c & 0x7f) == 0x7f) return tc_float_of(sign | 0x7fc00000u);",
              "ieee": f"if (e == {e_mask}u) return tc_float_of(sign | (m ? 0x7fc00000u : 0x7f800000u));",
              "fnuz": "if (c == 0x80) return tc_float_of(0x7fc00000u);"}[f.kind]
  nan = "0x80" if f.kind == "fnuz" else "(sign | 0x7fu)"
  infinity = "(sign | 0x7cu)" if f.kind == "ieee" else nan
  result = "(code ? code | sign : 0u)" if f.kind == "fnuz" else "(code | sign)"
  return f"""
{qualifier} float tc_{name}_to_float(unsigned char c) {{
  unsigned int sign = (unsigned int)(c & 0x80) << 24, e = (c >> {f.mantissa_bits}) & {e_mask}u, m = c & {m_mask}u;
  {specials}
  float magnitude = e ? tc_float_of(((e + {127 - f.bias}u) << 23) | (m << {shift})) : (float)m * {subnormal_step!r}f;
  return tc_float_of(tc_bits_of(magnitude) | sign);
}}
{qualifier} unsigned char tc_float_to_{name}(float x) {{
  unsigned int bits = tc_bits_of(x), sign = (bits >> 24) & 0x80u, magnitude = bits & 0x7fffffffu, code;
  if (magnitude > 0x7f800000u) return (unsigned char){nan};
  if (magnitude == 0x7f800000u) return (unsigned char){infinity};
  if (magnitude < {min_normal_bits}u) code = (unsigned int){rint}(tc_float_of(magnitude) * {1 / subnormal_step!r}f);
  else {{
    unsigned int rebased = magnitude - {(127 - f.bias) << 23}u;
    code = (rebased + {(1 << (shift - 1)) - 1}u + ((rebased >> {shift}) & 1u)) >> {shift};
  }}
  if (code > {f.max_code}u) code = {f.max_code}u;
  return (unsigned char){result};
}}
{qualifier} float tc_round_{name}(float x) {{ return tc_{name}_to_float(tc_float_to_{name}(x)); }}
"""


UNSIGNED_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


@attrs.frozen
class RenderedKernel:
  """What a renderer makes of a kernel: its source and the launch dimensions (work-items) it was written for."""
  source: str
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] = (1, 1, 1)


# the rule's local sizes (a kernel search may choose others): the innermost grid dimension gets up to this many
# work-items, each further dimension up to NEXT_LOCAL_WIDTH
FIRST_LOCAL_WIDTH = 256
NEXT_LOCAL_WIDTH = 16

class CStyleRenderer:
  """Renders a kernel SINK as one C function `void name(T* restrict data0, ..., long long var0, ...)`: the buffers,
  then the scalar parameters as 64-bit words (`tinycore.uop.scalars`), then any `extra_params`.

  A renderer holds configuration only: `render` linearizes the kernel once and writes it on a private copy of the
  renderer (the `_`-prefixed attributes are that one kernel's names and arrays), so renders never share state."""
  device: str = ""
  supported_dtypes: frozenset[DType] = frozenset(ALL)
  kernel_qualifier = ""             # e.g. "__kernel" in OpenCL
  buffer_qualifier = ""             # e.g. "__global" in OpenCL
  restrict = "restrict"
  index_type = "long long"
  float_suffix = {dtypes.float32: "f", dtypes.float64: "", dtypes.float16: "f", dtypes.bfloat16: "f",
                  **{d: "f" for d in FP8S}}
  type_names: dict[DType, str] = {
    dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long", dtypes.float32: "float", dtypes.float64: "double",
    dtypes.float16: "float", dtypes.bfloat16: "float", **{d: "float" for d in FP8S}}  # narrow floats compute in float
  storage_names: dict[DType, str] = {dtypes.float16: "unsigned short", dtypes.bfloat16: "unsigned short",
                                     **{d: "unsigned char" for d in FP8S}}
  math_functions = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc",
                    Ops.POW: "pow"}
  prelude = "#include <math.h>\n"
  half_helpers = HALF_HELPERS       # the float16/bfloat16 conversion functions, emitted when a kernel uses them
  float_bits_helpers = C_FLOAT_BITS  # tc_bits_of / tc_float_of, which the 8-bit float conversions use
  helper_qualifier = "static inline"
  rint_function = "rintf"
  # bytes of row buffers one kernel may declare for values a reduction loop computes and a later loop reuses
  # (codegen.reuse; they live on the stack of the thread running the kernel); 0 computes such values twice
  scratch_bytes = 0
  opts: KernelOpts = NO_OPTS       # the kernel being written's opts (set on the render's private copy)
  _kernel_target: KernelTarget | None = None

  @property
  def kernel_target(self) -> KernelTarget:
    """What the optimizer knows of the machine: the target a renderer sets (tiny-cpu's, from the CPU's flags), else
    GRID_TARGET for a renderer that launches a grid (`global_dims`), DEFAULT_TARGET for one that loops."""
    if self._kernel_target is not None: return self._kernel_target
    return GRID_TARGET if self.global_dims else DEFAULT_TARGET

  @kernel_target.setter
  def kernel_target(self, target: KernelTarget) -> None: self._kernel_target = target

  @property
  def code_for_op(self) -> dict[Ops, str]:
    """The ALU ops this renderer writes as code of their own, by name (tinygrad's `Renderer.code_for_op`, which its
    tests read to skip an op a backend lacks): every one, here (`alu` renders them all)."""
    return {op: op.name for op in GroupOp.ALU}

  # ------------------------------------------------------------------ types and literals
  def value_type(self, dtype: DType) -> str: return self.type_names[dtype]
  def storage_type(self, dtype: DType) -> str: return self.storage_names.get(dtype, self.type_names[dtype])

  def literal(self, value: Any, dtype: DType) -> str:
    text = self._literal(value, dtype)
    return f"({text})" if text.startswith("-") else text

  def _literal(self, value: Any, dtype: DType) -> str:
    if dtype is dtypes.bool: return "1" if value else "0"
    if dtypes.is_float(dtype):
      suffix = self.float_suffix[dtype]
      if math.isnan(value): return f"(0.0{suffix}/0.0{suffix})" if suffix else "(0.0/0.0)"
      if math.isinf(value):
        return ("-" if value < 0 else "") + (f"(1.0{suffix}/0.0{suffix})" if suffix else "(1.0/0.0)")
      return f"{float(value)!r}{suffix}"
    if dtypes.is_unsigned(dtype): return f"{value}u" if dtype.itemsize <= 4 else f"{value}ull"
    if dtype.itemsize == 8:
      return f"({value + 1}ll-1)" if value == dtypes.min(dtypes.int64) else f"{value}ll"
    if value == dtypes.min(dtypes.int32): return f"({value + 1}-1)"
    return str(value)

  def math_call(self, op: Ops, dtype: DType, args: list[str]) -> str:
    name = self.math_functions[op]
    if dtype is not dtypes.float64: name += "f"
    return f"{name}({', '.join(args)})"

  def round_narrow(self, expr: str, dtype: DType) -> str:
    """A value computed in float rounded to a narrow float dtype (others: as it is)."""
    if dtype is dtypes.float16: return f"tc_round_half({expr})"
    if dtype is dtypes.bfloat16: return f"tc_round_bf16({expr})"
    if dtype in FP8S: return f"tc_round_{dtype.name}({expr})"
    return expr

  def bitcast(self, expr: str, src: DType, dst: DType) -> str:
    """Reinterpret bits; narrow floats go through their storage form."""
    if src in NARROW_FLOATS: expr = self.store_value(expr, src)
    src_type = self.storage_type(src)
    if dst in NARROW_FLOATS:
      word_type = self.storage_type(dst)
      word = (f"({{ {src_type} tc_in = {expr}; {word_type} tc_out; __builtin_memcpy(&tc_out, &tc_in, {dst.itemsize}); "
              "tc_out; })")
      return self.load_word(word, dst)
    dst_type = self.storage_type(dst)
    return (f"({{ {src_type} tc_in = {expr}; {dst_type} tc_out; "
            "__builtin_memcpy(&tc_out, &tc_in, sizeof(tc_out)); tc_out; })")

  def cast(self, expr: str, src: DType, dst: DType) -> str:
    if dst is dtypes.bool: return f"({expr} != 0)"
    if dst in NARROW_FLOATS: return self.round_narrow(self.float_for_narrow(expr, src), dst)
    if dtypes.is_float(src) and dtypes.is_int(dst): return self.float_to_int(expr, dst)
    return f"({self.value_type(dst)})({expr})"

  def _float_to_signed(self, x: str, bits: int) -> str:
    """x truncated to a signed int of `bits` (32 or 64), NaN and out-of-range values giving the minimum (x86's
    "integer indefinite", which numpy returns): C leaves them undefined."""
    limit, dtype = float(2 ** (bits - 1)), dtypes.int32 if bits == 32 else dtypes.int64
    return (f"(({x} != {x} || {x} >= {limit!r} || {x} < {-limit!r}) ? {self.literal(dtypes.min(dtype), dtype)} : "
            f"({self.value_type(dtype)})({x}))")

  def float_to_int(self, x: str, dst: DType) -> str:
    """A float cast to an int dtype with numpy's results on x86 for every input: signed targets and 8/16-bit ones
    truncate through int32 (int64 for 64-bit), uint32 through int64 (so negative values wrap); uint64 covers
    [2**63, 2**64) itself; values outside the range give the minimum of the intermediate type."""
    if dst is dtypes.uint64:
      top, wrap = 2.0 ** 63, f"{2 ** 63}{'UL' if self.value_type(dst) == 'ulong' else 'ull'}"
      high = f"({x} >= {2.0 ** 64!r} ? 0 : ({self.value_type(dst)})({x} - {top!r}) + {wrap})"
      return f"({x} >= {top!r} ? {high} : ({self.value_type(dst)}){self._float_to_signed(x, 64)})"
    bits = 64 if dst.itemsize == 8 or dst is dtypes.uint32 else 32
    return f"(({self.value_type(dst)}){self._float_to_signed(x, bits)})"

  def float_for_narrow(self, expr: str, src: DType) -> str:
    """expr as the float a narrow float is rounded from. A double (or a 32/64-bit int, through double) is first
    rounded to float by round-to-odd: rounding it to float to nearest and then to 16 bits could round twice (a value
    just off a 16-bit tie would land on the tie); round-to-odd keeps the second rounding exact."""
    if src is dtypes.float64 or (dtypes.is_int(src) and src.itemsize >= 4):
      return f"tc_float_round_odd((double)({expr}))"
    return f"(float)({expr})"

  def load(self, buffer: str, offset: str, dtype: DType) -> str:
    return self.load_word(f"{buffer}[{offset}]", dtype)

  def load_word(self, word: str, dtype: DType) -> str:
    """A stored word as the value it holds (a narrow float's word as the float it is)."""
    if dtype is dtypes.float16: return f"tc_half_to_float({word})"
    if dtype is dtypes.bfloat16: return f"tc_bf16_to_float({word})"
    if dtype in FP8S: return f"tc_{dtype.name}_to_float({word})"
    return word

  def gated_load(self, buffer: str, offset: str, gate: str, dtype: DType) -> str:
    """A load that reads 0 where `gate` is false (and reads no memory there)."""
    return f"({gate} ? {self.load(buffer, offset, dtype)} : {self.literal(0, dtype)})"

  def scalar_parameter(self, word: str, dtype: DType) -> str:
    """A scalar parameter's value from its 64-bit word: an integer's value, or a float's bits in its format."""
    if not dtypes.is_float(dtype): return f"({self.value_type(dtype)})({word})"
    bits = UNSIGNED_OF_SIZE[dtype.itemsize]
    return self.bitcast(word, bits, dtype)  # the bitcast narrows the word to the float's size first

  def store_value(self, expr: str, dtype: DType) -> str:
    if dtype is dtypes.float16: return f"tc_float_to_half({expr})"
    if dtype is dtypes.bfloat16: return f"tc_float_to_bf16({expr})"
    if dtype in FP8S: return f"tc_float_to_{dtype.name}({expr})"
    return expr

  # ------------------------------------------------------------------ expressions
  def alu(self, u: UOp, args: list[str]) -> str:
    op, dtype = u.op, u.dtype
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC, Ops.POW):
      return self.round_narrow(self.math_call(op, dtype, args), dtype)
    if op is Ops.RECIPROCAL: return self.round_narrow(f"(1/{args[0]})", dtype)
    if op is Ops.NEG:
      if dtype is dtypes.bool: return f"(!{args[0]})"
      return self.wrapping_neg(args[0], dtype) if dtypes.is_int(dtype) else self.round_narrow(f"(-{args[0]})", dtype)
    if op is Ops.WHERE: return f"({args[0]} ? {args[1]} : {args[2]})"
    if op is Ops.MULACC:
      if dtypes.is_int(dtype):
        return self.wrapping_arithmetic(self.wrapping_arithmetic(args[0], "*", args[1], dtype), "+", args[2], dtype)
      return self.round_narrow(f"(({args[0]}*{args[1]})+{args[2]})", dtype)
    a, b = args
    if op is Ops.MAX: return self.max_expr(a, b, dtype)
    if op in (Ops.IDIV, Ops.MOD): return self.int_division(op, a, b, u.src[1], dtype)
    if dtype is dtypes.bool and op in (Ops.ADD, Ops.MUL): return f"({a}{'|' if op is Ops.ADD else '&'}{b})"
    if op in (Ops.SHL, Ops.SHR) and dtypes.is_int(dtype): return self.shift(op, a, b, dtype)
    symbols = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.CMPLT: "<", Ops.CMPNE: "!=",
               Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
    if op in (Ops.ADD, Ops.SUB, Ops.MUL) and dtypes.is_int(dtype):
      return self.wrapping_arithmetic(f"{a}", symbols[op], f"{b}", dtype)
    expr = f"({a}{symbols[op]}{b})"
    if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV): return self.round_narrow(expr, dtype)
    return expr

  # Integer arithmetic wraps (two's complement) like numpy's. Signed overflow is undefined behaviour in C and OpenCL
  # C, and small types are promoted to int (uint16 * uint16 can overflow int), so add, subtract, multiply and negate
  # run in the unsigned type of at least 32 bits, where wrapping is defined, and convert back.
  def _wide_unsigned(self, dtype: DType) -> str:
    return self.value_type(dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32)

  def wrapping_arithmetic(self, a: str, symbol: str, b: str, dtype: DType) -> str:
    """a (+ - *) b in `dtype`, wrapping on overflow."""
    if dtype in (dtypes.uint32, dtypes.uint64): return f"({a}{symbol}{b})"  # unsigned arithmetic already wraps
    wide = self._wide_unsigned(dtype)
    return f"(({self.value_type(dtype)})(({wide}){a}{symbol}({wide}){b}))"

  def wrapping_neg(self, a: str, dtype: DType) -> str:
    """-a in `dtype`, wrapping (-INT_MIN is INT_MIN)."""
    return f"(({self.value_type(dtype)})(0-({self._wide_unsigned(dtype)}){a}))"

  def shift(self, op: Ops, a: str, b: str, dtype: DType) -> str:
    """a << b or a >> b with numpy's results on x86 for every count: the count is read as unsigned, and a count of
    at least the bit width shifts everything out (0, or -1 for a negative value shifted right). C leaves such counts
    undefined and OpenCL takes them modulo the width."""
    bits = dtype.itemsize * 8
    count_type = self.value_type(UNSIGNED_OF_SIZE[dtype.itemsize])
    too_far = f"(({count_type}){b} >= {bits})"
    if op is Ops.SHL:
      shifted = f"(({self.value_type(dtype)})(({self._wide_unsigned(dtype)}){a}<<{b}))"
      return f"({too_far} ? {self.literal(0, dtype)} : {shifted})"
    shifted_out = self.literal(0, dtype) if dtypes.is_unsigned(dtype) else f"({a} < 0 ? {self.literal(-1, dtype)} : 0)"
    return f"({too_far} ? {shifted_out} : ({self.value_type(dtype)})({a}>>{b}))"

  def int_division(self, op: Ops, a: str, b: str, divisor: UOp, dtype: DType) -> str:
    """Truncating integer a / b or a % b. Division by zero traps on x86 and MIN / -1 overflows; like numpy, x / 0 and
    x % 0 are 0 and MIN / -1 wraps to MIN (MIN % -1 is 0)."""
    symbol = "/" if op is Ops.IDIV else "%"
    cast = f"({self.value_type(dtype)})"
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f"({cast}({a}{symbol}{b}))"
    if dtypes.is_unsigned(dtype): return f"({b} == 0 ? 0 : {cast}({a}{symbol}{b}))"
    minus_one = self.wrapping_neg(a, dtype) if op is Ops.IDIV else "0"
    return f"({b} == 0 ? 0 : {b} == -1 ? {minus_one} : {cast}({a}{symbol}{b}))"

  def max_expr(self, a: str, b: str, dtype: DType) -> str:
    """The larger of a and b; for floats NaN wins (numpy's maximum propagates NaN). The two tests are joined with a
    bitwise `|`: a short-circuit `||` is a branch, which kept gcc from vectorizing a running max (cummax 3x slower)."""
    if dtypes.is_float(dtype): return f"((({a} != {a}) | ({a} > {b})) ? {a} : {b})"
    return f"({a} > {b} ? {a} : {b})"

  def accumulate(self, x: UOp) -> str:
    """The new value of REDUCE x's accumulator after one more element (`acc OP value`)."""
    acc, value = self._name(x), self._name(x.src[0])
    if x.arg is Ops.MAX: return self.max_expr(value, acc, x.dtype)
    return self.alu(UOp(x.arg, x.dtype, (x, x.src[0])), [acc, value])

  def before_loop(self, loop: Loop, lines: list[str], pad: str) -> None:
    """Statements before a loop (after its accumulators, before its pragma); none by default."""

  def after_loop(self, loop: Loop, lines: list[str], pad: str) -> None:
    """Statements right after a loop closes; none by default."""

  def loop_pragma(self, loop: Loop) -> str:
    """A line placed before a loop (e.g. a vectorization hint); none by default."""
    return ""

  def loop_bounds(self, loop: Loop, lines: list[str], pad: str) -> tuple[str, str]:
    """The start and end expressions of a loop (statements it needs go into `lines`); [0, size) by default, and
    [0, bound) for a symbolic dim's loop (its iterations past the bound are gated off anyway)."""
    if len(loop.range.src) > 1: return "0", self._name(loop.range.src[1])
    return "0", self.literal(loop.range.src[0].arg, dtypes.int64)

  def packed_load(self, u: UOp) -> str | None:
    """The expression reading LOAD `u` from a kernel-local copy of its panel (see codegen.packing), or None to read
    memory; none by default."""
    return None

  def extra_params(self) -> list[str]:
    """Scalar parameters after the buffers (e.g. a thread's share of the work); none by default."""
    return []

  def reduction_updates(self, loop: Loop) -> list[AccUpdate]:
    """The accumulator updates of an innermost loop (one with no loops inside): a reduction over this range."""
    if any(isinstance(item, Loop) for item in loop.body): return []
    updates = [item for item in loop.body if isinstance(item, AccUpdate)]
    return [] if any(u.reduce in self._vector for u in updates) else updates

  # ------------------------------------------------------------------ the function
  def signature(self, name: str, params: list[UOp], written: set[int], scalars: list[UOp] | None = None) -> str:
    args = []
    for p in params:
      const = "" if p.arg in written else "const "
      args.append(f"{self.buffer_qualifier}{' ' if self.buffer_qualifier else ''}{const}{self.storage_type(p.dtype)}* "
                  f"{self.restrict} data{p.arg}")
    args.extend(f"{self.value_type(dtypes.int64)} var{i}" for i in range(len(scalars or ())))
    args.extend(self.extra_params())
    return f"{self.kernel_qualifier}{' ' if self.kernel_qualifier else ''}void {name}({', '.join(args)})"

  # ------------------------------------------------------------------ work-items (devices that launch a grid)
  global_dims = 0          # how many outer loops may become work-item ids (0: the kernel loops over everything)
  max_local_size = 256     # the most work-items in one work-group

  def global_id(self, dim: int) -> str:
    """The expression for this work-item's id in grid dimension `dim` (dimension 0 varies fastest)."""
    raise NotImplementedError(f"{type(self).__name__} does not launch a grid")

  def parallel_loops(self, kernel: LinearKernel) -> list[Loop]:
    """The outer output loops that become work-item ids: the outermost, then each next one only while the loop
    above it holds nothing but that loop (so no reduce is repeated per work-item)."""
    chosen: list[Loop] = []
    body = kernel.body
    while len(chosen) < self.global_dims:
      loops = [item for item in body if isinstance(item, Loop)]
      if len(loops) != 1 or loops[0].range.arg[1] != "loop" or loops[0].reduces: break
      if chosen and any(isinstance(item, Loop) for item in chosen[-1].body if item is not loops[0]): break
      chosen.append(loops[0])
      body = loops[0].body
    return chosen

  def grid_sizes(self, kernel: LinearKernel) -> list[int]:
    """The sizes of the loops that become work-item ids, dimension 0 (the innermost mapped loop) first."""
    return [loop.range.src[0].arg for loop in reversed(self.parallel_loops(kernel))]

  def launch_dims(self, kernel: LinearKernel) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(global_size, local_size) in work-items for devices with `global_dims`; the global size is padded up to a
    multiple of the local size (the kernel returns early past the real size). The local size is the kernel opts'
    "local" setting (a kernel search's choice), else the rule: dimension 0 as wide as FIRST_LOCAL_WIDTH allows, each
    further one up to NEXT_LOCAL_WIDTH, powers of two within `max_local_size`."""
    if not self.global_dims: return (1, 1, 1), (1, 1, 1)
    sizes = self.grid_sizes(kernel)
    if (chosen := self.opts.setting("local")) is not None:
      if len(chosen) != len(sizes) or math.prod(chosen) > self.max_local_size:
        raise ValueError(f"local size {chosen} does not fit a grid of {sizes} (at most {self.max_local_size})")
      local = list(chosen)
    else:
      local, budget = [], self.max_local_size
      for size in sizes:
        width = 1
        while width * 2 <= min(size, budget, NEXT_LOCAL_WIDTH if local else FIRST_LOCAL_WIDTH): width *= 2
        local.append(width)
        budget //= width
    global_size = [-(-size // width) * width for size, width in zip(sizes, local)]
    pad = 3 - len(sizes)
    return tuple(global_size) + (1,) * pad, tuple(local) + (1,) * pad

  def search_space(self, sink: UOp) -> dict[str, tuple[Any, ...]]:
    """The settings of this renderer that a kernel search may try on the optimized kernel `sink`, by name, each with
    the values to try (the kernel's opts carry the chosen ones: `KernelOpts.setting`). Here: a grid's local sizes,
    powers of two in each dimension up to the loop's size, within `max_local_size`."""
    if not self.global_dims: return {}
    sizes = self.grid_sizes(linearize(sink))
    if not sizes: return {}
    options: list[tuple[int, ...]] = [()]
    for size in sizes:
      widths = [1 << i for i in range(max(1, size).bit_length()) if 1 << i <= size]
      options = [o + (w,) for o in options for w in widths if math.prod(o) * w <= self.max_local_size]
    return {"local": tuple(options)}

  def render(self, name: str, sink: UOp) -> RenderedKernel:
    """The kernel as source plus its launch dimensions, from one linearization."""
    kernel = linearize(sink)
    writer = copy.copy(self)  # this kernel's names and arrays live on the copy, never on the shared renderer
    writer.opts = opts_of(sink)
    writer.begin_kernel(kernel)
    global_size, local_size = writer.launch_dims(kernel)
    return RenderedKernel(writer.write_source(name, sink, kernel), global_size, local_size)

  def begin_kernel(self, kernel: LinearKernel) -> None:
    """Decide what the whole kernel needs before any line is written (a subclass hook; nothing by default)."""

  def write_source(self, name: str, sink: UOp, kernel: LinearKernel) -> str:
    written = {u.src[0].src[0].arg for u in sink.src if u.op is Ops.STORE}
    self._names: dict[UOp, str] = {}
    self._counter = 0
    parallel = self.parallel_loops(kernel) if self.global_dims else []
    self._grid_dims = {id(loop): len(parallel) - 1 - i for i, loop in enumerate(parallel)}
    self._prepare_upcast(kernel)
    scalars = kernel_scalars(sink)
    self._scalar_words = {u: f"var{i}" for i, u in enumerate(scalars)}
    self._plan_scratch(kernel)
    lines = [self.signature(name, kernel.params, written, scalars) + " {"]
    self._emit_block(kernel.body, lines, 1)
    lines.append("}")
    return self.prelude + self.narrow_float_helpers(sink) + "\n".join(lines) + "\n"

  def narrow_float_helpers(self, sink: UOp) -> str:
    """The conversion functions of the narrow floats a kernel uses (none: no text)."""
    used = {u.dtype for u in sink.toposort() if u.dtype in NARROW_FLOATS}
    if not used: return ""
    fp8s = [d for d in FP8S if d in used]
    return self.half_helpers + (self.float_bits_helpers if fp8s else "") + "".join(
      fp8_helpers(d, self.helper_qualifier, self.rint_function) for d in fp8s)

  # ------------------------------------------------------------------ upcast (unrolled) ranges
  unroll_pragma = "#pragma GCC unroll 64"
  max_unrolled = 64                       # upcast ranges up to this size are unrolled, wider ones vectorized
  wide_upcast_pragma = "#pragma omp simd"

  def _is_vector(self, item: Any) -> bool:
    if isinstance(item, AccUpdate): return item.reduce in self._vector
    return isinstance(item, UOp) and item in self._vector

  def _segments(self, body: list) -> list:
    """Consecutive vector items grouped into lists (each becomes one unrolled loop nest); other items as they are."""
    out: list = []
    for item in body:
      if self._is_vector(item):
        if out and isinstance(out[-1], list): out[-1].append(item)
        else: out.append([item])
      else: out.append(item)
    return out

  def _prepare_upcast(self, kernel: LinearKernel) -> None:
    """Which unrolled block each vector node is computed in, and which of them other blocks read (those are kept in
    arrays indexed by the upcast ranges; the rest stay scalars inside their block)."""
    self._vector, self._upcast = kernel.vector, kernel.upcast
    self._array_dims = "".join(f"[{r.src[0].arg}]" for r in kernel.upcast)
    self._array_index = "".join(f"[ridx{r.arg[0]}]" for r in kernel.upcast)
    self._block_of: dict[Any, int] = {}
    self._current_block: int | None = None
    self._arrays: dict[UOp, str] = {}
    self._staged: set[UOp] = set()  # vector REDUCEs read from a staging array
    if not kernel.upcast: return
    def assign(body: list) -> None:
      for segment in self._segments(body):
        if isinstance(segment, list):
          self._blocks.append(segment)
          for item in segment: self._block_of[self._block_key(item)] = len(self._blocks)
        elif isinstance(segment, Loop): assign(segment.body)
    self._blocks: list[list] = []
    assign(kernel.body)
    for block in self._blocks:
      for item in block:
        # a REDUCE item only names its accumulator; its AccUpdate reads the value
        sources = ([item.reduce.src[0]] if isinstance(item, AccUpdate) else
                   [] if item.op is Ops.REDUCE else value_sources(item))
        for src in sources:
          if (src in self._vector and src.op is not Ops.REDUCE and
              self._block_of.get(src) != self._block_of[self._block_key(item)]):
            self._arrays.setdefault(src, self._fresh("arr"))

  @staticmethod
  def _block_key(item: Any) -> Any: return id(item) if isinstance(item, AccUpdate) else item

  def _emit_vector_block(self, items: list, lines: list[str], depth: int) -> None:
    pad = "  " * depth
    for node in items:
      if isinstance(node, UOp) and node in self._arrays:
        lines.append(f"{pad}{self.value_type(node.dtype)} {self._arrays[node]}{self._array_dims};")
    self._stage_strided_stores(items, lines, depth)
    self._open_upcast_loops(lines, depth)
    self._current_block = self._block_of[self._block_key(items[0])]
    inner = depth + len(self._upcast)
    self._emit_block(self.order_vector_block(items, self._upcast), lines, inner, vector_ok=True)
    self._current_block = None
    lines.append("  " * depth + "}" * len(self._upcast))

  # a renderer whose compiler vectorizes an unrolled tile only from contiguous stores sets this statement ({name}: a
  # staging array), which keeps the array's contiguous copy in memory (see _stage_strided_stores); "": no staging
  staging_barrier = ""

  def _stage_strided_stores(self, items: list, lines: list[str], depth: int) -> None:
    """Accumulators that a block stores with a stride along the innermost upcast range (a tile's columns 196 floats
    apart in the output), as they are or through an epilogue (a bias, a residual, a relu), are first copied into a
    contiguous staging array, which the block then reads (a conv with its epilogue ran 2.5x slower unstaged)."""
    if not self.staging_barrier or not self._upcast: return
    inner = self._upcast[-1]
    for u in items:
      if not (isinstance(u, UOp) and u.op is Ops.STORE) or affine_terms(u.src[0].src[1])[0].get(inner) == 1: continue
      for x in u.src[1].toposort():
        if x.op is Ops.REDUCE and x in self._vector and x not in self._staged: self._stage(x, lines, depth)

  def _stage_finished_tiles(self, loop: Loop, later: list, lines: list[str], depth: int) -> None:
    """A register tile's accumulators, complete after their reduction `loop`, are copied into a staging array (read
    from then on) when another tile's reduction follows in the same block: two tiles of accumulators live at once
    (a residual block's conv and its shortcut conv in one kernel) made clang vectorize both loops 4 lanes wide."""
    finished = [x for x in loop.reduces if x in self._vector]
    if not (self.staging_barrier and finished and
            any(isinstance(e, Loop) and any(x in self._vector for x in e.reduces) for e in later)): return
    for x in finished: self._stage(x, lines, depth)

  def _stage(self, x: UOp, lines: list[str], depth: int) -> None:
    """Copy the accumulators of the vector REDUCE `x` into a fresh staging array, kept by the barrier, and read `x`
    from it from now on."""
    pad = "  " * depth
    self._staged.add(x)
    stage = self._fresh("stage")
    lines.append(f"{pad}{self.value_type(x.dtype)} {stage}{self._array_dims};")
    self._open_upcast_loops(lines, depth)
    lines.append("  " * (depth + len(self._upcast)) + f"{stage}{self._array_index} = {self._name(x)};")
    lines.append(pad + "}" * len(self._upcast))
    lines.append(pad + self.staging_barrier.format(name=stage))
    self._names[x] = stage

  def order_vector_block(self, items: list, upcast: list[UOp]) -> list:
    """The statements of one unrolled block (UOps and AccUpdates, in a valid order) in the order to write them; a
    subclass may reorder them for its compiler, keeping every statement after the ones it reads."""
    return items

  def _open_upcast_loops(self, lines: list[str], depth: int) -> None:
    for i, r in enumerate(self._upcast):
      pad = "  " * (depth + i)
      name = self._name(r)
      # a small range unrolls into registers; a wide strip (a column sum's accumulators, in L1) stays a loop
      wide = r.src[0].arg > self.max_unrolled
      lines.append(f"{pad}{self.wide_upcast_pragma if wide else self.unroll_pragma}")
      bound = self.literal(r.src[0].arg, dtypes.int64)
      lines.append(f"{pad}for ({self.index_type} {name} = 0; {name} < {bound}; {name}++) {{")

  # ------------------------------------------------------------------ row buffers (codegen.reuse)
  def scratch_element_bytes(self, dtype: DType) -> int:
    """Bytes of one element of a row buffer: the value type a node of `dtype` is computed in."""
    return 4 if dtype in NARROW_FLOATS else dtype.itemsize

  def _plan_scratch(self, kernel: LinearKernel) -> None:
    """Which values get a row buffer: its name, the loop it is declared before, and each copy's expression."""
    self._scratch_plan = find_reused_values(kernel, self.scratch_bytes, self.scratch_element_bytes)
    self._scratch_names: dict[int, str] = {}
    self._scratch_before: dict[int, list] = {}
    self._scratch_of = {reused.value: reused for reused in self._scratch_plan.values}
    for reused in self._scratch_plan.values:
      name = self._scratch_names[id(reused)] = self._fresh("row")
      self._scratch_before.setdefault(id(reused.source), []).append(reused)
      for reader, repeated in reused.readers: self._names[repeated] = f"{name}[{self._name(reader.range)}]"

  def _declare_scratch(self, reused: ReusedValue, lines: list[str], pad: str) -> None:
    name, size = self._scratch_names[id(reused)], reused.size
    lines.append(f"{pad}{self.value_type(reused.value.dtype)} {name}[{size}] __attribute__((aligned(64)));")

  def _declare_accumulator(self, x: UOp, lines: list[str], pad: str) -> None:
    acc = self._names[x] = self._fresh("acc")
    identity = self.literal(identity_element(x.arg, x.dtype), x.dtype)
    if x not in self._vector:
      lines.append(f"{pad}{self.value_type(x.dtype)} {acc} = {identity};")
      return
    lines.append(f"{pad}{self.value_type(x.dtype)} {acc}{self._array_dims};")
    depth = len(pad) // 2
    self._open_upcast_loops(lines, depth)
    lines.append("  " * (depth + len(self._upcast)) + f"{acc}{self._array_index} = {identity};")
    lines.append(pad + "}" * len(self._upcast))

  def read_from_block_array(self, u: UOp) -> bool:
    """Whether value u is read here from the array its own (earlier, upcast) block stored it in: its sources'
    names are out of scope here."""
    return u in self._arrays and self._block_of.get(u) != self._current_block

  def _name(self, u: UOp) -> str:
    if u.op is Ops.CONST: return self.literal(u.arg, u.dtype)
    if u.op is Ops.PARAM: return f"data{u.arg}"
    if u.op is Ops.RANGE: return f"ridx{u.arg[0]}"
    if u.op is Ops.REDUCE and u in self._vector: return f"{self._names[u]}{self._array_index}"
    if self.read_from_block_array(u): return f"{self._arrays[u]}{self._array_index}"
    return self._names[u]

  def _fresh(self, prefix: str) -> str:
    self._counter += 1
    return f"{prefix}{self._counter}"

  def _emit_block(self, body: list, lines: list[str], depth: int, vector_ok: bool = False) -> None:
    pad = "  " * depth
    items = body if vector_ok or not self._upcast else self._segments(body)
    for position, item in enumerate(items):
      if isinstance(item, list):
        self._emit_vector_block(item, lines, depth)
        continue
      if isinstance(item, Loop):
        for x in item.reduces: self._declare_accumulator(x, lines, pad)
        for reused in self._scratch_before.get(id(item), []): self._declare_scratch(reused, lines, pad)
        r = self._name(item.range)
        if id(item) in self._grid_dims:
          size = self.literal(item.range.src[0].arg, dtypes.int64)
          lines.append(f"{pad}{self.index_type} {r} = {self.global_id(self._grid_dims[id(item)])};")
          lines.append(f"{pad}if ({r} >= {size}) return;")
          self._emit_block(item.body, lines, depth)
          continue
        self.emit_loop(item, lines, depth)
        self._stage_finished_tiles(item, items[position + 1:], lines, depth)
      elif isinstance(item, AccUpdate):
        lines.append(f"{pad}{self._name(item.reduce)} = {self.accumulate(item.reduce)};")
      elif item not in self._scratch_plan.unused and item not in self._scratch_plan.replaced:
        self._emit_node(item, lines, pad)

  def emit_loop(self, loop: Loop, lines: list[str], depth: int) -> None:
    """One loop, its accumulators already declared: the hooks around it, its pragma, header and body. A subclass may
    write some loops in another shape (the CPU renderer gives reduction loops lane accumulators)."""
    pad, r = "  " * depth, self._name(loop.range)
    self.before_loop(loop, lines, pad)
    if (pragma := self.loop_pragma(loop)): lines.append(f"{pad}{pragma}")
    start, end = self.loop_bounds(loop, lines, pad)
    lines.append(f"{pad}for ({self.index_type} {r} = {start}; {r} < {end}; {r}++) {{")
    self._emit_block(loop.body, lines, depth + 1)
    lines.append(f"{pad}}}")
    self.after_loop(loop, lines, pad)

  def _address(self, index: UOp) -> tuple[str, str, str | None]:
    buffer, offset = self._name(index.src[0]), self._name(index.src[1])
    gate = self._name(index.src[2]) if len(index.src) > 2 else None
    return buffer, offset, gate

  def _emit_node(self, u: UOp, lines: list[str], pad: str) -> None:
    if u.op is Ops.REDUCE: return  # its accumulator is its value
    if u.op is Ops.STORE:
      buffer, offset, gate = self._address(u.src[0])
      value = self._name(u.src[1])
      statement = f"{buffer}[{offset}] = {self.store_value(value, u.src[0].dtype)};"
      lines.append(f"{pad}if ({gate}) {statement}" if gate else f"{pad}{statement}")
      return
    if u.op is Ops.LOAD and (packed := self.packed_load(u)) is not None: expr = packed
    elif u.op is Ops.LOAD:
      buffer, offset, gate = self._address(u.src[0])
      expr = self.gated_load(buffer, offset, gate, u.dtype) if gate else self.load(buffer, offset, u.dtype)
    elif u.op is Ops.CAST: expr = self.cast(self._name(u.src[0]), u.src[0].dtype, u.dtype)
    elif u.op is Ops.BITCAST: expr = self.bitcast(self._name(u.src[0]), u.src[0].dtype, u.dtype)
    elif u.op is Ops.DEFINE_VAR: expr = self.scalar_parameter(self._scalar_words[u], u.dtype)
    elif u.op in GroupOp.ALU: expr = self.alu(u, [self._name(s) for s in u.src])
    else: raise NotImplementedError(f"the C renderer cannot render {u.op}")
    name = self._names[u] = self._fresh("v")
    lines.append(f"{pad}{self.value_type(u.dtype)} {name} = {expr};")
    if u in self._arrays: lines.append(f"{pad}{self._arrays[u]}{self._array_index} = {name};")
    if (reused := self._scratch_of.get(u)) is not None:
      lines.append(f"{pad}{self._scratch_names[id(reused)]}[{self._name(reused.source.range)}] = {name};")
