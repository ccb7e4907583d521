"""Kernel scalar parameters: values a kernel takes as arguments at launch instead of having them in its source.

Inside a kernel a scalar parameter is `DEFINE_VAR` (arg: (name, min, max), no sources). The CALL that runs the
kernel lists the parameters' values after its buffers, one per parameter, in the kernel's parameter order: a CONST
(a value from Python), a BIND(DEFINE_VAR, CONST) (a bound variable), or, in a cached schedule's template, the
placeholder DEFINE_VAR (with a DEVICE source) that binding replaces by the value. So the kernel, its source and the
schedule's cache key do not depend on the value: a new learning rate is a new argument, not a new program.

The calling convention: a kernel takes its buffers, then its scalar parameters in the order of their names, each
as one 64-bit word (`scalar_word`): an integer's value (two's complement), a float's bits in its own format.
"""
from __future__ import annotations
import struct
from typing import Any
from tinycore.dtype import FP8S, DType, dtypes, float_to_fp8
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.symbolic import round_to_dtype

BUFFER_ARGS = (Ops.BUFFER, Ops.BUFFER_VIEW)
SCALAR_ARGS = (Ops.CONST, Ops.BIND, Ops.DEFINE_VAR)


def kernel_scalars(sink: UOp) -> list[UOp]:
  """A kernel's scalar parameters (its DEFINE_VARs) in argument order: by name."""
  return sorted((u for u in sink.toposort() if u.op is Ops.DEFINE_VAR and not u.src), key=lambda u: u.arg[0])


def call_buffers(call: UOp) -> tuple[UOp, ...]:
  """The buffer arguments of a CALL (destination first)."""
  return tuple(u for u in call.src[1:] if u.op in BUFFER_ARGS)


def call_scalars(call: UOp) -> tuple[UOp, ...]:
  """The scalar arguments of a CALL, in the kernel's parameter order."""
  return tuple(u for u in call.src[1:] if u.op in SCALAR_ARGS)


def scalar_value(u: UOp) -> Any:
  """The Python value of a scalar argument: a CONST's value or a BIND's bound value."""
  if u.op is Ops.CONST: return u.arg
  if u.op is Ops.BIND: return u.src[1].arg
  raise ValueError(f"scalar argument {u.arg[0] if u.op is Ops.DEFINE_VAR else u.op} has no value: bind the schedule "
                   "(run a realize, or a LINEAR from Tensor.schedule_linear) before running it")


def scalar_bounds(dtype: DType) -> tuple[Any, Any]:
  """The range a scalar parameter of this dtype may take (what simplification may assume about it)."""
  return dtypes.min(dtype), dtypes.max(dtype)


_FLOAT_FORMATS = {dtypes.float16: ("<e", "<H"), dtypes.float32: ("<f", "<I"), dtypes.float64: ("<d", "<q")}


def scalar_word(value: Any, dtype: DType) -> int:
  """The 64-bit word a kernel receives for a scalar parameter of `dtype` (a Python int in the int64 range): the
  value rounded to the dtype exactly as a store would round it, then an integer's two's complement value, or a
  float's bits (an 8-bit float in the low 8 bits, float16 and bfloat16 in the low 16, float32 in the low 32, float64
  all 64)."""
  if dtypes.is_float(dtype):
    value = round_to_dtype(float(value), dtype)
    if dtype is dtypes.bfloat16: return struct.unpack("<I", struct.pack("<f", value))[0] >> 16
    if dtype in FP8S: return float_to_fp8(value, dtype)
    pack, unpack = _FLOAT_FORMATS[dtype]
    return struct.unpack(unpack, struct.pack(pack, value))[0]
  word = int(dtypes.as_const(value, dtype))
  return word - (1 << 64) if word >= 1 << 63 else word
