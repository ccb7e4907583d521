"""The DISK device: a file used as device memory. ``DISK:/abs/path`` names the file; every buffer on it views the
file from byte 0, and sub-buffers (views) are byte ranges of it. DISK stores and moves bytes and never runs kernels.

The file is opened on the first allocation and shared by every buffer on that device name (refcounted: the file
closes when the last buffer is freed). Opening creates the file if it is missing, grows it with ftruncate to the size
a buffer needs (never shrinks it; block devices are not grown) and maps it with mmap. A file that nobody may write
(no write permission bits, or one that cannot be opened for writing) is opened and mapped read-only: reading works,
writing raises PermissionError.

Copies: ``_copyout`` reads with ``os.preadv`` straight into the destination, in chunks of ``CHUNK`` bytes, so reading
a file into host memory needs no second full-size copy; ``_copyin`` writes with ``os.pwrite`` in the same chunks.
``_as_buffer`` is the zero-copy mmap slice the core's copy path stores into. Sizes and offsets are Python ints
throughout (files over 2 GiB are fine). ``DiskDevice.synchronize()`` makes the writes durable (msync + fsync).
"""
from __future__ import annotations
import errno
import mmap
import os
import stat
import threading
from typing import Any
from tinycore.plugin import Allocator, BufferSpec, Compiled

PREFIX = "DISK"
CHUNK = 64 << 20  # bytes per read/write system call: big enough to stream, small enough to bound a copy's extra memory
SHM_DIR = "/dev/shm"


def disk_path(name: str) -> str | None:
  """The file a canonical DISK device name refers to: "DISK:/abs/path" -> "/abs/path", "DISK:shm:x" -> "/dev/shm/x";
  None for the bare kind name "DISK" (which lists the kind but holds no file). A relative or empty path is a
  ValueError naming it."""
  prefix, separator, rest = name.partition(":")
  if prefix != PREFIX: raise ValueError(f"not a DISK device name: {name!r}")
  if not separator: return None
  if rest.startswith("shm:"):
    shm_name = rest[len("shm:"):]
    if not shm_name or "/" in shm_name:
      raise ValueError(f"bad DISK shared-memory name {name!r}: use DISK:shm:NAME with a NAME that has no '/'")
    if not os.path.isdir(SHM_DIR): raise ValueError(f"{name!r}: this system has no {SHM_DIR} for shared memory")
    return os.path.join(SHM_DIR, shm_name)
  if not rest: raise ValueError(f"DISK device {name!r} names no file: use DISK:/absolute/path")
  if not os.path.isabs(rest):
    raise ValueError(f"DISK device {name!r} names the relative path {rest!r}: use an absolute path, "
                     f"as in DISK:{os.path.abspath(rest)}")
  return rest


def _describe(error: OSError) -> str:
  return error.strerror or str(error)


def open_file(path: str) -> tuple[int, bool]:
  """Open ``path`` for a DISK device: (fd, read_only). Read-write and created if missing; read-only when the file has
  no write permission bits (even for root, who could otherwise write anything) or cannot be opened for writing.
  Errors name the path."""
  cloexec = getattr(os, "O_CLOEXEC", 0)
  try:
    st: os.stat_result | None = os.stat(path)
  except FileNotFoundError:
    st = None
  except OSError as error:
    raise type(error)(error.errno, f"cannot open DISK file {path}: {_describe(error)}", path) from None
  if st is not None and stat.S_ISDIR(st.st_mode):
    raise IsADirectoryError(errno.EISDIR, f"cannot open DISK file {path}: it is a directory", path)
  if st is not None and not st.st_mode & 0o222 and stat.S_ISREG(st.st_mode):
    return os.open(path, os.O_RDONLY | cloexec), True
  try:
    return os.open(path, os.O_RDWR | os.O_CREAT | cloexec, 0o666), False
  except FileNotFoundError:
    directory = os.path.dirname(path) or "/"
    raise FileNotFoundError(errno.ENOENT, f"cannot open DISK file {path}: the directory {directory} does not exist",
                            path) from None
  except OSError as error:
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ETXTBSY) and st is not None:
      try:
        return os.open(path, os.O_RDONLY | cloexec), True
      except OSError:
        pass
    raise type(error)(error.errno, f"cannot open DISK file {path}: {_describe(error)}", path) from None


class OpenFile:
  """One open of a DISK file: its fd, its mappings (one per size it was mapped at; the newest serves new buffers) and
  how many buffers use it. Closed when the last buffer is freed. If the path is replaced (``os.replace``) or
  removed while open, the next allocation opens the new file and this one lives on for the buffers that use it."""

  def __init__(self, path: str, fd: int, read_only: bool, mm: mmap.mmap, size: int, inode: tuple[int, int]):
    self.path, self.fd, self.read_only, self.mm, self.size, self.inode = path, fd, read_only, mm, size, inode
    self.old_maps: list[mmap.mmap] = []  # smaller mappings that older buffers still use
    self.refcount = 0
    self.dirty = False
    self.closed = False

  @staticmethod
  def open(path: str, nbytes: int) -> OpenFile:
    """Open (creating if needed), grow to ``nbytes`` and map. On any failure nothing stays open."""
    fd, read_only = open_file(path)
    try:
      st = os.fstat(fd)
      block = stat.S_ISBLK(st.st_mode)
      size = os.lseek(fd, 0, os.SEEK_END) if block else st.st_size
      if size < nbytes:
        _check_can_grow(path, read_only, block, size, nbytes)
        _ftruncate(fd, path, nbytes)
        size = nbytes
      mm = _map(fd, path, size, read_only)
      return OpenFile(path, fd, read_only, mm, size, (st.st_dev, st.st_ino))
    except BaseException:
      os.close(fd)
      raise

  def grow(self, nbytes: int) -> None:
    """Make the file and the newest mapping at least ``nbytes`` long (a buffer larger than any before it)."""
    st = os.fstat(self.fd)
    block = stat.S_ISBLK(st.st_mode)
    size = os.lseek(self.fd, 0, os.SEEK_END) if block else st.st_size
    if size < nbytes:
      _check_can_grow(self.path, self.read_only, block, size, nbytes)
      _ftruncate(self.fd, self.path, nbytes)
      size = nbytes
    mm = _map(self.fd, self.path, size, self.read_only)
    # buffers made before keep the old (smaller) mapping: both map the same file, so they see the same bytes
    self.old_maps.append(self.mm)
    self.mm, self.size = mm, size

  def maps(self) -> list[mmap.mmap]: return [self.mm, *self.old_maps]

  def sync(self) -> None:
    """Make everything written so far durable: msync every mapping, then fsync the file."""
    if self.closed or self.read_only or not self.dirty: return
    for mm in self.maps():
      try: mm.flush()
      except ValueError: pass  # a mapping that was closed
    try: os.fsync(self.fd)
    except OSError as error:
      if error.errno not in (errno.EINVAL, errno.EROFS): raise OSError(error.errno, f"fsync of {self.path} failed: "
                                                                       f"{_describe(error)}", self.path) from None
    self.dirty = False

  def close(self) -> None:
    """Sync what was written, then unmap and close (even if the sync fails, which is then raised)."""
    if self.closed: return
    try:
      self.sync()
    finally:
      self.closed = True
      for mm in self.maps():
        try: mm.close()
        except BufferError: pass  # a zero-copy view is still exported: the mapping goes when the last view does
      self.old_maps.clear()
      os.close(self.fd)


def _check_can_grow(path: str, read_only: bool, block: bool, size: int, nbytes: int) -> None:
  if read_only:
    raise ValueError(f"DISK file {path} is read-only and holds {size} bytes: a buffer of {nbytes} bytes does not fit "
                     "(it cannot be grown)")
  if block:
    raise ValueError(f"DISK block device {path} holds {size} bytes: a buffer of {nbytes} bytes does not fit")


def _ftruncate(fd: int, path: str, nbytes: int) -> None:
  try: os.ftruncate(fd, nbytes)
  except OSError as error:
    raise OSError(error.errno, f"cannot grow DISK file {path} to {nbytes} bytes: {_describe(error)}", path) from None


def _map(fd: int, path: str, size: int, read_only: bool) -> mmap.mmap:
  try: return mmap.mmap(fd, size, access=mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE)
  except (OSError, ValueError, OverflowError) as error:
    raise OSError(getattr(error, "errno", None), f"cannot mmap {size} bytes of DISK file {path}: {error}",
                  path) from None


class DiskHandle:
  """A DISK buffer: ``nbytes`` at byte ``offset`` of an open file, through the mapping ``mm`` it was made with."""
  __slots__ = ("file", "mm", "offset", "nbytes")

  def __init__(self, file: OpenFile, mm: mmap.mmap, offset: int, nbytes: int):
    self.file, self.mm, self.offset, self.nbytes = file, mm, offset, nbytes

  def __repr__(self) -> str: return f"<DiskHandle {self.file.path} [{self.offset}:{self.offset + self.nbytes}]>"


class DiskFile:
  """The file behind one DISK device name: opens it on the first allocation, hands every buffer a handle on the
  shared open, and closes it when the last buffer is freed (a later allocation opens it again)."""

  def __init__(self, path: str):
    self.path = path
    self.lock = threading.RLock()
    self.current: OpenFile | None = None
    self.opens: list[OpenFile] = []  # every open still in use (more than one only after the path was replaced)

  def acquire(self, nbytes: int) -> DiskHandle:
    with self.lock:
      current = self.current
      if current is not None and not self._still_names(current): current = None
      if current is None:
        current = OpenFile.open(self.path, nbytes)
        self.current = current
        self.opens.append(current)
      elif nbytes > current.size: current.grow(nbytes)
      current.refcount += 1
      return DiskHandle(current, current.mm, 0, nbytes)

  def _still_names(self, opened: OpenFile) -> bool:
    """Whether the path still names the file we have open (it may have been replaced or removed since)."""
    try: st = os.stat(self.path)
    except OSError: return False
    return (st.st_dev, st.st_ino) == opened.inode

  def release(self, handle: DiskHandle) -> None:
    with self.lock:
      opened = handle.file
      opened.refcount -= 1
      if opened.refcount > 0: return
      if self.current is opened: self.current = None
      if opened in self.opens: self.opens.remove(opened)
      opened.close()

  def sync(self) -> None:
    with self.lock:
      for opened in list(self.opens): opened.sync()

  @property
  def read_only(self) -> bool: return self.current is not None and self.current.read_only


def _bytes_view(mv: memoryview) -> memoryview:
  mv = memoryview(mv)
  return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


class DiskAllocator(Allocator[DiskHandle]):
  """Buffers in a file. Each allocation views the file from offset 0; ``_offset`` makes sub-ranges. DISK memory is
  not device memory, so allocations are not counted in ``allocated_bytes``."""

  def __init__(self, file: DiskFile | None, name: str):
    super().__init__()
    self.file, self.name = file, name

  def alloc(self, nbytes: int, spec: BufferSpec | None = None) -> DiskHandle:
    if not isinstance(nbytes, int) or nbytes <= 0:
      raise ValueError(f"allocation size must be a positive int, got {nbytes!r}")
    return self._alloc(nbytes, spec or BufferSpec())

  def free(self, handle: DiskHandle, nbytes: int, spec: BufferSpec | None = None) -> None:
    self._free(handle, spec or BufferSpec())

  @property
  def supports_as_buffer(self) -> bool:  # type: ignore[override]
    # a read-only file has no writable view to store into: copies into it then go through _copyin, which says why
    return self.file is not None and not self.file.read_only

  def _alloc(self, nbytes: int, spec: BufferSpec) -> DiskHandle:
    if self.file is None:
      raise ValueError(f"{self.name} names no file, so it cannot hold a buffer: use a device DISK:/absolute/path")
    return self.file.acquire(nbytes)

  def _free(self, handle: DiskHandle, spec: BufferSpec) -> None:
    if self.file is not None: self.file.release(handle)

  def _offset(self, handle: DiskHandle, nbytes: int, offset: int) -> DiskHandle:
    if offset < 0 or offset + nbytes > handle.nbytes:
      raise ValueError(f"sub-buffer [{offset}:{offset + nbytes}] outside a DISK buffer of {handle.nbytes} bytes "
                       f"({handle.file.path})")
    return DiskHandle(handle.file, handle.mm, handle.offset + offset, nbytes)

  def _as_buffer(self, handle: DiskHandle) -> memoryview:
    """The mapped bytes (writable, or read-only for a read-only file). Writing through it is a store into the file."""
    self._check_open(handle)
    if not handle.file.read_only: handle.file.dirty = True
    return memoryview(handle.mm)[handle.offset:handle.offset + handle.nbytes]

  def _copyin(self, dst: DiskHandle, src: memoryview) -> None:
    self._check_open(dst)
    if dst.file.read_only:
      raise PermissionError(errno.EACCES, f"cannot write to DISK file {dst.file.path}: it is read-only", dst.file.path)
    source = _bytes_view(src)
    if source.nbytes > dst.nbytes:
      raise ValueError(f"copyin of {source.nbytes} bytes into a DISK buffer of {dst.nbytes} bytes ({dst.file.path})")
    dst.file.dirty = True
    fd, done, total = dst.file.fd, 0, source.nbytes
    while done < total:
      try: written = os.pwrite(fd, source[done:done + CHUNK], dst.offset + done)
      except OSError as error:
        raise OSError(error.errno, f"write of {total} bytes to DISK file {dst.file.path} at byte "
                      f"{dst.offset + done} failed: {_describe(error)}", dst.file.path) from None
      if written <= 0: raise OSError(errno.EIO, f"write to DISK file {dst.file.path} made no progress", dst.file.path)
      done += written

  def _copyout(self, dst: memoryview, src: DiskHandle) -> None:
    self._check_open(src)
    target = _bytes_view(dst)
    total = min(target.nbytes, src.nbytes)
    fd, path, done = src.file.fd, src.file.path, 0
    while done < total:
      chunk = target[done:done + min(CHUNK, total - done)]
      try:
        if hasattr(os, "preadv"): count = os.preadv(fd, [chunk], src.offset + done)
        else:  # no preadv (older macOS): copy from the mapping, one chunk at a time
          chunk[:] = memoryview(src.mm)[src.offset + done:src.offset + done + chunk.nbytes]
          count = chunk.nbytes
      except OSError as error:
        raise OSError(error.errno, f"read of {total} bytes from DISK file {path} at byte {src.offset + done} failed: "
                      f"{_describe(error)}", path) from None
      if count <= 0:
        raise EOFError(f"DISK file {path} ended at byte {src.offset + done} while reading {total} bytes at byte "
                       f"{src.offset} (was it truncated?)")
      done += count

  @staticmethod
  def _check_open(handle: DiskHandle) -> None:
    if handle.file.closed: raise RuntimeError(f"DISK buffer {handle!r} is used after its file was closed")


class DiskDevice(Compiled):
  """A DISK device: ``DISK:/abs/path`` (the file) or ``DISK:shm:NAME`` (a file in /dev/shm). No renderer, compiler
  or runtime: DISK never computes. The bare name "DISK" is the kind itself: it opens (so ``tinycore devices`` can
  list it) but holds no buffer."""

  def __init__(self, name: str):
    self.path = disk_path(name)
    self.file = DiskFile(self.path) if self.path is not None else None
    super().__init__(name, DiskAllocator(self.file, name))

  def synchronize(self) -> None:
    """Make every write to this file durable (msync of the mappings, then fsync)."""
    if self.file is not None: self.file.sync()

  def finalize(self) -> None:
    self.synchronize()

  def capabilities(self) -> dict[str, Any]:
    return {"compute": False, "file": self.path if self.path is not None else "DISK:/absolute/path"}
