"""Random tensor programs (movement ops, elementwise ops, reductions, assigns into views) against numpy.

Float programs start from random data that is sometimes salted with NaN, inf and -0.0; integer programs run in every
integer dtype with values across the whole range, so adds and multiplies overflow (and must wrap like numpy's),
shift counts reach past the bit width or are negative, and divisors include 0 and -1.

Each run draws a fresh seed (printed on failure; rerun with TINYCORE_FUZZ_SEED=<seed>); TINYCORE_FUZZ_PROGRAMS sets
how many programs of each kind (default 60 float and 40 integer, about 30 s with a cold kernel cache).
"""
import os
import random
import numpy as np
import pytest
from tinycore import Tensor

PROGRAMS = int(os.environ.get("TINYCORE_FUZZ_PROGRAMS", "60"))
INT_PROGRAMS = int(os.environ.get("TINYCORE_FUZZ_PROGRAMS", "40"))
SPECIAL_FLOATS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], np.float32)


def salted(rng: random.Random, values: np.ndarray) -> np.ndarray:
  """values with about a quarter of the elements replaced by NaN, +-inf or +-0.0, in a third of the calls."""
  if rng.random() > 1 / 3 or not values.size: return values
  picker = np.random.default_rng(rng.randrange(1 << 30))
  where = picker.random(values.shape) < 0.25
  return np.where(where, picker.choice(SPECIAL_FLOATS, values.shape), values).astype(np.float32)


class Program:
  """A tinycore tensor and the numpy array it must equal, transformed together."""

  def __init__(self, rng: random.Random, shape: tuple[int, ...]):
    self.rng = rng
    self.ref = salted(rng, np.random.default_rng(rng.randrange(1 << 30)).uniform(-2, 2, shape).astype(np.float32))
    self.t = Tensor(self.ref.copy())
    self.reduced = False  # after a reduction the sign of a zero depends on the summation order: not compared

  OPS = ["permute", "reshape", "pad", "shrink", "flip", "expand", "unary", "binary", "reduce", "slice", "contiguous",
         "move", "cat", "where"]

  def step(self) -> str: return self.apply(self.rng.choice(self.OPS))

  def apply(self, op: str) -> str:
    r, t, ref = self.rng, self.t, self.ref
    if op == "permute" and ref.ndim > 1:
      order = list(range(ref.ndim))
      r.shuffle(order)
      self.t, self.ref = t.permute(order), ref.transpose(order)
    elif op == "reshape" and ref.size > 1:
      sizes = [d for d in range(1, ref.size + 1) if ref.size % d == 0]
      first = r.choice(sizes)
      shape = (first, ref.size // first) if r.random() < 0.7 else (ref.size,)
      self.t, self.ref = t.reshape(shape), ref.reshape(shape)
    elif op == "pad" and ref.ndim:
      pads = tuple((r.randrange(3), r.randrange(3)) for _ in range(ref.ndim))
      self.t, self.ref = t.pad(pads), np.pad(ref, pads)
    elif op == "shrink" and ref.ndim:
      bounds = []
      for s in ref.shape:
        lo = r.randrange(s) if s else 0
        bounds.append((lo, r.randrange(lo + 1, s + 1) if s else 0))
      self.t, self.ref = t.shrink(tuple(bounds)), ref[tuple(slice(lo, hi) for lo, hi in bounds)]
    elif op == "flip" and ref.ndim:
      axis = r.randrange(ref.ndim)
      self.t, self.ref = t.flip(axis), np.flip(ref, axis)
    elif op == "expand" and ref.ndim and ref.size <= 4096:
      shape = (r.randrange(1, 4),) + ref.shape
      self.t, self.ref = t.expand(shape), np.broadcast_to(ref, shape)
    elif op == "unary":
      name, fn, npfn = r.choice([("neg", lambda x: -x, np.negative),
                                 ("relu", lambda x: x.relu(), lambda x: np.maximum(x, 0)),
                                 ("sin", lambda x: x.sin(), np.sin),
                                 ("exp2", lambda x: (x * 0.5).exp2(), lambda x: np.exp2(x * 0.5)),
                                 ("square", lambda x: x * x, np.square),
                                 ("abs", lambda x: x.abs(), np.abs),
                                 ("clip", lambda x: x.clip(-1, 1), lambda x: np.clip(x, -1, 1)),
                                 ("plus_zero", lambda x: x + 0, lambda x: x + np.float32(0)),
                                 ("times_one", lambda x: x * 1, lambda x: x * np.float32(1)),
                                 ("times_zero", lambda x: x * 0, lambda x: x * np.float32(0))])
      with np.errstate(all="ignore"): self.t, self.ref = fn(t), npfn(ref).astype(np.float32)
      return name
    elif op == "binary":
      other = self.ref_like()
      name, fn, npfn = r.choice([("add", lambda a, b: a + b, np.add), ("sub", lambda a, b: a - b, np.subtract),
                                 ("mul", lambda a, b: a * b, np.multiply), ("maximum", Tensor.maximum, np.maximum),
                                 ("minimum", Tensor.minimum, np.minimum)])
      with np.errstate(all="ignore"): self.t, self.ref = fn(t, Tensor(other)), npfn(ref, other).astype(np.float32)
      return name
    elif op == "reduce" and ref.ndim and ref.size:
      axis = r.randrange(ref.ndim)
      keep = r.random() < 0.5
      self.reduced = True
      with np.errstate(all="ignore"): return self.apply_reduce(axis, keep)
    elif op == "slice" and ref.ndim and ref.shape[0] > 1:
      step = r.choice([1, 2, -1, -2])
      self.t, self.ref = t[::step], ref[::step]
    elif op == "contiguous":
      self.t = t.contiguous()
    elif op == "move":  # to another device and back: two COPY calls (or none for views that fuse away)
      self.t = t.to("CPU:1").to(t.device)
    elif op == "cat" and ref.ndim:
      axis = r.randrange(ref.ndim)
      other = self.ref_like()
      self.t, self.ref = t.cat(Tensor(other), dim=axis), np.concatenate([ref, other], axis)
    elif op == "where":
      other = self.ref_like()
      self.t, self.ref = (t > 0).where(t, Tensor(other)), np.where(ref > 0, ref, other)
    return op

  def apply_reduce(self, axis: int, keep: bool) -> str:
    t, ref = self.t, self.ref
    if self.rng.random() < 0.5:
      self.t, self.ref = t.sum(axis, keepdim=keep), ref.sum(axis, keepdims=keep, dtype=np.float32)
    else: self.t, self.ref = t.max(axis, keepdim=keep), ref.max(axis, keepdims=keep)
    return "reduce"

  def ref_like(self) -> np.ndarray:
    return salted(self.rng, np.random.default_rng(self.rng.randrange(1 << 30)).uniform(-2, 2, self.ref.shape)
                  .astype(np.float32))


INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


def int_values(rng: random.Random, shape: tuple[int, ...], dtype: str) -> np.ndarray:
  """Integers of `dtype` across its whole range, small ones, and its extremes, mixed."""
  picker, info = np.random.default_rng(rng.randrange(1 << 30)), np.iinfo(dtype)
  wide = picker.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
  small = picker.integers(max(info.min, -9), 10, shape).astype(dtype)
  edges = picker.choice(np.array([info.min, info.max, info.min + 1, info.max - 1, 0], dtype), shape)
  kind = picker.integers(0, 3, shape)
  return np.where(kind == 0, wide, np.where(kind == 1, small, edges)).astype(dtype)


def int_binary_ops():
  """(name, tinycore op, numpy op, how to draw the second operand) for integer programs."""
  return [("add", lambda a, b: a + b, np.add, "any"), ("sub", lambda a, b: a - b, np.subtract, "any"),
          ("mul", lambda a, b: a * b, np.multiply, "any"), ("and", lambda a, b: a & b, np.bitwise_and, "any"),
          ("or", lambda a, b: a | b, np.bitwise_or, "any"), ("xor", lambda a, b: a ^ b, np.bitwise_xor, "any"),
          ("shl", lambda a, b: a << b, np.left_shift, "count"), ("shr", lambda a, b: a >> b, np.right_shift, "count"),
          ("floordiv", lambda a, b: a // b, np.floor_divide, "divisor"), ("mod", lambda a, b: a % b, np.mod, "divisor"),
          ("maximum", Tensor.maximum, np.maximum, "any"), ("minimum", Tensor.minimum, np.minimum, "any")]


class IntProgram(Program):
  """An integer program: wrapping arithmetic, bitwise ops, shifts by any count, floor division and modulo by any
  divisor (0 gives 0, like numpy), reductions in the dtype tinycore accumulates in."""
  OPS = ["permute", "reshape", "pad", "shrink", "flip", "slice", "contiguous", "cat", "where", "unary", "binary",
         "binary", "binary", "scalar", "reduce"]

  def __init__(self, rng: random.Random, shape: tuple[int, ...]):
    self.rng, self.dtype, self.reduced = rng, rng.choice(INT_DTYPES), True
    self.ref = int_values(rng, shape, self.dtype)
    self.t = Tensor(self.ref.copy())

  def ref_like(self) -> np.ndarray: return int_values(self.rng, self.ref.shape, self.ref.dtype.name)

  def operand(self, kind: str) -> np.ndarray:
    dtype, picker = self.ref.dtype, np.random.default_rng(self.rng.randrange(1 << 30))
    if kind == "count":  # shift counts past the width, and negative ones (huge when read as unsigned)
      bits = dtype.itemsize * 8
      return picker.integers(-2, 2 * bits + 2, self.ref.shape).astype(dtype)
    if kind == "divisor":  # zeros and -1 among small and wide divisors
      edges = np.array([0, -1, 1, 2, -3], np.int64).astype(dtype)
      return np.where(picker.random(self.ref.shape) < 0.5, picker.choice(edges, self.ref.shape), self.ref_like())
    return self.ref_like()

  def apply(self, op: str) -> str:
    r, t, ref = self.rng, self.t, self.ref
    with np.errstate(all="ignore"):
      if op == "unary":
        name, fn, npfn = r.choice([("neg", lambda x: -x, np.negative), ("invert", lambda x: ~x, np.invert),
                                   ("abs", lambda x: x.abs(), np.abs)])
        self.t, self.ref = fn(t), npfn(ref)
        return name
      if op == "binary":
        name, fn, npfn, kind = r.choice(int_binary_ops())
        other = self.operand(kind)
        self.t, self.ref = fn(t, Tensor(other)), npfn(ref, other)
        return name
      if op == "scalar":  # a Python int takes the tensor's dtype, as numpy's NEP 50 does
        name, fn, npfn, _ = r.choice(int_binary_ops())
        value = r.choice([0, 1, 3, 7])
        self.t, self.ref = fn(t, value), npfn(ref, ref.dtype.type(value))
        return f"{name}_scalar{value}"
      if op == "reduce" and ref.ndim and ref.size:
        axis, keep = r.randrange(ref.ndim), r.random() < 0.5
        if r.random() < 0.5:  # wrapping sums are exact in any order
          out = t.sum(axis, keepdim=keep)
          self.t, self.ref = out, ref.sum(axis, keepdims=keep, dtype=np.dtype(out.dtype.name))
        else: self.t, self.ref = t.max(axis, keepdim=keep), ref.max(axis, keepdims=keep)
        return op
    return super().apply(op)


def test_random_integer_programs_match_numpy():
  seed = int(os.environ.get("TINYCORE_FUZZ_SEED", random.randrange(1 << 30)))
  rng = random.Random(seed)
  for index in range(INT_PROGRAMS):
    program = IntProgram(rng, tuple(rng.randrange(1, 6) for _ in range(rng.randrange(1, 4))))
    steps = [program.dtype] + [program.step() for _ in range(rng.randrange(2, 9))]
    try:
      actual = program.t.numpy()
      assert actual.dtype == program.ref.dtype, f"dtype {actual.dtype}, numpy has {program.ref.dtype}"
      np.testing.assert_array_equal(actual, program.ref)
    except AssertionError as error:
      pytest.fail(f"program {index} of seed {seed} (TINYCORE_FUZZ_SEED={seed}): steps {steps}\n{error}")


def test_random_programs_match_numpy():
  seed = int(os.environ.get("TINYCORE_FUZZ_SEED", random.randrange(1 << 30)))
  rng = random.Random(seed)
  for index in range(PROGRAMS):
    program = Program(rng, tuple(rng.randrange(1, 7) for _ in range(rng.randrange(1, 4))))
    steps = [program.step() for _ in range(rng.randrange(2, 12))]
    if rng.random() < 0.3 and program.ref.ndim and program.ref.shape[0] > 2:
      # assign into a view of a realized copy: the rest must stay, the view must take the value
      base = program.t.contiguous().realize()
      expected = program.ref.copy()
      value = np.full(expected[1:2].shape, 7.0, np.float32)
      base[1:2].assign(Tensor(value))
      expected[1:2] = value
      program.t, program.ref = base, expected
      steps.append("assign")
    try:
      actual = program.t.numpy()
      np.testing.assert_allclose(actual, program.ref, rtol=1e-4, atol=1e-4)  # NaN where numpy has NaN, inf exact
      if not program.reduced:
        zeros = (actual == 0) & (program.ref == 0)
        np.testing.assert_equal(np.signbit(actual[zeros]), np.signbit(program.ref[zeros]), err_msg="signed zeros")
    except AssertionError as error:
      pytest.fail(f"program {index} of seed {seed} (TINYCORE_FUZZ_SEED={seed}): steps {steps}\n{error}")


def replayed_program(seed: int, index: int) -> tuple[Program, list[str]]:
  """Program `index` of `seed` as test_random_programs_match_numpy draws it (its steps; no assign), and its steps."""
  rng = random.Random(seed)
  for _ in range(index + 1):
    program = Program(rng, tuple(rng.randrange(1, 7) for _ in range(rng.randrange(1, 4))))
    steps = [program.step() for _ in range(rng.randrange(2, 12))]
    rng.random()  # (the draw that decides the assign in test_random_programs_match_numpy)
  return program, steps


def test_a_kernel_cut_at_its_gates_keeps_every_buffer_parameter():
  """Seed 357380630, program 154 (pad, shrink, cat, pad, assign into a view): cut at its gates (the CPU's
  split_at_gates) the kernel's last piece no longer read one input; the parameter must stay, or every later buffer
  is passed one position off (the output was wrong where a piece read the next buffer)."""
  program, steps = replayed_program(357380630, 154)
  np.testing.assert_allclose(program.t.numpy(), program.ref, rtol=1e-4, atol=1e-4, err_msg=str(steps))


def test_a_written_out_loop_keeps_every_buffer_parameter():
  """Seed 840566340, program 15 (times zero twice, reshape, expand, pad, shrink, where, pad, sub): a loop of 3 inside
  a remainder, written out (unroll_wrapping), decided the gate of a load multiplied by zero, and that buffer was
  read no more; its parameter must stay (as a cut at the gates keeps it) or the later buffers are read one off."""
  program, steps = replayed_program(840566340, 15)
  np.testing.assert_allclose(program.t.numpy(), program.ref, rtol=1e-4, atol=1e-4, err_msg=str(steps))


@pytest.mark.parametrize("cols", [2, 5])
def test_minimum_of_a_padded_cat_keeps_signed_zeros(cols):
  """Seed 704359956, program 13: a kernel cut at the gates of a padded cat had min(pad's 0.0, -0.0) in a piece of
  its own as -max(-0.0, -y); clang (LLVM 14) folded that to +0.0. Minimums are now selects without negations."""
  rng = np.random.default_rng(cols)
  a, b = rng.uniform(-2, 2, (3, cols)).astype(np.float32), rng.uniform(-2, 2, (2, cols)).astype(np.float32)
  pads = ((1, 1), (1, 2))
  padded = np.pad(np.concatenate([a, b]), pads)
  other = np.where(rng.random(padded.shape) < 0.5, -0.0, 0.0).astype(np.float32)
  for got, want in [(Tensor(a).cat(Tensor(b)).pad(pads).minimum(Tensor(other)), np.minimum(padded, other)),
                    (Tensor(other).minimum(Tensor(a).cat(Tensor(b)).pad(pads)), np.minimum(other, padded))]:
    got = got.numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
