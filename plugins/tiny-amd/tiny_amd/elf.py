"""A small ELF linker and loader for AMDGPU code objects.

llvmlite emits a *relocatable* object (ET_REL): `.text` (the kernels' machine code), `.rodata` (one 64-byte kernel
descriptor `NAME.kd` per kernel) and `.rela.rodata`, whose R_AMDGPU_REL64 entries make each descriptor's
`kernel_code_entry_byte_offset` the distance from the descriptor to its code. `link_code_object` turns it into a
loadable image (ET_DYN, the same e_flags naming the gfx target):

  1. lay out the allocated sections (SHF_ALLOC) in one PT_LOAD segment, each at its alignment, with file offset ==
     virtual address (so the image is the file's first bytes up to the segment's end);
  2. apply every relocation of an allocated section. Only PC-relative ones are accepted (REL64, REL32, REL32_LO,
     REL32_HI: S + A - P), so the image works at whatever address it is loaded; an absolute one would need the load
     address and is refused with its name;
  3. write the symbol table with addresses (st_value = section address + value), the section headers, and keep the
     AMDGPU metadata note.

The result is what this plugin loads (`load_code_object`): copy the PT_LOAD bytes to executable GPU memory and find
each `NAME.kd`. It is a valid ELF for tools (llvm-readelf, llvm-objdump --mcpu=gfx1100 disassembles it), but it has
no dynamic section: ROCm's own loader expects ld.lld's output instead.
"""
from __future__ import annotations
import struct
import attrs

ET_REL, ET_DYN, PT_LOAD, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS, SHT_PROGBITS = 1, 3, 1, 2, 3, 4, 8, 1
SHF_ALLOC = 0x2
SHN_UNDEF, SHN_ABS, SHN_LORESERVE = 0, 0xFFF1, 0xFF00
RELOCATIONS = {0: "R_AMDGPU_NONE", 1: "R_AMDGPU_ABS32_LO", 2: "R_AMDGPU_ABS32_HI", 3: "R_AMDGPU_ABS64",
               4: "R_AMDGPU_REL32", 5: "R_AMDGPU_REL64", 6: "R_AMDGPU_ABS32", 7: "R_AMDGPU_GOTPCREL",
               10: "R_AMDGPU_REL32_LO", 11: "R_AMDGPU_REL32_HI", 13: "R_AMDGPU_RELATIVE64"}
KERNEL_DESCRIPTOR_BYTES = 64
IMAGE_START = 0x100  # the allocated sections start after the ELF and program headers
EM_AMDGPU = 224


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
  data: bytes
  addr: int = 0


@attrs.frozen
class Symbol:
  name: str
  value: int
  size: int
  info: int
  other: int
  shndx: int


def parse_sections(blob: bytes) -> tuple[bytes, int, list[Section]]:
  """(e_ident, e_flags, sections) of an ELF64 little-endian AMDGPU object; anything else is refused."""
  if blob[:4] != b"\x7fELF" or blob[4] != 2 or blob[5] != 1:
    raise ValueError("not a 64-bit little-endian ELF file")
  machine, flags, shoff, shentsize, shnum, shstrndx = (struct.unpack_from("<H", blob, 18)[0],
                                                       struct.unpack_from("<I", blob, 48)[0],
                                                       *struct.unpack_from("<Q", blob, 40),
                                                       *struct.unpack_from("<HHH", blob, 58))
  if machine != EM_AMDGPU: raise ValueError(f"not an AMDGPU ELF (e_machine {machine})")
  sections = []
  for i in range(shnum):
    name, kind, sflags, addr, offset, size, link, info, align, entsize = struct.unpack_from("<IIQQQQIIQQ", blob,
                                                                                          shoff + i * shentsize)
    data = b"" if kind == SHT_NOBITS else blob[offset:offset + size]
    sections.append(Section(str(name), kind, sflags, offset, size, link, info, max(align, 1), entsize, data, addr))
  names = sections[shstrndx].data
  for s in sections: s.name = names[int(s.name):names.index(b"\0", int(s.name))].decode()
  return blob[:16], flags, sections


def parse_symbols(section: Section, strings: bytes) -> list[Symbol]:
  out = []
  for i in range(section.size // 24):
    name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", section.data, i * 24)
    out.append(Symbol(strings[name:strings.index(b"\0", name)].decode(), value, size, info, other, shndx))
  return out


def layout(sections: list[Section]) -> int:
  """Give each allocated section an address (== file offset); returns the end of the image."""
  end = IMAGE_START
  for s in sections:
    if not s.flags & SHF_ALLOC: continue
    end = -(-end // s.align) * s.align
    s.addr = end
    if s.type == SHT_NOBITS: s.type, s.data = SHT_PROGBITS, bytes(s.size)  # zeros in the file: one simple segment
    end += s.size
  return end


def apply_relocations(sections: list[Section], symbols: list[Symbol]) -> None:
  """Patch every relocation of an allocated section (PC-relative only: the image runs at any address)."""
  for rela in sections:
    if rela.type != SHT_RELA or not sections[rela.info].flags & SHF_ALLOC: continue
    target = sections[rela.info]
    data = bytearray(target.data)
    for i in range(rela.size // 24):
      offset, info, addend = struct.unpack_from("<QQq", rela.data, i * 24)
      kind, symbol = info & 0xFFFFFFFF, symbols[info >> 32]
      if kind == 0: continue
      if symbol.shndx == SHN_UNDEF or symbol.shndx >= SHN_LORESERVE:
        raise ValueError(f"relocation against {symbol.name!r}, which no section of the object defines")
      distance = sections[symbol.shndx].addr + symbol.value + addend - (target.addr + offset)
      if kind == 5: struct.pack_into("<q", data, offset, distance)
      elif kind == 4: struct.pack_into("<i", data, offset, distance)
      elif kind == 10: struct.pack_into("<I", data, offset, distance & 0xFFFFFFFF)
      elif kind == 11: struct.pack_into("<I", data, offset, (distance >> 32) & 0xFFFFFFFF)
      else:
        raise ValueError(f"unsupported relocation {RELOCATIONS.get(kind, kind)} against {symbol.name!r}: "
                         "only PC-relative relocations can be resolved without the load address")
    target.data = bytes(data)


def link_code_object(blob: bytes) -> bytes:
  """A relocatable AMDGPU object -> a loadable code object (see the module docstring)."""
  ident, flags, sections = parse_sections(blob)
  symtab = next((s for s in sections if s.type == SHT_SYMTAB), None)
  if symtab is None: raise ValueError("the object has no symbol table")
  symbols = parse_symbols(symtab, sections[symtab.link].data)
  image_end = layout(sections)
  apply_relocations(sections, symbols)
  kept = [s for s in sections if s.flags & SHF_ALLOC]
  index_of = {id(s): i + 1 for i, s in enumerate(kept)}
  new_index = {i: index_of.get(id(s), SHN_UNDEF) for i, s in enumerate(sections)}
  # the symbol table with addresses, and its strings
  strings, symbol_bytes = bytearray(b"\0"), bytearray(bytes(24))
  for sym in symbols[1:]:
    name = len(strings)
    strings += sym.name.encode() + b"\0"
    located = sym.shndx not in (SHN_UNDEF,) and sym.shndx < SHN_LORESERVE
    value = sections[sym.shndx].addr + sym.value if located else sym.value
    shndx = new_index.get(sym.shndx, SHN_UNDEF) if located else sym.shndx
    symbol_bytes += struct.pack("<IBBHQQ", name, sym.info, sym.other, shndx, value, sym.size)
  first_global = next((i for i, s in enumerate(symbols) if s.info >> 4 != 0), len(symbols))
  return write_elf(ident, flags, kept, image_end, bytes(symbol_bytes), bytes(strings), first_global)


def write_elf(ident: bytes, flags: int, kept: list[Section], image_end: int, symbols: bytes, strings: bytes,
              first_global: int) -> bytes:
  """The ELF file: headers, the image, then the symbol table, its strings and the section headers."""
  names = bytearray(b"\0")
  def name_of(text: str) -> int:
    names.extend(text.encode() + b"\0")
    return len(names) - len(text) - 1
  out = bytearray(image_end)
  for s in kept: out[s.addr:s.addr + len(s.data)] = s.data
  headers = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
  for s in kept:
    headers.append(struct.pack("<IIQQQQIIQQ", name_of(s.name), s.type, s.flags, s.addr, s.addr, s.size, 0, 0,
                               s.align, s.entsize))
  symtab_offset = -(-len(out) // 8) * 8
  out += bytes(symtab_offset - len(out)) + symbols
  strtab_index = len(kept) + 2
  headers.append(struct.pack("<IIQQQQIIQQ", name_of(".symtab"), SHT_SYMTAB, 0, 0, symtab_offset, len(symbols),
                             strtab_index, first_global, 8, 24))
  headers.append(struct.pack("<IIQQQQIIQQ", name_of(".strtab"), SHT_STRTAB, 0, 0, len(out), len(strings), 0, 0, 1, 0))
  out += strings
  shstrtab_name = name_of(".shstrtab")
  headers.append(struct.pack("<IIQQQQIIQQ", shstrtab_name, SHT_STRTAB, 0, 0, len(out), len(names), 0, 0, 1, 0))
  out += names
  section_headers = -(-len(out) // 8) * 8
  out += bytes(section_headers - len(out)) + b"".join(headers)
  program_header = struct.pack("<IIQQQQQQ", PT_LOAD, 7, 0, 0, 0, image_end, image_end, 0x1000)
  elf_header = ident + struct.pack("<HHIQQQIHHHHHH", ET_DYN, EM_AMDGPU, 1, 0, 64, section_headers, flags, 64, 56, 1,
                                   64, len(headers), len(headers) - 1)
  out[:64 + 56] = elf_header + program_header
  return bytes(out)


@attrs.frozen
class KernelDescriptor:
  """The fields of an amdhsa kernel descriptor (64 bytes, AMDGPUUsage 'Kernel Descriptor') a dispatch needs."""
  group_segment_bytes: int
  private_segment_bytes: int
  kernarg_bytes: int
  code_offset: int
  rsrc3: int
  rsrc1: int
  rsrc2: int
  properties: int

  @classmethod
  def parse(cls, data: bytes) -> KernelDescriptor:
    group, private, kernarg, _, code = struct.unpack_from("<IIIIq", data, 0)
    rsrc3, rsrc1, rsrc2, properties = struct.unpack_from("<IIIH", data, 44)
    return cls(group, private, kernarg, code, rsrc3, rsrc1, rsrc2, properties)


@attrs.frozen
class CodeObject:
  """A linked code object ready to copy into GPU memory: `image` (the PT_LOAD bytes, loaded at some base) and the
  offset of each kernel's descriptor in it."""
  image: bytes
  descriptors: dict[str, int]
  flags: int


def load_code_object(blob: bytes) -> CodeObject:
  """The loadable image and kernel descriptors of a code object made by `link_code_object`."""
  ident, flags, sections = parse_sections(blob)
  (phoff,), (phnum,) = struct.unpack_from("<Q", blob, 32), struct.unpack_from("<H", blob, 56)
  image = bytearray()
  for i in range(phnum):
    kind, _, offset, vaddr, _, filesz, memsz, _ = struct.unpack_from("<IIQQQQQQ", blob, phoff + i * 56)
    if kind != PT_LOAD: continue
    if len(image) < vaddr + memsz: image += bytes(vaddr + memsz - len(image))
    image[vaddr:vaddr + filesz] = blob[offset:offset + filesz]
  symtab = next(s for s in sections if s.type == SHT_SYMTAB)
  descriptors = {s.name[:-3]: s.value for s in parse_symbols(symtab, sections[symtab.link].data)
                 if s.name.endswith(".kd")}
  if not descriptors: raise ValueError("the code object defines no kernel descriptor (.kd symbol)")
  return CodeObject(bytes(image), descriptors, flags)
