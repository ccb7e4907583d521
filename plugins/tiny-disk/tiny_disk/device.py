"""The DISK device: a file used as device memory. ``DISK:/abs/path`` names the file; every buffer on it views the
file from byte 0, and sub-buffers (views) are byte ranges of it. DISK stores and moves bytes and never runs kernels.

All I/O is ``os.preadv``/``os.pwrite`` on a file descriptor, never a memory mapping: a mapped page of a file that
another process truncated (or of a sparse file on a full disk) kills the process with SIGBUS, where a system call
returns an error. Every I/O failure is an OSError naming the file.

Opening is split by intent. The first allocation opens an existing file read-only and keeps that descriptor: the
buffers read the file that was there when they were allocated, even if the path is replaced later (``os.replace``),
and a read past the file's end (it was truncated) is an OSError, never zeros. Allocation creates and grows nothing:
the first write opens the file for writing (creating it if missing, and checking that the path still names the file
the buffers were allocated on), then reserves the space the buffer needs with ``posix_fallocate`` before writing, so
a full disk fails there, cleanly, with the file restored to its old size. Files are never shrunk; block devices are
not grown. A file with no write permission bits is read-only even for root: reading works, writing raises
PermissionError, and a buffer larger than it is a ValueError at allocation.

The open is shared by every buffer on that device name (refcounted: it is fsynced, if written, and closed when the
last buffer is freed). Copies move at most ``CHUNK`` bytes per system call, straight between the file and the
other side's memory. Sizes and offsets are Python ints throughout (files over 2 GiB are fine).
``DiskDevice.synchronize()`` makes the writes durable (fsync).
"""
from __future__ import annotations
import errno
import os
import stat
import threading
from typing import Any
from tinycore.plugin import Allocator, BufferSpec, Compiled

PREFIX = "DISK"
CHUNK = 64 << 20  # bytes per read/write system call: big enough to stream, small enough to bound a copy's extra memory
SHM_DIR = "/dev/shm"
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def disk_path(name: str) -> str | None:
  """The file a canonical DISK device name refers to: "DISK:/abs/path" -> "/abs/path", "DISK:shm:x" -> "/dev/shm/x";
  None for the bare kind name "DISK" (which lists the kind but holds no file). The path is taken verbatim (a name
  ending in ":0" is that file). A relative or empty path is a ValueError naming it."""
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


def _os_error(error: OSError, what: str, path: str) -> OSError:
  """The same kind of OSError (FileNotFoundError stays one), with a message that says what failed on which file."""
  return type(error)(error.errno, f"{what} DISK file {path}: {_describe(error)}", path)


def _file_size(fd: int, st: os.stat_result) -> int:
  return os.lseek(fd, 0, os.SEEK_END) if stat.S_ISBLK(st.st_mode) else st.st_size


def _no_write_bits(st: os.stat_result) -> bool:
  """A regular file nobody may write: read-only for DISK even when run as root (who could write it anyway)."""
  return stat.S_ISREG(st.st_mode) and not st.st_mode & 0o222


class OpenFile:
  """One open of a DISK file, shared by the buffers allocated on it: the descriptor (read-only until the first write;
  None while the file does not exist yet), the file's identity, and how many buffers use it. Closed when the last
  buffer is freed. If the path is replaced or removed while open, new allocations open the new file and this one
  lives on, read-only in effect, for the buffers that use it."""

  def __init__(self, path: str, fd: int | None, inode: tuple[int, int] | None, size: int, block: bool,
               read_only: bool):
    self.path, self.fd, self.inode, self.size, self.block, self.read_only = path, fd, inode, size, block, read_only
    self.writable = False  # whether fd is open for writing (after the first write)
    self.refcount = 0
    self.dirty = False
    self.closed = False

  @staticmethod
  def open(path: str) -> OpenFile:
    """Open ``path`` for reading if it exists (a missing file is opened, and created, by the first write)."""
    try: fd = os.open(path, os.O_RDONLY | CLOEXEC)
    except FileNotFoundError:
      directory = os.path.dirname(path) or "/"
      if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, f"cannot open DISK file {path}: the directory {directory} does not "
                                "exist", path) from None
      return OpenFile(path, None, None, 0, False, False)
    except IsADirectoryError:
      raise IsADirectoryError(errno.EISDIR, f"cannot open DISK file {path}: it is a directory", path) from None
    except OSError as error: raise _os_error(error, "cannot open", path) from None
    try:
      st = os.fstat(fd)
      if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, f"cannot open DISK file {path}: it is a directory", path)
      return OpenFile(path, fd, (st.st_dev, st.st_ino), _file_size(fd, st), stat.S_ISBLK(st.st_mode),
                      _no_write_bits(st))
    except BaseException:
      os.close(fd)
      raise

  def still_named(self) -> bool:
    """Whether the path still names this file (it may have been replaced, removed or, if it was missing, created)."""
    try: st = os.stat(self.path)
    except OSError: return self.inode is None
    return (st.st_dev, st.st_ino) == self.inode

  def check_fits(self, nbytes: int) -> None:
    """Refuse, at allocation, a buffer that a file which cannot grow does not hold."""
    if self.size >= nbytes or self.fd is None: return
    if self.read_only:
      raise ValueError(f"DISK file {self.path} is read-only and holds {self.size} bytes: a buffer of {nbytes} bytes "
                       "does not fit (it cannot be grown)")
    if self.block:
      raise ValueError(f"DISK block device {self.path} holds {self.size} bytes: a buffer of {nbytes} bytes does not "
                       "fit")

  def prepare_write(self, extent: int) -> int:
    """Make the file writable and at least ``extent`` bytes long (space reserved), and return the descriptor."""
    if self.read_only:
      raise PermissionError(errno.EACCES, f"cannot write to DISK file {self.path}: it is read-only", self.path)
    if not self.writable: self._reopen_for_writing()
    assert self.fd is not None
    if not self.still_named():
      raise OSError(errno.ESTALE, f"cannot write to DISK file {self.path}: the path was replaced or removed since "
                    "its buffers were allocated (the write would be lost)", self.path)
    self.size = _file_size(self.fd, os.fstat(self.fd))  # another process may have truncated or grown it
    if self.size < extent and not self.block:
      _reserve(self.fd, self.path, self.size, extent)
      self.size = extent
    return self.fd

  def _reopen_for_writing(self) -> None:
    flags = os.O_RDWR | CLOEXEC | (os.O_CREAT if self.inode is None else 0)
    try: fd = os.open(self.path, flags, 0o666)
    except PermissionError as error:
      raise PermissionError(error.errno, f"cannot write to DISK file {self.path}: it is read-only "
                            f"({_describe(error)})", self.path) from None
    except OSError as error: raise _os_error(error, "cannot open for writing", self.path) from None
    st = os.fstat(fd)
    if self.inode is not None and (st.st_dev, st.st_ino) != self.inode:
      os.close(fd)
      raise OSError(errno.ESTALE, f"cannot write to DISK file {self.path}: the path was replaced or removed since "
                    "its buffers were allocated (the write would be lost)", self.path)
    if self.fd is not None:
      # the same descriptor number now writes too: a read running in another thread keeps a valid descriptor
      os.dup2(fd, self.fd, inheritable=False)
      os.close(fd)
      fd = self.fd
    self.fd, self.inode, self.writable = fd, (st.st_dev, st.st_ino), True
    self.block, self.size = stat.S_ISBLK(st.st_mode), _file_size(fd, st)

  def sync(self) -> None:
    """Make everything written so far durable (fsync)."""
    if self.closed or not self.dirty or self.fd is None: return
    try: os.fsync(self.fd)
    except OSError as error:
      if error.errno not in (errno.EINVAL, errno.EROFS):
        raise OSError(error.errno, f"fsync of DISK file {self.path} failed: {_describe(error)}", self.path) from None
    self.dirty = False

  def close(self) -> None:
    """Sync what was written, then close (even if the sync fails, which is then raised)."""
    if self.closed: return
    try:
      self.sync()
    finally:
      self.closed = True
      if self.fd is not None: os.close(self.fd)


def _reserve(fd: int, path: str, size: int, extent: int) -> None:
  """Grow the file from ``size`` to ``extent`` bytes with the blocks reserved (posix_fallocate), so that a full disk
  fails here and not in the middle of a write; on failure the file keeps its old size. Filesystems that cannot
  reserve space are grown sparse (ftruncate): their writes still fail cleanly with ENOSPC."""
  try:
    if hasattr(os, "posix_fallocate"):
      try:
        os.posix_fallocate(fd, size, extent - size)
        return
      except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS): raise
    os.ftruncate(fd, extent)
  except OSError as error:
    try: os.ftruncate(fd, size)  # give back what a failed reservation took
    except OSError: pass
    raise OSError(error.errno, f"cannot grow DISK file {path} from {size} to {extent} bytes: {_describe(error)}",
                  path) from None


class DiskHandle:
  """A DISK buffer: ``nbytes`` at byte ``offset`` of an open file. ``extent`` is the size of the allocation it
  belongs to: the file grows to it on the first write (a view's write grows the file for its whole buffer)."""
  __slots__ = ("file", "offset", "nbytes", "extent")

  def __init__(self, file: OpenFile, offset: int, nbytes: int, extent: int):
    self.file, self.offset, self.nbytes, self.extent = file, offset, nbytes, extent

  def __repr__(self) -> str: return f"<DiskHandle {self.file.path} [{self.offset}:{self.offset + self.nbytes}]>"


class DiskFile:
  """The file behind one DISK device name: opened on the first allocation, shared by every buffer allocated while
  the path names the same file, closed when the last of them is freed (a later allocation opens it again)."""

  def __init__(self, path: str):
    self.path = path
    self.lock = threading.RLock()
    self.current: OpenFile | None = None
    self.opens: list[OpenFile] = []  # every open still in use (more than one only after the path was replaced)

  def acquire(self, nbytes: int) -> DiskHandle:
    with self.lock:
      current = self.current
      if current is not None and not current.still_named(): current = None
      if current is None:
        current = OpenFile.open(self.path)
        try: current.check_fits(nbytes)
        except BaseException:
          current.close()
          raise
        self.current = current
        self.opens.append(current)
      else: current.check_fits(nbytes)
      current.refcount += 1
      return DiskHandle(current, 0, nbytes, nbytes)

  def release(self, handle: DiskHandle) -> None:
    with self.lock:
      opened = handle.file
      opened.refcount -= 1
      if opened.refcount > 0: return
      if self.current is opened: self.current = None
      if opened in self.opens: self.opens.remove(opened)
      opened.close()

  def write(self, handle: DiskHandle, source: memoryview) -> None:
    """Write ``source`` at the handle's offset: the file is made writable and grown (space reserved) first."""
    with self.lock:
      fd = handle.file.prepare_write(handle.extent)
      handle.file.dirty = True
    path, done, total = handle.file.path, 0, source.nbytes
    while done < total:
      try: written = os.pwrite(fd, source[done:done + CHUNK], handle.offset + done)
      except OSError as error:
        raise OSError(error.errno, f"write of {total} bytes to DISK file {path} at byte {handle.offset + done} "
                      f"failed: {_describe(error)}", path) from None
      if written <= 0: raise OSError(errno.EIO, f"write to DISK file {path} made no progress", path)
      done += written

  def read(self, handle: DiskHandle, target: memoryview) -> None:
    """Fill ``target`` from the handle's offset. A file that ends before the range does (it was truncated, or never
    written that far) is an OSError naming it: never zeros, never a signal."""
    opened, done, total = handle.file, 0, target.nbytes
    if opened.fd is None:
      raise FileNotFoundError(errno.ENOENT, f"cannot read DISK file {opened.path}: it did not exist when its buffer "
                              "was allocated and nothing has been written to it", opened.path)
    while done < total:
      chunk = target[done:done + min(CHUNK, total - done)]
      try:
        if hasattr(os, "preadv"): count = os.preadv(opened.fd, [chunk], handle.offset + done)
        else:  # no preadv (older macOS)
          data = os.pread(opened.fd, chunk.nbytes, handle.offset + done)
          chunk[:len(data)] = data
          count = len(data)
      except OSError as error:
        raise OSError(error.errno, f"read of {total} bytes from DISK file {opened.path} at byte "
                      f"{handle.offset + done} failed: {_describe(error)}", opened.path) from None
      if count <= 0:
        raise OSError(errno.EIO, f"DISK file {opened.path} ends at byte {handle.offset + done}, inside the "
                      f"{total} bytes read at byte {handle.offset} (it was truncated, or never written that far)",
                      opened.path)
      done += count

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
  not device memory, so allocations are not counted in ``allocated_bytes``. There is no zero-copy host view (no
  ``_as_buffer``): every copy is a system call that reports failure, and ``_copyin`` is done when it returns."""
  synchronous_copyin = True

  def __init__(self, file: DiskFile | None, name: str):
    super().__init__()
    self.file, self.name = file, name

  def alloc(self, nbytes: int, spec: BufferSpec | None = None) -> DiskHandle:
    if not isinstance(nbytes, int) or nbytes <= 0:
      raise ValueError(f"allocation size must be a positive int, got {nbytes!r}")
    return self._alloc(nbytes, spec or BufferSpec())

  def free(self, handle: DiskHandle, nbytes: int, spec: BufferSpec | None = None) -> None:
    self._free(handle, spec or BufferSpec())

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
    return DiskHandle(handle.file, handle.offset + offset, nbytes, handle.extent)

  def _copyin(self, dst: DiskHandle, src: memoryview) -> None:
    self._check_open(dst)
    source = _bytes_view(src)
    if source.nbytes > dst.nbytes:
      raise ValueError(f"copyin of {source.nbytes} bytes into a DISK buffer of {dst.nbytes} bytes ({dst.file.path})")
    assert self.file is not None
    self.file.write(dst, source)

  def _copyout(self, dst: memoryview, src: DiskHandle) -> None:
    self._check_open(src)
    target = _bytes_view(dst)
    assert self.file is not None
    self.file.read(src, target[:min(target.nbytes, src.nbytes)])

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
