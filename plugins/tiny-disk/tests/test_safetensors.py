"""tinycore.nn.state: safetensors files through DISK, checked against the `safetensors` package both ways."""
from __future__ import annotations
import json
import os
import pathlib
from collections import namedtuple
import numpy as np
import pytest
from tinycore import Tensor, dtypes
from tinycore.nn.state import (SafetensorsError, get_parameters, get_state_dict, load_state_dict, safe_dtypes,
                               safe_get_metadata, safe_load, safe_load_metadata, safe_save)
import tiny_disk.device as disk_device
from disk_helpers import disk

safetensors_numpy = pytest.importorskip("safetensors.numpy")
pytestmark = pytest.mark.usefixtures("cpu_device")

NUMPY_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16,
                np.float32, np.float64]
SHAPES = [(), (1,), (5,), (3, 4), (2, 3, 5), (0,), (2, 0, 3)]


def random_array(npdt, shape, rng) -> np.ndarray:
  if npdt is np.bool_: return np.asarray(rng.integers(0, 2, shape).astype(np.bool_))
  if np.issubdtype(npdt, np.floating): return np.asarray((rng.standard_normal(shape) * 10).astype(npdt))
  info = np.iinfo(npdt)
  return np.asarray(rng.integers(info.min, info.max, shape, dtype=npdt, endpoint=True))


def every_dtype_and_shape(rng) -> dict[str, np.ndarray]:
  return {f"{np.dtype(npdt).name}_{i}": random_array(npdt, shape, rng)
          for npdt in NUMPY_DTYPES for i, shape in enumerate(SHAPES)}


@pytest.fixture
def rng() -> np.random.Generator:
  return np.random.default_rng(1)


def no_temporaries(directory: pathlib.Path) -> bool:
  return not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------ interoperability
def test_load_files_written_by_safetensors(tmp_path, rng):
  arrays = every_dtype_and_shape(rng)
  path = tmp_path / "theirs.safetensors"
  safetensors_numpy.save_file(arrays, str(path), metadata={"format": "np", "who": "safetensors"})
  loaded = safe_load(path)
  assert sorted(loaded) == sorted(arrays)
  for name, expected in arrays.items():
    t = loaded[name]
    assert t.device == disk(path) and t.shape == expected.shape and t.dtype.name == np.dtype(expected.dtype).name
    np.testing.assert_array_equal(t.numpy(), expected, err_msg=name)
  assert safe_get_metadata(path) == {"format": "np", "who": "safetensors"}
  source, data_start, header = safe_load_metadata(str(path))
  assert source.device == disk(path) and source.dtype is dtypes.uint8 and source.shape == (path.stat().st_size,)
  assert data_start == 8 + int.from_bytes(path.read_bytes()[:8], "little")
  assert header["__metadata__"]["who"] == "safetensors" and set(header) == set(arrays) | {"__metadata__"}


def test_files_written_here_load_with_safetensors(tmp_path, rng):
  arrays = every_dtype_and_shape(rng)
  path = tmp_path / "ours.safetensors"
  safe_save({name: Tensor(a) for name, a in arrays.items()}, path, metadata={"model": "test", "step": "3"})
  theirs = safetensors_numpy.load_file(str(path))
  assert sorted(theirs) == sorted(arrays)
  for name, expected in arrays.items():
    assert theirs[name].dtype == expected.dtype and theirs[name].shape == expected.shape, name
    np.testing.assert_array_equal(theirs[name], expected, err_msg=name)
  from safetensors import safe_open
  with safe_open(str(path), framework="np") as f:
    assert f.metadata() == {"model": "test", "step": "3"}
  assert no_temporaries(tmp_path)


def test_layout_is_the_format(tmp_path):
  """8-byte length, JSON header padded with spaces to 8 bytes, then the tensors' bytes back to back in order."""
  a, b = np.arange(3, dtype=np.float32), np.arange(4, dtype=np.int16).reshape(2, 2)
  path = tmp_path / "layout.safetensors"
  safe_save({"a": Tensor(a), "b": Tensor(b)}, str(path))
  raw = path.read_bytes()
  length = int.from_bytes(raw[:8], "little")
  assert length % 8 == 0 and raw[8:8 + length].rstrip(b" ").endswith(b"}")
  header = json.loads(raw[8:8 + length])
  assert header == {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                    "b": {"dtype": "I16", "shape": [2, 2], "data_offsets": [12, 20]}}
  assert raw[8 + length:] == a.tobytes() + b.tobytes()


def test_round_trip_here_with_bfloat16_and_views(tmp_path, rng):
  bits = rng.integers(0, 1 << 16, (3, 7), dtype=np.uint16)
  bits[(bits & 0x7F80) == 0x7F80] = 0
  base = rng.standard_normal((6, 5)).astype(np.float32)
  tensors = {
    "bf16": Tensor(bits).bitcast(dtypes.bfloat16),
    "transposed": Tensor(base).T,  # not contiguous: stored in its own row-major order
    "computed": Tensor(base) * 2 + 1,
    "slice": Tensor(base)[1:3, 2:4],
  }
  path = tmp_path / "mixed.safetensors"
  safe_save(tensors, path)
  loaded = safe_load(path)
  assert loaded["bf16"].dtype is dtypes.bfloat16 and loaded["bf16"].shape == (3, 7)
  np.testing.assert_array_equal(loaded["bf16"].to("CPU").bitcast(dtypes.uint16).numpy(), bits)
  np.testing.assert_array_equal(loaded["transposed"].numpy(), base.T)
  np.testing.assert_array_equal(loaded["computed"].numpy(), base * 2 + 1)
  np.testing.assert_array_equal(loaded["slice"].numpy(), base[1:3, 2:4])
  assert json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])["bf16"]["dtype"] == "BF16"


def test_load_bfloat16_written_by_hand(tmp_path):
  values = np.array([1.0, -2.5, 3.0e38, 0.0], np.float32)
  bits = (values.view(np.uint32) >> 16).astype(np.uint16)
  header = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
  path = tmp_path / "bf16.safetensors"
  path.write_bytes(len(header).to_bytes(8, "little") + header + bits.tobytes())
  np.testing.assert_array_equal(safe_load(path)["w"].to("CPU").numpy(), (bits.astype(np.uint32) << 16).view(np.float32))


def test_resave_loaded_tensors(tmp_path, rng):
  """Tensors loaded from one file (on DISK) saved to another: disk to disk goes through host memory."""
  arrays = {"x": rng.standard_normal((4, 4)).astype(np.float32), "y": np.arange(6, dtype=np.int64)}
  first, second = tmp_path / "first.safetensors", tmp_path / "second.safetensors"
  safetensors_numpy.save_file(arrays, str(first))
  safe_save(safe_load(first), second)
  for name, value in safetensors_numpy.load_file(str(second)).items():
    np.testing.assert_array_equal(value, arrays[name])


def test_overwrite_while_loaded(tmp_path):
  """Saving over a file that was loaded (and read) before: a new load sees the new file, the bytes read before stay."""
  path = tmp_path / "w.safetensors"
  safe_save({"v": Tensor(np.arange(4, dtype=np.float32))}, path)
  old = safe_load(path)["v"].to("CPU").realize()
  safe_save({"v": Tensor(np.arange(4, dtype=np.float32) + 10), "more": Tensor(np.ones(1000, np.float32))}, path)
  new = safe_load(path)
  assert new["v"].numpy().tolist() == [10, 11, 12, 13] and new["more"].numpy().sum() == 1000
  assert old.numpy().tolist() == [0, 1, 2, 3]
  assert no_temporaries(tmp_path)


def test_save_keeps_the_mode_of_the_file_it_replaces(tmp_path):
  path = tmp_path / "ro.safetensors"
  safe_save({"v": Tensor([1.0])}, path)
  path.chmod(0o444)  # a read-only target is replaced (the directory is writable), and stays read-only
  safe_save({"v": Tensor([2.0])}, path)
  assert path.stat().st_mode & 0o777 == 0o444 and safe_load(path)["v"].numpy().tolist() == [2.0]
  assert no_temporaries(tmp_path)


def test_empty_dict(tmp_path):
  path = tmp_path / "empty.safetensors"
  safe_save({}, path, metadata={"k": "v"})
  assert safe_load(path) == {} and safe_get_metadata(path) == {"k": "v"}
  assert safetensors_numpy.load_file(str(path)) == {}


# ------------------------------------------------------------------ reading only what is asked for
def test_load_reads_only_the_header_then_only_the_tensor(tmp_path, monkeypatch, rng):
  arrays = {"small": np.arange(4, dtype=np.int32), "big": rng.standard_normal(100_000).astype(np.float32)}
  path = tmp_path / "lazy.safetensors"
  safetensors_numpy.save_file(arrays, str(path))
  reads: list[tuple[int, int]] = []
  real = os.preadv
  monkeypatch.setattr(disk_device.os, "preadv",
                      lambda fd, bufs, off: reads.append((off, sum(memoryview(b).nbytes for b in bufs)))
                      or real(fd, bufs, off))
  loaded = safe_load(path)
  data_start = 8 + int.from_bytes(path.read_bytes()[:8], "little")
  assert reads == [(0, 8), (8, data_start - 8)]  # the length, then the header: no tensor data
  reads.clear()
  assert loaded["small"].numpy().tolist() == [0, 1, 2, 3]
  assert sum(n for _, n in reads) == 16


# ------------------------------------------------------------------ bad files
def write_file(path: pathlib.Path, header: bytes | str, data: bytes = b"", length: int | None = None) -> pathlib.Path:
  header = header.encode() if isinstance(header, str) else header
  path.write_bytes((len(header) if length is None else length).to_bytes(8, "little") + header + data)
  return path


GOOD_ENTRY = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize("make, words", [
  (lambda p: p.write_bytes(b"\x01\x02"), "fewer than the 8-byte header length"),
  (lambda p: write_file(p, "{}", length=1 << 40), "length field says"),
  (lambda p: write_file(p, "{}", length=3), "length field says"),
  (lambda p: write_file(p, "{not json", b"\0" * 8), "not valid JSON"),
  (lambda p: write_file(p, b"\xff\xfe{}", b""), "not valid JSON"),
  (lambda p: write_file(p, "[1, 2]"), "expected a JSON object"),
  (lambda p: write_file(p, json.dumps({"w": {**GOOD_ENTRY, "dtype": "F8_E8M0"}}), b"\0" * 8),
   "unknown safetensors dtype 'F8_E8M0'"),
  (lambda p: write_file(p, json.dumps({"w": {**GOOD_ENTRY, "data_offsets": [0, 80]}}), b"\0" * 8), "outside the file"),
  (lambda p: write_file(p, json.dumps({"w": {**GOOD_ENTRY, "data_offsets": [4, 8]}}), b"\0" * 8), "needs 8"),
  (lambda p: write_file(p, json.dumps({"w": {**GOOD_ENTRY, "shape": [-2]}}), b"\0" * 8), "corrupt shape"),
  (lambda p: write_file(p, json.dumps({"w": {"dtype": "F32"}}), b"\0" * 8), "needs dtype, shape, data_offsets"),
], ids=["short", "huge-length", "length-past-end", "bad-json", "bad-utf8", "not-object", "unknown-dtype",
        "offsets-past-end", "offsets-mismatch", "bad-shape", "missing-fields"])
def test_corrupt_header_is_a_value_error_naming_the_file(tmp_path, make, words):
  path = tmp_path / "bad.safetensors"
  make(path)
  with pytest.raises(ValueError, match=words) as info:
    safe_load(path)
  assert str(path) in str(info.value)
  if "F8_E8M0" not in words:  # a dtype the package knows and tinycore does not: the one intended difference
    with pytest.raises(Exception):
      safetensors_numpy.load_file(str(path))


@pytest.mark.parametrize("length", [0, 1])
def test_header_length_below_two_is_corrupt(tmp_path, length):
  path = tmp_path / "tiny.safetensors"
  path.write_bytes(length.to_bytes(8, "little") + b"{}" + bytes(6))
  with pytest.raises(SafetensorsError, match=f"{path}: corrupt safetensors header: its length field says {length}"):
    safe_load(path)
  with pytest.raises(Exception):
    safetensors_numpy.load_file(str(path))


def test_a_source_tensor_must_be_1d_uint8():
  with pytest.raises(SafetensorsError, match=r"must be 1-d uint8, got shape \(2, 8\)"):
    safe_load(Tensor(np.zeros((2, 8), np.uint8)))
  with pytest.raises(SafetensorsError, match="must be 1-d uint8.*int32"):
    safe_load(Tensor(np.zeros(16, np.int32)))
  with pytest.raises(SafetensorsError, match="fewer than the 8-byte header length"):
    safe_load(Tensor(np.zeros(4, np.uint8)))


def test_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope.safetensors")):
    safe_load(tmp_path / "nope.safetensors")


def test_save_into_missing_directory_names_it_and_creates_nothing(tmp_path):
  path = tmp_path / "no" / "such" / "dir.safetensors"
  with pytest.raises(FileNotFoundError, match=str(path.parent)):
    safe_save({"a": Tensor([1.0])}, path)
  assert not (tmp_path / "no").exists()


def test_failed_save_leaves_the_old_file_and_no_temporary(tmp_path):
  path = tmp_path / "keep.safetensors"
  safe_save({"a": Tensor(np.arange(3, dtype=np.float32))}, path)
  before = path.read_bytes()
  source = tmp_path / "source.bin"
  source.write_bytes(bytes(range(64)))
  unreadable = Tensor(source)[::2]  # a non-contiguous DISK view cannot be read: the save fails while writing
  with pytest.raises(Exception, match="non-contiguous"):
    safe_save({"a": Tensor(np.arange(3, dtype=np.float32) + 1), "bad": unreadable}, path)
  assert path.read_bytes() == before and no_temporaries(tmp_path)


def test_bad_arguments_write_nothing(tmp_path):
  path = tmp_path / "x.safetensors"
  with pytest.raises(TypeError, match="not a Tensor"):
    safe_save({"a": np.zeros(3)}, path)
  with pytest.raises(ValueError, match="reserved"):
    safe_save({"__metadata__": Tensor([1.0])}, path)
  for bad in ({"k": object()}, {"k": 1}, {"k": {"nested": "x"}}, {"k": None}, {1: "v"}):
    with pytest.raises(TypeError, match="metadata must map str to str"):
      safe_save({"a": Tensor([1.0])}, path, metadata=bad)
  assert list(tmp_path.iterdir()) == []


def test_dtype_names():
  assert {name: d.name for name, d in safe_dtypes.items()} == {
    "BOOL": "bool", "I8": "int8", "U8": "uint8", "I16": "int16", "U16": "uint16", "I32": "int32", "U32": "uint32",
    "I64": "int64", "U64": "uint64", "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
    "F8_E4M3": "fp8e4m3", "F8_E5M2": "fp8e5m2"}


# ------------------------------------------------------------------ state dicts
class Linear:
  def __init__(self, n: int, m: int):
    self.weight = Tensor(np.random.default_rng(n * m).standard_normal((m, n)).astype(np.float32))
    self.bias = Tensor(np.zeros(m, np.float32))


Pair = namedtuple("Pair", ["left", "right"])


class Model:
  def __init__(self):
    self.l1 = Linear(3, 4)
    self.layers = [Linear(4, 4), Linear(4, 2)]
    self.extra = {"scale": Tensor(np.ones(1, np.float32)), "name": "not a tensor"}
    self.pair = Pair(Tensor(np.zeros(2, np.int32)), 7)
    self.myself = self  # a cycle is walked once


def test_get_state_dict_names():
  model = Model()
  state = get_state_dict(model)
  assert list(state) == ["l1.weight", "l1.bias", "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                         "extra.scale", "pair.left"]
  assert state["layers.1.weight"] is model.layers[1].weight
  assert get_parameters(model) == list(state.values())
  t = Tensor([1.0])
  assert get_state_dict({"a": [t], "b": (1, "x")}, prefix="m.") == {"m.a.0": t}
  assert get_state_dict(t, prefix="w") == {"w": t}


def test_save_and_load_a_model(tmp_path):
  model, other = Model(), Model()
  for t in get_parameters(other): t.assign(t.full_like(5)).realize()
  path = tmp_path / "model.safetensors"
  safe_save(get_state_dict(model), path)
  load_state_dict(other, safe_load(path))
  for (name, a), b in zip(get_state_dict(model).items(), get_parameters(other)):
    assert b.device == "CPU", name
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_load_state_dict_checks(tmp_path):
  model = Model()
  with pytest.raises(KeyError, match="l1.weight"):
    load_state_dict(model, {})
  assert load_state_dict(model, {}, strict=False) == []
  state = get_state_dict(Model())
  state["l1.bias"] = Tensor(np.zeros(5, np.float32))
  with pytest.raises(ValueError, match=r"Shape mismatch in layer `l1.bias`: Expected shape \(4,\)"):
    load_state_dict(model, state)


# ------------------------------------------------------------------ validation as the safetensors package does it
def entry(begin: int, end: int, shape=(2,), dtype: str = "F32") -> dict:
  return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


def file_bytes(header: dict | bytes, data: bytes) -> bytes:
  raw = header if isinstance(header, bytes) else json.dumps(header).encode()
  return len(raw).to_bytes(8, "little") + raw + data


# name: (header, data bytes, words in our error or None when the file is valid)
LAYOUTS = {
  "in-order": ({"a": entry(0, 8), "b": entry(8, 16)}, 16, None),
  "out-of-order": ({"b": entry(8, 16), "a": entry(0, 8)}, 16, None),
  "empty-tensor-between": ({"a": entry(0, 8), "z": entry(8, 8, (0,)), "b": entry(8, 16)}, 16, None),
  "empty-file": ({}, 0, None),
  "null-metadata": ({"__metadata__": None, "a": entry(0, 8)}, 8, None),
  "leading-space": (b' {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', 8, None),
  "overlap": ({"a": entry(0, 8), "b": entry(4, 12)}, 12, "overlap the tensor before it"),
  "same-range": ({"a": entry(0, 8), "b": entry(0, 8)}, 8, "overlap the tensor before it"),
  "hole-between": ({"a": entry(0, 8), "b": entry(12, 20)}, 20, r"leave a hole: data bytes \[8, 12\)"),
  "hole-at-start": ({"a": entry(4, 12)}, 12, r"leave a hole: data bytes \[0, 4\)"),
  "trailing-bytes": ({"a": entry(0, 8)}, 9, "1 trailing bytes belong to no tensor"),
  "trailing-byte-no-tensors": ({}, 1, "1 trailing bytes"),
  "reversed-offsets": ({"a": entry(8, 0)}, 8, "lie outside"),
  "metadata-int-value": ({"__metadata__": {"k": 1}, "a": entry(0, 8)}, 8, "metadata values must be strings"),
  "metadata-nested": ({"__metadata__": {"k": {"x": "y"}}, "a": entry(0, 8)}, 8, "metadata values must be strings"),
  "metadata-list": ({"__metadata__": ["k"], "a": entry(0, 8)}, 8, "is not an object"),
  "trailing-nul-in-header": (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\0', 8, "not valid JSON"),
  "float-in-shape": ({"a": {**entry(0, 8), "shape": [2.0]}}, 8, "corrupt shape"),
  "bool-in-shape": ({"a": {**entry(0, 8), "shape": [True, 2]}}, 8, "corrupt shape"),
  "three-offsets": ({"a": {**entry(0, 8), "data_offsets": [0, 8, 8]}}, 8, "corrupt data_offsets"),
  "negative-offset": ({"a": entry(-8, 0, (0,))}, 8, "lie outside"),
  "offsets-not-a-list": ({"a": {**entry(0, 8), "data_offsets": "0-8"}}, 8, "corrupt data_offsets"),
  "shape-not-a-list": ({"a": {**entry(0, 8), "shape": 2}}, 8, "corrupt shape"),
  "entry-not-an-object": ({"a": [0, 8]}, 8, "needs dtype, shape, data_offsets"),
  "shape-overflows": ({"a": entry(0, 8, (2**62, 2**62))}, 8, "needs"),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_validation_matches_the_safetensors_package(tmp_path, name):
  """Every validation branch: a file the package rejects is a SafetensorsError (a ValueError) naming the file and the
  problem; a file it accepts loads with the same names and values."""
  header, data_bytes, words = LAYOUTS[name]
  data = bytes(range(data_bytes))
  path = tmp_path / f"{name}.safetensors"
  path.write_bytes(file_bytes(header, data))
  try:
    theirs = safetensors_numpy.load_file(str(path))
  except Exception as error:  # the package's own SafetensorError
    theirs = error
  if words is None:
    assert not isinstance(theirs, Exception), f"the package rejects {name}: {theirs}"
    ours = safe_load(path)
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items(): np.testing.assert_array_equal(ours[key].numpy(), value, err_msg=key)
  else:
    assert isinstance(theirs, Exception), f"the package accepts {name}, we expect to reject it"
    with pytest.raises(SafetensorsError, match=words) as info:
      safe_load(path)
    assert str(path) in str(info.value)
    with pytest.raises(SafetensorsError, match=words):  # the same checks for a file given as a tensor
      safe_load(Tensor(file_bytes(header, data)))


def test_metadata_round_trip_and_null(tmp_path):
  path = tmp_path / "m.safetensors"
  safe_save({"a": Tensor([1.0])}, path, metadata={"k": "v", "empty": ""})
  assert safe_get_metadata(path) == {"k": "v", "empty": ""}
  path.write_bytes(file_bytes({"__metadata__": None, "a": entry(0, 8)}, bytes(8)))
  assert safe_get_metadata(path) == {} and "__metadata__" not in safe_load_metadata(path)[2]


# ------------------------------------------------------------------ files that change under a lazy load
def test_load_then_path_replaced_reads_the_loaded_file(tmp_path):
  """The tensors of a lazy load read the file their header describes: the replacement is not read, not grown."""
  path = tmp_path / "w.safetensors"
  values = np.arange(1000, dtype=np.float32)
  safetensors_numpy.save_file({"w": values}, str(path))
  loaded = safe_load(path)
  replacement = tmp_path / "new.safetensors"
  safetensors_numpy.save_file({"w": np.ones(2, np.float32)}, str(replacement))
  new_bytes = replacement.read_bytes()
  os.replace(replacement, path)
  np.testing.assert_array_equal(loaded["w"].numpy(), values)
  assert path.read_bytes() == new_bytes  # the new file: not grown, not written
  assert safe_load(path)["w"].numpy().tolist() == [1, 1]


def test_load_then_truncated_in_place_is_an_os_error(tmp_path):
  path = tmp_path / "t.safetensors"
  safetensors_numpy.save_file({"w": np.arange(1000, dtype=np.float32)}, str(path))
  loaded = safe_load(path)
  os.truncate(path, 200)  # another process shrank it: the tensor's bytes are gone
  with pytest.raises(OSError, match=f"{path}.*truncated"):
    loaded["w"].numpy()
  with pytest.raises(OSError, match=str(path)):
    loaded["w"].to("CPU").realize()
  assert path.stat().st_size == 200  # reading never grows it


def test_load_then_removed_still_reads(tmp_path):
  path = tmp_path / "r.safetensors"
  safetensors_numpy.save_file({"w": np.arange(10, dtype=np.int32)}, str(path))
  loaded = safe_load(path)
  path.unlink()
  assert loaded["w"].numpy().tolist() == list(range(10)) and not path.exists()


def test_8_bit_floats_round_trip_as_their_bytes(tmp_path, rng):
  # F8_E4M3 and F8_E5M2 (the safetensors names, which torch's float8_e4m3fn and float8_e5m2 save as)
  codes = rng.integers(0, 256, (4, 6), dtype=np.uint8)
  codes[(codes & 0x7C) == 0x7C] = 0x7F  # one NaN byte in e5m2 (a kernel keeps a NaN's sign, not its payload)
  path = tmp_path / "fp8.safetensors"
  safe_save({"e4m3": Tensor(codes).bitcast(dtypes.fp8e4m3), "e5m2": Tensor(codes.T.copy()).bitcast(dtypes.fp8e5m2)},
            path)
  header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
  assert header["e4m3"]["dtype"] == "F8_E4M3" and header["e5m2"]["dtype"] == "F8_E5M2"
  loaded = safe_load(path)
  assert loaded["e4m3"].dtype is dtypes.fp8e4m3 and loaded["e5m2"].dtype is dtypes.fp8e5m2
  np.testing.assert_array_equal(loaded["e4m3"].to("CPU").bitcast(dtypes.uint8).numpy(), codes)
  np.testing.assert_array_equal(loaded["e5m2"].to("CPU").bitcast(dtypes.uint8).numpy(), codes.T)
