"""GGUF files (llama.cpp's format): the metadata and the tensors, read lazily through DISK, and the quantized types
dequantized by kernels on the device they are moved to.

    metadata, tensors = gguf_load("model.gguf")     # tinygrad's name: gguf_load(path or uint8 Tensor)

Each tensor is a lazy Tensor on `device` (the default device): its bytes, a view of the file on DISK, copied there
and, for a quantized type, dequantized there to float32 by ordinary tensor code (bit shifts, masks and scales over
the blocks). Nothing is read or computed until a kernel needs it, and then only that tensor's bytes. Types: F32,
F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K; another type raises naming the tensor and the type. Shapes are numpy's
order (GGUF lists the innermost dim first).

    metadata, tensors = gguf_load("model.gguf", quantized=True)
    y = tensors["blk.0.ffn_up.weight"].linear(x)    # x @ W.T, W kept as its blocks (a QuantizedTensor)

A quantized matrix stays quantized in memory this way: its blocks are the uint8 rows of a QuantizedTensor, and each
use dequantizes inside the kernel that reads it (the matmul's loads, an embedding's picked rows).
"""
from __future__ import annotations
import os
import pathlib
import struct
from typing import Any, Callable, NamedTuple
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# metadata value types
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class GGUFError(ValueError):
  """A GGUF file that is not valid, or holds a tensor type tinycore cannot dequantize: the message names the file,
  the tensor and the problem."""


class _Reader:
  """Sequential reads from the head of a file tensor, fetched from DISK in growing chunks."""

  def __init__(self, t: Tensor, name: str):
    self.t, self.name, self.pos, self.data = t, name, 0, b""

  def take(self, n: int) -> bytes:
    end = self.pos + n
    if end > len(self.data):
      if end > self.t.shape[0]: raise GGUFError(f"{self.name}: the header runs past the end of the file")
      fetch = min(self.t.shape[0], max(end, 2 * len(self.data), 1 << 16))
      self.data += bytes(self.t[len(self.data):fetch].data())
    out = self.data[self.pos:end]
    self.pos = end
    return out

  def scalar(self, fmt: str) -> Any: return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

  def string(self) -> str:
    length = self.scalar("<Q")
    if length > self.t.shape[0]: raise GGUFError(f"{self.name}: a string of {length} bytes in the header")
    return self.take(length).decode("utf-8", errors="replace")

  def value(self, kind: int) -> Any:
    if kind in _SCALARS: return self.scalar(_SCALARS[kind])
    if kind == STRING: return self.string()
    if kind == ARRAY:
      item_kind, count = self.scalar("<I"), self.scalar("<Q")
      if item_kind in _SCALARS:  # one read for the whole array
        fmt = _SCALARS[item_kind]
        return list(struct.unpack(f"<{count}{fmt[1]}", self.take(count * struct.calcsize(fmt))))
      return [self.value(item_kind) for _ in range(count)]
    raise GGUFError(f"{self.name}: unknown metadata value type {kind}")


def _f16(blocks: Tensor, start: int) -> Tensor:
  """The float16 at byte `start` of each block, as float32 (blocks, 1)."""
  return blocks[:, start:start + 2].bitcast(dtypes.float16).float()


# A quantized type's dequantization is a list of parts, (index, values): a block's values seen in the type's layout
# (a shape, row-major over the block) hold `values` (blocks, ...) at `index` (ints and whole slices over the layout).
# No part is a cat of others: a matmul reads each part against its own slice of x, so the dequantization fuses into
# the matmul's loads (a cat's pieces are pads, which the scheduler may realize).
Part = tuple[tuple[Any, ...], Tensor]
ALL = slice(None)


def _q8_0(blocks: Tensor) -> list[Part]:  # 34 bytes: scale, 32 int8
  return [((ALL,), _f16(blocks, 0) * blocks[:, 2:34].bitcast(dtypes.int8).float())]


def _q4_0(blocks: Tensor) -> list[Part]:  # 18 bytes: scale, 16 bytes of two 4-bit values (low: 0..15, high: 16..31)
  qs, d = blocks[:, 2:18], _f16(blocks, 0)
  return [((0, ALL), d * ((qs & 15).float() - 8)), ((1, ALL), d * ((qs >> 4).float() - 8))]


def _q4_1(blocks: Tensor) -> list[Part]:  # 20 bytes: scale, minimum, 16 bytes of nibbles
  qs, d, m = blocks[:, 4:20], _f16(blocks, 0), _f16(blocks, 2)
  return [((0, ALL), d * (qs & 15).float() + m), ((1, ALL), d * (qs >> 4).float() + m)]


def _q4_k(blocks: Tensor) -> list[Part]:
  """144 bytes per 256 values: scale and minimum (f16), 8 pairs of 6-bit sub-block scales and minimums packed in 12
  bytes, then 4 groups of 32 bytes whose low nibbles are one sub-block of 32 and high nibbles the next. Layout
  (half, group in half, nibble, 32): sub-block 4 half + 2 group + nibble; its 6-bit scale and minimum are those of
  byte r = 2 group + nibble of the first, second and third 4 bytes (s0, s1, s2): half 0 takes s0 & 63 and
  s1 & 63, half 1 (s2 & 15) | (s0 >> 6) << 4 and (s2 >> 4) | (s1 >> 6) << 4."""
  n = blocks.shape[0]
  d, dmin = _f16(blocks, 0).reshape(n, 1, 1), _f16(blocks, 2).reshape(n, 1, 1)
  s0, s1, s2 = (blocks[:, start:start + 4].reshape(n, 2, 2) for start in (4, 8, 12))  # (n, group, nibble)
  q = blocks[:, 16:144].reshape(n, 2, 2, 32)  # (n, half, group, 32)
  parts: list[Part] = []
  for half in (0, 1):
    for nibble in (0, 1):
      a, b, c = s0[:, :, nibble], s1[:, :, nibble], s2[:, :, nibble]
      scale = a & 63 if half == 0 else (c & 15) | ((a >> 6) << 4)
      low = b & 63 if half == 0 else (c >> 4) | ((b >> 6) << 4)
      values = (q[:, half] >> 4 * nibble) & 15 if nibble else q[:, half] & 15
      parts.append(((half, ALL, nibble, ALL), d * scale.float().reshape(n, 2, 1) * values.float()
                    - dmin * low.float().reshape(n, 2, 1)))
  return parts


def _q6_k(blocks: Tensor) -> list[Part]:
  """210 bytes per 256 values: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales (one per 16
  values), the f16 scale. Layout (half, part, 2, 16), the last dim the 16 values of one scale: each half of 128
  values takes 64 low-nibble bytes (a, b) and 32 high bytes; part 0 is a's low nibbles with the high bytes' bits
  0-1, part 1 b's with bits 2-3, part 2 a's high nibbles with bits 4-5, part 3 b's with bits 6-7."""
  n = blocks.shape[0]
  ql, qh = blocks[:, 0:128].reshape(n, 2, 2, 2, 16), blocks[:, 128:192].reshape(n, 2, 2, 16)
  a, b = ql[:, :, 0], ql[:, :, 1]
  scales = blocks[:, 192:208].bitcast(dtypes.int8).float().reshape(n, 2, 4, 2, 1)
  d = _f16(blocks, 208).reshape(n, 1, 1, 1)
  nibbles = [a & 15, b & 15, a >> 4, b >> 4]
  parts: list[Part] = []
  for part in range(4):
    high = qh & 3 if part == 0 else (qh >> 2 * part) & 3
    q = (nibbles[part] | (high << 4)).float() - 32
    parts.append(((ALL, part, ALL, ALL), d * scales[:, :, part] * q))
  return parts


class GGMLType(NamedTuple):
  """A tensor type of GGUF: its values per block, bytes per block, and for a quantized type the layout of a block's
  values and its dequantization into parts (blocks (n, bytes) uint8 -> [(index into the layout, values)])."""
  name: str
  block_values: int
  block_bytes: int
  layout: tuple[int, ...] = ()
  parts: Callable[[Tensor], list[Part]] | None = None


GGML_TYPES: dict[int, GGMLType] = {
  0: GGMLType("F32", 1, 4), 1: GGMLType("F16", 1, 2), 30: GGMLType("BF16", 1, 2),
  2: GGMLType("Q4_0", 32, 18, (2, 16), _q4_0), 3: GGMLType("Q4_1", 32, 20, (2, 16), _q4_1),
  8: GGMLType("Q8_0", 32, 34, (32,), _q8_0), 12: GGMLType("Q4_K", 256, 144, (2, 2, 2, 32), _q4_k),
  14: GGMLType("Q6_K", 256, 210, (2, 4, 2, 16), _q6_k),
}
KNOWN_NAMES = {6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 13: "Q5_K", 15: "Q8_K"}


def _place(values: Tensor, index: tuple[Any, ...], layout: tuple[int, ...]) -> Tensor:
  """values (n, ...) padded with zeros to (n, *layout), where `index` says they go."""
  n = values.shape[0]
  shape = [n] + [1 if isinstance(i, int) else size for i, size in zip(index, layout)]
  padding = [(0, 0)] + [(i, size - i - 1) if isinstance(i, int) else (0, 0) for i, size in zip(index, layout)]
  return values.reshape(shape).pad(padding)


class QuantizedTensor:
  """A matrix (rows, columns) kept in memory as its GGML blocks: `blocks` is a uint8 Tensor (rows, bytes per row),
  each row whole blocks. Nothing is dequantized ahead: `linear(x)` computes x @ self.T with the dequantization in
  the matmul's loads (each part of a block against its slice of x), `rows(ids)` dequantizes only the rows picked
  (an embedding lookup), `dequantize()` the whole matrix as a lazy float32 Tensor."""

  def __init__(self, blocks: Tensor, ggml_type: GGMLType, shape: tuple[int, int]):
    if blocks.dtype is not dtypes.uint8 or len(shape) != 2 or shape[1] % ggml_type.block_values or \
       tuple(blocks.shape) != (shape[0], shape[1] // ggml_type.block_values * ggml_type.block_bytes):
      raise GGUFError(f"{ggml_type.name} blocks of shape {tuple(blocks.shape)} ({blocks.dtype}) do not hold a "
                      f"{shape} matrix")
    self.blocks, self.ggml_type, self.shape = blocks, ggml_type, tuple(shape)
    self.dtype, self.device = dtypes.float32, blocks.device

  @property
  def nbytes(self) -> int: return self.blocks.nbytes()

  def with_blocks(self, blocks: Tensor) -> QuantizedTensor:
    """The same matrix over other blocks of the same shape (the rows moved, the bytes realized elsewhere)."""
    return QuantizedTensor(blocks, self.ggml_type, self.shape)

  def to(self, device: str | None) -> QuantizedTensor: return self.with_blocks(self.blocks.to(device))

  def realize(self) -> QuantizedTensor: return self.with_blocks(self.blocks.contiguous().realize())

  def _parts(self, blocks: Tensor) -> list[Part]:
    assert self.ggml_type.parts is not None
    return self.ggml_type.parts(blocks.reshape(-1, self.ggml_type.block_bytes))

  def _assemble(self, blocks: Tensor, rows: int) -> Tensor:
    layout = self.ggml_type.layout
    pieces = [_place(values, index, layout) for index, values in self._parts(blocks)]
    whole = pieces[0]
    for piece in pieces[1:]: whole = whole + piece
    return whole.reshape(rows, self.shape[1])

  def dequantize(self) -> Tensor:
    """The whole matrix in float32 (lazy: realize it to hold it)."""
    return self._assemble(self.blocks, self.shape[0])

  def rows(self, ids: Tensor) -> Tensor:
    """self.dequantize()[ids] for an int tensor of row numbers, dequantizing only the rows it picks."""
    picked = self.blocks[ids.reshape(-1)]
    return self._assemble(picked, picked.shape[0]).reshape(*ids.shape, self.shape[1])

  def linear(self, x: Tensor) -> Tensor:
    """x @ self.T for x (..., columns), in float32: each part of every block multiplies its own slice of x, and
    the sum runs over the blocks and the values within them, so no dequantized copy of the matrix is made."""
    if x.shape[-1] != self.shape[1]:
      raise ValueError(f"x of shape {tuple(x.shape)} cannot multiply the transpose of a {self.shape} matrix")
    rows, per_row = self.shape[0], self.shape[1] // self.ggml_type.block_values
    layout, lead = self.ggml_type.layout, x.shape[:-1]
    xs = x.float().reshape(*lead, 1, per_row, *layout)
    total = None
    for index, values in self._parts(self.blocks):
      term = xs[(..., *index)] * values.reshape(rows, per_row, *values.shape[1:])
      total = term if total is None else total + term
    assert total is not None
    return total.sum(tuple(range(len(lead) + 1, total.ndim)))


def _tensor(data: Tensor, kind: int, shape: tuple[int, ...], name: str, where: str, device: str | None,
            quantized: bool) -> Tensor | QuantizedTensor:
  ggml_type = GGML_TYPES[kind]
  count = 1
  for s in shape: count *= s
  if ggml_type.parts is None:
    dtype = {0: dtypes.float32, 1: dtypes.float16, 30: dtypes.bfloat16}[kind]
    return data.to(device).bitcast(dtype).reshape(shape)
  columns = shape[-1] if shape else 1
  if columns % ggml_type.block_values:
    raise GGUFError(f"{where}: tensor {name!r} of type {ggml_type.name} has rows of {columns} values, not whole "
                    f"blocks of {ggml_type.block_values}")
  matrix = QuantizedTensor(data.to(device).reshape(count // columns, -1), ggml_type, (count // columns, columns))
  return matrix if quantized and len(shape) == 2 else matrix.dequantize().reshape(shape)


def gguf_load(fn: Tensor | str | os.PathLike, device: str | None = None,
              quantized: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
  """(metadata, tensors) of a GGUF file (a path, or a 1-d uint8 tensor holding one). Only the header is read now;
  each tensor reads its own bytes when a kernel needs it; quantized ones dequantize on `device` (the default).
  With `quantized`, each quantized matrix is a QuantizedTensor instead: its blocks, dequantized where it is used."""
  from tinycore.device.registry import Device
  device = str(Device.canonicalize(device or Device.DEFAULT))
  if isinstance(fn, Tensor): t, where = fn, f"GGUF tensor on {fn.device}"
  else:
    where = str(pathlib.Path(fn).resolve())
    if not os.path.isfile(where): raise FileNotFoundError(f"no GGUF file at {where}")
    t = Tensor(pathlib.Path(where))
  if t.dtype is not dtypes.uint8 or t.ndim != 1: raise GGUFError(f"{where}: a GGUF source must be a 1-d uint8 tensor")
  reader = _Reader(t, where)
  if t.shape[0] < 24 or reader.take(4) != GGUF_MAGIC: raise GGUFError(f"{where} is not a GGUF file (no GGUF magic)")
  version = reader.scalar("<I")
  if version not in (2, 3): raise GGUFError(f"{where}: GGUF version {version} is not supported (2 or 3)")
  tensor_count, kv_count = reader.scalar("<Q"), reader.scalar("<Q")
  metadata: dict[str, Any] = {}
  for _ in range(kv_count):
    key = reader.string()
    metadata[key] = reader.value(reader.scalar("<I"))
  infos = []
  for _ in range(tensor_count):
    name, ndim = reader.string(), reader.scalar("<I")
    dims = [reader.scalar("<Q") for _ in range(ndim)]
    infos.append((name, tuple(reversed(dims)), reader.scalar("<I"), reader.scalar("<Q")))
  alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
  data_start = -(-reader.pos // alignment) * alignment
  tensors: dict[str, Any] = {}
  for name, shape, kind, offset in infos:
    if kind not in GGML_TYPES:
      raise GGUFError(f"{where}: tensor {name!r} has type {KNOWN_NAMES.get(kind, kind)}, which tinycore does not "
                      f"dequantize (supported: {', '.join(v.name for v in GGML_TYPES.values())})")
    count = 1
    for s in shape: count *= s
    nbytes = count // GGML_TYPES[kind].block_values * GGML_TYPES[kind].block_bytes
    start = data_start + offset
    if start + nbytes > t.shape[0]: raise GGUFError(f"{where}: tensor {name!r} runs past the end of the file")
    tensors[name] = _tensor(t[start:start + nbytes], kind, shape, name, where, device, quantized)
  return metadata, tensors
