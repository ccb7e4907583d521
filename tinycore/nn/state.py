"""Model state: safetensors files read and written through the DISK device, and state dicts of nested objects.

    from tinycore.nn.state import safe_load, safe_save, get_state_dict
    safe_save(get_state_dict(model), "/tmp/model.safetensors")
    weights = safe_load("/tmp/model.safetensors")   # {name: Tensor on DISK}; bytes are read when realized

The safetensors format: 8 bytes little-endian header length N, N bytes of JSON
``{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}``, then the data
(offsets count from the end of the header), which the tensors tile exactly. Loading reads only the header, through
the file's uint8 DISK tensor, which opens the file; each tensor is a view of that tensor
(`Tensor(pathlib.Path(path))[start:end].bitcast(dtype).reshape(shape)`), so realizing one reads only its bytes, from
the file the header came from even if the path is replaced meanwhile (a file truncated in place is an OSError naming
it, never zeros). Saving writes a temporary file next to the target through a DISK tensor, fsyncs it and renames it
over the target, so no partial file ever has the target's name and a failure (a full disk: an OSError naming the
target) leaves the old file as it was. Needs the DISK device (pip install tiny-disk).
"""
from __future__ import annotations
import errno
import json
import os
import pathlib
import secrets
import stat
from collections import OrderedDict
from typing import Any
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor
from tinycore.uop.ops import prod
from tinycore.nn.torch_format import torch_load  # noqa: F401  (tinygrad's nn.state.torch_load)
from tinycore.nn.gguf import gguf_load  # noqa: F401  (tinygrad's nn.state.gguf_load)

# the safetensors dtype names (https://github.com/huggingface/safetensors)
safe_dtypes: dict[str, DType] = {
  "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16,
  "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16,
  "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3,
  "F8_E5M2": dtypes.fp8e5m2,
}
inverse_safe_dtypes: dict[DType, str] = {dtype: name for name, dtype in safe_dtypes.items()}

HEADER_LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100 << 20  # the safetensors package's own limit: a longer "header" is a corrupt length
METADATA_KEY = "__metadata__"


class SafetensorsError(ValueError):
  """A safetensors file (or tensor) that is not valid: its message names the file and what is wrong."""


def _disk_name(path: str | os.PathLike) -> str:
  return str(pathlib.Path(path).resolve())


def _file_tensor(path: str) -> Tensor:
  """The whole file as a 1-d uint8 tensor on DISK (nothing is read until a view of it is realized)."""
  try: return Tensor(pathlib.Path(path))
  except FileNotFoundError: raise FileNotFoundError(errno.ENOENT, f"no safetensors file at {path}", path) from None


def _read_header_from_tensor(t: Tensor, name: str) -> tuple[int, dict[str, Any]]:
  if t.dtype is not dtypes.uint8 or t.ndim != 1:
    raise SafetensorsError(f"{name}: a safetensors source tensor must be 1-d uint8, got shape {t.shape} {t.dtype}")
  size = t.shape[0]
  if size < HEADER_LENGTH_BYTES:
    raise SafetensorsError(f"{name} is not a safetensors file: it has {size} bytes, fewer than the "
                           f"{HEADER_LENGTH_BYTES}-byte header length")
  length = _check_header_length(name, int.from_bytes(bytes(t[0:HEADER_LENGTH_BYTES].data()), "little"), size)
  header_bytes = bytes(t[HEADER_LENGTH_BYTES:HEADER_LENGTH_BYTES + length].data())
  return HEADER_LENGTH_BYTES + length, _parse_header(name, header_bytes, size - HEADER_LENGTH_BYTES - length)


def _check_header_length(name: str, length: int, size: int) -> int:
  if length > size - HEADER_LENGTH_BYTES or length > MAX_HEADER_BYTES:
    limit = f" (the limit is {MAX_HEADER_BYTES})" if length > MAX_HEADER_BYTES else ""
    raise SafetensorsError(f"{name}: corrupt safetensors header: its length field says {length} bytes, but the "
                           f"file has {size} bytes{limit}")
  if length < 2: raise SafetensorsError(f"{name}: corrupt safetensors header: its length field says {length} bytes")
  return length


def _parse_header(name: str, header_bytes: bytes, data_bytes: int) -> dict[str, Any]:
  """The JSON header, checked as the safetensors package checks it: every entry has a known dtype, a shape and
  offsets inside the data that match; the tensors, in offset order, tile the data exactly (no overlap, no hole, no
  trailing byte); "__metadata__" is null or maps str to str."""
  try:
    header = json.loads(header_bytes.decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as error:
    raise SafetensorsError(f"{name}: corrupt safetensors header: not valid JSON ({error})") from None
  if not isinstance(header, dict):
    raise SafetensorsError(f"{name}: corrupt safetensors header: expected a JSON object, got {type(header).__name__}")
  if METADATA_KEY in header:
    _check_metadata_entry(name, header[METADATA_KEY])
    if header[METADATA_KEY] is None: del header[METADATA_KEY]
  for key, entry in header.items():
    if key != METADATA_KEY: _check_tensor_entry(f"{name}: tensor {key!r}", entry, data_bytes)
  _check_layout(name, header, data_bytes)
  return header


def _check_metadata_entry(name: str, metadata: Any) -> None:
  if metadata is None: return  # the package reads null as "no metadata"
  if not isinstance(metadata, dict):
    raise SafetensorsError(f"{name}: corrupt safetensors header: {METADATA_KEY} is not an object")
  for key, value in metadata.items():
    if not isinstance(value, str):
      raise SafetensorsError(f"{name}: corrupt safetensors header: {METADATA_KEY}[{key!r}] is "
                             f"{type(value).__name__} {value!r}, but metadata values must be strings")


def _check_tensor_entry(where: str, entry: Any, data_bytes: int) -> None:
  """One tensor's entry: known dtype, a shape of non-negative ints, [begin, end] inside the data holding its bytes."""
  if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
    raise SafetensorsError(f"{where}: corrupt safetensors header entry {entry!r} (needs dtype, shape, data_offsets)")
  if entry["dtype"] not in safe_dtypes:
    raise SafetensorsError(f"{where}: unknown safetensors dtype {entry['dtype']!r}; known: {', '.join(safe_dtypes)}")
  shape, offsets = entry["shape"], entry["data_offsets"]
  if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
    raise SafetensorsError(f"{where}: corrupt shape {shape!r}")
  if not isinstance(offsets, list) or len(offsets) != 2 or \
      not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
    raise SafetensorsError(f"{where}: corrupt data_offsets {offsets!r}")
  begin, end = offsets
  if not 0 <= begin <= end <= data_bytes:
    raise SafetensorsError(f"{where}: data_offsets [{begin}, {end}] lie outside the file's {data_bytes} data bytes")
  expected = prod(shape) * safe_dtypes[entry["dtype"]].itemsize
  if end - begin != expected:
    raise SafetensorsError(f"{where}: data_offsets [{begin}, {end}] hold {end - begin} bytes, but shape {shape} of "
                           f"{entry['dtype']} needs {expected}")


def _check_layout(name: str, header: dict[str, Any], data_bytes: int) -> None:
  """The tensors, sorted by offsets, cover the data exactly: each starts where the one before ends (no overlap, no
  hole) and the last ends at the end of the file (no trailing bytes)."""
  spans = sorted((tuple(entry["data_offsets"]), key) for key, entry in header.items() if key != METADATA_KEY)
  covered = 0
  for (begin, end), key in spans:
    if begin < covered:
      raise SafetensorsError(f"{name}: tensor {key!r}: data_offsets [{begin}, {end}] overlap the tensor before it "
                             f"(which ends at {covered})")
    if begin > covered:
      raise SafetensorsError(f"{name}: tensor {key!r}: data_offsets [{begin}, {end}] leave a hole: data bytes "
                             f"[{covered}, {begin}) belong to no tensor")
    covered = end
  if covered != data_bytes:
    raise SafetensorsError(f"{name}: the tensors cover {covered} data bytes, but the file holds {data_bytes}: "
                           f"{data_bytes - covered} trailing bytes belong to no tensor")


def safe_load_metadata(fn: Tensor | str | os.PathLike) -> tuple[Tensor, int, dict[str, Any]]:
  """Read a safetensors header (only the header's bytes): the file as a 1-d uint8 DISK tensor, the byte where the
  data starts, and the whole JSON header (the tensor entries and, if present, "__metadata__"). A corrupt header is a
  ValueError naming the file. Like tinygrad's, `fn` may also be a 1-d uint8 tensor holding a safetensors file."""
  if isinstance(fn, Tensor):
    data_start, header = _read_header_from_tensor(fn, f"safetensors tensor on {fn.device}")
    return fn, data_start, header
  path = _disk_name(fn)
  # the header is read through the DISK tensor: that opens the file, and its tensors then read the same file (the
  # one the header describes) even if the path is replaced before they are realized
  t = _file_tensor(path)
  data_start, header = _read_header_from_tensor(t, path)
  return t, data_start, header


def safe_load(fn: Tensor | str | os.PathLike) -> dict[str, Tensor]:
  """Every tensor of a safetensors file, by name, as views of the file on DISK: realizing (or moving) one reads
  only its own bytes. Move them where you compute: ``{k: v.to(Device.DEFAULT) for k, v in safe_load(p).items()}``."""
  t, data_start, header = safe_load_metadata(fn)
  return {key: t[data_start + entry["data_offsets"][0]:data_start + entry["data_offsets"][1]]
          .bitcast(safe_dtypes[entry["dtype"]]).reshape(tuple(entry["shape"]))
          for key, entry in header.items() if key != METADATA_KEY}


def safe_get_metadata(fn: Tensor | str | os.PathLike) -> dict[str, Any]:
  """Just the file's "__metadata__" object ({} when it has none)."""
  return dict(safe_load_metadata(fn)[2].get(METADATA_KEY, {}))


def _header_for(tensors: dict[str, Tensor], metadata: dict[str, Any] | None) -> tuple[bytes, list[tuple[int, int]]]:
  """The padded JSON header and each tensor's [begin, end) in the data, in dict order."""
  header: dict[str, Any] = {}
  if metadata: header[METADATA_KEY] = metadata
  spans, offset = [], 0
  for key, t in tensors.items():
    nbytes = t.numel() * t.dtype.itemsize
    header[key] = {"dtype": inverse_safe_dtypes[t.dtype], "shape": list(t.shape),
                   "data_offsets": [offset, offset + nbytes]}
    spans.append((offset, offset + nbytes))
    offset += nbytes
  text = json.dumps(header, separators=(",", ":"))
  text += " " * (-len(text.encode("utf-8")) % 8)  # pad with spaces so the data starts 8-byte aligned
  return text.encode("utf-8"), spans


def _check_tensors(tensors: dict[str, Tensor], metadata: dict[str, Any] | None, path: str) -> None:
  if not isinstance(tensors, dict): raise TypeError(f"safe_save({path!r}): tensors must be a dict of name -> Tensor")
  for key, t in tensors.items():
    if not isinstance(key, str): raise TypeError(f"safe_save({path!r}): tensor names must be str, got {key!r}")
    if key == METADATA_KEY: raise ValueError(f"safe_save({path!r}): {METADATA_KEY!r} is reserved for the metadata")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save({path!r}): {key!r} is a {type(t).__name__}, not a Tensor")
    if isinstance(t.device, tuple):
      raise ValueError(f"safe_save({path!r}): {key!r} is sharded over {t.device}; gather it first")
    if t.dtype not in inverse_safe_dtypes: raise TypeError(f"safe_save({path!r}): {key!r} has dtype {t.dtype}, which "
                                                           "safetensors cannot store")
  if metadata is not None:
    if not isinstance(metadata, dict):
      raise TypeError(f"safe_save({path!r}): metadata must be a dict, got {type(metadata).__name__}")
    for key, value in metadata.items():
      # the format (and every reader of it) wants str -> str: anything else would be a file nobody can load
      if not isinstance(key, str) or not isinstance(value, str):
        raise TypeError(f"safe_save({path!r}): metadata must map str to str, got {key!r}: {value!r} "
                        f"({type(key).__name__} -> {type(value).__name__}); convert it, e.g. with str() or json.dumps")


def _as_bytes(t: Tensor) -> Tensor:
  """t's elements as a 1-d uint8 tensor in row-major order, on a device that computes (a DISK tensor goes through
  the default device: disk-to-disk copies go through host memory)."""
  from tinycore.device.registry import Device
  if not Device[t.device].can_compute: t = t.to(Device.DEFAULT)
  flat = t.contiguous().reshape(t.numel())
  return flat if flat.dtype is dtypes.uint8 else flat.bitcast(dtypes.uint8)


def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, Any] | None = None) -> None:
  """Write ``tensors`` to a safetensors file at ``fn`` (names in dict order, data contiguous, header padded to 8
  bytes; ``metadata`` becomes "__metadata__", which the safetensors package wants as str -> str).

  The bytes go through a DISK tensor on a temporary file in the target's directory, which is made durable and then
  renamed over ``fn``: a failure leaves the old file (if any) untouched and no temporary behind."""
  path = _disk_name(fn)
  _check_tensors(tensors, metadata, path)
  header, spans = _header_for(tensors, metadata)
  data_start = HEADER_LENGTH_BYTES + len(header)
  total = data_start + (spans[-1][1] if spans else 0)
  directory = os.path.dirname(path)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"cannot save {path}: the directory {directory} does not exist")
  temporary = _create_temporary(path)
  try:
    _write_through_disk(temporary, total, header, data_start, tensors, spans)
    _keep_mode(temporary, path)
    os.replace(temporary, path)
  except BaseException as error:
    try: os.unlink(temporary)
    except OSError: pass
    if isinstance(error, OSError):  # name the file the caller asked for (the message names the temporary too)
      raise type(error)(error.errno, f"cannot save {path} (it is unchanged): {error.strerror or error}", path) \
        from error
    raise
  _fsync_directory(directory)


def _create_temporary(path: str) -> str:
  """A new, empty file next to ``path`` (``path.<random>.tmp``), created as an ordinary file would be (mode 0666 less
  the umask)."""
  while True:
    temporary = f"{path}.{secrets.token_hex(4)}.tmp"
    try: fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except FileExistsError: continue
    except OSError as error:
      raise type(error)(error.errno, f"cannot save {path}: cannot create a temporary file next to it: "
                        f"{error.strerror}", temporary) from None
    os.close(fd)
    return temporary


def _keep_mode(temporary: str, path: str) -> None:
  """Give the finished temporary the mode of the file it replaces (after writing: that mode may be read-only)."""
  try: os.chmod(temporary, stat.S_IMODE(os.stat(path).st_mode))
  except OSError: pass  # no file to replace: keep the default mode


def _write_through_disk(temporary: str, total: int, header: bytes, data_start: int, tensors: dict[str, Tensor],
                        spans: list[tuple[int, int]]) -> None:
  import numpy as np
  from tinycore.device.registry import Device
  device = f"DISK:{temporary}"
  disk = Tensor.empty(total, dtype=dtypes.uint8, device=device)
  prefix = len(header).to_bytes(HEADER_LENGTH_BYTES, "little") + header
  disk[0:data_start].assign(Tensor(np.frombuffer(prefix, dtype=np.uint8)))
  for (begin, end), t in zip(spans, tensors.values()):
    if end > begin: disk[data_start + begin:data_start + end].assign(_as_bytes(t))
  disk.realize()
  Device[device].synchronize()  # durable before the rename makes it the target
  del disk


def _fsync_directory(directory: str) -> None:
  """Make the rename durable (POSIX: fsync the directory); best effort where directories cannot be opened."""
  try: fd = os.open(directory, os.O_RDONLY)
  except OSError: return
  try: os.fsync(fd)
  except OSError: pass
  finally: os.close(fd)


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every tensor reachable from ``obj`` through attributes, lists, tuples, dicts and namedtuples, keyed by its
  dotted path (``{"l1.weight": ..., "layers.0.bias": ...}``), as tinygrad's ``get_state_dict``."""
  return _state_dict(obj, prefix, tensor_type, set())


def _state_dict(obj: Any, prefix: str, tensor_type: type, active: set[int]) -> dict[str, Tensor]:
  if isinstance(obj, tensor_type): return {prefix.strip("."): obj}
  if id(obj) in active: return {}  # a reference cycle: its tensors are listed under the first path
  if hasattr(obj, "_asdict"): return _state_dict(obj._asdict(), prefix, tensor_type, active)  # namedtuple
  if isinstance(obj, OrderedDict): return _state_dict(dict(obj), prefix, tensor_type, active)
  if hasattr(obj, "__dict__") and not isinstance(obj, type):
    return _state_dict(obj.__dict__, prefix, tensor_type, active | {id(obj)})
  state: dict[str, Tensor] = {}
  if isinstance(obj, (list, tuple)):
    for i, x in enumerate(obj): state.update(_state_dict(x, f"{prefix}{i}.", tensor_type, active | {id(obj)}))
  elif isinstance(obj, dict):
    for k, v in obj.items(): state.update(_state_dict(v, f"{prefix}{k}.", tensor_type, active | {id(obj)}))
  return state


def get_parameters(obj: Any) -> list[Tensor]:
  """The tensors of ``get_state_dict(obj)``, in order."""
  return list(get_state_dict(obj).values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = True,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
  """Load ``state_dict`` into the tensors of ``model`` (matched by ``get_state_dict`` names): each model tensor is
  replaced by the loaded value moved to its device (sharded along its axis when it is sharded). ``strict``: a name
  missing from ``state_dict`` is a KeyError.
  A shape mismatch is a ValueError (shapes () and (1,) are interchangeable, as in tinygrad); a value of another
  dtype is cast to the model's (as torch's load_state_dict copies it). ``consume``
  deletes each loaded entry from ``state_dict``; ``verbose`` (tinygrad's progress bar) is accepted and prints
  nothing. Returns the model's tensors (realized unless ``realize=False``)."""
  loaded = []
  for key, target in get_state_dict(model).items():
    if key not in state_dict:
      if strict: raise KeyError(f"{key} is missing from the state dict (strict=True)")
      continue
    value = state_dict[key]
    if {value.shape, target.shape} == {(), (1,)}: value = value.reshape(target.shape)
    if value.shape != target.shape:  # (tinygrad's wording: code matches on it)
      raise ValueError(f"Shape mismatch in layer `{key}`: Expected shape {target.shape}, but found {value.shape} in "
                       f"state dict.")
    if value.dtype is not target.dtype: value = value.cast(target.dtype)  # the model keeps its dtype (torch's copy_)
    # a sharded model tensor keeps its sharding: the value is split along the same axis
    target.replace(value.shard(target.device, target.uop.axis) if isinstance(target.device, tuple) else
                   value.to(target.device))
    if consume: del state_dict[key]
    loaded.append(target)
  if realize and loaded: loaded[0].realize(*loaded[1:])
  return loaded
