"""Symbolic simplification: constant folding and index arithmetic, as rewrite rules.

Index expressions come from movement ops turned into math over loop ranges (reshape gives `//` and `%`), and
most of that math cancels: `(r0*4 + r1) // 4` is `r0` when `r1 < 4`. The rules below normalize integer sums into
affine form (terms with coefficients plus a constant) and use the bounds of each term to drop what cancels.
"""
from __future__ import annotations
import math
import operator
import struct
from typing import Any
from tinycore.dtype import FP8S, DType, dtypes, round_to_fp8
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.pattern import PatternMatcher, UPat

INT_TYPES = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
                       dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})


# ---------------------------------------------------------------------------- evaluating ALU ops on Python values
def _c_div(a: int, b: int) -> int:
  if b == 0: return 0
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int: return 0 if b == 0 else a - b * _c_div(a, b)


def _safe_fdiv(a, b):
  try: return a / b
  except ZeroDivisionError:
    if a == 0 or (isinstance(a, float) and math.isnan(a)): return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _safe(fn):
  def wrapped(*args):
    try: return fn(*args)
    except (ValueError, OverflowError): return math.nan
  return wrapped


PYTHON_ALU: dict[Ops, Any] = {
  Ops.ADD: operator.add, Ops.SUB: operator.sub, Ops.MUL: operator.mul, Ops.FDIV: _safe_fdiv, Ops.IDIV: _c_div,
  Ops.MOD: _c_mod, Ops.CMPLT: operator.lt, Ops.CMPNE: operator.ne, Ops.CMPEQ: operator.eq,
  Ops.MAX: lambda a, b: a if a != a or a > b else b,  # NaN wins, as in the renderer
  Ops.AND: operator.and_, Ops.OR: operator.or_, Ops.XOR: operator.xor, Ops.NEG: operator.neg,
  Ops.WHERE: lambda c, a, b: a if c else b,
  Ops.EXP2: _safe(lambda x: 2.0 ** x),
  Ops.LOG2: _safe(lambda x: math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)),
  Ops.SIN: _safe(math.sin), Ops.SQRT: _safe(lambda x: math.sqrt(x) if x >= 0 else math.nan),
  Ops.RECIPROCAL: lambda x: _safe_fdiv(1.0, x),
  Ops.TRUNC: _safe(lambda x: float(math.trunc(x)) if math.isfinite(x) else x),
  Ops.POW: _safe(lambda a, b: a ** b if not (a < 0 and b != int(b)) else math.nan),
}


def _float32_bits_round_odd(value: float) -> int:
  """The float32 bits of a double rounded by round-to-odd (so rounding them on to bfloat16 rounds only once)."""
  try: single = struct.unpack("f", struct.pack("f", value))[0]
  except OverflowError: single = math.copysign(math.inf, value)
  bits = struct.unpack("I", struct.pack("f", single))[0]
  if single == value: return bits
  if abs(single) > abs(value): bits -= 1  # rounded away from zero: step back toward it
  return bits | 1


def round_to_dtype(value: Any, dtype: DType) -> Any:
  """A Python value as `dtype` would hold it (ints wrap, narrower floats round; an 8-bit float saturates)."""
  if dtype in (dtypes.float32, dtypes.float16) and isinstance(value, float) and math.isfinite(value):
    try: return struct.unpack(dtype.fmt, struct.pack(dtype.fmt, value))[0]
    except OverflowError: return math.copysign(math.inf, value)
  if dtype is dtypes.bfloat16 and isinstance(value, float) and math.isfinite(value):
    bits = _float32_bits_round_odd(value)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("f", struct.pack("I", bits))[0]
  if dtype in FP8S and isinstance(value, float): return round_to_fp8(value, dtype)
  return dtypes.as_const(value, dtype)


def shift_value(op: Ops, value: int, count: int, dtype: DType) -> int:
  """value << count or value >> count as the renderer computes it (numpy's results on x86): the count is read as
  unsigned, and a count of at least the bit width shifts every bit out."""
  bits = dtype.itemsize * 8
  if count % (1 << bits) >= bits: return 0 if op is Ops.SHL or value >= 0 else -1
  return value << count if op is Ops.SHL else value >> count


def exec_alu(op: Ops, dtype: DType, args: list[Any]) -> Any:
  """The value of op on Python constants, as a device computes it in `dtype` (ints wrap, floats round)."""
  if op in (Ops.SHL, Ops.SHR) and dtypes.is_int(dtype): return round_to_dtype(shift_value(op, *args, dtype), dtype)
  return round_to_dtype(PYTHON_ALU[op](*args), dtype)


# ---------------------------------------------------------------------------- affine form of integer sums
def _is_int(u: UOp) -> bool: return u.dtype in INT_TYPES


def affine_terms(u: UOp) -> tuple[dict[UOp, int], int]:
  """u as sum(coeff * term) + constant, looking through ADD, SUB, NEG and multiplication by constants."""
  if u.op is Ops.CONST: return {}, u.arg
  if u.op in (Ops.ADD, Ops.SUB):
    (ta, ka), (tb, kb) = affine_terms(u.src[0]), affine_terms(u.src[1])
    sign = 1 if u.op is Ops.ADD else -1
    terms = dict(ta)
    for t, c in tb.items(): terms[t] = terms.get(t, 0) + sign * c
    return {t: c for t, c in terms.items() if c != 0}, ka + sign * kb
  if u.op is Ops.NEG:
    t, k = affine_terms(u.src[0])
    return {x: -c for x, c in t.items()}, -k
  if u.op is Ops.MUL:
    for a, b in ((u.src[0], u.src[1]), (u.src[1], u.src[0])):
      if b.op is Ops.CONST:
        if b.arg == 0: return {}, 0
        t, k = affine_terms(a)
        return {x: c * b.arg for x, c in t.items()}, k * b.arg
  return {u: 1}, 0


def build_affine(terms: dict[UOp, int], const: int, dtype: DType) -> UOp:
  out: UOp | None = None
  for term in sorted(terms, key=lambda t: t.order_key):
    coeff = terms[term]
    if coeff == 0: continue
    piece = term if coeff == 1 else UOp(Ops.MUL, dtype, (term, UOp.const(dtype, coeff)))
    out = piece if out is None else UOp(Ops.ADD, dtype, (out, piece))
  if out is None: return UOp.const(dtype, const)
  return out if const == 0 else UOp(Ops.ADD, dtype, (out, UOp.const(dtype, const)))


def _terms_bounds(terms: dict[UOp, int], const: int) -> tuple[float, float]:
  lo = hi = const
  for t, c in terms.items():
    a, b = t.vmin * c, t.vmax * c
    lo, hi = lo + min(a, b), hi + max(a, b)
  return lo, hi


def _affine_fits(terms: dict[UOp, int], const: int, dtype: DType) -> bool:
  """Whether the sum cannot leave dtype's range: only then does the wrapped value equal the integer sum, so // and %
  may be distributed over its terms (uint16 a-b is a + 65535*b: true mod 2**16, wrong for //3)."""
  lo, hi = _terms_bounds(terms, const)
  return dtype.min <= lo and hi <= dtype.max


def merge_div_mod_pairs(terms: dict[UOp, int]) -> dict[UOp, int]:
  """(y//c)*(k*c) + (y%c)*k is y*k."""
  terms = dict(terms)
  changed = True
  while changed:
    changed = False
    for t in list(terms):
      if t not in terms or t.op is not Ops.IDIV or t.src[1].op is not Ops.CONST: continue
      y, c = t.src[0], t.src[1].arg
      mod = UOp(Ops.MOD, t.dtype, (y, t.src[1]))
      if mod in terms and terms[t] == terms[mod] * c and y.vmin >= 0:
        k = terms.pop(mod)
        del terms[t]
        terms[y] = terms.get(y, 0) + k
        if terms[y] == 0: del terms[y]
        changed = True
  return terms


def simplify_sum(x: UOp) -> UOp | None:
  terms, const = affine_terms(x)
  terms = merge_div_mod_pairs(terms)
  rebuilt = build_affine(terms, const, x.dtype)
  return None if rebuilt is x else rebuilt


def _factored(terms: dict[UOp, int], const: int, c: int) -> tuple[int, UOp, UOp] | None:
  """x (terms + const, x >= 0) as a * big + small with 0 <= small < a, a > 1 a divisor of c: (a, big, small). A
  grouped conv's flat index g * 3136 + y * 56 + x + ... over 100352 (32 channels of 3136 a group) is g // 32 so, not a
  division of the whole sum per element."""
  for a in sorted({abs(v) for v in terms.values() if v and c % abs(v) == 0 and abs(v) > 1}, reverse=True):
    big = {t: v // a for t, v in terms.items() if v % a == 0}
    small = {t: v for t, v in terms.items() if v % a != 0}
    if not big or not small: continue
    lo, hi = _terms_bounds(small, const % a)
    if lo >= 0 and hi < a and all(t.vmin >= 0 for t in big):
      dtype = next(iter(terms)).dtype
      return a, build_affine(big, const // a, dtype), build_affine(small, const % a, dtype)
  return None


def simplify_div(x: UOp, d: UOp) -> UOp | None:
  c = d.arg
  if c <= 0 or x.vmin < 0: return None
  if c == 1: return x
  if x.vmax < c: return UOp.const(x.dtype, 0)
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and 0 < x.src[1].arg * c <= x.dtype.max:  # (y//a)//c is y//(a*c)
    return UOp(Ops.IDIV, x.dtype, (x.src[0], UOp.const(x.dtype, x.src[1].arg * c)))
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg % c == 0 and x.src[0].vmin >= 0:
    # (y%m)//c is (y//c)%(m//c) when c divides m
    y, m = x.src[0], x.src[1].arg
    return UOp(Ops.MOD, x.dtype, (UOp(Ops.IDIV, x.dtype, (y, d)), UOp.const(x.dtype, m // c)))
  terms, const = affine_terms(x)
  if not _affine_fits(terms, const, x.dtype): return None
  whole = {t: a // c for t, a in terms.items() if a % c == 0}
  rest = {t: a for t, a in terms.items() if a % c != 0}
  kq, kr = divmod(const, c)
  lo, hi = _terms_bounds(rest, kr)
  if lo >= 0 and hi < c: return build_affine(whole, kq, x.dtype)
  if (whole or kq) and lo >= 0:
    return UOp(Ops.ADD, x.dtype, (build_affine(whole, kq, x.dtype),
                                  UOp(Ops.IDIV, x.dtype, (build_affine(rest, kr, x.dtype), d))))
  if (factored := _factored(terms, const, c)) is not None:  # (a * big + small) // (a * k) is big // k
    a, big, _ = factored
    return UOp(Ops.IDIV, x.dtype, (big, UOp.const(x.dtype, c // a)))
  g = math.gcd(c, const, *terms.values())
  if g > 1 and all(t.vmin >= 0 for t in terms):
    return UOp(Ops.IDIV, x.dtype, (build_affine({t: a // g for t, a in terms.items()}, const // g, x.dtype),
                                   UOp.const(x.dtype, c // g)))
  return None


def simplify_mod(x: UOp, d: UOp) -> UOp | None:
  c = d.arg
  if c <= 0 or x.vmin < 0: return None
  if c == 1: return UOp.const(x.dtype, 0)
  if x.vmax < c: return x
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg % c == 0:  # (y%m)%c is y%c when c divides m
    return UOp(Ops.MOD, x.dtype, (x.src[0], d))
  terms, const = affine_terms(x)
  if not _affine_fits(terms, const, x.dtype): return None
  kept = {t: a % c for t, a in terms.items() if a % c != 0}
  if any(t.vmin < 0 for t in kept): return None
  lo, hi = _terms_bounds(kept, const % c)
  if lo >= 0 and hi < c: return build_affine(kept, const % c, x.dtype)
  # a coefficient above c/2 is one below 0: (16 * i + 1023 * j + 15) % 1024 is 16 * i - j + 15 (a flip's index in a
  # merged loop) where that stays within [0, c)
  balanced = {t: a - c if 2 * a > c else a for t, a in kept.items()}
  if balanced != kept:
    for k in (const % c, const % c - c):
      lo, hi = _terms_bounds(balanced, k)
      if lo >= 0 and hi < c: return build_affine(balanced, k, x.dtype)
  if (factored := _factored(kept, const % c, c)) is not None:  # (a * big + small) % (a * k) is (big % k) * a + small
    a, big, small = factored
    return UOp(Ops.ADD, x.dtype, (UOp(Ops.MUL, x.dtype, (UOp(Ops.MOD, x.dtype, (big, UOp.const(x.dtype, c // a))),
                                                         UOp.const(x.dtype, a))), small))
  if kept != terms or const % c != const:
    return UOp(Ops.MOD, x.dtype, (build_affine(kept, const % c, x.dtype), d))
  return None


def simplify_compare(x: UOp) -> UOp | None:
  a, b = x.src
  if not (_is_int(a) or a.dtype is dtypes.bool): return None
  (a0, a1), (b0, b1) = a.vmin_vmax, b.vmin_vmax
  if x.op is Ops.CMPLT:
    if a1 < b0: return UOp.const(dtypes.bool, True)
    if a0 >= b1: return UOp.const(dtypes.bool, False)
  if x.op is Ops.CMPNE and (a1 < b0 or b1 < a0): return UOp.const(dtypes.bool, True)
  if x.op is Ops.CMPEQ and (a1 < b0 or b1 < a0): return UOp.const(dtypes.bool, False)
  return None


def fold_constants(x: UOp) -> UOp | None:
  if not x.src or any(s.op is not Ops.CONST for s in x.src): return None
  if x.op is Ops.CAST: return UOp.const(x.dtype, round_to_dtype(x.src[0].arg, x.dtype) if dtypes.is_float(x.dtype)
                                        else _cast_value(x.src[0].arg, x.dtype))
  if x.op not in PYTHON_ALU and x.op not in (Ops.SHL, Ops.SHR): return None
  if x.op in (Ops.SHL, Ops.SHR) and not dtypes.is_int(x.dtype): return None
  if x.op in (Ops.IDIV, Ops.MOD) and x.src[1].arg == 0: return None  # division by zero is left to the device
  return UOp.const(x.dtype, exec_alu(x.op, x.dtype, [s.arg for s in x.src]))


def float_to_int_value(v: float, dtype: DType) -> int:
  """A float cast to an int dtype as the renderer does it (numpy's results on x86; see CStyleRenderer.float_to_int)."""
  def truncated(bits: int) -> int:
    limit = 2 ** (bits - 1)
    return -limit if v != v or v >= limit or v < -limit else math.trunc(v)
  if dtype is dtypes.uint64 and v >= 2 ** 63: return 0 if v >= 2 ** 64 else math.trunc(v)
  return dtypes.as_const(truncated(64 if dtype.itemsize == 8 or dtype is dtypes.uint32 else 32), dtype)


def _cast_value(v: Any, dtype: DType) -> Any:
  if dtype is dtypes.bool: return bool(v)
  if dtypes.is_int(dtype) and isinstance(v, float): return float_to_int_value(v, dtype)
  return dtypes.as_const(v, dtype)


def _bounds_in(cond: UOp) -> dict[UOp, tuple[float, float]] | None:
  """The interval each value is held to by a condition that is a comparison of it with a constant (`x < 8`,
  `7 < x`) or an AND of such comparisons; None for any other condition."""
  if cond.op is Ops.AND and cond.dtype is dtypes.bool:
    left, right = _bounds_in(cond.src[0]), _bounds_in(cond.src[1])
    if left is None or right is None: return None
    merged = dict(left)
    for x, (lo, hi) in right.items():
      old_lo, old_hi = merged.get(x, (-math.inf, math.inf))
      merged[x] = (max(lo, old_lo), min(hi, old_hi))
    return merged
  if cond.op is not Ops.CMPLT: return None
  a, b = cond.src
  if b.op is Ops.CONST and a.op is not Ops.CONST and _is_int(a): return {a: (-math.inf, b.arg - 1)}
  if a.op is Ops.CONST and b.op is not Ops.CONST and _is_int(b): return {b: (a.arg + 1, math.inf)}
  return None


def _disjoint(c1: UOp, c2: UOp) -> bool:
  """Whether no values make both conditions true: they hold one value to intervals that do not meet."""
  b1, b2 = _bounds_in(c1), _bounds_in(c2)
  if b1 is None or b2 is None: return False
  return any(max(b1[x][0], b2[x][0]) > min(b1[x][1], b2[x][1]) for x in b1.keys() & b2.keys())


def _select_chain(u: UOp, identity: UOp) -> list[tuple[UOp, UOp]] | None:
  """`c1 ? a : (c2 ? b : ... identity)` as [(c1, a), (c2, b), ...]; None when u is not such a chain."""
  chain = []
  while u.op is Ops.WHERE:
    chain.append((u.src[0], u.src[1]))
    u = u.src[2]
  return chain if chain and u is identity else None


def merge_disjoint_selects(x: UOp) -> UOp | None:
  """a + b where each is a select chain ending in the sum's identity (-0.0 for floats: x + -0.0 is x, for -0.0
  too; 0 for ints) and no two of their conditions can hold at once: one chain (a cat's pieces, each zero outside its
  part of the output, become one select per element instead of a sum of gated values)."""
  if x.dtype is dtypes.bool: return None
  identity = x.const_like(-0.0 if dtypes.is_float(x.dtype) else 0)
  a, b = (_select_chain(s, identity) for s in x.src)
  if a is None or b is None or not all(_disjoint(p, q) for p, _ in a for q, _ in b): return None
  out = identity
  for cond, value in reversed(a + b): out = cond.where(value, out)
  return out


# Constant patterns match by kind (see `same_arg`): an int pattern never matches a bool or float constant, and
# +0.0 never matches -0.0. Each identity below is exact for its dtypes, NaN, inf and signed zeros included.
symbolic = PatternMatcher([
  # an ALU op on constants is a constant
  (UPat(GroupOp.ALU | {Ops.CAST}, name="x"), fold_constants),
  # integers: adding or subtracting zero, multiplying or dividing by one change nothing; times zero is zero
  (UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(0)]), lambda x: x),
  (UPat(Ops.SUB, src=(UPat.var("x"), UPat.const(0))), lambda x: x),
  (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(1)]), lambda x: x),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.const(1))), lambda x: x),
  (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(0)], name="m"), lambda x, m: m.const_like(0)),
  # floats: x + -0.0, x - +0.0, x * 1.0 and x / 1.0 are x (but x + 0.0 is +0.0 for x = -0.0, and x * 0.0 is NaN
  # for inf and NaN, so neither folds)
  (UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(-0.0)]), lambda x: x),
  (UPat(Ops.SUB, src=(UPat.var("x"), UPat.const(0.0))), lambda x: x),
  (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(1.0)]), lambda x: x),
  (UPat(Ops.FDIV, src=(UPat.var("x"), UPat.const(1.0))), lambda x: x),
  # -(-x) is x (a sign flipped twice, for floats NaN and signed zeros included; for ints the wrap undone)
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
  # -(c ? -x : k) is c ? x : -k (both flips exact; a cat's -0.0 padding, `-(pad(-x))`, becomes one select)
  (UPat(Ops.NEG, src=(UPat(Ops.WHERE, src=(UPat.var("c"), UPat(Ops.NEG, src=(UPat.var("x"),)), UPat.cvar("k"))),)),
   lambda c, x, k: c.where(x, UOp(Ops.CONST, k.dtype, k.src, dtypes.as_const(-k.arg, k.dtype)))
   if k.dtype is not dtypes.bool else None),
  # sums of select chains with disjoint conditions are one chain (cat, pad by parts)
  (UPat(Ops.ADD, name="x", src=(UPat(Ops.WHERE), UPat(Ops.WHERE))), merge_disjoint_selects),
  # a cast to the same dtype is nothing
  (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype is x.dtype else None),
  # integer sums are kept in affine normal form, which cancels (y//c)*c + y%c
  (UPat((Ops.ADD, Ops.SUB), dtype=INT_TYPES, name="x"), simplify_sum),
  (UPat(Ops.MUL, dtype=INT_TYPES, src=[UPat((Ops.ADD, Ops.SUB)), UPat(Ops.CONST)], name="x"), simplify_sum),
  # division and remainder by a constant use the bounds of the dividend
  (UPat(Ops.IDIV, dtype=INT_TYPES, src=(UPat.var("x"), UPat.cvar("d"))), simplify_div),
  (UPat(Ops.MOD, dtype=INT_TYPES, src=(UPat.var("x"), UPat.cvar("d"))), simplify_mod),
  # comparisons decided by bounds are constants
  (UPat(GroupOp.Comparison, name="x"), simplify_compare),
  # boolean identities (bool constants only: the int 1 is not True, x & 1 keeps only the low bit)
  (UPat((Ops.MUL, Ops.AND), dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(False)], name="a"),
   lambda x, a: a.const_like(False)),
  (UPat((Ops.ADD, Ops.OR), dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(False)]), lambda x: x),
  (UPat((Ops.MUL, Ops.AND), dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(True)]), lambda x: x),
  # integer bitwise identities: x & 0 is 0, x | 0 and x ^ 0 are x
  (UPat(Ops.AND, src=[UPat.var("x"), UPat.const(0)], name="a"), lambda x, a: a.const_like(0)),
  (UPat((Ops.OR, Ops.XOR), src=[UPat.var("x"), UPat.const(0)]), lambda x: x),
  # x & x and x | x are x, for bools and ints alike
  (UPat((Ops.AND, Ops.OR), src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  # a bool made a number and then a condition again is the bool (a one-hot mask, int32, used in a where): cast back
  # to bool, or tested against zero (0, 0.0 and -0.0 all compare equal to it)
  (UPat(Ops.CAST, dtype=dtypes.bool, src=(UPat(Ops.CAST, src=(UPat.var("b", dtype=dtypes.bool),)),)), lambda b: b),
  (UPat(Ops.CMPNE, src=(UPat(Ops.CAST, src=(UPat.var("b", dtype=dtypes.bool),)), UPat.cvar("zero"))),
   lambda b, zero: b if zero.arg == 0 else None),
  # a WHERE with a known (bool) condition, or equal branches, is one branch
  (UPat(Ops.WHERE, src=(UPat.const(True), UPat.var("a"), UPat.var("b"))), lambda a, b: a),
  (UPat(Ops.WHERE, src=(UPat.const(False), UPat.var("a"), UPat.var("b"))), lambda a, b: b),
  (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
])
