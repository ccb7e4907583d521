"""Test helper: places a relocatable AMDGPU ELF (what llvmlite emits for amdgcn-amd-amdhsa) into emulated memory
and applies its relocations, returning each kernel's descriptor fields and code address. Launches never need this
(the plugin writes the registers); the emulator's own tests use it to run hand-written IR kernels."""
from __future__ import annotations

import struct

import attrs

from tiny_amd.emulator.memory import HostAllocation, MemoryRegistry

SHT_SYMTAB, SHT_RELA, SHF_ALLOC = 2, 4, 0x2
R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64, R_AMDGPU_REL32 = 1, 2, 3, 4
R_AMDGPU_REL64, R_AMDGPU_ABS32, R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI = 5, 6, 10, 11


@attrs.define
class LoadedKernel:
  """A kernel placed in memory: its descriptor's fields and where its code starts."""
  name: str
  descriptor_address: int
  code_address: int
  group_segment_size: int
  private_segment_size: int
  kernarg_size: int
  rsrc1: int
  rsrc2: int
  rsrc3: int
  code_properties: int


@attrs.define
class Section:
  name: str
  type: int
  flags: int
  offset: int
  size: int
  link: int
  info: int
  align: int
  entsize: int
  address: int = 0


def compile_ir(ir: str, cpu: str = "gfx1100") -> bytes:
  """LLVM IR (amdgcn-amd-amdhsa) -> relocatable AMDGPU ELF via llvmlite, O2 pipeline first (as the plugin does).
  Used by the emulator's tests and benchmark to make real machine code from hand-written kernels."""
  import llvmlite.binding as llvm
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()
  machine = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu=cpu, opt=2, reloc="pic")
  module = llvm.parse_assembly(ir if "target triple" in ir else 'target triple = "amdgcn-amd-amdhsa"\n' + ir)
  module.verify()
  builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
  builder.getModulePassManager().run(module, builder)
  return machine.emit_object(module)


def read_sections(elf: bytes) -> list[Section]:
  if elf[:4] != b"\x7fELF" or elf[4] != 2: raise ValueError("not a 64-bit ELF")
  shoff, = struct.unpack_from("<Q", elf, 0x28)
  shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
  raw = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
  names = raw[shstrndx][4]
  def cstr(off): return elf[off:elf.index(b"\0", off)].decode()
  return [Section(cstr(names + r[0]), r[1], r[2], r[4], r[5], r[6], r[7], max(r[8], 1), r[9]) for r in raw]


def load_code_object(elf: bytes, memory: MemoryRegistry) -> tuple[HostAllocation, dict[str, LoadedKernel]]:
  """Lays out the ELF's allocatable sections in one allocation (code 256-byte aligned, as COMPUTE_PGM_LO
  needs), applies the relocations, and returns the allocation and the kernels by name."""
  sections = read_sections(elf)
  size = 0
  for sec in sections:
    if sec.flags & SHF_ALLOC and sec.size:
      size = -(-size // max(sec.align, 256)) * max(sec.align, 256)
      sec.address, size = size, size + sec.size
  image = bytearray(size)
  for sec in sections:
    if sec.flags & SHF_ALLOC and sec.size and sec.type != 8: image[sec.address:sec.address + sec.size] = \
        elf[sec.offset:sec.offset + sec.size]
  alloc = memory.allocate(max(size, 4))
  symtab = next(s for s in sections if s.type == SHT_SYMTAB)
  symbols = read_symbols(elf, symtab, sections)
  for sec in sections:
    if sec.type == SHT_RELA and sections[sec.info].flags & SHF_ALLOC:
      apply_relocations(elf, sec, sections[sec.info], symbols, image, alloc.va)
  alloc.bytes[:size] = memoryview(bytes(image)).cast("B")
  kernels = {}
  for name, (value, shndx) in symbols.items():
    if name.endswith(".kd"):
      at = sections[shndx].address + value
      kernels[name[:-3]] = parse_descriptor(name[:-3], bytes(image[at:at + 64]), alloc.va + at)
  return alloc, kernels


def read_symbols(elf: bytes, symtab: Section, sections: list[Section]) -> dict[str, tuple[int, int]]:
  strtab = sections[symtab.link]
  out = {}
  for i in range(symtab.size // 24):
    st_name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", elf, symtab.offset + i * 24)
    name = elf[strtab.offset + st_name:elf.index(b"\0", strtab.offset + st_name)].decode()
    out[name if name else f"#{i}"] = (value, shndx)
    out[f"#{i}"] = (value, shndx)
  return out


def apply_relocations(elf: bytes, rela: Section, target: Section, symbols: dict, image: bytearray, base: int) -> None:
  sections = read_sections(elf)
  for i in range(rela.size // 24):
    offset, info, addend = struct.unpack_from("<QQq", elf, rela.offset + i * 24)
    sym_value, shndx = symbols[f"#{info >> 32}"]
    s = base + sections[shndx].address + sym_value
    p = base + target.address + offset
    kind, at = info & 0xFFFFFFFF, target.address + offset
    value = {R_AMDGPU_REL64: s + addend - p, R_AMDGPU_ABS64: s + addend, R_AMDGPU_REL32: s + addend - p,
             R_AMDGPU_ABS32: s + addend, R_AMDGPU_ABS32_LO: s + addend, R_AMDGPU_ABS32_HI: (s + addend) >> 32,
             R_AMDGPU_REL32_LO: s + addend - p, R_AMDGPU_REL32_HI: (s + addend - p) >> 32}.get(kind)
    if value is None: raise ValueError(f"unsupported AMDGPU relocation type {kind}")
    if kind in (R_AMDGPU_REL64, R_AMDGPU_ABS64): struct.pack_into("<Q", image, at, value & (2**64 - 1))
    else: struct.pack_into("<I", image, at, value & 0xFFFFFFFF)


def parse_descriptor(name: str, kd: bytes, address: int) -> LoadedKernel:
  """The 64-byte kernel descriptor (AMDGPUUsage 'Kernel Descriptor')."""
  group, private, kernarg = struct.unpack_from("<III", kd, 0)
  entry, = struct.unpack_from("<q", kd, 16)
  rsrc3, rsrc1, rsrc2, props = struct.unpack_from("<IIIH", kd, 44)
  return LoadedKernel(name, address, address + entry, group, private, kernarg, rsrc1, rsrc2, rsrc3, props)
