"""RDNA3 decoder and single instructions against encodings printed by llvm-mc-19 (gfx1100) and hand-computed
results."""
import struct

import numpy as np
import pytest

from tiny_amd.emulator import decoder, salu, vector
from tiny_amd.emulator.coverage import unsupported
from tiny_amd.emulator.memory import MemoryRegistry
from tiny_amd.emulator.wave_state import EXEC, VCC, WaveBatch


def decode(*words):
  return decoder.decode_one(struct.pack(f"<{len(words)}I", *words) + bytes(8), 0, 0x1000)


@pytest.mark.parametrize("words,fmt,name,fields,size", [
  ((0x06000501,), "VOP2", "v_add_f32", {"vdst": 0, "src0": 0x101, "vsrc1": 0x102}, 4),  # v_add_f32 v0, v1, v2
  ((0xF4040000, 0xF8000010), "SMEM", "s_load_b64", {"sdata": 0, "sbase": 0, "offset": 0x10}, 8),
  ((0xDC520010, 0x01020000), "GLOBAL", "global_load_b32", {"vdst": 1, "addr": 0, "saddr": 2, "offset": 16}, 8),
  ((0xBEFD0000,), "SOP1", "s_mov_b32", {"sdst": 125, "ssrc0": 0}, 4),                                # m0 = s0
  ((0xC9060501, 0x00020B04), "VOPD", "v_dual", {"opx": "v_add_f32", "opy": "v_mul_f32", "vdstx": 0, "vdsty": 3}, 8),
  ((0xD8D80004, 0x01000002), "DS", "ds_load_b32", {"vdst": 1, "addr": 2, "offset0": 4}, 8),
  ((0xD7006A00, 0x00020501), "VOP3", "v_add_co_u32", {"vdst": 0, "sdst": 106, "src0": 0x101, "src1": 0x102}, 8),
  ((0xD6130000, 0x040E0501), "VOP3", "v_fma_f32", {"src0": 0x101, "src1": 0x102, "src2": 0x103}, 8),
  ((0x7E0002FF, 0x12345678), "VOP1", "v_mov_b32", {"src0": 255}, 8),                                 # literal
  ((0xDC510008, 0x01000000), "SCRATCH", "scratch_load_b32", {"vdst": 1, "saddr": 0, "offset": 8}, 8),
  ((0xBFA50006,), "SOPP", "s_cbranch_execz", {"simm16": 6}, 4),
])
def test_decode_llvm_mc_encodings(words, fmt, name, fields, size):
  ins = decode(*words)
  assert (ins.fmt, ins.name, ins.size) == (fmt, name, size)
  for k, v in fields.items(): assert ins.f[k] == v, k
  if fmt == "VOP1": assert ins.lit == 0x12345678


def test_unknown_encoding_names_the_address():
  with pytest.raises(decoder.DecodeError, match="0x1000"):
    decode(0xE4000000, 0)  # MTBUF


def batch(nwaves=2):
  st = WaveBatch(nwaves, 8, 1, 0, MemoryRegistry())
  st.sgpr[:, EXEC] = 0xFFFFFFFF
  return st


def test_scalar_add_carry_and_compare():
  st = batch()
  st.sgpr[:, 0], st.sgpr[:, 1] = [0xFFFFFFFF, 5], [1, 6]
  salu.exec_sop2(st, decode(0x80020100))  # s_add_u32 s2, s0, s1
  assert st.sgpr[:, 2].tolist() == [0, 11] and st.scc.tolist() == [1, 0]
  salu.exec_sop2(st, decode(0x82030100))  # s_addc_u32 s3, s0, s1 (+ SCC)
  assert st.sgpr[:, 3].tolist() == [1, 11]
  salu.exec_sopc(st, decode(0xBF040100))  # s_cmp_lt_i32 s0, s1: -1 < 1, 5 < 6
  assert st.scc.tolist() == [1, 1]


def test_vector_add_respects_exec_and_vcc_compare():
  st = batch(1)
  st.vgpr[1, 0] = np.arange(32, dtype=np.float32).view(np.uint32)
  st.vgpr[2, 0] = np.full(32, 0.5, np.float32).view(np.uint32)
  st.sgpr[0, EXEC] = 0x0000FFFF
  vector.exec_vop(st, decode(0x06000501))  # v_add_f32 v0, v1, v2
  out = st.vgpr[0, 0].view(np.float32)
  assert out[:16].tolist() == [i + 0.5 for i in range(16)] and (out[16:] == 0).all()
  vector.exec_vop(st, decode(0x7C280501))  # v_cmp_gt_f32 vcc, v1, v2: lane > 0.5 for lanes >= 1, exec lanes only
  assert st.sgpr[0, VCC] == 0x0000FFFE


def test_half_true16_high_register_and_inline_constant():
  st = batch(1)
  st.vgpr[0, 0] = (np.float16(3).view(np.uint16).astype(np.uint32) << 16) | np.float16(2).view(np.uint16)
  vector.exec_vop(st, decode(0x6A010100))  # v_mul_f16 v0.l, v0.l, v0.h  (v128 = v0.h)
  assert (st.vgpr[0, 0] & 0xFFFF).astype(np.uint16).view(np.float16)[0] == 6
  vector.exec_vop(st, decode(0x640000F2))  # v_add_f16 v0.l, 1.0, v0.l
  assert (st.vgpr[0, 0] & 0xFFFF).astype(np.uint16).view(np.float16)[0] == 7
  assert (st.vgpr[0, 0] >> 16).astype(np.uint16).view(np.float16)[0] == 3  # high half kept


def test_coverage_lists_only_real_gaps():
  gaps = unsupported()
  assert "v_add_f32" not in gaps.get("VOP2", []) and "s_load_b32" not in gaps.get("SMEM", [])
  assert "v_wmma_f32_16x16x16_f16" in gaps["VOP3P"]


def test_fma_is_correctly_rounded():
  from fractions import Fraction
  from tiny_amd.emulator.valu_ops import fma64, fma_narrow
  rng = np.random.default_rng(3)
  a = rng.standard_normal(3000) * 10.0 ** rng.integers(-20, 20, 3000)
  b = rng.standard_normal(3000) * 10.0 ** rng.integers(-20, 20, 3000)
  c = -(a * b) * (1 + rng.standard_normal(3000) * 1e-15)
  ref = np.array([float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)])
  np.testing.assert_array_equal(fma64(a, b, c), ref)
  # f32: (1+2^-12)^2 + 2^-60 = 1 + 2^-11 + 2^-24 + 2^-60 lies just above the tie between two floats: the correct
  # rounding goes up; rounding through float64 first would lose 2^-60 and round the tie down to even
  x, tiny = np.float32(1 + 2.0**-12), np.float32(2.0**-60)
  assert fma_narrow(np.array([x]), np.array([x]), np.array([tiny]), np.float32)[0] == np.float32(1 + 2**-11 + 2**-23)
  assert np.isnan(fma64(np.array([np.inf]), np.array([0.0]), np.array([1.0]))[0])
  assert fma64(np.array([np.inf]), np.array([2.0]), np.array([1.0]))[0] == np.inf


def test_scalar_bit_ops():
  st = batch(1)
  st.sgpr[0, 0], st.sgpr[0, 1], st.sgpr[0, 2] = 0xF0, 3, 0xFFFFFFF0
  salu.exec_sop1(st, decode(0xBE801201))  # s_bitset1_b32 s0, s1: set bit 3
  assert st.sgpr[0, 0] == 0xF8
  salu.exec_sop1(st, decode(0xBE831802))  # s_bcnt1_i32_b32 s3, s2
  assert st.sgpr[0, 3] == 28 and st.scc[0] == 1
  salu.exec_sop1(st, decode(0xBE840402))  # s_brev_b32 s4, s2
  assert st.sgpr[0, 4] == 0x0FFFFFFF
  salu.exec_sop1(st, decode(0xBE850C02))  # s_cls_i32 s5, s2: 27 bits after the sign equal it
  assert st.sgpr[0, 5] == 27
