"""The core's own host memory: page-aligned anonymous mmaps with zero-copy views.

This is the memory the core needs whatever plugins are installed: the HCQ2 staging ring, host copies and the
PYTHON device's buffers. Every allocation is a fresh anonymous mapping, so it starts page-aligned and zero-filled,
and its address never changes while the handle lives: a queue device can register (pin) it and address it in place.
`HostAllocator` is public so a plugin whose memory is host memory (tiny-cpu) can use it as is.
"""
from __future__ import annotations
import ctypes
import mmap
from typing import Any
from tinycore.device.allocator import BufferSpec, BufferStorage, LRUAllocator

# large buffers are faulted in up front: one kernel-side pass instead of a page fault per 4 KiB on first touch
POPULATE_THRESHOLD = 1 << 20
POPULATE = getattr(mmap, "MAP_POPULATE", 0)
# From 4 MiB (numpy's threshold) a buffer asks for transparent huge pages (2 MiB on x86-64) before it is populated:
# a kernel streaming 64 MB then takes 32 TLB entries instead of 16,384 page walks (a sum of 64 MB on 2 cores: 1.1 ->
# 0.9 ms measured). madvise(MADV_HUGEPAGE) is only advice: with THP off ("never") the pages stay 4 KiB.
HUGE_PAGE_THRESHOLD = 4 << 20
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux >= 5.14; Python 3.11 lacks the name


class HostMemory:
  """A range of host memory: ``nbytes`` at address ``addr``, with a memoryview ``view`` of it. ``mm`` keeps the
  underlying mapping alive (None for adopted external memory); sub-ranges share their parent's ``mm``."""
  __slots__ = ("mm", "addr", "nbytes", "view")

  def __init__(self, mm: mmap.mmap | None, addr: int, nbytes: int, view: memoryview):
    self.mm, self.addr, self.nbytes, self.view = mm, addr, nbytes, view

  def __repr__(self) -> str: return f"<HostMemory {self.nbytes} bytes at {self.addr:#x}>"

  def __bytes__(self) -> bytes: return bytes(self.view)


class HostAllocator(LRUAllocator[HostMemory]):
  """Page-aligned, zero-filled host memory from anonymous mmaps (or adopted memory at ``BufferSpec.external_ptr``).
  Handles are `HostMemory`; views are slices of the mapping, so sub-buffers and host views never copy."""

  def _alloc(self, nbytes: int, spec: BufferSpec) -> HostMemory:
    if spec.external_ptr is not None:
      view = memoryview((ctypes.c_char * nbytes).from_address(spec.external_ptr)).cast("B")
      return HostMemory(None, spec.external_ptr, nbytes, view)
    try:
      # private, so a forked child gets a copy of the parent's buffers (and its own LRU reuse never clobbers them)
      huge = nbytes >= HUGE_PAGE_THRESHOLD and MADV_HUGEPAGE is not None
      populate = POPULATE if nbytes >= POPULATE_THRESHOLD and not huge else 0
      mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    except OSError as error:
      raise MemoryError(f"mmap of {nbytes} bytes failed: {error}") from error
    if huge: populate_huge(mapping)
    # c_char.from_buffer holds a buffer export only while it lives; the address stays valid while the mapping does
    address = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    return HostMemory(mapping, address, nbytes, memoryview(mapping))

  def _free(self, handle: HostMemory, spec: BufferSpec) -> None:
    if handle.mm is None: return
    try:
      handle.view.release()
      handle.mm.close()
    except BufferError:
      pass  # a sub-range or a zero-copy view still uses the memory: the mapping goes when the last of them does

  def _copyin(self, dst: HostMemory, src: memoryview) -> None:
    source = src if src.format == "B" else src.cast("B")
    dst.view[:source.nbytes] = source

  def _copyout(self, dst: memoryview, src: HostMemory) -> None:
    dst[:] = src.view[:dst.nbytes]

  def _offset(self, handle: HostMemory, nbytes: int, offset: int) -> HostMemory:
    return HostMemory(handle.mm, handle.addr + offset, nbytes, handle.view[offset:offset + nbytes])

  def _as_buffer(self, handle: HostMemory) -> memoryview: return handle.view

  def _transfer(self, dst: HostMemory, src: HostMemory, nbytes: int, src_dev: Any, dst_dev: Any) -> None:
    dst.view[:nbytes] = src.view[:nbytes]

  def _map(self, buf: Any) -> BufferStorage:
    """Another device's host-visible memory, used in place (the mapping keeps that memory's host view alive)."""
    if (host := buf.host) is None: raise RuntimeError(f"{buf.device} memory has no host view: it cannot be mapped")
    memory = HostMemory(None, view_address(host), host.nbytes, host)
    return BufferStorage(memory, memory, host)


def populate_huge(mapping: mmap.mmap) -> None:
  """Advise huge pages for a fresh mapping, then fault it in (MAP_POPULATE at mmap time would have made 4 KiB pages
  before the advice). Where the kernel refuses the advice or the populate call, pages come on first touch instead."""
  try: mapping.madvise(MADV_HUGEPAGE)
  except (OSError, ValueError): return
  try: mapping.madvise(MADV_POPULATE_WRITE)
  except (OSError, ValueError): pass


def view_address(view: memoryview) -> int:
  """The address of the first byte of a host memoryview (read-only ones too), 0 for an empty one."""
  import numpy as np
  return int(np.frombuffer(view, dtype=np.uint8).ctypes.data) if view.nbytes else 0
