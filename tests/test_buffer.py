"""Buffer storage and mappings (the seed's test/unit/test_buffer.py::test_mapping): a buffer's memory as another
device addresses it, mapped once by that device's allocator and cached until the memory is freed."""
import numpy as np
import pytest
from tinycore.device.buffer import Buffer
from tinycore.device.registry import Device
from tinycore.dtype import dtypes

HOST_KINDS = ["NPY", "PYTHON"]


def needs_kind(kind: str) -> None:
  if kind not in {spec.prefix for spec in Device.specs()}: pytest.skip(f"no installed plugin provides {kind}")


@pytest.mark.parametrize("host_kind", HOST_KINDS)
def test_mapping(host_kind):
  needs_kind(host_kind)
  b = Buffer("CPU", 8, dtypes.uint8, initial_value=b"abcdefgh")
  assert b.get_storage(host_kind).meta is b.get_buf(host_kind)  # a base's mapping owns what it maps
  v = b.view(4, dtypes.uint8, 2)
  mapped = v.get_storage(host_kind)
  assert bytes(mapped.buf) == b"cdef"
  assert mapped.host is v.host
  assert mapped.meta is None
  assert v.get_storage(host_kind) is mapped
  old = mapped
  b.deallocate()
  assert not v.is_allocated()
  v.host[:] = b"test"  # the view allocates its base again and writes through its host view
  assert v.get_storage(host_kind) is not old
  assert bytes(v.get_buf(host_kind)) == b"test"


def test_mapping_is_the_memory_itself_not_a_copy():
  b = Buffer("CPU", 6, dtypes.uint8, initial_value=b"012345")
  array = b.get_buf("NPY")
  array[1] = ord("x")                              # written through the mapping...
  assert bytes(b.as_memoryview()) == b"0x2345"     # ...is in the buffer
  b.copyin(memoryview(b"abcdef"))
  assert bytes(array) == b"abcdef"                 # and the other way round


def test_own_storage_and_views():
  b = Buffer("CPU", 4, dtypes.float32, initial_value=np.arange(4, dtype=np.float32).tobytes())
  assert b.get_storage() is b.get_storage("cpu:0")  # the own device, by any spelling of its name
  assert b.get_buf() is b.get_storage().buf
  v = b.view(2, dtypes.float32, 8)
  assert np.frombuffer(v.host, np.float32).tolist() == [2.0, 3.0]
  assert v.get_storage().meta is None and v.get_storage().host is v.host


def test_a_view_follows_its_base_after_the_base_is_freed_and_reallocated():
  b = Buffer("CPU", 8, dtypes.uint8, initial_value=b"abcdefgh")
  v = b.view(2, dtypes.uint8, 6)
  assert bytes(v.as_memoryview()) == b"gh"
  b.deallocate()
  b.allocate()
  b.copyin(memoryview(b"ABCDEFGH"))
  assert bytes(v.as_memoryview()) == b"GH"  # not the freed memory


def test_deallocate_a_view_keeps_the_base():
  b = Buffer("CPU", 4, dtypes.uint8, initial_value=b"wxyz")
  v = b.view(2, dtypes.uint8, 1)
  v.get_storage("NPY")
  v.deallocate()
  assert b.is_allocated() and bytes(b.as_memoryview()) == b"wxyz"
  assert bytes(v.get_buf("NPY")) == b"xy"


def test_a_device_that_cannot_map_says_so(tmp_path):
  needs_kind("DISK")
  b = Buffer("CPU", 4, dtypes.uint8, initial_value=b"abcd")
  with pytest.raises(RuntimeError, match="cannot address CPU memory in place"):
    b.get_storage(f"DISK:{tmp_path / 'x.bin'}")
  npy = Buffer("NPY", 4, dtypes.uint8, initial_value=b"abcd")
  assert bytes(npy.get_buf("CPU").view) == b"abcd"  # CPU maps any host-visible memory
