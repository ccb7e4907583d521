"""Data types and the promotion rules between them (tinygrad's lattice)."""
from __future__ import annotations
import math
from functools import lru_cache
from typing import Any
import attrs
from tinycore.errors import UnknownDTypeError
from tinycore.helpers import ContextVar


@attrs.frozen(order=False, repr=False, eq=False)
class DType:
  """A scalar element type. `priority` orders types for promotion; `fmt` is the struct/memoryview code.
  Each dtype is a singleton compared by identity (fast to hash); pickling returns the singleton."""
  priority: int
  itemsize: int
  name: str
  fmt: str | None
  np_name: str | None

  def __repr__(self) -> str: return f"dtypes.{self.name}"
  def __reduce__(self): return (to_dtype, (self.name,))
  def __lt__(self, other: DType) -> bool:
    return (self.priority, self.itemsize, self.name) < (other.priority, other.itemsize, other.name)

  # tinygrad's per-dtype facts: dtypes.int32.max, dtypes.uint8.min, dtypes.float16.bitsize
  @property
  def min(self) -> bool | int | float:
    """The smallest value (-inf for floats, False for bool)."""
    return dtypes.min(self)
  @property
  def max(self) -> bool | int | float:
    """The largest value (inf for floats, True for bool)."""
    return dtypes.max(self)
  @property
  def bitsize(self) -> int: return 1 if self.name == "bool" else self.itemsize * 8


# what a dtype argument may be (tinygrad's name for it, in type hints): a DType or its name
DTypeLike = DType | str

# the dtypes a Python float and a Python int get, as tinygrad's settings: `DEFAULT_FLOAT=HALF python x.py`,
# `with Context(DEFAULT_FLOAT=dtypes.half):` (a dtype or its name), or `dtypes.default_float = dtypes.half`
DEFAULT_FLOAT = ContextVar("DEFAULT_FLOAT", "float32")
DEFAULT_INT = ContextVar("DEFAULT_INT", "int32")


def _default_dtype(setting: ContextVar, kind: str) -> DType:
  value = setting.value
  # (read on every Python float or int a tensor op meets: the value's dtype is looked up once per value)
  if (known := _resolved_defaults.get((setting.key, value))) is not None: return known
  d = to_dtype(value.lower() if isinstance(value, str) else value)
  if (kind == "float") != dtypes.is_float(d) or (kind == "int" and not dtypes.is_int(d)):
    raise ValueError(f"{setting.key}={value!r}: the default {kind} dtype must be a{'n' if kind == 'int' else ''} "
                     f"{kind} dtype")
  _resolved_defaults[(setting.key, value)] = d
  return d


_resolved_defaults: dict[tuple[str, Any], DType] = {}  # (setting, its value) -> the dtype it names


class DTypesNamespace(type):
  """dtypes' metaclass: default_float and default_int read (and set) the DEFAULT_FLOAT / DEFAULT_INT settings."""
  @property
  def default_float(cls) -> DType: return _default_dtype(DEFAULT_FLOAT, "float")
  @default_float.setter
  def default_float(cls, d: DType | str) -> None: DEFAULT_FLOAT.value = d
  @property
  def default_int(cls) -> DType: return _default_dtype(DEFAULT_INT, "int")
  @default_int.setter
  def default_int(cls, d: DType | str) -> None: DEFAULT_INT.value = d


class dtypes(metaclass=DTypesNamespace):
  """The dtypes namespace, as in tinygrad: `dtypes.float32`, `dtypes.is_float(d)`, ..."""
  bool = DType(0, 1, "bool", "?", "bool")
  int8 = DType(1, 1, "int8", "b", "int8")
  uint8 = DType(2, 1, "uint8", "B", "uint8")
  int16 = DType(3, 2, "int16", "h", "int16")
  uint16 = DType(4, 2, "uint16", "H", "uint16")
  int32 = DType(5, 4, "int32", "i", "int32")
  uint32 = DType(6, 4, "uint32", "I", "uint32")
  int64 = DType(7, 8, "int64", "q", "int64")
  uint64 = DType(8, 8, "uint64", "Q", "uint64")
  # 8-bit floats (tinygrad's, as ml_dtypes and ONNX define them): stored as bytes, computed in float (Float8Format)
  fp8e4m3 = DType(9, 1, "fp8e4m3", None, None)
  fp8e4m3fnuz = DType(9, 1, "fp8e4m3fnuz", None, None)
  fp8e5m2 = DType(10, 1, "fp8e5m2", None, None)
  fp8e5m2fnuz = DType(10, 1, "fp8e5m2fnuz", None, None)
  float16 = DType(11, 2, "float16", "e", "float16")
  bfloat16 = DType(12, 2, "bfloat16", None, None)
  float32 = DType(13, 4, "float32", "f", "float32")
  float64 = DType(14, 8, "float64", "d", "float64")
  # aliases
  half, float, double = float16, float32, float64
  uchar, char, short, ushort = uint8, int8, int16, uint16
  int, uint, long, ulong = int32, uint32, int64, uint64
  # the index type used for addressing inside kernels
  index: DType = int64

  @staticmethod
  def is_float(d: DType) -> bool: return d in FLOATS
  @staticmethod
  def is_int(d: DType) -> bool: return d in INTS
  @staticmethod
  def is_unsigned(d: DType) -> bool: return d in UNSIGNED
  @staticmethod
  def is_bool(d: DType) -> bool: return d is dtypes.bool

  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype a Python value (or nested list of them) gets by default."""
    if isinstance(x, (list, tuple)):
      return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.int_for(x)
    if isinstance(x, float): return dtypes.default_float
    raise TypeError(f"cannot infer a dtype for a value of type {type(x).__name__}")

  @staticmethod
  def int_for(x: int) -> DType:
    """The dtype a Python int gets: default_int, or int64 when it does not fit (as numpy does)."""
    if dtypes.min(dtypes.default_int) <= x <= dtypes.max(dtypes.default_int): return dtypes.default_int
    if dtypes.min(dtypes.int64) <= x <= dtypes.max(dtypes.int64): return dtypes.int64
    raise OverflowError(f"Python int {x} is outside the int64 range; pass an explicit dtype (e.g. dtypes.uint64)")

  @staticmethod
  def as_const(val: Any, dtype: DType) -> bool | int | float:
    """Normalize a Python scalar to the value it has when stored as `dtype`."""
    if dtype is dtypes.bool: return bool(val)
    if dtypes.is_int(dtype):
      if isinstance(val, float) and not math.isfinite(val): return 0
      v = int(val)
      bits = dtype.itemsize * 8
      v &= (1 << bits) - 1
      if not dtypes.is_unsigned(dtype) and v >= 1 << (bits - 1): v -= 1 << bits
      return v
    return float(val)

  @staticmethod
  def min(dtype: DType) -> bool | int | float:
    if dtype is dtypes.bool: return False
    if dtypes.is_int(dtype): return 0 if dtypes.is_unsigned(dtype) else -(1 << (dtype.itemsize * 8 - 1))
    return -math.inf

  @staticmethod
  def max(dtype: DType) -> bool | int | float:
    if dtype is dtypes.bool: return True
    if dtypes.is_int(dtype):
      bits = dtype.itemsize * 8
      return (1 << bits) - 1 if dtypes.is_unsigned(dtype) else (1 << (bits - 1)) - 1
    return math.inf

  @staticmethod
  def fields() -> dict[str, DType]:
    """Every dtype once, by its canonical name (the aliases, dtypes.half and so on, are attributes)."""
    return dict(DTYPES_BY_NAME)

  @staticmethod
  def from_np(npdt: Any) -> DType:
    """The dtype of a numpy dtype (np.float32, np.dtype("int16"), "uint8")."""
    return from_np_dtype(npdt)

  @staticmethod
  def finfo(dtype: DType) -> tuple[int, int]:
    """(exponent bits, mantissa bits) of a float dtype, as tinygrad's dtypes.finfo."""
    if not dtypes.is_float(dtype): raise ValueError(f"{dtype} is not a floating point type")
    return FLOAT_BITS[dtype.name]


FP8S = (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
ALL = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
       dtypes.uint64, *FP8S, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
FLOATS = frozenset({*FP8S, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64})
# floats computed in float and rounded back to their own precision after every op (no arithmetic of their own)
NARROW_FLOATS = frozenset({*FP8S, dtypes.float16, dtypes.bfloat16})
# dtypes numpy has no type for: the host reads and writes them as float32 (a cast on the device)
HOST_FLOAT32 = frozenset({*FP8S, dtypes.bfloat16})
UNSIGNED = frozenset({dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
INTS = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64}) | UNSIGNED
FLOAT_BITS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52), "fp8e4m3": (4, 3),
              "fp8e5m2": (5, 2), "fp8e4m3fnuz": (4, 3), "fp8e5m2fnuz": (5, 2)}
# tinygrad's groups of dtypes, as tuples on the namespace (dtypes.floats, dtypes.ints, ...)
dtypes.fp8_ocp = (dtypes.fp8e4m3, dtypes.fp8e5m2)
dtypes.fp8_fnuz = (dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
dtypes.fp8s = FP8S
dtypes.floats = (*FP8S, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
dtypes.uints = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
dtypes.sints = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
dtypes.ints = dtypes.uints + dtypes.sints
dtypes.all = dtypes.floats + dtypes.ints + (dtypes.bool,)
DTYPES_BY_NAME = {"bool": dtypes.bool, "int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16,
                  "uint16": dtypes.uint16, "int32": dtypes.int32, "uint32": dtypes.uint32, "int64": dtypes.int64,
                  "uint64": dtypes.uint64, **{d.name: d for d in FP8S}, "float16": dtypes.float16,
                  "bfloat16": dtypes.bfloat16, "float32": dtypes.float32, "float64": dtypes.float64}
# the 8-bit floats' names in ml_dtypes, torch and tinygrad's DType.name ("float8_e4m3fn" is ONNX's e4m3)
dtypes.float8_e4m3 = dtypes.float8_e4m3fn = dtypes.fp8e4m3
dtypes.float8_e5m2, dtypes.float8_e4m3fnuz, dtypes.float8_e5m2fnuz = FP8S[1:]

# each type promotes to these (tinygrad's lattice); the least upper bound of a set is their cheapest common ancestor
PROMOTION_LATTICE: dict[DType, list[DType]] = {
  dtypes.bool: [dtypes.int8, dtypes.uint8], dtypes.int8: [dtypes.int16], dtypes.int16: [dtypes.int32],
  dtypes.int32: [dtypes.int64], dtypes.int64: [*FP8S, dtypes.float16, dtypes.bfloat16],
  dtypes.uint8: [dtypes.int16, dtypes.uint16], dtypes.uint16: [dtypes.int32, dtypes.uint32],
  dtypes.uint32: [dtypes.int64, dtypes.uint64], dtypes.uint64: [*FP8S, dtypes.float16, dtypes.bfloat16],
  **{d: [dtypes.float16, dtypes.bfloat16] for d in FP8S},
  dtypes.float16: [dtypes.float32], dtypes.bfloat16: [dtypes.float32], dtypes.float32: [dtypes.float64],
}


@lru_cache(None)
class DTypeSet(frozenset):
  """A renderer's supported dtypes: a frozenset (`dtypes.half in renderer.supported_dtypes`) that can also be called,
  as tinygrad's `Renderer.supported_dtypes()` method is (`dtypes.half in renderer.supported_dtypes()`)."""
  def __call__(self) -> DTypeSet: return self


def _ancestors(d: DType) -> frozenset[DType]:
  return frozenset({d}).union(*[_ancestors(p) for p in PROMOTION_LATTICE.get(d, [])])


@lru_cache(None)  # every binary op and reduction asks; the lattice is small and fixed
def _least_common_ancestor(*ds: DType) -> DType:
  common = frozenset.intersection(*[_ancestors(d) for d in ds])
  return min(common) if common else dtypes.float64


def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every one of `ds` promotes to. Ints with no common int (uint64 and a signed int) meet in
  the default float, as tinygrad's, whose lattice has its weak float between them and the halves."""
  out = _least_common_ancestor(*ds)
  if dtypes.is_float(out) and not any(dtypes.is_float(d) for d in ds): return dtypes.default_float
  return out


def least_upper_float(d: DType) -> DType:
  return d if dtypes.is_float(d) else least_upper_dtype(d, dtypes.default_float)


def to_dtype(x: DType | str) -> DType:
  """Accept a DType, a name ("float32", "half", ...) or a numpy dtype."""
  if isinstance(x, DType): return x
  name = getattr(x, "name", None) if not isinstance(x, str) else x
  if name is None and hasattr(x, "__name__"): name = x.__name__
  if isinstance(name, str):
    if name in DTYPES_BY_NAME: return DTYPES_BY_NAME[name]
    alias = getattr(dtypes, name, None)
    if isinstance(alias, DType): return alias
  raise UnknownDTypeError(f"unknown dtype {x!r}; known: {', '.join(DTYPES_BY_NAME)}")


def to_np_dtype(d: DType):
  """The numpy dtype with the same bytes (bfloat16 and the 8-bit floats have none: cast to float32 first)."""
  import numpy as np
  if d in HOST_FLOAT32: raise TypeError(f"{d.name} has no numpy dtype; cast to float32 first")
  return np.dtype(d.np_name)


# numpy dtypes of ml_dtypes (the package onnx and jax use) with a tinycore dtype of another name
ML_DTYPES_NAMES = {"float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2", "float8_e4m3fnuz": "fp8e4m3fnuz",
                   "float8_e5m2fnuz": "fp8e5m2fnuz"}


def from_np_dtype(npdt) -> DType:
  """The dtype of a numpy dtype; ml_dtypes' bfloat16 and 8-bit floats too (an array of them is read as its bytes)."""
  import numpy as np
  name = np.dtype(npdt).name
  name = ML_DTYPES_NAMES.get(name, name)
  if name not in DTYPES_BY_NAME: raise TypeError(f"numpy dtype {name} is not supported by tinycore")
  return DTYPES_BY_NAME[name]


# ---------------------------------------------------------------------------- 8-bit floats
@attrs.frozen
class Float8Format:
  """An 8-bit float: sign, `exponent_bits`, `mantissa_bits`, exponent `bias`; `max_code` is the largest finite
  value's byte. `kind` says what the all-ones patterns mean: "fn" (e4m3: no infinity, S.1111.111 is NaN), "ieee"
  (e5m2: exponent all ones is infinity or NaN, as IEEE) or "fnuz" (no infinity, no negative zero, 0x80 is NaN).
  The NaN a conversion makes keeps its sign in the OCP formats (S.1111111).

  Converting to one rounds to nearest even and saturates: a finite value beyond the largest becomes the largest of
  its sign (ml_dtypes' and tinygrad's behaviour, and ONNX's default `saturate=1`); infinity becomes infinity in e5m2
  and NaN in the others; NaN becomes NaN (S.1111.111 in the OCP formats, 0x80 in fnuz)."""
  exponent_bits: int
  mantissa_bits: int
  bias: int
  max_code: int
  kind: str

  @property
  def nan_code(self) -> int: return 0x80 if self.kind == "fnuz" else 0x7F


FP8_FORMATS: dict[DType, Float8Format] = {
  dtypes.fp8e4m3: Float8Format(4, 3, 7, 0x7E, "fn"), dtypes.fp8e5m2: Float8Format(5, 2, 15, 0x7B, "ieee"),
  dtypes.fp8e4m3fnuz: Float8Format(4, 3, 8, 0x7F, "fnuz"), dtypes.fp8e5m2fnuz: Float8Format(5, 2, 16, 0x7F, "fnuz")}


def fp8_to_float(code: int, dtype: DType) -> float:
  """The value of an 8-bit float's byte."""
  f = FP8_FORMATS[dtype]
  code &= 0xFF
  sign, exponent, mantissa = code >> 7, (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1), \
    code & ((1 << f.mantissa_bits) - 1)
  if f.kind == "fnuz" and code == 0x80: return math.nan
  if f.kind == "fn" and code & 0x7F == 0x7F: return -math.nan if sign else math.nan
  if f.kind == "ieee" and exponent == (1 << f.exponent_bits) - 1:
    return (-math.nan if sign else math.nan) if mantissa else (-math.inf if sign else math.inf)
  if exponent == 0: value = math.ldexp(mantissa, 1 - f.bias - f.mantissa_bits)
  else: value = math.ldexp((1 << f.mantissa_bits) + mantissa, exponent - f.bias - f.mantissa_bits)
  return -value if sign else value


def float_to_fp8(x: float, dtype: DType) -> int:
  """The byte of the 8-bit float nearest x (ties to even; saturating: see Float8Format)."""
  f = FP8_FORMATS[dtype]
  x = float(x)
  sign = 0x80 if math.copysign(1.0, x) < 0 else 0
  if math.isnan(x) or (math.isinf(x) and f.kind != "ieee"): return f.nan_code if f.kind == "fnuz" else sign | f.nan_code
  if math.isinf(x): return sign | 0x7C
  magnitude = abs(x)
  exponent = math.frexp(magnitude)[1] - 1 if magnitude else -1 << 20  # magnitude in [2**exponent, 2**(exponent + 1))
  # the step between neighbours at this magnitude (the subnormal step below the smallest normal)
  step_exponent = max(exponent, 1 - f.bias) - f.mantissa_bits
  steps = round(math.ldexp(magnitude, -step_exponent))  # exact scaling; round() ties to even
  if exponent < 1 - f.bias: code = steps  # subnormal (a round up to 2**mantissa_bits is the smallest normal's byte)
  else: code = ((exponent + f.bias) << f.mantissa_bits) + steps - (1 << f.mantissa_bits)
  code = min(code, f.max_code)
  if f.kind == "fnuz" and code == 0: return 0
  return code | sign


def round_to_fp8(x: float, dtype: DType) -> float:
  """x rounded to the 8-bit float `dtype` (tinygrad's truncate for fp8)."""
  return fp8_to_float(float_to_fp8(x, dtype), dtype)


@lru_cache(None)
def fp8_values(dtype: DType) -> Any:
  """The float32 value of each of the 256 bytes of an 8-bit float (a read-only numpy array, made once: host
  interop)."""
  import numpy as np
  table = np.array([fp8_to_float(code, dtype) for code in range(256)], np.float32)
  table.setflags(write=False)
  return table


def fp8_decode(codes: Any, dtype: DType) -> Any:
  """An array of an 8-bit float's bytes (uint8) as float32 values (numpy, vectorized)."""
  import numpy as np
  return fp8_values(dtype)[np.asarray(codes, np.uint8)]


def fp8_encode(values: Any, dtype: DType) -> Any:
  """float values as the bytes (uint8) of the nearest 8-bit floats, as `float_to_fp8` (numpy, vectorized): the
  nearest of the format's values (ties to the even byte), saturating, with the format's NaN and infinity bytes."""
  import numpy as np
  f = FP8_FORMATS[dtype]
  x = np.asarray(values, np.float64)
  positive = fp8_values(dtype)[:f.max_code + 1].astype(np.float64)  # increasing with the byte
  magnitude = np.abs(x)
  above = np.clip(np.searchsorted(positive, magnitude), 1, f.max_code)  # the first value >= magnitude
  low, high = positive[above - 1], positive[above]
  tie = magnitude - low == high - magnitude
  code = np.where((magnitude - low < high - magnitude) | (tie & ((above - 1) % 2 == 0)), above - 1, above)
  code = np.where(magnitude >= positive[-1], f.max_code, code).astype(np.uint8)
  negative = np.signbit(x)
  if f.kind == "fnuz": code = np.where(negative & (code != 0), code | 0x80, code)
  else: code = np.where(negative, code | 0x80, code)
  special_nan = np.isnan(x) | (np.isinf(x) & (f.kind != "ieee"))
  nan = np.uint8(0x80) if f.kind == "fnuz" else np.where(negative, 0xFF, 0x7F)
  code = np.where(special_nan, nan, code)
  if f.kind == "ieee": code = np.where(np.isinf(x), np.where(negative, 0xFC, 0x7C), code)
  return code.astype(np.uint8)
