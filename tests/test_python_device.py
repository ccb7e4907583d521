"""The PYTHON device: the core's own host memory and an interpreter of the linearized kernel (no C compiler).

Values are checked against numpy (and, as the codegen oracle is meant to be used, against the CPU device running the
same kernels when tiny-cpu is installed)."""
from __future__ import annotations
import importlib.util
import mmap
import struct
import textwrap
from typing import Callable
import numpy as np
import pytest
from tinycore import Device, Tensor, dtypes
from tinycore.device.kernels import compile_kernel
from tinycore.device.buffer import Buffer
from tinycore.device.interpreter import ListingError, PythonProgram
from tinycore.device.python import HOST_DEVICE
from tinycore.uop.ops import Ops

needs_cpu = pytest.mark.skipif(importlib.util.find_spec("tiny_cpu") is None, reason="tiny-cpu is not installed")


def kernels_of(t: Tensor) -> list:
  return [call.src[0] for call in t.schedule_linear().src if call.src[0].op is Ops.SINK]


def test_multiply_runs_on_the_interpreter():
  t = Tensor([1., 2.], device="PYTHON") * 2
  [kernel] = kernels_of(t)
  compiled = compile_kernel("PYTHON", kernel)
  assert isinstance(compiled.program, PythonProgram)
  assert compiled.source.startswith("# tinycore listing") and "('alu'," in compiled.source
  assert t.device == "PYTHON" and t.tolist() == [2.0, 4.0]


def test_reduce_and_upcast_matmul_match_numpy():
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((20, 32)).astype(np.float32), rng.standard_normal((32, 48)).astype(np.float32)
  out = Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")
  [kernel] = kernels_of(out)
  assert "('vector',)" in compile_kernel("PYTHON", kernel).source  # the register-tiled (upcast) matmul
  np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)
  x = Tensor(a, device="PYTHON")
  np.testing.assert_allclose(x.max(axis=0).numpy(), a.max(axis=0))
  np.testing.assert_allclose(x.sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_integer_semantics_match_the_c_renderer():
  big = Tensor(np.array([2**31 - 1, -2**31], np.int32), device="PYTHON")
  assert (big + 1).tolist() == [-2**31, -2**31 + 1]  # wraps like two's complement
  assert (Tensor(np.array([250], np.uint8), device="PYTHON") + 10).tolist() == [4]
  a = Tensor(np.array([7, -7, 7, -7, 5], np.int32), device="PYTHON")
  b = Tensor(np.array([2, 2, -2, -2, 0], np.int32), device="PYTHON")
  assert a.idiv(b).tolist() == [3, -3, -3, 3, 0]  # truncating; x / 0 is 0, as the C renderer guards it
  np.testing.assert_equal((a[:4] // b[:4]).numpy(), np.array([7, -7, 7, -7]) // np.array([2, 2, -2, -2]))
  np.testing.assert_equal((a[:4] % b[:4]).numpy(), np.array([7, -7, 7, -7]) % np.array([2, 2, -2, -2]))
  assert (Tensor(np.array([1], np.int32), device="PYTHON") << 31).tolist() == [-2**31]
  assert Tensor([-1.0, 300.0], device="PYTHON").cast(dtypes.uint8).tolist() == [255, 44]  # wraps like numpy


def test_16bit_floats_round_after_every_op():
  rng = np.random.default_rng(5)
  a, b = rng.standard_normal(64).astype(np.float16), rng.standard_normal(64).astype(np.float16)
  ta, tb = Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON")
  np.testing.assert_equal((ta * tb + ta).numpy(), a * b + a)
  assert Tensor([70000.0], device="PYTHON").cast(dtypes.float16).tolist() == [np.inf]
  bf = Tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -3.0], device="PYTHON").cast(dtypes.bfloat16)
  assert bf.cast(dtypes.float32).tolist() == [1.0, 1.0 + 2**-6, -3.0]  # round to nearest even on 8 bits


def test_special_float_values():
  x = Tensor([0.0, -1.0, 4.0, np.inf], device="PYTHON")
  np.testing.assert_equal(x.log2().numpy(), [-np.inf, np.nan, 2.0, np.inf])
  np.testing.assert_equal(x.sqrt().numpy(), [0.0, np.nan, 2.0, np.inf])
  np.testing.assert_equal((Tensor([1.0, -1.0, 0.0], device="PYTHON") / 0).numpy(), [np.inf, -np.inf, np.nan])
  np.testing.assert_equal(Tensor([200.0, -np.inf], device="PYTHON").exp2().numpy(), [np.inf, 0.0])


@needs_cpu
def test_oracle_agrees_with_cpu_on_the_same_kernels():
  rng = np.random.default_rng(11)
  a = rng.standard_normal((17, 33)).astype(np.float32)
  i = rng.integers(-100, 100, (17, 33)).astype(np.int32)
  def program(device: str) -> list[np.ndarray]:
    x, n = Tensor(a, device=device), Tensor(i, device=device)
    return [x.softmax(1).numpy(), (x @ x.T).numpy(), ((n * 7) // 3 - n % 5).numpy(), x.exp().sum(0).numpy()]
  for got, want in zip(program("PYTHON"), program("CPU")):
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_host_memory_is_page_aligned_and_zero_copy():
  buf = Buffer("PYTHON", 3000, dtypes.uint8, preallocate=True)
  handle = buf._buf
  assert handle.addr % mmap.PAGESIZE == 0 and Device["PYTHON"].zero_copy_host_view
  view = buf.view(4, dtypes.uint8, 8)
  view.copyin(memoryview(b"abcd"))
  assert bytes(buf.as_memoryview(force_zero_copy=True)[8:12]) == b"abcd"
  assert view._buf.addr == handle.addr + 8 and view._buf.mm is handle.mm  # a view shares the mapping


def test_the_staging_ring_is_core_host_memory():
  from tinycore.device.buffers import buffer_of
  from tinycore.hcq.staging import staging_uop
  ring = staging_uop()
  assert ring.device == HOST_DEVICE == "PYTHON"
  assert buffer_of(ring)._buf.addr % mmap.PAGESIZE == 0


def test_a_malformed_listing_is_a_clear_error():
  with pytest.raises(ListingError, match="params and upcast"):
    PythonProgram("bad", b"('loop', 0, 4)\n('end',)\n")
  with pytest.raises(ListingError, match="not a literal tuple"):
    PythonProgram("bad", b"('params', ())\n('upcast', ())\nimport os\n")


def test_a_hand_written_listing_with_a_scalar_parameter():
  # the calling convention: buffers, then scalar parameters as 64-bit words (a float32's bits in the low 32)
  listing = textwrap.dedent("""\
    ('params', ((0, 'float32'),))
    ('upcast', ())
    ('const', 1, 2.0, 'float32')
    ('const', 3, 1, 'int64')
    ('var', 0, 0, 'float32')
    ('loop', 4, 2)
      ('alu', 2, 'MUL', 'float32', 'float32', (0, 1))
      ('alu', 5, 'ADD', 'int64', 'int64', (4, 3))
      ('alu', 6, 'MUL', 'float32', 'float32', (2, 2))
      ('store', 0, 'float32', 4, None, 6)
    ('end',)
    """)
  out = bytearray(8)
  word = struct.unpack("<I", struct.pack("<f", 1.25))[0]
  PythonProgram("scaled", listing.encode())(memoryview(out), vals=(word,))
  assert struct.unpack("<2f", out) == (6.25, 6.25)


def edge_values(rng: np.random.Generator, dtype, n: int = 48) -> np.ndarray:
  """Random values of `dtype` with its extremes (ints) or infinities, NaN, signed zeros and huge values (floats)."""
  if dtype is dtypes.bool: return rng.random(n) < 0.5
  if dtypes.is_float(dtype):
    values = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3, 1e5], n)).astype(np.float32)
    values[:6] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 3e38]
    return values
  info = np.iinfo(dtype.name)
  values = np.array([int(v) for v in rng.integers(0, 1 << 62, n)], dtype=object) % (int(info.max) - int(info.min) + 1)
  values = (values + int(info.min)).astype(dtype.name)
  values[:4] = [info.min, info.max, 0, 1]
  return values


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
  if x.dtype.kind != "f": return bool((x == y).all())
  return bool(((x == y) & (np.signbit(x) == np.signbit(y)) | (np.isnan(x) & np.isnan(y))).all())


def on(device: str, values: np.ndarray, dtype) -> Tensor:
  t = Tensor(values, device=device)
  return t if t.dtype is dtype else t.cast(dtype)


def readable(t: Tensor) -> np.ndarray:
  return (t.bitcast(dtypes.uint16) if t.dtype is dtypes.bfloat16 else t).numpy()


@needs_cpu
@pytest.mark.parametrize("dtype", [d for d in dtypes.fields().values()], ids=lambda d: d.name)
def test_oracle_matches_cpu_bit_for_bit(dtype):
  # the interpreter computes what the C renderer's code computes: wrapping, rounding, guards, NaN and signed zeros
  rng = np.random.default_rng(7)
  a, b = edge_values(rng, dtype), edge_values(rng, dtype)
  def results(device: str) -> list[np.ndarray]:
    x, y = on(device, a, dtype), on(device, b, dtype)
    pieces = [x + y, x * y, x.maximum(y), (x < y).where(x, y), x == y, -x]
    if dtype is not dtypes.bool: pieces.append(x - y)
    if dtypes.is_float(dtype): pieces += [x / y, x.sqrt(), x.trunc()]
    elif dtype is not dtypes.bool: pieces += [x.idiv(y), x % y, x ^ y]
    out = [readable(Tensor.stack(*[p.cast(dtype) for p in pieces]))]
    targets = dtypes.fields().values()  # float to int out of range included: the C renderer defines it
    return out + [readable(x.cast(target)) for target in targets if dtype in (dtypes.float32, dtypes.int32)]
  for got, want in zip(results("PYTHON"), results("CPU")):
    assert same_bits(got, want), (got, want)


def near_16bit_ties(bits_kept: int) -> np.ndarray:
  """float64 values on, just above and just below the ties of a float with `bits_kept` mantissa bits, where
  rounding to float32 first would land on the tie (and round a second time)."""
  ties = np.array([1.0, 1.5, -3.25, 1000.0, 2.0**-20, 6e4 if bits_kept == 10 else 3e38]) * (1 + 2.0**-(bits_kept + 1))
  return np.concatenate([ties, ties * (1 + 2.0**-40), ties * (1 - 2.0**-40)])


def test_edge_semantics_match_numpy():
  # NaN wins a max or min reduction wherever it is
  x = Tensor([[1.0, np.nan, 3.0], [np.nan, 2.0, 0.0], [4.0, 5.0, np.nan], [-1.0, -2.0, -0.0]], device="PYTHON")
  np.testing.assert_equal(x.max(1).numpy(), [np.nan, np.nan, np.nan, -0.0])
  np.testing.assert_equal(x.min(0).numpy(), [np.nan, np.nan, np.nan])
  assert np.isnan(x.max().item()) and np.isnan(x.min().item())
  assert x[3].max().item() == 0.0 and x.argmax(1).tolist()[:3] == [1, 0, 2]
  # shift counts are read as unsigned; at least the width shifts everything out
  n = Tensor(np.array([1, -8, 5, -5, 3], np.int32), device="PYTHON")
  counts = Tensor(np.array([32, 40, -1, 33, 31], np.int32), device="PYTHON")
  assert (n << counts).tolist() == [0, 0, 0, 0, -2**31]
  assert (n >> counts).tolist() == [0, -1, 0, -1, 0]
  u = Tensor(np.array([255, 255, 128], np.uint8), device="PYTHON")
  assert (u >> Tensor(np.array([8, 7, 200], np.uint8), device="PYTHON")).tolist() == [0, 1, 0]
  # x / 0 and x % 0 are 0, MIN / -1 is MIN
  a = Tensor(np.array([-2**31, 7, -7, -2**31], np.int32), device="PYTHON")
  b = Tensor(np.array([-1, 0, 0, 0], np.int32), device="PYTHON")
  assert a.idiv(b).tolist() == [-2**31, 0, 0, 0] and (a % b).tolist() == [0, 0, 0, 0]
  # float64 and 64-bit ints round once to 16-bit floats and to float32
  ties = near_16bit_ties(10)
  got = Tensor(ties, device="PYTHON").cast(dtypes.float16).bitcast(dtypes.uint16).numpy()
  np.testing.assert_equal(got, ties.astype(np.float16).view(np.uint16))
  ties = near_16bit_ties(7)
  got = Tensor(ties, device="PYTHON").cast(dtypes.bfloat16).cast(dtypes.float32).numpy()
  assert got[6] == 1.0 + 2.0**-7 and got[12] == 1.0 and got[0] == 1.0  # above, below and on the tie of 1 + 2**-8
  big = np.array([2**60 + 2**36 + 1, -(2**60 + 2**36 + 1), 2**62 - 1], np.int64)
  np.testing.assert_equal(Tensor(big, device="PYTHON").cast(dtypes.float32).numpy(), big.astype(np.float32))
  # float to int: through int32 for small targets (out of range: the minimum), uint64 covers [2**63, 2**64)
  f = Tensor(np.array([3000000001.0, np.nan, 2.0**63 * 1.5, 2.0**64], np.float64), device="PYTHON")
  assert f.cast(dtypes.uint16).tolist() == [0, 0, 0, 0] and f[:1].cast(dtypes.uint32).tolist() == [3000000001]
  assert f[2:].cast(dtypes.uint64).tolist() == [3 * 2**62, 0]


def edge_programs(x_values: np.ndarray) -> Callable[[str], list[np.ndarray]]:
  """Kernels on the semantics the C renderer defines where C does not: NaN through max/min, shifts past the width,
  division by zero, MIN / -1, casts that must round once, float to int out of range."""
  int_dtypes = [d for d in dtypes.fields().values() if dtypes.is_int(d)]
  def program(device: str) -> list[np.ndarray]:
    out = []
    for dtype in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64):
      x = on(device, x_values, dtype)
      out += [readable(p) for p in (x.max(1), x.min(0), x.max(), x.relu(), x.abs(), x.clip(-1.0, 1.0))]
      out += [x.argmax(1).numpy(), x.argmin(0).numpy()]
    for dtype in int_dtypes:
      bits, info = dtype.itemsize * 8, np.iinfo(dtype.name)
      # 2**24 + 2**16 + 1 and 2**60 + 2**36 + 1 are just above a bfloat16 and a float32 tie: they must round once
      odd = {4: 2**24 + 2**16 + 1, 8: 2**60 + 2**36 + 1}.get(dtype.itemsize, 5)
      a = on(device, np.array([info.min, info.max, -1 if info.min else 3, 1, odd, info.min, -7 if info.min else 7],
                              dtype.name), dtype)
      counts = [0, 1, bits - 1, bits, bits + 1, int(info.max), -1 if info.min else int(info.max) - 1]
      c = on(device, np.array(counts, dtype.name), dtype)
      d = on(device, np.array([-1 if info.min else 0, 0, 0, 0, 2, -1 if info.min else 3, 0], dtype.name), dtype)
      out += [(a << c).numpy(), (a >> c).numpy(), a.idiv(d).numpy(), (a % d).numpy(), (-a).numpy()]
      out += [readable(a.cast(target)) for target in (dtypes.float16, dtypes.bfloat16, dtypes.float32)]
    for bits_kept, target in ((10, dtypes.float16), (7, dtypes.bfloat16)):
      out.append(readable(Tensor(near_16bit_ties(bits_kept), device=device).cast(target)))
    wide = np.array([2.0**63, 2.0**63 * 1.5, 2.0**64, 3e19, -1.0, -3e9, 3000000001.5, np.nan, np.inf], np.float64)
    out += [Tensor(wide, device=device).cast(d).numpy() for d in int_dtypes]
    return out
  return program


@needs_cpu
def test_oracle_matches_cpu_on_edge_semantics():
  x = np.array([[1.0, np.nan, -0.0, 3.0], [np.nan, 2.0, 0.0, -0.0], [-0.0, 0.0, -5.0, np.nan], [-1.0, np.inf, -np.inf,
               -0.0]], np.float32)
  program = edge_programs(x)
  for index, (got, want) in enumerate(zip(program("PYTHON"), program("CPU"))):
    assert got.dtype == want.dtype and same_bits(got, want), (index, got, want)
