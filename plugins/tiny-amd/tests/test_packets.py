"""The PM4 and SDMA packets the queues write, checked field by field against the kernel headers' layouts."""
from __future__ import annotations
import struct
import pytest
from tinycore.plugin import CommandWriter, Copy, InputAddress
from tiny_amd import pm4, sdma
from tiny_amd.device import AMDCopyQueue, KERNARG_MAGIC, dwords_to_words, fill_kernarg_pointers, offset_value, pad_pm4


def test_packet3_header_is_the_kernels_macro():
  # PACKET3(op, n) = 3 << 30 | (n & 0x3FFF) << 16 | (op & 0xFF) << 8, n = body dwords - 1
  assert pm4.packet3(pm4.NOP, [7]) == [0xC0001000, 7]
  assert pm4.set_sh_reg(pm4.COMPUTE_PGM_LO, [1, 2])[:2] == [0xC0027600, 0x20C]
  assert pm4.packet_size(pm4.dispatch_direct((4, 2, 1), wave32=True)[0]) == 5
  assert pm4.packet_size(pm4.FILLER) == 1


def test_dispatch_release_wait_and_indirect_buffer_fields():
  assert pm4.dispatch_direct((4, 2, 1), wave32=True)[1:] == [4, 2, 1, 1 | 4 | 1 << 15]
  assert pm4.dispatch_direct((4, 2, 1), wave32=False)[4] == 1 | 4
  release = pm4.release_mem(0x1234_5678_9ABC, 0x1_0000_0002)
  assert release[0] >> 8 & 0xFF == pm4.RELEASE_MEM and len(release) == 8
  assert release[2] >> 29 == 2 and release[3:7] == [0x5678_9ABC, 0x1234, 2, 1]
  assert pm4.release_mem(0x1000, 0, pm4.DATA_SEL_CLOCK_64)[2] >> 29 == 3
  wait = pm4.wait_reg_mem64(0x2000, 5)
  assert wait[0] >> 8 & 0xFF == 0x93 and wait[1] == 5 | 1 << 4 and wait[2:6] == [0x2000, 0, 5, 0]
  ib = pm4.indirect_buffer(0x7F00_0000_1000, 40)
  assert ib[1:] == [0x1000, 0x7F00, 40 | 1 << 23]
  with pytest.raises(ValueError, match="at most"):
    pm4.indirect_buffer(0, 1 << 20)


def test_kernarg_pointer_is_filled_at_submit():
  """The launch's USER_DATA_0/1 point at its kernarg words, inside the command buffer at its GPU address."""
  header = pm4.packet3(pm4.NOP, [KERNARG_MAGIC, 0, 0, 0, 0, 0, 0])[:4]
  launch = pad_pm4(pm4.set_sh_reg(pm4.COMPUTE_USER_DATA_0, [0, 0]) + pm4.dispatch_direct((1, 1, 1), True))
  out = CommandWriter()
  out.words(dwords_to_words(pad_pm4(pm4.barrier())))      # something before the launch
  out.words(dwords_to_words(header) + [11, 22] + dwords_to_words(launch))
  blob = bytearray(out.blob)
  fill_kernarg_pointers(blob, 0x5_0000_0000)
  at = len(dwords_to_words(pad_pm4(pm4.barrier()))) * 8
  kernarg = 0x5_0000_0000 + at + 16
  assert struct.unpack_from("<2Q", blob, at + 16) == (11, 22)
  user_data = at + 32 + 8  # the SET_SH_REG header and offset dwords, then the two values
  assert struct.unpack_from("<2I", blob, user_data) == (kernarg & 0xFFFFFFFF, kernarg >> 32)


class _Device:
  device = "AMD"
  class host_mappings:  # noqa: N801 - a stand-in with the one method the copy queue calls
    @staticmethod
    def ensure(address, nbytes=8): pass


def test_sdma_copy_is_split_with_addresses_at_patchable_offsets():
  queue = AMDCopyQueue.__new__(AMDCopyQueue)
  queue.device = _Device()
  nbytes = 2 * sdma.COPY_LINEAR_MAX_BYTES + 5
  encoded = queue.encode([Copy(InputAddress(0, "AMD"), 0x10_0000, nbytes)])
  words = struct.unpack(f"<{len(encoded.blob) // 8}Q", encoded.blob)
  assert len(words) == 12  # three packets of four words
  counts = [words[i + 1] & 0x3FFFFF for i in range(0, 12, 4)]
  assert [c + 1 for c in counts] == [sdma.COPY_LINEAR_MAX_BYTES] * 2 + [5]
  assert [words[i] for i in range(0, 12, 4)] == [sdma.OP_COPY << 32] * 3
  assert [words[i + 2] for i in range(0, 12, 4)] == [0x10_0000 + k * sdma.COPY_LINEAR_MAX_BYTES for k in range(3)]
  assert encoded.patches == [(24, InputAddress(0, "AMD", 0)), (56, InputAddress(0, "AMD", 1 << 22)),
                             (88, InputAddress(0, "AMD", 2 << 22))]
  assert offset_value(7, 3) == 10


def test_sdma_signal_wait_timestamp():
  assert sdma.fence(0x1_0000_0010, 9) == [5, 0x10, 1, 9]
  assert sdma.poll_regmem(0x2000, 3) == [8 | 5 << 28 | 1 << 31, 0x2000, 0, 3, 0xFFFFFFFF, 10 | 0xFFF << 16]
  assert sdma.timestamp(0x3000) == [13 | 2 << 8, 0x3000, 0]
  assert sdma.trap() == [6, 0]
