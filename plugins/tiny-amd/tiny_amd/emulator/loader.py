"""Test helper: places an AMDGPU code object (llvmlite's relocatable output, or one `tiny_amd.elf` linked) into
emulated memory and returns each kernel's descriptor fields and code address. The ELF is read and linked by
`tiny_amd.elf`, the plugin's own reader, so the tests load exactly what the plugin would. Launches never need this
(the plugin writes the registers); the emulator's own tests use it to run hand-written IR kernels."""
from __future__ import annotations

import struct

import attrs
import numpy as np

from tiny_amd.elf import ET_REL, KernelDescriptor, link_code_object
from tiny_amd.elf import load_code_object as read_code_object
from tiny_amd.emulator.memory import HostAllocation, MemoryRegistry


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


def load_code_object(elf: bytes, memory: MemoryRegistry) -> tuple[HostAllocation, dict[str, LoadedKernel]]:
  """Links the object if it is relocatable, copies its image into one (page-aligned) allocation and returns the
  allocation and the kernels by name."""
  if struct.unpack_from("<H", elf, 16)[0] == ET_REL: elf = link_code_object(elf)
  code = read_code_object(elf)
  alloc = memory.allocate(max(len(code.image), 4))
  alloc.bytes[:len(code.image)] = np.frombuffer(code.image, np.uint8)
  kernels = {}
  for name, at in code.descriptors.items():
    kd = KernelDescriptor.parse(code.image[at:at + 64])
    kernels[name] = LoadedKernel(name, alloc.va + at, alloc.va + at + kd.code_offset, kd.group_segment_bytes,
                                 kd.private_segment_bytes, kd.kernarg_bytes, kd.rsrc1, kd.rsrc2, kd.rsrc3,
                                 kd.properties)
  return alloc, kernels
