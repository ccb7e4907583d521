"""Reading PyTorch checkpoints (the zip files ``torch.save`` writes) without torch.

A checkpoint is a zip archive ``NAME/data.pkl`` + ``NAME/data/KEY`` (one uncompressed member per storage). The
pickle rebuilds the saved object (usually a dict of tensors); each tensor is a persistent reference to a storage
(its dtype, from the storage class, and its KEY) plus an offset, sizes and strides. Here every storage is a view of
the file's uint8 DISK tensor (``file[start:end].bitcast(dtype)``), so nothing is read until a tensor is realized.
Unpickling never imports anything: only the few torch and collections names a checkpoint uses are understood;
an object of any other class loads as an `UnknownObject`, an inert record of the class's name and the arguments and
state it was pickled with, so the tensors of a checkpoint that also pickled other objects load.
"""
from __future__ import annotations
import io
import os
import pathlib
import pickle
import struct
import zipfile
from collections import OrderedDict
from typing import Any
from tinycore.device.registry import Device
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor
from tinycore.uop.ops import prod

# torch's storage classes by name, as a checkpoint's pickle names them ("torch FloatStorage")
storage_dtypes: dict[str, DType] = {
  "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
  "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
  "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
}
# torch's dtypes by name, as a checkpoint's pickle names them for a tensor over an untyped storage ("torch
# float8_e4m3fn": torch saves the dtypes without a typed storage class so, with _rebuild_tensor_v3)
torch_dtypes: dict[str, DType] = {
  "float32": dtypes.float32, "float64": dtypes.float64, "float16": dtypes.float16, "bfloat16": dtypes.bfloat16,
  "int64": dtypes.int64, "int32": dtypes.int32, "int16": dtypes.int16, "int8": dtypes.int8, "uint8": dtypes.uint8,
  "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64, "bool": dtypes.bool,
  "float8_e4m3fn": dtypes.fp8e4m3, "float8_e5m2": dtypes.fp8e5m2, "float8_e4m3fnuz": dtypes.fp8e4m3fnuz,
  "float8_e5m2fnuz": dtypes.fp8e5m2fnuz,
}
ZIP_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # the fixed 30 bytes before a member's name and extra field


class TorchFormatError(ValueError):
  """A file that is not a checkpoint this reader understands: the message names the file and what is wrong."""


class UnknownObject:
  """Stands in for a pickled object of a class this reader does not know (an optimizer, a custom config): it keeps
  the arguments and state it was built from. `pickled_name` is the class's "module.name" in the pickle."""
  pickled_name = "?"
  args: tuple = ()
  kwargs: dict = {}
  state: Any = None

  def __init__(self, *args: Any, **kwargs: Any): self.args, self.kwargs = args, kwargs
  def __setstate__(self, state: Any) -> None: self.state = state
  def __repr__(self) -> str: return f"<unknown {self.pickled_name} args={self.args!r} state={self.state!r}>"


def unknown_class(module: str, name: str) -> type:
  """An UnknownObject subclass named after the pickled class (nothing is imported)."""
  return type(name, (UnknownObject,), {"pickled_name": f"{module}.{name}"})


def torch_load(fn: str | os.PathLike | Tensor) -> Any:
  """The object ``torch.save`` wrote to ``fn`` (a path, or the file's bytes as a 1-d uint8 tensor), with every
  torch tensor a Tensor viewing the file. Only torch's zip format (the default since torch 1.6) is read."""
  file = fn if isinstance(fn, Tensor) else Tensor(pathlib.Path(fn))
  name = "the tensor" if isinstance(fn, Tensor) else str(fn)
  if file.dtype is not dtypes.uint8 or file.ndim != 1:
    raise TorchFormatError(f"{name}: torch_load needs a path or a 1-d uint8 tensor, got {file.shape} {file.dtype}")
  source = io.BytesIO(bytes(file.data())) if isinstance(fn, Tensor) else fn
  if not zipfile.is_zipfile(source):
    raise TorchFormatError(f"{name} is not a torch zip checkpoint (torch.save's legacy format is not supported; "
                           "re-save it with a current torch, or as safetensors)")
  with zipfile.ZipFile(source) as archive:
    pickles = [i for i in archive.infolist() if i.filename.endswith("data.pkl")]
    if len(pickles) != 1: raise TorchFormatError(f"{name}: expected one data.pkl in the archive, found {len(pickles)}")
    prefix = pickles[0].filename[:-len("data.pkl")]
    byteorder = archive.read(f"{prefix}byteorder").decode() if f"{prefix}byteorder" in archive.namelist() else "little"
    if byteorder != "little": raise TorchFormatError(f"{name}: a {byteorder}-endian checkpoint is not supported")
    members = {i.filename[len(prefix) + len("data/"):]: i for i in archive.infolist()
               if i.filename.startswith(f"{prefix}data/")}
    unpickler = CheckpointUnpickler(io.BytesIO(archive.read(pickles[0])), file, members, name)
    return unpickler.load()


class CheckpointUnpickler(pickle.Unpickler):
  """Unpickles data.pkl: tensors are rebuilt as views of their storages, storages as views of the file."""

  def __init__(self, data: io.BytesIO, file: Tensor, members: dict[str, zipfile.ZipInfo], name: str):
    super().__init__(data)
    self.file, self.members, self.name = file, members, name
    self.storages: dict[str, Tensor] = {}

  def find_class(self, module: str, name: str) -> Any:
    if module == "collections" and name == "OrderedDict": return OrderedDict
    if module == "torch" and name in storage_dtypes: return storage_dtypes[name]
    if module == "torch._utils" and name == "_rebuild_tensor_v2": return rebuild_tensor
    if module == "torch._utils" and name == "_rebuild_tensor_v3": return rebuild_tensor_v3
    if module in ("torch", "torch.storage") and name == "UntypedStorage": return dtypes.uint8  # bytes, typed later
    if module == "torch" and name in torch_dtypes: return torch_dtypes[name]
    if module == "torch._utils" and name == "_rebuild_parameter": return lambda data, *_: data
    return unknown_class(module, name)

  def persistent_load(self, pid: Any) -> Tensor:
    # ("storage", storage class, key, location, numel): the storage's bytes are the archive member data/KEY
    if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage" and isinstance(pid[1], DType)):
      raise TorchFormatError(f"{self.name}: unsupported persistent reference {pid!r}")
    dtype, key = pid[1], str(pid[2])
    if key not in self.storages: self.storages[key] = self.storage(key, dtype)
    return self.storages[key]

  def storage(self, key: str, dtype: DType) -> Tensor:
    """The storage data/KEY as a 1-d tensor of dtype: a view of the file at the member's data."""
    info = self.members.get(key)
    if info is None: raise TorchFormatError(f"{self.name}: the archive has no storage data/{key}")
    if info.compress_type != zipfile.ZIP_STORED:
      raise TorchFormatError(f"{self.name}: storage data/{key} is compressed; torch.save never compresses them")
    start = member_data_offset(self.file, info)
    if info.file_size % dtype.itemsize:
      raise TorchFormatError(f"{self.name}: storage data/{key} has {info.file_size} bytes, not a whole number of "
                             f"{dtype.name} elements")
    if info.file_size == 0: return Tensor.empty(0, dtype=dtype)
    return self.file[start:start + info.file_size].bitcast(dtype)


def member_data_offset(file: Tensor, info: zipfile.ZipInfo) -> int:
  """Where a stored member's bytes start: after its local header, whose name and extra field lengths can differ
  from the central directory's (torch pads the extra field to align the data)."""
  header = bytes(file[info.header_offset:info.header_offset + ZIP_LOCAL_HEADER.size].data())
  fields = ZIP_LOCAL_HEADER.unpack(header)
  if fields[0] != b"PK\x03\x04": raise TorchFormatError(f"{info.filename}: bad zip local header")
  return info.header_offset + ZIP_LOCAL_HEADER.size + fields[-2] + fields[-1]


def rebuild_tensor_v3(storage: Tensor, offset: int, size: tuple[int, ...], stride: tuple[int, ...], requires_grad: Any,
                      hooks: Any, dtype: Any, *_: Any) -> Tensor:
  """torch's _rebuild_tensor_v3: `rebuild_tensor` of an untyped storage (bytes) read as `dtype`."""
  if not isinstance(dtype, DType): raise TorchFormatError(f"a tensor of an unsupported torch dtype ({dtype!r})")
  if storage.dtype is not dtype: storage = storage.bitcast(dtype) if storage.numel() else Tensor.empty(0, dtype=dtype)
  return rebuild_tensor(storage, offset, size, stride)


def rebuild_tensor(storage: Tensor, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any) -> Tensor:
  """torch's _rebuild_tensor_v2: the tensor of `size` at `offset` elements into `storage`, element i at
  offset + sum(i_k * stride_k). Contiguous and permuted layouts are views of the storage; any other layout (an
  expanded or overlapping one) is gathered on the default device."""
  size, stride = tuple(size), tuple(stride)
  numel = prod(size)
  if numel == 0: return Tensor.empty(*size, dtype=storage.dtype)
  # order the dims from the largest stride down: a permuted contiguous tensor is contiguous in that order
  order = sorted(range(len(size)), key=lambda d: -stride[d])
  ordered = tuple(size[d] for d in order)
  if tuple(stride[d] for d in order if size[d] != 1) == tuple(
      prod(ordered[i + 1:]) for i, d in enumerate(order) if size[d] != 1):
    view = storage[offset:offset + numel].reshape(ordered)
    return view if order == sorted(order) else view.permute(*[order.index(d) for d in range(len(size))])
  index = offset + sum(Tensor.arange(n).reshape(*[n if k == d else 1 for k in range(len(size))]) * s
                       for d, (n, s) in enumerate(zip(size, stride)))
  return storage.to(Device.DEFAULT)[index.flatten()].reshape(size)
