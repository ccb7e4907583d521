"""The IR: hash-consing, pattern matching, symbolic simplification and the spec checker."""
import pytest
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.pattern import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.symbolic import symbolic
from tinycore.uop.spec import SpecError, check_spec


def rng(i, n): return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (i, "loop"))
def simplify(u): return graph_rewrite(u, symbolic)


def test_hash_consing_returns_the_same_node():
  a = UOp(Ops.CONST, dtypes.int32, (), 3)
  b = UOp(Ops.CONST, dtypes.int32, (), 3)
  assert a is b
  assert UOp(Ops.ADD, dtypes.int32, (a, b)) is UOp(Ops.ADD, dtypes.int32, (a, b))
  assert UOp(Ops.CONST, dtypes.int32, (), 4) is not a


def test_graph_rewrite_applies_rules_to_fixpoint():
  x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", 0, 10))
  expr = UOp(Ops.NEG, dtypes.int32, (UOp(Ops.NEG, dtypes.int32, (UOp(Ops.NEG, dtypes.int32,
                                                                     (UOp(Ops.NEG, dtypes.int32, (x,)),)),)),))
  double_neg = PatternMatcher([(UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("y"),)),)), lambda y: y)])
  assert graph_rewrite(expr, double_neg) is x


def test_pattern_matcher_tries_rules_in_list_order_when_a_function_repeats():
  # the same function in the first and the last rule: the rule list's order decides, not the function's identity
  x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", 0, 10))
  first, second = UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)
  def to_first(node): return first
  def to_second(node): return second
  rules = PatternMatcher([(UPat(Ops.NEG, name="node"), to_first), (UPat(Ops.NEG, name="node"), to_second),
                          (UPat(Ops.SQRT, name="node"), to_first)])
  assert graph_rewrite(UOp(Ops.NEG, dtypes.int32, (x,)), rules) is first
  # an any-op rule listed before an op rule wins over it too
  either = PatternMatcher([(UPat(Ops.NEG, name="node"), to_second), (UPat(None, name="node"), to_first),
                           (UPat(Ops.NEG, name="node"), to_second)])
  assert either.rewrite(UOp(Ops.NEG, dtypes.int32, (x,))) is second


def test_constant_folding_wraps_to_the_dtype():
  c = UOp(Ops.ADD, dtypes.uint8, (UOp.const(dtypes.uint8, 250), UOp.const(dtypes.uint8, 10)))
  assert simplify(c).arg == 4
  d = UOp(Ops.IDIV, dtypes.int32, (UOp.const(dtypes.int32, -7), UOp.const(dtypes.int32, 2)))
  assert simplify(d).arg == -3  # C truncation


def test_reshape_index_math_cancels():
  r0, r1 = rng(0, 5), rng(1, 4)
  flat = r0 * 4 + r1
  assert simplify(flat // 4) is r0
  assert simplify(flat % 4) is r1
  assert simplify((flat // 4) * 4 + flat % 4) is simplify(flat)


def test_division_that_does_not_cancel_is_kept():
  r0 = rng(0, 10)
  out = simplify((r0 * 3 + 1) // 4)
  assert out.op is Ops.IDIV


def test_bounds_decide_comparisons():
  r0 = rng(0, 5)
  assert simplify(r0 < 5).arg is True
  assert simplify(r0 < 0).arg is False
  assert simplify(r0 < 3).op is Ops.CMPLT


def test_spec_rejects_a_malformed_kernel():
  p = UOp(Ops.PARAM, dtypes.float32, (), 0)
  bad_store = UOp(Ops.STORE, None, (UOp(Ops.INDEX, dtypes.float32, (p, UOp.const(dtypes.index, 0))),
                                    UOp.const(dtypes.int32, 1)))
  with pytest.raises(SpecError, match="STORE"):
    check_spec(UOp(Ops.SINK, None, (bad_store,)), "kernel")


def test_spec_accepts_a_well_formed_kernel():
  p = UOp(Ops.PARAM, dtypes.float32, (), 0)
  store = UOp(Ops.STORE, None, (UOp(Ops.INDEX, dtypes.float32, (p, rng(0, 4))), UOp.const(dtypes.float32, 1.0)))
  check_spec(UOp(Ops.SINK, None, (store,)), "kernel")
