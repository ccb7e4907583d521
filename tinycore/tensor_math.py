"""Math functions of tinygrad's Tensor API, mixed into Tensor: erf, inverse and hyperbolic trigonometry, closeness
tests, copysign, logaddexp, the activations (gelu, mish, hardswish, selu, ...), a softplus that does not overflow,
and var_mean/std_mean. Each composes existing lazy ops (exp2, log2, sqrt, where, ...), so it fuses into one kernel
and the autograd over the UOp graph differentiates it. Where a formula loses precision (cancellation near 0, overflow
for large inputs), a `where` picks a form that doesn't, with each branch's input clamped to its own range, so the
branch not taken is finite and passes a zero gradient rather than 0 * inf = NaN."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any, Sequence
from tinycore.dtype import dtypes, least_upper_float
from tinycore.errors import ArgumentError

if TYPE_CHECKING:
  from tinycore.tensor import Tensor

# erf(x) = 1 - t * P(t) * exp(-x^2), t = 1 / (1 + ERF_P * x), for x >= 0 (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7)
ERF_P = 0.3275911
ERF_TAIL = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)  # P's coefficients, lowest first
# erf's Maclaurin series 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)), in powers of x^2: exact to 1e-8 for |x| <= 1/2
ERF_SERIES = tuple((-1) ** n * 2 / math.sqrt(math.pi) / (math.factorial(n) * (2 * n + 1)) for n in range(7))
ERF_SERIES_LIMIT = 0.5
# atan(x) = x * Q(x^2) on [-1, 1] (Abramowitz & Stegun 4.4.49, |error| < 2e-8), Q's coefficients lowest first
ATAN_SERIES = (1.0, -0.3333314528, 0.1999355085, -0.1420889944, 0.1065626393, -0.0752896400, 0.0429096138,
               -0.0161657367, 0.0028662257)
# sinh's Maclaurin series x * sum x^(2n) / (2n+1)!: exact in float32 for |x| <= 1/2, where exp(x) - exp(-x) cancels
SINH_SERIES = tuple(1 / math.factorial(2 * n + 1) for n in range(5))
SINH_SERIES_LIMIT = 0.5
# above this |x|, x^2 would overflow float32 in asinh and acosh: both are log(2|x|) to float precision there
HYPERBOLIC_LARGE = 1e18
# below this |x|, asinh and atanh by their Maclaurin series (1 + x cancels in their logs): exact to 1e-9 up to 1/4
INVERSE_HYPERBOLIC_SERIES_LIMIT = 0.25
ASINH_SERIES = tuple((-1) ** n * math.comb(2 * n, n) / (4 ** n * (2 * n + 1)) for n in range(7))
ATANH_SERIES = tuple(1 / (2 * n + 1) for n in range(7))


def _polynomial(x: Tensor, coefficients: Sequence[float]) -> Tensor:
  """sum coefficients[i] * x**i by Horner's rule."""
  out = x * coefficients[-1] + coefficients[-2]
  for c in reversed(coefficients[:-2]): out = out * x + c
  return out


class TensorMath:
  """Math methods of Tensor (Tensor inherits them through TensorOps)."""
  __slots__ = ()

  def _as_float(self: Tensor) -> Tensor:
    return self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))

  # ------------------------------------------------------------------ special functions
  def erf(self: Tensor) -> Tensor:
    """The error function: a series near 0 (exact relative precision), A&S 7.1.26 elsewhere (|error| < 2e-7)."""
    x = self._as_float()
    small = x.abs() <= ERF_SERIES_LIMIT
    near = x.clip(-ERF_SERIES_LIMIT, ERF_SERIES_LIMIT)
    series = near * _polynomial(near * near, ERF_SERIES)
    far = x.abs().maximum(ERF_SERIES_LIMIT)
    t = (1 + ERF_P * far).reciprocal()
    tail = 1 - t * _polynomial(t, ERF_TAIL) * (-far * far).exp()
    return small.where(series, (x < 0).where(-tail, tail))

  def logaddexp(self: Tensor, other: Tensor | Any) -> Tensor:
    """log(exp(self) + exp(other)), shifted by the larger so neither overflows (-inf with -inf stays -inf)."""
    a, b = self._as_float()._broadcasted(other)
    peak = a.maximum(b)
    safe = peak.isinf().where(0, peak)
    return ((a - safe).exp() + (b - safe).exp()).log() + safe

  def log10(self: Tensor) -> Tensor:
    """The base-10 logarithm."""
    return self._as_float().log2() * math.log10(2)

  def fmod(self: Tensor, x: Tensor | Any) -> Tensor:
    """C's remainder: the sign follows self (truncating division), unlike `%`, whose sign follows x."""
    a, b = self._broadcasted(x)
    if dtypes.is_int(a.dtype): return a - a.div(b, rounding_mode="trunc") * b
    return a - (a / b).trunc() * b

  def eq(self: Tensor, x: Tensor | Any) -> Tensor:
    """self == x, elementwise."""
    return self == x

  def ne(self: Tensor, x: Tensor | Any) -> Tensor:
    """self != x, elementwise."""
    return self != x

  # ------------------------------------------------------------------ trigonometry
  def _atan_unit(self: Tensor) -> Tensor:
    """atan on [-1, 1] by its polynomial."""
    return self * _polynomial(self * self, ATAN_SERIES)

  def atan(self: Tensor) -> Tensor:
    """The inverse tangent; |x| > 1 uses atan(x) = pi/2 - atan(1/x), so +-inf gives +-pi/2."""
    x = self._as_float()
    size = x.abs()
    outside = size > 1
    reduced = outside.where(size.maximum(1).reciprocal(), size.minimum(1))
    angle = reduced._atan_unit()
    angle = outside.where(math.pi / 2 - angle, angle)
    return (x < 0).where(-angle, angle)

  def asin(self: Tensor) -> Tensor:
    """The inverse sine, as atan(x / sqrt(1 - x^2)) with 1 - x^2 = (1 - x)(1 + x) (exact near +-1); NaN outside
    [-1, 1]."""
    x = self._as_float()
    return (x / ((1 - x) * (1 + x)).sqrt()).atan()

  def acos(self: Tensor) -> Tensor:
    """The inverse cosine, as 2 atan(sqrt((1 - x) / (1 + x))): full relative precision near 1, pi at -1."""
    x = self._as_float()
    return ((1 - x) / (1 + x)).sqrt().atan() * 2

  def sinh(self: Tensor) -> Tensor:
    """The hyperbolic sine; a series near 0, where exp(x) - exp(-x) cancels."""
    x = self._as_float()
    near = x.clip(-SINH_SERIES_LIMIT, SINH_SERIES_LIMIT)
    series = near * _polynomial(near * near, SINH_SERIES)
    return (x.abs() <= SINH_SERIES_LIMIT).where(series, (x.exp() - (-x).exp()) / 2)

  def cosh(self: Tensor) -> Tensor:
    """The hyperbolic cosine."""
    x = self._as_float()
    return (x.exp() + (-x).exp()) / 2

  def _near_zero_series(self: Tensor, coefficients: Sequence[float], far: Tensor) -> Tensor:
    """x * P(x^2) where |x| <= INVERSE_HYPERBOLIC_SERIES_LIMIT, else far."""
    limit = INVERSE_HYPERBOLIC_SERIES_LIMIT
    near = self.clip(-limit, limit)
    return (self.abs() <= limit).where(near * _polynomial(near * near, coefficients), far)

  def _log_of_twice(self: Tensor) -> Tensor:
    """log(2x) for x >= HYPERBOLIC_LARGE (other x clamped up to it)."""
    return self.maximum(HYPERBOLIC_LARGE).log() + math.log(2)

  def asinh(self: Tensor) -> Tensor:
    """The inverse hyperbolic sine, odd by construction (no cancellation for negative x); a series near 0 and
    log(2|x|) for huge |x|."""
    x = self._as_float()
    size = x.abs()
    moderate = size.minimum(HYPERBOLIC_LARGE)
    value = (moderate + (moderate * moderate + 1).sqrt()).log()
    value = (size > HYPERBOLIC_LARGE).where(size._log_of_twice(), value)
    return x._near_zero_series(ASINH_SERIES, (x < 0).where(-value, value))

  def acosh(self: Tensor) -> Tensor:
    """The inverse hyperbolic cosine (NaN below 1), log(2x) for huge x."""
    x = self._as_float()
    moderate = x.clip(1, HYPERBOLIC_LARGE)
    value = (moderate + ((moderate - 1) * (moderate + 1)).sqrt()).log()
    # below 1: NaN, with torch's gradient there, 1/sqrt(x^2 - 1) (finite below -1): a NaN plus (x - x) times that
    # slope taken as a constant (computed on the detached input, 0 from 1 up so nothing leaks when not selected)
    xd = x.detach()
    slope = (xd < 1).where(((xd - 1) * (xd + 1)).sqrt().reciprocal(), 0.0)
    below = (x - xd) * slope + math.nan
    return (x < 1).where(below, (x > HYPERBOLIC_LARGE).where(x._log_of_twice(), value))

  def atanh(self: Tensor) -> Tensor:
    """The inverse hyperbolic tangent: a series near 0, +-inf at +-1, NaN outside [-1, 1]."""
    x = self._as_float()
    return x._near_zero_series(ATANH_SERIES, ((1 + x) / (1 - x)).log() * 0.5)

  # ------------------------------------------------------------------ tests and signs
  def isfinite(self: Tensor) -> Tensor:
    """True where the value is neither infinite nor NaN."""
    return (self.isinf() | self.isnan()).logical_not()

  def isclose(self: Tensor, other: Tensor | Any, rtol: float = 1e-05, atol: float = 1e-08,
              equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other| elementwise (numpy's and torch's rule); infinities are close only to
    themselves, NaNs to NaNs only with equal_nan."""
    a, b = self._broadcasted(other)
    finite = a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs())
    same_infinity = (a.isinf() | b.isinf()) & (a == b)
    both_nan = (a.isnan() & b.isnan()) & equal_nan
    return finite | same_infinity | both_nan

  def allclose(self: Tensor, other: Tensor | Any, rtol: float = 1e-05, atol: float = 1e-08,
               equal_nan: bool = False) -> Tensor:
    """Whether every element is close (isclose), as a 0-d bool tensor (as tinygrad; `if a.allclose(b):` reads it)."""
    return self.isclose(other, rtol, atol, equal_nan).all()

  def copysign(self: Tensor, other: Tensor | Any) -> Tensor:
    """|self| with the sign of other, -0.0 counting as negative (in the dtype the two broadcast to)."""
    a, b = self._broadcasted(other)
    negative = (b < 0) | ((b == 0) & (b.reciprocal() < 0)) if dtypes.is_float(b.dtype) else b < 0
    size = a.abs()
    return negative.where(-size, size)

  # ------------------------------------------------------------------ activations
  def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, computed as max(beta x, 0) + log(1 + exp(-|beta x|)): one exp, never overflowing
    (large inputs give x, not inf)."""
    x = self._as_float() * beta
    return (x.maximum(0) + ((-x.abs()).exp() + 1).log()) * (1 / beta)

  def logsigmoid(self: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), finite for large negative x."""
    return -(-self._as_float()).softplus()

  def mish(self: Tensor) -> Tensor:
    """x * tanh(softplus(x))."""
    return self * self.softplus().tanh()

  def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
    """The Gaussian error linear unit: approximate="tanh" (tinygrad's default) or "none" (the exact x * Phi(x))."""
    if approximate == "tanh":
      return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
    if approximate == "none": return self * 0.5 * (1 + (self * (1 / math.sqrt(2))).erf())
    raise ArgumentError(f"gelu approximate must be 'tanh' or 'none', got {approximate!r}")

  def quick_gelu(self: Tensor) -> Tensor:
    """x * sigmoid(1.702 x)."""
    return self * (self * 1.702).sigmoid()

  def relu6(self: Tensor) -> Tensor:
    """min(max(x, 0), 6)."""
    if not dtypes.is_float(self.dtype): return self.relu().minimum(6)  # (x - 6 of an unsigned int wraps)
    return self.relu() - (self - 6).relu()

  def hardswish(self: Tensor) -> Tensor:
    """x * relu6(x + 3) / 6 (ints and bools in float)."""
    x = self._as_float()
    return x * (x + 3).relu6() * (1 / 6)

  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """clip(alpha x + beta, 0, 1) (torch's defaults)."""
    line = alpha * self + beta
    return line.relu() - (line - 1).relu()

  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:
    """clip(x, min_val, max_val)."""
    return self.clip(min_val, max_val)

  def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    return self.maximum(0) + (alpha * ((self * (1 / alpha)).exp() - 1)).minimum(0)

  def selu(self: Tensor, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor:
    """gamma * (x if x >= 0 else alpha (exp(x) - 1)) (tinygrad's constants)."""
    return gamma * (self >= 0).where(self, alpha * (self.exp() - 1))

  def softsign(self: Tensor) -> Tensor:
    """x / (1 + |x|) (ints and bools in float: 1 + |x| may not fit their dtype)."""
    x = self._as_float()
    return x / (1 + x.abs())

  # ------------------------------------------------------------------ statistics
  def var_mean(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,
               correction: int = 1) -> tuple[Tensor, Tensor]:
    """(var, mean) over axis, as torch.var_mean."""
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,
               correction: int = 1) -> tuple[Tensor, Tensor]:
    """(std, mean) over axis, as torch.std_mean."""
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
