"""Scalar semantics of every kernel op and dtype, in pure Python, matching what the C-style renderer's code computes.

Values are Python ints (integers, two's complement, wrapped to their dtype after every op), bools, and floats.
float32 results are rounded to float32 after every op (the C code computes in float with no contraction);
float16 and bfloat16 are computed in float and rounded back after every op, as the C renderer does. Where C
would trap or be undefined, the result is what the C renderer's code defines or what x86 gives: integer
division by zero is 0, MIN / -1 wraps, a shift count is read as unsigned and one of at least the width shifts
everything out, a float that does not fit an integer converts to the "integer indefinite" value (the most negative
int32/int64) before wrapping, a float MAX lets NaN win, and a float64 (or 32/64-bit int) cast to a 16-bit float is
first rounded to float32 by round-to-odd so it rounds once.
"""
from __future__ import annotations
import math
import struct
from typing import Any, Callable
from functools import partial
from tinycore.dtype import FP8S, DType, dtypes, float_to_fp8, fp8_to_float, round_to_fp8
from tinycore.uop.ops import Ops

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_F16 = struct.Struct("<e")
_U16 = struct.Struct("<H")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")
INF = math.inf
# an invalid operation's NaN as this machine's floating-point unit makes it (x86: the sign bit set), so NaN bits
# match what the compiled C code computes on the same machine
NAN = math.inf - math.inf


def round_f32(x: float) -> float:
  """x rounded to the nearest float32 (too large: infinity of its sign)."""
  try: return _F32.unpack(_F32.pack(x))[0]
  except OverflowError: return math.copysign(INF, x)


def half_bits(x: float) -> int:
  """The float16 word of a float (round to nearest even; too large: infinity; NaN keeps its sign)."""
  if math.isnan(x): return (0x8000 if math.copysign(1.0, x) < 0 else 0) | 0x7E00
  try: return _U16.unpack(_F16.pack(x))[0]
  except OverflowError: return 0xFC00 if x < 0 else 0x7C00


def half_value(bits: int) -> float: return _F16.unpack(_U16.pack(bits))[0]


def bf16_bits(x: float) -> int:
  """The bfloat16 word of a float32 value: round to nearest even on the float32 bits; NaN stays quiet NaN."""
  word = _U32.unpack(_F32.pack(round_f32(x)))[0]
  if word & 0x7FFFFFFF > 0x7F800000: return (word >> 16) | 0x40
  return ((word + 0x7FFF + ((word >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(bits: int) -> float: return _F32.unpack(_U32.pack(bits << 16))[0]


def round_f32_odd(x: float) -> float:
  """x rounded to float32 by round-to-odd (an inexact result gets its last bit set), as the C renderer's
  `tc_float_round_odd`: a second rounding to 16 bits then equals rounding x once."""
  f = round_f32(x)
  if f == x or math.isnan(x): return f
  bits = _U32.unpack(_F32.pack(f))[0]
  if abs(f) > abs(x): bits -= 1  # rounded away from zero (or overflowed to infinity): step back toward zero
  return _F32.unpack(_U32.pack(bits | 1))[0]


def int_to_f32(v: int) -> float:
  """An integer rounded once to float32 (nearest even), as C's (float) of a 64-bit integer: float(v) would first
  round to float64 and could then round again."""
  magnitude = abs(v)
  extra = magnitude.bit_length() - 24
  if extra <= 0: return float(v)
  whole, rest = divmod(magnitude, 1 << extra)
  half = 1 << (extra - 1)
  if rest > half or (rest == half and whole & 1): whole += 1
  return round_f32(math.copysign(float(whole << extra), v))


def round_half(x: float) -> float: return half_value(half_bits(round_f32(x)))
def round_bf16(x: float) -> float: return bf16_value(bf16_bits(x))


def rounder(dtype: DType) -> Callable[[float], float] | None:
  """The function that rounds a computed float to `dtype` (None for float64, which Python floats already are)."""
  if dtype in FP8S: return partial(round_to_fp8, dtype=dtype)
  return {dtypes.float32: round_f32, dtypes.float16: round_half, dtypes.bfloat16: round_bf16}.get(dtype)


def wrapper(dtype: DType) -> Callable[[int], int]:
  """The function that wraps a Python int to `dtype`'s range (two's complement)."""
  bits = dtype.itemsize * 8
  mask, sign = (1 << bits) - 1, 1 << (bits - 1)
  if dtypes.is_unsigned(dtype): return lambda v: v & mask
  return lambda v: ((v + sign) & mask) - sign


def _trunc_div(a: int, b: int) -> int:
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q


def int_div(a: int, b: int) -> int:
  """C's truncating division, with the C renderer's guards: x / 0 is 0 (the wrap handles MIN / -1)."""
  return 0 if b == 0 else _trunc_div(a, b)


def int_mod(a: int, b: int) -> int:
  """C's remainder (the sign of the dividend); x % 0 and x % -1 are 0."""
  return 0 if b in (0, -1) else a - _trunc_div(a, b) * b


def float_div(a: float, b: float) -> float:
  if b == 0:
    if a == 0 or math.isnan(a): return NAN
    return math.copysign(INF, a) * math.copysign(1.0, b)
  return a / b


def exp2(x: float) -> float:
  try: return math.pow(2.0, x)
  except OverflowError: return INF


def log2(x: float) -> float:
  if x == 0: return -INF
  if x < 0 or math.isnan(x): return NAN
  return math.log2(x)


def sin(x: float) -> float: return math.sin(x) if math.isfinite(x) else NAN
def sqrt(x: float) -> float: return NAN if x < 0 else math.sqrt(x)


def trunc(x: float) -> float:
  return x if not math.isfinite(x) else math.copysign(float(math.trunc(x)), x)


def power(a: float, b: float) -> float:
  """C's pow: 0 to a negative power is infinity, a negative base to a non-integer power is NaN."""
  try: return math.pow(a, b)
  except OverflowError:
    odd = b.is_integer() and b % 2 == 1
    return -INF if (a < 0 and odd) else INF
  except ValueError:
    if a == 0: return -INF if (math.copysign(1.0, a) < 0 and b.is_integer() and b % 2 == 1) else INF
    return NAN


def maximum(a, b):
  """The larger of a and b as the C renderer writes it: a NaN first operand wins, so NaN propagates either way."""
  return a if (a != a or a > b) else b


_FLOAT_OPS: dict[Ops, Callable] = {
  Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b, Ops.FDIV: float_div,
  Ops.NEG: lambda a: -a, Ops.RECIPROCAL: lambda a: float_div(1.0, a), Ops.EXP2: exp2, Ops.LOG2: log2, Ops.SIN: sin,
  Ops.SQRT: sqrt, Ops.TRUNC: trunc, Ops.POW: power,
}
_INT_OPS: dict[Ops, Callable] = {
  Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b, Ops.IDIV: int_div,
  Ops.MOD: int_mod, Ops.NEG: lambda a: -a, Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b,
  Ops.XOR: lambda a, b: a ^ b,
  Ops.MULACC: lambda a, b, c: a * b + c,
}
_SELECT_OPS: dict[Ops, Callable] = {
  Ops.MAX: maximum, Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b,
  Ops.WHERE: lambda c, a, b: a if c else b,
}
_BOOL_OPS: dict[Ops, Callable] = {
  Ops.ADD: lambda a, b: a or b, Ops.SUB: lambda a, b: a != b, Ops.MUL: lambda a, b: a and b, Ops.NEG: lambda a: not a,
  Ops.AND: lambda a, b: bool(a & b), Ops.OR: lambda a, b: bool(a | b), Ops.XOR: lambda a, b: bool(a ^ b),
}


def alu_function(op: Ops, dtype: DType) -> Callable:
  """The Python function computing `op` with result dtype `dtype` (the C renderer's semantics)."""
  if op in _SELECT_OPS: return _SELECT_OPS[op]  # comparisons and selections never round or wrap
  if dtype is dtypes.bool:
    if op in _BOOL_OPS: return _BOOL_OPS[op]
    raise NotImplementedError(f"{op.name} on bool")
  if dtypes.is_float(dtype):
    if op is Ops.MULACC: base: Callable = lambda a, b, c: a * b + c
    elif op in _FLOAT_OPS: base = _FLOAT_OPS[op]
    else: raise NotImplementedError(f"{op.name} on {dtype.name}")
    if dtype is dtypes.float64: return base
    if op is Ops.MULACC and dtype is dtypes.float32:
      return lambda a, b, c: round_f32(round_f32(a * b) + c)  # two float ops, each rounded (no fused multiply-add)
    rounding = rounder(dtype)
    return _rounded(base, rounding) if rounding is not None else base
  wrap = wrapper(dtype)
  if op in (Ops.SHL, Ops.SHR): return shift_function(op, dtype)
  if op not in _INT_OPS: raise NotImplementedError(f"{op.name} on {dtype.name}")
  base = _INT_OPS[op]
  if op in (Ops.AND, Ops.OR, Ops.XOR): return base  # these cannot leave the range of their inputs
  return lambda *args: wrap(base(*args))


def shift_function(op: Ops, dtype: DType) -> Callable[[int, int], int]:
  """a << b or a >> b in the integer `dtype`: the count is read as unsigned of the same size, and a count of at least
  the width shifts everything out (0, or -1 for a negative value shifted right)."""
  bits = dtype.itemsize * 8
  count_mask, wrap = (1 << bits) - 1, wrapper(dtype)
  if op is Ops.SHL: return lambda a, b: wrap(a << (b & count_mask)) if (b & count_mask) < bits else 0
  return lambda a, b: a >> min(b & count_mask, bits)  # Python's >> already gives 0 or -1 past the width


def _rounded(base: Callable, rounding: Callable[[float], float]) -> Callable:
  return lambda *args: rounding(base(*args))


def cast_function(src: DType, dst: DType) -> Callable:
  """The Python function converting a `src` value to `dst` like the C renderer's cast."""
  if dst is dtypes.bool: return lambda v: v != 0
  if dtypes.is_float(dst): return _to_float_function(src, dst)
  wrap = wrapper(dst)
  if not dtypes.is_float(src): return lambda v: wrap(int(v))
  if dst is dtypes.uint64:
    to_int64 = _float_to_signed(64)
    # [2**63, 2**64) converts itself, past it is 0; below it goes through int64 (negative values wrap)
    return lambda v: (0 if v >= 2.0 ** 64 else math.trunc(v)) if v >= 2.0 ** 63 else wrap(to_int64(v))
  # C converts through int64 for 64-bit targets and uint32, through int32 for the rest
  to_signed = _float_to_signed(64 if dst.itemsize == 8 or dst is dtypes.uint32 else 32)
  return lambda v: wrap(to_signed(v))


def _float_to_signed(bits: int) -> Callable[[float], int]:
  """A float truncated to a signed int of `bits`; NaN and values out of range give the minimum (x86's "integer
  indefinite")."""
  limit = float(2 ** (bits - 1))
  return lambda v: math.trunc(v) if -limit <= v < limit else -(1 << (bits - 1))


def _to_float_function(src: DType, dst: DType) -> Callable:
  """A `src` value cast to the float `dst` as the C renderer converts: 16-bit targets from float64 or a 32/64-bit int
  (through double) round to float32 by round-to-odd first, other sources go through float exactly; 64-bit ints
  round once to float32."""
  if dst in (dtypes.float16, dtypes.bfloat16, *FP8S):
    rounding = rounder(dst)
    if src is dtypes.float64 or (dtypes.is_int(src) and src.itemsize >= 4):
      return lambda v: rounding(round_f32_odd(float(v)))
    return lambda v: rounding(float(v))
  if dst is dtypes.float64: return float
  if dtypes.is_int(src) and src.itemsize == 8: return int_to_f32
  return lambda v: round_f32(float(v))


_STORAGE_FORMATS: dict[DType, str] = {dtypes.float16: "H", dtypes.bfloat16: "H", **{d: "B" for d in FP8S}}


def storage_format(dtype: DType) -> str:
  """The memoryview format of `dtype`'s storage (16-bit floats are stored as words, 8-bit floats as bytes)."""
  return _STORAGE_FORMATS.get(dtype) or str(dtype.fmt)


def load_function(dtype: DType) -> Callable | None:
  """How a stored word becomes a value (None: the memoryview item is the value)."""
  if dtype is dtypes.float16: return half_value
  if dtype is dtypes.bfloat16: return bf16_value
  if dtype in FP8S: return partial(fp8_to_float, dtype=dtype)
  return None


def store_function(dtype: DType) -> Callable | None:
  """How a value becomes a stored word (None: the memoryview stores it as is)."""
  if dtype is dtypes.float16: return half_bits
  if dtype is dtypes.bfloat16: return bf16_bits
  if dtype in FP8S: return partial(float_to_fp8, dtype=dtype)
  return None


def bitcast_function(src: DType, dst: DType) -> Callable:
  """Reinterpret the bits of a `src` value as `dst` (16-bit floats through their storage words)."""
  pack = struct.Struct("<" + storage_format(src)).pack
  unpack = struct.Struct("<" + storage_format(dst)).unpack
  to_word, from_word = store_function(src), load_function(dst)
  def reinterpret(v):
    word = unpack(pack(to_word(v) if to_word is not None else v))[0]
    return from_word(word) if from_word is not None else word
  return reinterpret


def word_function(dtype: DType) -> Callable[[int], Any]:
  """How a scalar parameter's 64-bit word becomes a value: an integer's two's complement value, a float's bits in
  its own format (in the low bits), as the kernel calling convention passes them."""
  if dtype is dtypes.bool: return lambda word: word != 0
  if not dtypes.is_float(dtype): return wrapper(dtype)
  if dtype is dtypes.float16: return lambda word: half_value(word & 0xFFFF)
  if dtype is dtypes.bfloat16: return lambda word: bf16_value(word & 0xFFFF)
  if dtype in FP8S: return lambda word: fp8_to_float(word & 0xFF, dtype)
  if dtype is dtypes.float32: return lambda word: _F32.unpack(_U32.pack(word & 0xFFFFFFFF))[0]
  return lambda word: _F64.unpack(_U64.pack(word & 0xFFFFFFFFFFFFFFFF))[0]


def const_value(value, dtype: DType):
  """A listing constant as a value of `dtype` (non-finite floats are written as text)."""
  if dtypes.is_float(dtype): return float(value)
  if dtype is dtypes.bool: return bool(value)
  return wrapper(dtype)(int(value))
