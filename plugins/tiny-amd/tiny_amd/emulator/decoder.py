"""RDNA3 (gfx1100) machine-code decoder: bytes -> a list of Instr records (format, mnemonic, operand fields, the
trailing literal). The encodings follow the RDNA3 ISA; the opcode -> mnemonic tables come from LLVM's own
disassembler (rdna3_opcodes.py). rdna3.Program decodes each address once and caches it by (address, bytes)."""
from __future__ import annotations

import struct

from tiny_amd.emulator import rdna3_opcodes as opcodes

LITERAL = 255      # a source operand field value that means "the 32-bit literal after the instruction"
DPP8, DPP8_FI, DPP16 = 233, 234, 250


class DecodeError(Exception):
  """The bytes at an address are not an instruction this emulator knows."""


class Instr:
  """One decoded instruction: `pc` (byte address), `size` (bytes), `fmt` (encoding name), `name` (mnemonic),
  `f` (dict of the encoding's fields), `lit` (the 32-bit literal or None)."""
  __slots__ = ("pc", "size", "fmt", "name", "f", "lit", "handler")

  def __init__(self, pc: int, size: int, fmt: str, name: str, f: dict, lit: int | None = None):
    self.pc, self.size, self.fmt, self.name, self.f, self.lit = pc, size, fmt, name, f, lit
    self.handler = None  # bound by the interpreter on first use

  def __repr__(self) -> str:
    return f"<{self.fmt} {self.name} @0x{self.pc:x} {self.f}{'' if self.lit is None else f' lit=0x{self.lit:x}'}>"


def bits(word: int, hi: int, lo: int) -> int:
  return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


def sign_extend(value: int, nbits: int) -> int:
  return value - (1 << nbits) if value & (1 << (nbits - 1)) else value


def lookup(table: dict, op: int, fmt: str, pc: int) -> str:
  if op not in table: raise DecodeError(f"unknown {fmt} opcode {op} at 0x{pc:x}")
  return table[op]


def decode_scalar(w: int, pc: int) -> tuple[str, str, dict, list[int]]:
  """SOP1/SOP2/SOPK/SOPC/SOPP: (fmt, name, fields, source fields that may be a literal)."""
  top9 = bits(w, 31, 23)
  if top9 == 0x17D:
    f = {"sdst": bits(w, 22, 16), "op": bits(w, 15, 8), "ssrc0": bits(w, 7, 0)}
    return "SOP1", lookup(opcodes.SOP1, f["op"], "SOP1", pc), f, [f["ssrc0"]]
  if top9 == 0x17E:
    f = {"op": bits(w, 22, 16), "ssrc1": bits(w, 15, 8), "ssrc0": bits(w, 7, 0)}
    return "SOPC", lookup(opcodes.SOPC, f["op"], "SOPC", pc), f, [f["ssrc0"], f["ssrc1"]]
  if top9 == 0x17F:
    f = {"op": bits(w, 22, 16), "simm16": bits(w, 15, 0)}
    return "SOPP", lookup(opcodes.SOPP, f["op"], "SOPP", pc), f, []
  if bits(w, 31, 28) == 0xB:
    f = {"op": bits(w, 27, 23), "sdst": bits(w, 22, 16), "simm16": bits(w, 15, 0)}
    name = lookup(opcodes.SOPK, f["op"], "SOPK", pc)
    return "SOPK", name, f, [LITERAL] if name == "s_setreg_imm32_b32" else []
  f = {"op": bits(w, 29, 23), "sdst": bits(w, 22, 16), "ssrc1": bits(w, 15, 8), "ssrc0": bits(w, 7, 0)}
  return "SOP2", lookup(opcodes.SOP2, f["op"], "SOP2", pc), f, [f["ssrc0"], f["ssrc1"]]


def decode_vop3(w: int, w2: int, pc: int) -> tuple[str, dict]:
  op = bits(w, 25, 16)
  name = lookup(opcodes.VOP3, op, "VOP3", pc)
  f = {"op": op, "vdst": bits(w, 7, 0), "abs": bits(w, 10, 8), "opsel": bits(w, 14, 11), "clamp": bits(w, 15, 15),
       "sdst": bits(w, 14, 8), "src0": bits(w2, 8, 0), "src1": bits(w2, 17, 9), "src2": bits(w2, 26, 18),
       "omod": bits(w2, 28, 27), "neg": bits(w2, 31, 29)}
  return name, f


def decode_vop3p(w: int, w2: int, pc: int) -> tuple[str, dict]:
  op = bits(w, 22, 16)
  name = lookup(opcodes.VOP3P, op, "VOP3P", pc)
  f = {"op": op, "vdst": bits(w, 7, 0), "neg_hi": bits(w, 10, 8), "opsel": bits(w, 13, 11),
       "opsel_hi": bits(w2, 28, 27) | bits(w, 14, 14) << 2, "clamp": bits(w, 15, 15),
       "src0": bits(w2, 8, 0), "src1": bits(w2, 17, 9), "src2": bits(w2, 26, 18), "neg": bits(w2, 31, 29)}
  return name, f


def decode_vopd(w: int, w2: int, pc: int) -> tuple[str, dict]:
  opx, opy = bits(w, 25, 22), bits(w, 21, 17)
  vdstx = bits(w2, 31, 24)
  f = {"opx": lookup(opcodes.VOPD_X, opx, "VOPD X", pc), "opy": lookup(opcodes.VOPD_Y, opy, "VOPD Y", pc),
       "srcx0": bits(w, 8, 0), "vsrcx1": bits(w, 16, 9) + 256, "vdstx": vdstx,
       "srcy0": bits(w2, 8, 0), "vsrcy1": bits(w2, 16, 9) + 256, "vdsty": (bits(w2, 23, 17) << 1) | ((vdstx & 1) ^ 1)}
  return "v_dual", f


def decode_memory(fmt: str, w: int, w2: int, pc: int) -> tuple[str, str, dict]:
  if fmt == "SMEM":
    f = {"op": bits(w, 25, 18), "sdata": bits(w, 12, 6), "sbase": bits(w, 5, 0) << 1,
         "soffset": bits(w2, 31, 25), "offset": sign_extend(bits(w2, 20, 0), 21)}
    return "SMEM", lookup(opcodes.SMEM, f["op"], "SMEM", pc), f
  if fmt == "DS":
    f = {"op": bits(w, 25, 18), "offset0": bits(w, 7, 0), "offset1": bits(w, 15, 8), "gds": bits(w, 17, 17),
         "addr": bits(w2, 7, 0), "data0": bits(w2, 15, 8), "data1": bits(w2, 23, 16), "vdst": bits(w2, 31, 24)}
    return "DS", lookup(opcodes.DS, f["op"], "DS", pc), f
  seg = bits(w, 17, 16)
  sub = {0: "FLAT", 1: "SCRATCH", 2: "GLOBAL"}.get(seg)
  if sub is None: raise DecodeError(f"FLAT segment 3 is reserved (at 0x{pc:x})")
  f = {"op": bits(w, 24, 18), "offset": sign_extend(bits(w, 12, 0), 13), "glc": bits(w, 14, 14),
       "addr": bits(w2, 7, 0), "data": bits(w2, 15, 8), "saddr": bits(w2, 22, 16), "sve": bits(w2, 23, 23),
       "vdst": bits(w2, 31, 24)}
  return sub, lookup(getattr(opcodes, sub), f["op"], sub, pc), f


def decode_one(code: bytes, off: int, pc: int) -> Instr:
  """Decodes the instruction at byte offset off of code (pc is its address, for messages and branches)."""
  w = struct.unpack_from("<I", code, off)[0]
  if bits(w, 31, 30) == 0b10:
    fmt, name, f, srcs = decode_scalar(w, pc)
    size = 4
    if LITERAL in srcs: return Instr(pc, 8, fmt, name, f, struct.unpack_from("<I", code, off + 4)[0])
    return Instr(pc, size, fmt, name, f)
  if bits(w, 31, 31) == 0:
    if bits(w, 30, 25) == 0x3F:
      f = {"op": bits(w, 16, 9), "vdst": bits(w, 24, 17), "src0": bits(w, 8, 0)}
      fmt, name = "VOP1", lookup(opcodes.VOP1, f["op"], "VOP1", pc)
    elif bits(w, 30, 25) == 0x3E:
      f = {"op": bits(w, 24, 17), "vsrc1": bits(w, 16, 9) + 256, "src0": bits(w, 8, 0)}
      fmt, name = "VOPC", lookup(opcodes.VOPC, f["op"], "VOPC", pc)
    else:
      f = {"op": bits(w, 30, 25), "vdst": bits(w, 24, 17), "vsrc1": bits(w, 16, 9) + 256, "src0": bits(w, 8, 0)}
      fmt, name = "VOP2", lookup(opcodes.VOP2, f["op"], "VOP2", pc)
    return finish_vector(code, off, pc, 4, fmt, name, f, [f["src0"]], name in ("v_fmamk_f32", "v_fmaak_f32",
                                                                               "v_fmamk_f16", "v_fmaak_f16"))
  top6 = bits(w, 31, 26)
  w2 = struct.unpack_from("<I", code, off + 4)[0]
  if top6 == 0b110101:
    name, f = decode_vop3(w, w2, pc)
    return finish_vector(code, off, pc, 8, "VOP3", name, f, [f["src0"], f["src1"], f["src2"]])
  if top6 == 0b110011:
    name, f = decode_vop3p(w, w2, pc)
    return finish_vector(code, off, pc, 8, "VOP3P", name, f, [f["src0"], f["src1"], f["src2"]])
  if top6 == 0b110010:
    name, f = decode_vopd(w, w2, pc)
    needs_lit = any(n in ("v_fmaak_f32", "v_fmamk_f32") for n in (f["opx"], f["opy"]))
    return finish_vector(code, off, pc, 8, "VOPD", name, f, [f["srcx0"], f["srcy0"]], needs_lit)
  if top6 == 0b111000:  # MUBUF: only the cache invalidations that memory fences emit
    op = bits(w, 25, 18)
    name = {43: "buffer_gl0_inv", 44: "buffer_gl1_inv"}.get(op)
    if name is None: raise DecodeError(f"MUBUF buffer instruction (op {op}) at 0x{pc:x} is not emulated")
    return Instr(pc, 8, "MUBUF", name, {"op": op})
  fmt = {0b111101: "SMEM", 0b110110: "DS", 0b110111: "FLAT"}.get(top6)
  if fmt is None: raise DecodeError(f"unsupported encoding 0x{w:08x} at 0x{pc:x} (not SOP/SMEM/VOP/DS/FLAT)")
  fmt, name, f = decode_memory(fmt, w, w2, pc)
  return Instr(pc, 8, fmt, name, f)


def finish_vector(code: bytes, off: int, pc: int, size: int, fmt: str, name: str, f: dict, srcs: list[int],
                  always_literal: bool = False) -> Instr:
  if DPP16 in srcs[:1] or DPP8 in srcs[:1] or DPP8_FI in srcs[:1]:
    raise DecodeError(f"{name} at 0x{pc:x} uses DPP, which the emulator does not implement")
  if always_literal or LITERAL in srcs:
    return Instr(pc, size + 4, fmt, name, f, struct.unpack_from("<I", code, off + size)[0])
  return Instr(pc, size, fmt, name, f)
