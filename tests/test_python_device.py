"""The PYTHON device: the core's own host memory and an interpreter of the linearized kernel (no C compiler).

Values are checked against numpy (and, as the codegen oracle is meant to be used, against the CPU device running the
same kernels when tiny-cpu is installed)."""
from __future__ import annotations
import importlib.util
import mmap
import struct
import textwrap
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
    # float to uint64 out of range is undefined in C (it depends on the instruction set): not compared
    targets = [d for d in dtypes.fields().values() if not (dtypes.is_float(dtype) and d is dtypes.uint64)]
    return out + [readable(x.cast(target)) for target in targets if dtype in (dtypes.float32, dtypes.int32)]
  for got, want in zip(results("PYTHON"), results("CPU")):
    assert same_bits(got, want), (got, want)
