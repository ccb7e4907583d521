"""LLVM IR -> AMDGPU code object, in process: llvmlite (O2, then the amdgcn backend) and the plugin's ELF linker.

The IR comes from the core's LLVM IR renderer (`tinycore.codegen.llvm_ir`) with the amdgcn target below: buffers in
the global address space (1), the `amdgpu_kernel` calling convention (the kernel arguments are the kernarg segment,
8 bytes each: buffer addresses, then the scalar parameters), work-group and work-item ids from the amdgcn
intrinsics, and float64 transcendentals expanded in IR (a GPU has no libm). The O2 pipeline runs before code
generation: without it the kernel descriptor asks for dispatch and queue pointers the kernel never uses.
"""
from __future__ import annotations
import os
from typing import Any
from tinycore.plugin import Compiler, LLVMRenderer, LLVMTarget, dump_binary
from tiny_amd.elf import KernelDescriptor, link_code_object, load_code_object

# the wave size each supported target runs (gfx11 defaults to wave32, gfx9 CDNA to wave64)
WAVE_SIZE = {"gfx1100": 32, "gfx942": 64}
MAX_WORKGROUP_SIZE = 256
CHECK_ARCHS_ENV = "TINYCORE_AMD_CHECK_ARCHS"


def amdgcn_target(arch: str) -> LLVMTarget:
  """The LLVM IR target for one gfx architecture."""
  return LLVMTarget(triple="amdgcn-amd-amdhsa", global_addrspace=1, local_addrspace=3,
                    calling_convention="amdgpu_kernel",
                    kernel_attributes=f'nounwind "amdgpu-flat-work-group-size"="1,{MAX_WORKGROUP_SIZE}"',
                    workgroup_id="llvm.amdgcn.workgroup.id.{axis}", workitem_id="llvm.amdgcn.workitem.id.{axis}",
                    private_addrspace=5, grid_dims=3, max_local_size=MAX_WORKGROUP_SIZE, math_in_ir=True)


class AMDRenderer(LLVMRenderer):
  """The core LLVM IR renderer for an amdgcn target."""
  def __init__(self, arch: str = "gfx1100"):
    super().__init__(amdgcn_target(arch))
    self.device, self.arch = "AMD", arch


def llvm_binding() -> Any:
  """llvmlite's binding with the AMDGPU backend ready (imported on first compile: importing the plugin stays cheap)."""
  import llvmlite.binding as llvm
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()
  return llvm


class AMDCompiler(Compiler):
  """Compiles the renderer's IR for `arch` to a linked code object (`tiny_amd.elf`), cached on disk by the core.

  TINYCORE_AMD_CHECK_ARCHS="gfx942" also compiles each kernel for those targets (the IR does not depend on the
  target), links it and checks its kernel descriptor: a compile-only check of every kernel a run makes, written out
  under TINYCORE_DUMP_BINARIES as <kernel>-<arch>-<hash>.hsaco."""
  binary_extension = ".hsaco"

  def __init__(self, arch: str = "gfx1100"):
    if arch not in WAVE_SIZE:
      raise ValueError(f"unsupported AMD target {arch!r}: tiny-amd compiles for {sorted(WAVE_SIZE)}")
    import llvmlite
    self.arch = arch
    self.check_archs = tuple(a.strip() for a in os.environ.get(CHECK_ARCHS_ENV, "").split(",") if a.strip())
    if bad := [a for a in self.check_archs if a not in WAVE_SIZE]:
      raise ValueError(f"{CHECK_ARCHS_ENV}: {bad} are not tiny-amd targets ({sorted(WAVE_SIZE)})")
    self.cachekey = (f"tiny-amd llvmlite-{llvmlite.__version__} {arch} O2 codeobject-1 "
                     f"checked {','.join(self.check_archs)}")

  def compile_object(self, src: str, arch: str | None = None) -> bytes:
    """The relocatable ELF object llvmlite emits for the IR (for `arch`, by default the compiler's)."""
    llvm = llvm_binding()
    try:
      module = llvm.parse_assembly(src)
      module.verify()
    except RuntimeError as error:
      raise RuntimeError(f"tiny-amd: the LLVM IR does not parse or verify: {error}") from error
    machine = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu=arch or self.arch, opt=2,
                                                                                  reloc="pic")
    module.data_layout = str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
    builder.getModulePassManager().run(module, builder)
    return machine.emit_object(module)

  def compile(self, src: str) -> bytes:
    binary = link_code_object(self.compile_object(src))
    if self.check_archs:
      names = sorted(load_code_object(binary).descriptors)
      for arch in self.check_archs: self.check_arch(src, arch, names)
    return binary

  def check_arch(self, src: str, arch: str, names: list[str]) -> None:
    """Compile and link `src` for `arch`; its code object must hold a descriptor for each kernel in `names`, with
    code 256-byte aligned and the wave size the target runs (a ValueError naming the kernel otherwise)."""
    binary = link_code_object(self.compile_object(src, arch))
    code = load_code_object(binary)
    for name in names:
      if name not in code.descriptors: raise ValueError(f"{arch}: the code object has no {name}.kd")
      at = code.descriptors[name]
      kd = KernelDescriptor.parse(code.image[at:at + 64])
      if (at + kd.code_offset) % 256 or bool(kd.properties & (1 << 10)) != (WAVE_SIZE[arch] == 32):
        raise ValueError(f"{arch}: the descriptor of {name} points at unaligned code or has the wrong wave size")
    dump_binary(f"{names[0]}-{arch}", binary, self.binary_extension)
