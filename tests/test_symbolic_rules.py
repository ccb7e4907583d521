"""The IR's integer bounds and the symbolic rewrite rules, one behaviour at a time, with the values they must give."""
import pytest
from tinycore.dtype import dtypes
from tinycore.schedule.copies import copy_to_anonymous_store
from tinycore.uop.ops import Ops, UOp
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
