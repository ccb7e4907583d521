"""The IR's integer bounds and the symbolic rewrite rules, one behaviour at a time, with the values they must give."""
import pytest
from tinycore.dtype import dtypes
from tinycore.schedule.copies import copy_to_anonymous_store
from tinycore.uop.ops import Ops, UOp, pretty
from tinycore.uop.pattern import graph_rewrite
from tinycore.uop.symbolic import symbolic
from tinycore.uop.spec import SpecError, check_spec


def rng(i, n): return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (i, "loop"))
def var(name, lo, hi): return UOp(Ops.DEFINE_VAR, dtypes.index, (), (name, lo, hi))
def simplify(u): return graph_rewrite(u, symbolic)


# ---------------------------------------------------------------------------- bounds (vmin_vmax)
def test_bounds_of_a_variable_are_its_declared_range():
  x = var("x", 2, 10)
  assert x.vmin_vmax == (2, 10)
  assert (x + 3).vmin_vmax == (5, 13)
  assert (x * -2).vmin_vmax == (-20, -4)
  assert simplify(x < 11).arg is True and simplify(x < 2).arg is False
  assert simplify(x < 5).op is Ops.CMPLT


@pytest.mark.parametrize("lo, hi, d, expected", [(0, 9, 4, (0, 2)), (-9, 9, 4, (-2, 2)), (5, 7, 2, (2, 3)),
                                                 (-7, -5, 2, (-3, -2))])
def test_bounds_of_division_by_a_constant_truncate_toward_zero(lo, hi, d, expected):
  assert (var("x", lo, hi) // d).vmin_vmax == expected


def test_bounds_of_remainder_by_a_constant():
  assert (var("x", 0, 9) % 4).vmin_vmax == (0, 3)
  assert (var("x", 0, 2) % 4).vmin_vmax == (0, 2)
  assert (var("x", -9, 9) % 4).vmin_vmax == (-3, 3)


def test_bounds_decide_comparisons_through_division():
  r0 = rng(0, 10)
  assert simplify((r0 // 4) < 3).arg is True
  assert simplify((r0 // 4) < 2).op is Ops.CMPLT
  assert simplify(((r0 // 4) * 4) < 9).arg is True


def test_bounds_of_a_bound_variable_are_the_variable_s():
  x = var("x", 1, 6)
  bound = UOp(Ops.BIND, dtypes.index, (x, UOp.const(dtypes.index, 3)))
  assert bound.vmin_vmax == (1, 6)


def test_the_buffer_of_a_pending_store_is_found_through_after():
  src = UOp.new_buffer("CPU", 6, dtypes.float32).reshape((2, 3))
  copy = UOp(Ops.COPY, dtypes.float32, (src,), "CPU:1")
  after = copy_to_anonymous_store(copy, src)
  buf = after.buffer_uop
  assert buf is not None and buf.op is Ops.BUFFER and buf.arg == 6 and buf.device == "CPU:1"


# ---------------------------------------------------------------------------- the spec checker
def _kernel_with(value: UOp) -> UOp:
  out = UOp(Ops.PARAM, value.dtype, (), 0)
  return UOp(Ops.SINK, None, (UOp(Ops.STORE, None, (UOp(Ops.INDEX, value.dtype, (out, rng(0, 4))), value)),))


I32, F32 = UOp.const(dtypes.int32, 1), UOp.const(dtypes.float32, 1.0)


@pytest.mark.parametrize("bad", [
  lambda: UOp(Ops.CMPLT, dtypes.bool, (I32, F32)).cast(dtypes.int32),           # compares two dtypes
  lambda: UOp(Ops.CMPLT, dtypes.int32, (I32, I32)),                             # a comparison that is not bool
  lambda: UOp(Ops.WHERE, dtypes.int32, (I32, I32, I32)),                        # a condition that is not bool
  lambda: UOp(Ops.ADD, dtypes.int32, (I32, UOp.const(dtypes.int64, 1))),        # mixed operand dtypes
  lambda: UOp(Ops.CAST, dtypes.int32, (F32, F32)),                              # a cast of two values
  lambda: UOp(Ops.BITCAST, dtypes.int32, (F32, F32)),                           # a bitcast of two values
], ids=["cmp-dtypes", "cmp-not-bool", "where-cond", "add-dtypes", "cast-arity", "bitcast-arity"])
def test_spec_rejects_malformed_alu_nodes(bad):
  with pytest.raises(SpecError):
    check_spec(_kernel_with(bad()), "kernel")


@pytest.mark.parametrize("good", [
  lambda: UOp(Ops.CMPLT, dtypes.bool, (I32, I32)).cast(dtypes.int32),
  lambda: UOp(Ops.WHERE, dtypes.int32, (UOp.const(dtypes.bool, True), I32, I32)),
  lambda: UOp(Ops.SHL, dtypes.int32, (I32, UOp.const(dtypes.uint32, 2))),
  lambda: UOp(Ops.CAST, dtypes.int32, (F32,)),
  lambda: UOp(Ops.BITCAST, dtypes.int32, (F32,)),
], ids=["cmp", "where", "shift", "cast", "bitcast"])
def test_spec_accepts_well_formed_alu_nodes(good):
  check_spec(_kernel_with(good()), "kernel")


def test_tensor_spec_rejects_a_movement_that_changes_dtype_or_has_no_tuple_arg():
  buf = UOp.new_buffer("CPU", 6, dtypes.int32)
  check_spec(UOp(Ops.RESHAPE, dtypes.int32, (buf,), (2, 3)), "tensor")
  with pytest.raises(SpecError, match="RESHAPE"):
    check_spec(UOp(Ops.RESHAPE, dtypes.float32, (buf,), (2, 3)), "tensor")
  with pytest.raises(SpecError, match="RESHAPE"):
    check_spec(UOp(Ops.RESHAPE, dtypes.int32, (buf,), 6), "tensor")


def test_tensor_spec_rejects_a_reduce_with_a_bad_op_axes_or_dtype():
  src = UOp.new_buffer("CPU", 6, dtypes.int32).reshape((2, 3))
  check_spec(UOp(Ops.REDUCE_AXIS, dtypes.int32, (src,), (Ops.ADD, (1,))), "tensor")
  for dtype, arg in ((dtypes.int32, (Ops.SUB, (1,))), (dtypes.int32, (Ops.ADD, 1)), (dtypes.float32, (Ops.MAX, (1,)))):
    with pytest.raises(SpecError, match="REDUCE_AXIS"):
      check_spec(UOp(Ops.REDUCE_AXIS, dtype, (src,), arg), "tensor")


# ---------------------------------------------------------------------------- affine normal form
def test_equal_sums_in_any_order_build_the_same_node_ranges_first():
  r0, r1 = rng(0, 5), rng(1, 7)
  a = simplify((r1 // 2) + r0 + 3)
  assert a is simplify(r0 + 3 + (r1 // 2)) is simplify(3 + (r1 // 2) + r0)
  # r0 + (r1 // 2) + 3: the loop variable comes first, the constant last
  assert a.op is Ops.ADD and a.src[1].arg == 3
  assert a.src[0].src[0] is r0 and a.src[0].src[1].op is Ops.IDIV



def test_a_sum_orders_a_term_whose_sources_are_shared_in_time_linear_in_its_nodes():
  # a binary search's index reads the steps before it, each twice: as a tree, this term has 2**60 paths
  term = var("x", 0, 3)
  for _ in range(60): term = term * term
  a = simplify(rng(0, 5) + term + 3)
  assert a.op is Ops.ADD and a.src[1].arg == 3 and a.src[0].src[1] is term

# ---------------------------------------------------------------------------- constant folding
@pytest.mark.parametrize("op, dtype, args, expected", [
  (Ops.POW, dtypes.float32, (0.0, 0.5), 0.0),        # 0 to a fractional power is 0, not nan
  (Ops.POW, dtypes.float32, (4.0, 0.5), 2.0),
  (Ops.POW, dtypes.float32, (-8.0, 2.0), 64.0),      # a negative base with an integer exponent is defined
  (Ops.MAX, dtypes.int32, (-3, 2), 2),
  (Ops.SHR, dtypes.int32, (-8, 1), -4),
  (Ops.MOD, dtypes.int32, (-7, 2), -1),              # C remainder takes the dividend's sign
  (Ops.SUB, dtypes.uint8, (3, 5), 254),              # wraps to the dtype
  (Ops.FDIV, dtypes.float32, (1.0, 0.0), float("inf")),
  (Ops.FDIV, dtypes.float32, (-1.0, 0.0), float("-inf")),
])
def test_constant_folding_gives_the_device_s_value(op, dtype, args, expected):
  folded = simplify(UOp(op, dtype, tuple(UOp.const(dtype, a) for a in args)))
  assert folded.op is Ops.CONST and folded.arg == expected


def test_constant_folding_keeps_nan_for_undefined_powers():
  folded = simplify(UOp(Ops.POW, dtypes.float32, (UOp.const(dtypes.float32, -8.0), UOp.const(dtypes.float32, 0.5))))
  assert folded.op is Ops.CONST and folded.arg != folded.arg


def test_a_constant_on_the_left_of_a_product_is_a_coefficient():
  r0, r1 = rng(0, 5), rng(1, 4)
  assert simplify((4 * r0 + r1) // 4) is r0
  assert simplify((r1 + 4 * r0) % 4) is r1
  assert simplify(3 * (r0 + 1) - 3 * r0).arg == 3


# ---------------------------------------------------------------------------- division and remainder rules
def test_remainder_then_division_becomes_division_then_remainder():
  r0 = rng(0, 100)
  out = simplify((r0 % 8) // 2)  # (y % 8) // 2 is (y // 2) % 4
  assert out.op is Ops.MOD and out.src[1].arg == 4
  assert out.src[0].op is Ops.IDIV and out.src[0].src[0] is r0 and out.src[0].src[1].arg == 2


def test_a_common_factor_of_dividend_and_divisor_cancels():
  r0 = rng(0, 10)
  out = simplify((r0 * 4 + 2) // 6)  # (4*r0 + 2) // 6 is (2*r0 + 1) // 3
  assert out.op is Ops.IDIV and out.src[1].arg == 3
  assert out.src[0] is simplify(r0 * 2 + 1)


def test_a_division_of_a_sum_whose_low_terms_stay_below_a_coefficient_divides_the_high_terms_alone():
  """A grouped conv's flat index g * 3136 + y * 56 + x over a group's 100352 (32 channels of 3136): the group is
  g // 32, computed once per g, not a division of the whole sum per element; its remainder alike."""
  g, y, x = rng(0, 64), rng(1, 56), rng(2, 56)
  flat = g * 3136 + y * 56 + x
  out = simplify(flat // 100352)
  assert out.op is Ops.IDIV and out.src[0] is g and out.src[1].arg == 32
  rest = simplify(flat % 100352)
  assert rest is simplify((g % 32) * 3136 + y * 56 + x)
  for gv, yv, xv in [(0, 0, 0), (31, 55, 55), (32, 0, 0), (63, 55, 55), (40, 7, 3)]:
    value = gv * 3136 + yv * 56 + xv
    bound = {g: gv, y: yv, x: xv}
    assert simplify(out.substitute({k: UOp.const(dtypes.index, v) for k, v in bound.items()})).arg == value // 100352
    assert simplify(rest.substitute({k: UOp.const(dtypes.index, v) for k, v in bound.items()})).arg == value % 100352
  assert simplify((y * 56 + x + 56) // 112) is simplify((y + 1) // 2)  # the constant joins the high part
  assert simplify((y * 56 + x * 2) // 112).op is Ops.IDIV and simplify((y * 56 + x * 2) // 112).src[1].arg == 56


def test_a_remainder_whose_coefficients_are_small_negative_residues_is_the_sum_itself():
  """A flip inside a merged loop: (16 * i + 1023 * j + 15) % 1024 over i < 64, j < 16 is 16 * i - j + 15, which
  stays within [0, 1024): no remainder per element (a sort's mirrored stage)."""
  i, j = rng(0, 64), rng(1, 16)
  out = simplify((i * 16 + j * 1023 + 15) % 1024)
  assert out is simplify(i * 16 - j + 15)
  for iv, jv in [(0, 0), (0, 15), (63, 0), (63, 15), (5, 7)]:
    bound = {i: UOp.const(dtypes.index, iv), j: UOp.const(dtypes.index, jv)}
    assert simplify(out.substitute(bound)).arg == (iv * 16 + jv * 1023 + 15) % 1024
  # where the balanced sum would leave [0, c) the remainder stays
  k = rng(2, 32)
  assert simplify((k * 1023 + 15) % 1024).op is Ops.MOD


# ---------------------------------------------------------------------------- identities (integers and booleans)
def test_integer_identities():
  r0 = rng(0, 10)
  zero, one = UOp.const(dtypes.index, 0), UOp.const(dtypes.index, 1)
  assert simplify(UOp(Ops.ADD, dtypes.index, (r0, zero))) is r0
  assert simplify(UOp(Ops.ADD, dtypes.index, (zero, r0))) is r0
  assert simplify(UOp(Ops.SUB, dtypes.index, (r0, zero))) is r0
  assert simplify(UOp(Ops.MUL, dtypes.index, (one, r0))) is r0
  assert simplify(UOp(Ops.IDIV, dtypes.index, (r0, one))) is r0
  assert simplify(UOp(Ops.MUL, dtypes.index, (r0, zero))).arg == 0
  assert simplify(UOp(Ops.CAST, dtypes.index, (r0,))) is r0


def test_a_float_times_zero_is_not_zero():
  x = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, dtypes.float32, (UOp(Ops.PARAM, dtypes.float32, (), 0),
                                                                     rng(0, 4))),))
  product = UOp(Ops.MUL, dtypes.float32, (x, UOp.const(dtypes.float32, 0.0)))
  assert simplify(product) is product  # inf * 0 and nan * 0 are nan


def test_boolean_identities():
  cond = rng(0, 10) < 5
  true, false = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
  assert simplify(UOp(Ops.AND, dtypes.bool, (cond, true))) is cond
  assert simplify(UOp(Ops.AND, dtypes.bool, (false, cond))) is false
  assert simplify(UOp(Ops.AND, dtypes.bool, (cond, cond))) is cond
  assert simplify(UOp(Ops.OR, dtypes.bool, (cond, false))) is cond


def test_where_with_a_known_condition_or_equal_branches_is_one_branch():
  cond = rng(0, 10) < 5
  a, b = UOp.const(dtypes.int32, 7), UOp.const(dtypes.int32, 9)
  assert simplify(UOp(Ops.WHERE, dtypes.int32, (UOp.const(dtypes.bool, True), a, b))) is a
  assert simplify(UOp(Ops.WHERE, dtypes.int32, (UOp.const(dtypes.bool, False), a, b))) is b
  assert simplify(UOp(Ops.WHERE, dtypes.int32, (cond, a, a))) is a
  kept = UOp(Ops.WHERE, dtypes.int32, (cond, a, b))
  assert simplify(kept) is kept


# ---------------------------------------------------------------------------- building index expressions
def test_operators_build_the_nodes_they_name():
  r0 = rng(0, 10)
  lt, ne = r0 < 3, r0.ne(4)
  assert (lt.op, lt.dtype, lt.src[0], lt.src[1].arg) == (Ops.CMPLT, dtypes.bool, r0, 3)
  assert (ne.op, ne.dtype, ne.src[1].arg) == (Ops.CMPNE, dtypes.bool, 4)
  both = lt & ne
  assert (both.op, both.dtype, both.src) == (Ops.AND, dtypes.bool, (lt, ne))
  picked = lt.where(r0, 7)
  assert (picked.op, picked.dtype, picked.src[0], picked.src[1], picked.src[2].arg) == (Ops.WHERE, dtypes.index, lt,
                                                                                      r0, 7)
  assert ((r0 * 3) // 2 % 4 - 1 + 2).op is Ops.ADD and (2 - r0).src[0].arg == 2


def test_bounds_of_where_cover_both_branches():
  r0 = rng(0, 10)
  assert (r0 < 5).where(r0 + 20, r0 * -1).vmin_vmax == (-9, 29)
  assert (r0 < 5).where(3, 8).vmin_vmax == (3, 8)


@pytest.mark.parametrize("value, expected", [(1 + 0.75 * 2 ** -7, 1 + 2 ** -7), (1 + 2 ** -8, 1.0),
                                             (1 + 3 * 2 ** -8, 1 + 2 ** -6), (-(1 + 0.75 * 2 ** -7), -(1 + 2 ** -7)),
                                             (3.0, 3.0)])
def test_a_constant_cast_to_bfloat16_rounds_to_nearest_even(value, expected):
  folded = simplify(UOp(Ops.CAST, dtypes.bfloat16, (UOp.const(dtypes.float32, value),)))
  assert folded.op is Ops.CONST and folded.arg == expected


def test_spec_rejects_an_arange_that_is_negative_or_not_an_int():
  device = UOp(Ops.DEVICE, None, (), "CPU")
  check_spec(UOp(Ops.ARANGE, dtypes.int32, (device,), 5), "tensor")
  for arg in (-1, 2.5):
    with pytest.raises(SpecError, match="ARANGE"):
      check_spec(UOp(Ops.ARANGE, dtypes.int32, (device,), arg), "tensor")


def test_a_printed_graph_shows_its_last_nodes_by_number():
  node = rng(0, 10)
  for i in range(80): node = node + i + 1
  lines = pretty(node).splitlines()
  assert len(lines) == 60 and lines[-1].startswith("%59 = ADD")
  assert pretty(rng(0, 4), limit=1) == "%0 = RANGE (0, 'loop') (…) : dtypes.int64"


def test_a_bool_made_a_number_and_a_condition_again_is_the_bool():
  picked = UOp(Ops.CMPEQ, dtypes.bool, (rng(0, 10), UOp.const(dtypes.index, 3)))
  assert simplify(picked.cast(dtypes.int32).cast(dtypes.bool)) is picked
  assert simplify(UOp(Ops.CMPNE, dtypes.bool, (picked.cast(dtypes.int32), UOp.const(dtypes.int32, 0)))) is picked
  assert simplify(UOp(Ops.CMPNE, dtypes.bool, (picked.cast(dtypes.float32), UOp.const(dtypes.float32, -0.0)))) is picked
  # a number that was not a bool keeps its test: 2 != 0 is not 2
  two = rng(1, 5).cast(dtypes.int32)
  assert simplify(UOp(Ops.CMPNE, dtypes.bool, (two, UOp.const(dtypes.int32, 0)))).op is Ops.CMPNE
  assert simplify(UOp(Ops.CMPNE, dtypes.bool, (picked.cast(dtypes.int32), UOp.const(dtypes.int32, 1)))).op is Ops.CMPNE


def test_a_double_negation_is_the_value():
  x = rng(0, 10).cast(dtypes.float32)
  assert simplify(UOp(Ops.NEG, dtypes.float32, (UOp(Ops.NEG, dtypes.float32, (x,)),))) is x
  i = rng(1, 10).cast(dtypes.int32)
  assert simplify(UOp(Ops.NEG, dtypes.int32, (UOp(Ops.NEG, dtypes.int32, (i,)),))) is i


def neg(u): return UOp(Ops.NEG, u.dtype, (u,))


def test_a_negated_select_of_a_negation_is_one_select():
  # -(c ? -x : 0.0) is c ? x : -0.0 (a cat piece padded with -0.0 as -(pad(-x)))
  r = rng(0, 16)
  x = r.cast(dtypes.float32)
  folded = simplify(neg((r < 8).where(neg(x), UOp.const(dtypes.float32, 0.0))))
  assert folded.op is Ops.WHERE and folded.src[1] is x and str(folded.src[2].arg) == "-0.0"


def test_sums_of_selects_with_disjoint_conditions_are_one_chain():
  r = rng(0, 16)
  x, y, z = (r.cast(dtypes.float32) * k for k in (1.0, 2.0, 3.0))
  zero = UOp.const(dtypes.float32, -0.0)
  def above(k): return UOp.const(dtypes.index, k) < r
  pieces = [(r < 4).where(x, zero), (above(3) & (r < 12)).where(y, zero), above(11).where(z, zero)]
  merged = simplify(pieces[0] + pieces[1] + pieces[2])
  assert [u.op for u in (merged, merged.src[2], merged.src[2].src[2])] == [Ops.WHERE] * 3
  assert merged.src[2].src[2].src[2] is zero  # c1 ? x : (c2 ? y : (c3 ? z : -0.0))
  # conditions that can hold together stay a sum, and so do selects whose other branch is +0.0 (x + 0.0 is not x)
  assert simplify((r < 8).where(x, zero) + above(3).where(y, zero)).op is Ops.ADD
  plus = UOp.const(dtypes.float32, 0.0)
  assert simplify((r < 4).where(x, plus) + above(11).where(z, plus)).op is Ops.ADD
