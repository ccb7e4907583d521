"""GGUF files (llama.cpp's format): the metadata and the tensors, read lazily through DISK, and the quantized types
dequantized by kernels on the device they are moved to.

    metadata, tensors = gguf_load("model.gguf")     # tinygrad's name: gguf_load(path or uint8 Tensor)

Each tensor is a lazy Tensor on `device` (the default device): its bytes, a view of the file on DISK, copied there
and, for a quantized type, dequantized there to float32 by ordinary tensor code (bit shifts, masks and scales over
the blocks). Nothing is read or computed until a kernel needs it, and then only that tensor's bytes. Types: F32,
F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K; another type raises naming the tensor and the type. Shapes are numpy's
order (GGUF lists the innermost dim first).
"""
from __future__ import annotations
import os
import pathlib
import struct
from typing import Any, Callable
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


def _q8_0(blocks: Tensor) -> Tensor:  # 34 bytes: scale, 32 int8
  return _f16(blocks, 0) * blocks[:, 2:34].bitcast(dtypes.int8).float()


def _q4_0(blocks: Tensor) -> Tensor:  # 18 bytes: scale, 16 bytes of two 4-bit values (low: 0..15, high: 16..31)
  qs = blocks[:, 2:18]
  return _f16(blocks, 0) * ((qs & 15).cat(qs >> 4, dim=1).cast(dtypes.int32) - 8).float()


def _q4_1(blocks: Tensor) -> Tensor:  # 20 bytes: scale, minimum, 16 bytes of nibbles
  qs = blocks[:, 4:20]
  return _f16(blocks, 0) * (qs & 15).cat(qs >> 4, dim=1).float() + _f16(blocks, 2)


def _q4_k(blocks: Tensor) -> Tensor:
  """144 bytes per 256 values: scale and minimum (f16), 8 pairs of 6-bit sub-block scales and minimums packed in 12
  bytes, then 4 groups of 32 bytes whose low nibbles are one sub-block of 32 and high nibbles the next."""
  n = blocks.shape[0]
  s0, s1, s2 = blocks[:, 4:8], blocks[:, 8:12], blocks[:, 12:16]
  scales = (s0 & 63).cat((s2 & 15) | ((s0 >> 6) << 4), dim=1).float()  # (n, 8)
  mins = (s1 & 63).cat((s2 >> 4) | ((s1 >> 6) << 4), dim=1).float()
  q = blocks[:, 16:144].reshape(n, 4, 1, 32)
  values = (q & 15).cat(q >> 4, dim=2).reshape(n, 8, 32).float()
  d, dmin = _f16(blocks, 0).reshape(n, 1, 1), _f16(blocks, 2).reshape(n, 1, 1)
  return (d * scales.reshape(n, 8, 1) * values - dmin * mins.reshape(n, 8, 1)).reshape(n, 256)


def _q6_k(blocks: Tensor) -> Tensor:
  """210 bytes per 256 values: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales (one per 16
  values), the f16 scale. Each half of 128 values takes 64 low-nibble bytes and 32 high bytes."""
  n = blocks.shape[0]
  ql, qh = blocks[:, 0:128].reshape(n, 2, 64), blocks[:, 128:192].reshape(n, 2, 32)
  a, b = ql[:, :, 0:32], ql[:, :, 32:64]
  parts = [(a & 15) | ((qh & 3) << 4), (b & 15) | (((qh >> 2) & 3) << 4), (a >> 4) | (((qh >> 4) & 3) << 4),
           (b >> 4) | (((qh >> 6) & 3) << 4)]
  q = Tensor.stack(*parts, dim=2).cast(dtypes.int32) - 32  # (n, 2, 4, 32): value 128h + 32 part + l
  scales = blocks[:, 192:208].bitcast(dtypes.int8).float().reshape(n, 2, 4, 2, 1).expand(n, 2, 4, 2, 16)
  return _f16(blocks, 208).reshape(n, 1, 1, 1) * (scales.reshape(n, 2, 4, 32) * q.float())


# ggml type -> (name, values per block, bytes per block, dequantize(blocks (n, bytes) uint8) -> (n, values))
GGML_TYPES: dict[int, tuple[str, int, int, Callable[[Tensor], Tensor] | None]] = {
  0: ("F32", 1, 4, None), 1: ("F16", 1, 2, None), 30: ("BF16", 1, 2, None),
  2: ("Q4_0", 32, 18, _q4_0), 3: ("Q4_1", 32, 20, _q4_1), 8: ("Q8_0", 32, 34, _q8_0),
  12: ("Q4_K", 256, 144, _q4_k), 14: ("Q6_K", 256, 210, _q6_k),
}
KNOWN_NAMES = {6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 13: "Q5_K", 15: "Q8_K"}


def _tensor(data: Tensor, kind: int, shape: tuple[int, ...], name: str, where: str, device: str | None) -> Tensor:
  type_name, block_values, block_bytes, dequantize = GGML_TYPES[kind]
  count = 1
  for s in shape: count *= s
  if count % block_values:
    raise GGUFError(f"{where}: tensor {name!r} of type {type_name} has {count} values, not whole blocks of "
                    f"{block_values}")
  if dequantize is None:
    dtype = {0: dtypes.float32, 1: dtypes.float16, 30: dtypes.bfloat16}[kind]
    return data.to(device).bitcast(dtype).reshape(shape)
  blocks = data.to(device).reshape(count // block_values, block_bytes)
  return dequantize(blocks).reshape(shape)


def gguf_load(fn: Tensor | str | os.PathLike, device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """(metadata, tensors) of a GGUF file (a path, or a 1-d uint8 tensor holding one). Only the header is read now;
  each tensor reads its own bytes when a kernel needs it; quantized ones dequantize on `device` (the default)."""
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
  tensors: dict[str, Tensor] = {}
  for name, shape, kind, offset in infos:
    if kind not in GGML_TYPES:
      raise GGUFError(f"{where}: tensor {name!r} has type {KNOWN_NAMES.get(kind, kind)}, which tinycore does not "
                      f"dequantize (supported: {', '.join(v[0] for v in GGML_TYPES.values())})")
    _, block_values, block_bytes, _ = GGML_TYPES[kind]
    count = 1
    for s in shape: count *= s
    nbytes = count // block_values * block_bytes
    start = data_start + offset
    if start + nbytes > t.shape[0]: raise GGUFError(f"{where}: tensor {name!r} runs past the end of the file")
    tensors[name] = _tensor(t[start:start + nbytes], kind, shape, name, where, device)
  return metadata, tensors
