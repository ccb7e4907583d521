"""The DISK device itself: names, opening files, sharing, growing, read-only files, copies, durability.

These use Buffers and the allocator directly, so they need no compute device and none of the scheduler.
"""
from __future__ import annotations
import os
import pathlib
import pytest
from tinycore import Device, dtypes
from tinycore.device.buffer import Buffer
from tinycore.device.compiled import Compiled
import tiny_disk.device as disk_device
from tiny_disk import plugin
from tiny_disk.device import DiskAllocator, DiskDevice
from disk_helpers import disk, free_buffers, make_read_only


def buffer(path, nbytes: int, allocate: bool = True) -> Buffer:
  b = Buffer(disk(path), nbytes, dtypes.uint8)
  return b.allocate() if allocate else b


def read(b: Buffer) -> bytes: return bytes(b.as_memoryview())


# ------------------------------------------------------------------ names and the plugin
def test_spec():
  (spec,) = plugin.tinycore_devices()
  assert (spec.prefix, spec.compute, spec.priority, spec.names_are_paths) == ("DISK", False, -100, True)
  found = {s.prefix: s for s in Device.specs()}
  assert "DISK" in found and found["DISK"].distribution == "tiny-disk"
  assert not Device.DEFAULT.startswith("DISK")


def test_open_device(tmp_path):
  device = Device[f"disk:{tmp_path}/f"]
  assert isinstance(device, DiskDevice) and isinstance(device, Compiled) and device is Device[disk(tmp_path / "f")]
  assert device.device == disk(tmp_path / "f") and device.path == str(tmp_path / "f")
  assert not device.can_compute and device.renderer is None and device.compiler is None and device.runtime is None
  assert isinstance(device.allocator, DiskAllocator)
  assert device.capabilities() == {"compute": False, "file": str(tmp_path / "f")}
  assert not (tmp_path / "f").exists()  # opening the device opens no file: the first allocation does


def test_other_prefixes_are_not_ours():
  assert plugin.tinycore_open_device("CPU") is None
  assert plugin.tinycore_open_device("DISKY:/x") is None


@pytest.mark.parametrize("name, words", [("DISK:", "names no file"), ("DISK:relative/file", "'relative/file'"),
                                         ("DISK:file.bin", "'file.bin'")])
def test_bad_names(name, words):
  with pytest.raises(ValueError, match=words) as info:
    plugin.tinycore_open_device(name)
  assert name in str(info.value)
  with pytest.raises(RuntimeError, match=words):  # through the registry, which names the plugin too
    Device[name]


def test_bare_kind_opens_but_holds_nothing():
  device = Device["DISK"]
  assert device.capabilities() == {"compute": False, "file": "DISK:/absolute/path"}
  with pytest.raises(ValueError, match="DISK:/absolute/path"):
    Buffer("DISK", 4, dtypes.uint8).allocate()


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system")
def test_shared_memory_name():
  name = f"tiny_disk_test_{os.getpid()}"
  try:
    b = buffer(f"shm:{name}", 8)
    b.copyin(memoryview(b"shm-data"))
    assert pathlib.Path("/dev/shm", name).read_bytes() == b"shm-data"
    assert read(b) == b"shm-data"
  finally:
    pathlib.Path("/dev/shm", name).unlink(missing_ok=True)


# ------------------------------------------------------------------ opening, sharing, growing
def test_allocation_creates_nothing_the_first_write_creates_and_grows(tmp_path):
  path = tmp_path / "new.bin"
  b = buffer(path, 100)
  assert not path.exists()  # allocating is not writing
  with pytest.raises(FileNotFoundError, match=f"{path}.*nothing has been written"):
    read(b)
  b.view(4, dtypes.uint8, 10).copyin(memoryview(b"abcd"))  # a view's write grows the file for its whole buffer
  assert path.stat().st_size == 100
  assert read(b) == bytes(10) + b"abcd" + bytes(86)
  b.copyin(memoryview(bytes(range(100))))
  assert path.read_bytes() == bytes(range(100))


def test_reads_never_open_for_writing(data_file, monkeypatch):
  flags: list[int] = []
  real_open = os.open
  monkeypatch.setattr(disk_device.os, "open", lambda p, f, *a: flags.append(f) or real_open(p, f, *a))
  b = buffer(data_file, 100)
  assert read(b.view(10, dtypes.uint8, 5)) == bytes(range(5, 15))
  assert flags and all(f & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC) == 0 for f in flags)
  b.copyin(memoryview(bytes(100)))  # the first write opens it for writing, once
  assert sum(1 for f in flags if f & os.O_RDWR) == 1


def test_larger_file_is_not_shrunk_and_buffers_view_its_start(data_file):
  b = buffer(data_file, 10)
  assert read(b) == bytes(range(10))
  assert data_file.stat().st_size == 100


def test_one_open_shared_and_refcounted(data_file):
  device = Device[disk(data_file)]
  a, b = buffer(data_file, 10), buffer(data_file, 20)
  assert a._buf.file is b._buf.file and a._buf.file.refcount == 2
  opened = a._buf.file
  a.copyin(memoryview(b"ABCDEFGHIJ"))
  assert read(b)[:10] == b"ABCDEFGHIJ"  # the same file through another buffer
  del a
  free_buffers()
  assert opened.refcount == 1 and not opened.closed
  del b
  free_buffers()
  assert opened.closed and device.file.opens == [] and device.file.current is None
  c = buffer(data_file, 10)  # the next allocation opens the file again
  assert read(c) == b"ABCDEFGHIJ" and c._buf.file is not opened


def test_grow_while_open(tmp_path):
  path = tmp_path / "grow.bin"
  small = buffer(path, 8)
  small.copyin(memoryview(b"01234567"))
  big = buffer(path, 4096)
  assert path.stat().st_size == 8 and small._buf.file is big._buf.file
  big.view(2, dtypes.uint8, 8).copyin(memoryview(b"89"))
  assert path.stat().st_size == 4096
  assert read(big)[:10] == b"0123456789" and read(big)[10:] == bytes(4086)
  big.copyin(memoryview(b"x" * 4096))
  assert read(small) == b"x" * 8  # the smaller buffer reads the same file


def test_views_are_byte_ranges(data_file):
  base = buffer(data_file, 100)
  view = base.view(10, dtypes.uint8, 30)
  assert read(view) == bytes(range(30, 40))
  nested = view.view(4, dtypes.uint8, 2)
  assert nested.offset == 32 and read(nested) == bytes(range(32, 36))
  words = base.view(2, dtypes.uint32, 8)
  assert words.numpy().tolist() == [int.from_bytes(bytes(range(start, start + 4)), "little") for start in (8, 12)]
  view.copyin(memoryview(b"abcdefghij"))
  assert data_file.read_bytes()[28:42] == bytes([28, 29]) + b"abcdefghij" + bytes([40, 41])


def test_no_zero_copy_view(data_file):
  """No memory mapping: a mapped page of a truncated file (or of a sparse file on a full disk) raises SIGBUS."""
  b = buffer(data_file, 100)
  assert not b.allocator.supports_as_buffer and b.allocator.synchronous_copyin
  assert bytes(b.as_memoryview(allow_zero_copy=True)[:3]) == bytes([0, 1, 2])  # a copy, read with preadv


def test_handles_past_the_buffer_are_refused(data_file):
  b = buffer(data_file, 10)
  with pytest.raises(ValueError, match="outside a DISK buffer"):
    b.allocator._offset(b._buf, 8, 4)


# ------------------------------------------------------------------ bad input
def test_missing_directory_names_the_path_and_leaves_no_state(tmp_path):
  path = tmp_path / "not" / "here.bin"
  b = buffer(path, 10, allocate=False)
  with pytest.raises(FileNotFoundError, match=str(path.parent)) as info:
    b.allocate()
  assert str(path) in str(info.value)
  assert not path.exists() and Device[disk(path)].file.opens == [] and not b.is_allocated()
  path.parent.mkdir()  # the same device works once the directory exists
  b.allocate().copyin(memoryview(b"0123456789"))
  assert path.read_bytes() == b"0123456789"


def test_directory_is_refused(tmp_path):
  with pytest.raises(IsADirectoryError, match=str(tmp_path)):
    buffer(tmp_path, 10)


def test_read_only_file_reads_but_refuses_writes(data_file):
  make_read_only(data_file)
  b = buffer(data_file, 100)
  assert read(b) == bytes(range(100))
  with pytest.raises(PermissionError, match=f"{data_file}.*read-only"):
    b.copyin(memoryview(bytes(100)))
  with pytest.raises(PermissionError, match=str(data_file)):
    b.view(4, dtypes.uint8, 10).copyin(memoryview(b"abcd"))
  assert data_file.read_bytes() == bytes(range(100))


def test_read_only_short_file_names_path_and_sizes(data_file):
  make_read_only(data_file)
  with pytest.raises(ValueError, match=f"{data_file}.*100 bytes.*200 bytes"):
    buffer(data_file, 200)
  assert data_file.stat().st_size == 100 and Device[disk(data_file)].file.opens == []
  ok = buffer(data_file, 100)  # a failed open left nothing behind
  assert read(ok) == bytes(range(100))
  with pytest.raises(ValueError, match=f"{data_file}.*100 bytes.*101 bytes"):
    buffer(data_file, 101)  # growing an open read-only file is refused the same way


def test_failed_open_of_unwritable_new_file(tmp_path, monkeypatch):
  path = tmp_path / "f.bin"

  def refuse(*args, **kwargs):
    raise PermissionError(13, "Permission denied")
  monkeypatch.setattr(disk_device.os, "open", refuse)
  with pytest.raises(PermissionError, match=str(path)):
    buffer(path, 10)
  monkeypatch.undo()
  assert Device[disk(path)].file.opens == [] and not path.exists()
  b = buffer(path, 10)
  b.copyin(memoryview(b"0123456789"))
  assert read(b) == b"0123456789"


# ------------------------------------------------------------------ copies: chunked, 64-bit
def test_reads_and_writes_go_in_chunks(tmp_path, monkeypatch):
  monkeypatch.setattr(disk_device, "CHUNK", 4096)
  reads, writes = [], []
  real_preadv, real_pwrite = os.preadv, os.pwrite

  def preadv(fd, bufs, offset):
    reads.append((offset, sum(memoryview(b).nbytes for b in bufs)))
    return real_preadv(fd, bufs, offset)

  def pwrite(fd, data, offset):
    writes.append((offset, memoryview(data).nbytes))
    return real_pwrite(fd, data, offset)
  monkeypatch.setattr(disk_device.os, "preadv", preadv)
  monkeypatch.setattr(disk_device.os, "pwrite", pwrite)
  payload = os.urandom(3 * 4096 + 123)
  b = buffer(tmp_path / "chunks.bin", len(payload) + 7)
  view = b.view(len(payload), dtypes.uint8, 7)
  view.copyin(memoryview(payload))
  assert writes == [(7, 4096), (7 + 4096, 4096), (7 + 8192, 4096), (7 + 12288, 123)]
  out = bytearray(len(payload))
  view.copyout(memoryview(out))
  assert bytes(out) == payload
  assert reads == [(7, 4096), (7 + 4096, 4096), (7 + 8192, 4096), (7 + 12288, 123)]


def test_offsets_past_2_gib(tmp_path):
  """Sizes and offsets are never 32-bit: a sparse 2.5 GiB file, read and written beyond 2 GiB and 4 GiB-ish marks."""
  path = tmp_path / "big.bin"
  size = (5 << 29) + 4096  # 2.5 GiB + a page
  far = (1 << 31) + 12345
  with open(path, "wb") as f:
    f.truncate(size)
    f.seek(far)
    f.write(b"far-marker")
  b = buffer(path, size)
  assert b.nbytes == size and path.stat().st_size == size
  view = b.view(10, dtypes.uint8, far)
  assert read(view) == b"far-marker"
  end = b.view(4, dtypes.uint8, size - 4)
  end.copyin(memoryview(b"tail"))
  with open(path, "rb") as f:
    f.seek(size - 4)
    assert f.read() == b"tail"


def test_truncated_file_is_an_error_not_short_data(tmp_path):
  path = tmp_path / "t.bin"
  b = buffer(path, 8192)
  b.copyin(memoryview(os.urandom(8192)))
  os.truncate(path, 100)  # someone else shrank it
  with pytest.raises(OSError, match=f"{path} ends at byte 100.*truncated"):
    b.copyout(memoryview(bytearray(8192)))
  assert path.stat().st_size == 100  # reading never grows it


# ------------------------------------------------------------------ durability, accounting
def count_fsyncs(monkeypatch, path: pathlib.Path) -> list[int]:
  """Records each os.fsync of ``path`` from now on (buffers of earlier tests may be freed, and synced, meanwhile)."""
  free_buffers()
  synced: list[int] = []
  real_fsync = os.fsync

  def fsync(fd: int) -> None:
    if os.path.exists(path) and os.fstat(fd).st_ino == path.stat().st_ino: synced.append(fd)
    real_fsync(fd)
  monkeypatch.setattr(disk_device.os, "fsync", fsync)
  return synced


def test_synchronize_makes_writes_durable(tmp_path, monkeypatch):
  synced = count_fsyncs(monkeypatch, tmp_path / "s.bin")
  device = Device[disk(tmp_path / "s.bin")]
  b = buffer(tmp_path / "s.bin", 16)
  device.synchronize()
  assert synced == []  # nothing written: nothing to flush
  b.copyin(memoryview(b"0123456789abcdef"))
  device.synchronize()
  assert len(synced) == 1
  device.synchronize()
  assert len(synced) == 1
  b.view(1, dtypes.uint8, 0).copyin(memoryview(b"Z"))  # a write through a view counts too
  device.synchronize()
  assert len(synced) == 2 and (tmp_path / "s.bin").read_bytes()[:2] == b"Z1"


def test_closing_the_file_syncs_it(tmp_path, monkeypatch):
  synced = count_fsyncs(monkeypatch, tmp_path / "c.bin")
  b = buffer(tmp_path / "c.bin", 4)
  b.copyin(memoryview(b"abcd"))
  del b
  free_buffers()
  assert len(synced) == 1


def test_no_memory_accounting(tmp_path):
  b = buffer(tmp_path / "acct.bin", 1 << 20)
  assert b.allocator.allocated_bytes == 0
  del b
  free_buffers()
  assert Device[disk(tmp_path / "acct.bin")].allocator.allocated_bytes == 0


def test_replaced_file_is_reopened(tmp_path):
  path = tmp_path / "r.bin"
  path.write_bytes(b"old-data")
  old = buffer(path, 8)
  replacement = tmp_path / "r.new"
  replacement.write_bytes(b"new-data")
  os.replace(replacement, path)
  new = buffer(path, 8)
  assert read(new) == b"new-data" and read(old) == b"old-data"
  assert len(Device[disk(path)].file.opens) == 2
