"""Random tensor programs (movement ops, elementwise ops, reductions, assigns into views) against numpy.

Each run draws a fresh seed (printed on failure; rerun with TINYCORE_FUZZ_SEED=<seed>); TINYCORE_FUZZ_PROGRAMS sets
how many programs (default 60, a few seconds once kernels are cached).
"""
import os
import random
import numpy as np
import pytest
from tinycore import Tensor

PROGRAMS = int(os.environ.get("TINYCORE_FUZZ_PROGRAMS", "60"))


class Program:
  """A tinycore tensor and the numpy array it must equal, transformed together."""

  def __init__(self, rng: random.Random, shape: tuple[int, ...]):
    self.rng = rng
    self.ref = np.random.default_rng(rng.randrange(1 << 30)).uniform(-2, 2, shape).astype(np.float32)
    self.t = Tensor(self.ref.copy())

  def step(self) -> str:
    r, t, ref = self.rng, self.t, self.ref
    ops = ["permute", "reshape", "pad", "shrink", "flip", "expand", "unary", "binary", "reduce", "slice", "contiguous",
           "move", "cat", "where"]
    op = r.choice(ops)
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
                                 ("square", lambda x: x * x, np.square)])
      self.t, self.ref = fn(t), npfn(ref).astype(np.float32)
      return name
    elif op == "binary":
      other = self.ref_like()
      if r.random() < 0.5:
        self.t, self.ref = t + Tensor(other), (ref + other).astype(np.float32)
      else:
        self.t, self.ref = t.maximum(Tensor(other)), np.maximum(ref, other)
    elif op == "reduce" and ref.ndim and ref.size:
      axis = r.randrange(ref.ndim)
      keep = r.random() < 0.5
      if r.random() < 0.5: self.t, self.ref = t.sum(axis, keepdim=keep), ref.sum(axis, keepdims=keep, dtype=np.float32)
      else: self.t, self.ref = t.max(axis, keepdim=keep), ref.max(axis, keepdims=keep)
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

  def ref_like(self) -> np.ndarray:
    return np.random.default_rng(self.rng.randrange(1 << 30)).uniform(-2, 2, self.ref.shape).astype(np.float32)


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
      np.testing.assert_allclose(program.t.numpy(), program.ref, rtol=1e-4, atol=1e-4)
    except AssertionError as error:
      pytest.fail(f"program {index} of seed {seed} (TINYCORE_FUZZ_SEED={seed}): steps {steps}\n{error}")
