"""LLVM IR -> AMDGPU code object, in process: llvmlite (O2, then the amdgcn backend) and the plugin's ELF linker.

The IR comes from the core's LLVM IR renderer (`tinycore.codegen.llvm_ir`) with the amdgcn target below: buffers in
the global address space (1), the `amdgpu_kernel` calling convention (the kernel arguments are the kernarg segment,
8 bytes each: buffer addresses, then the scalar parameters), work-group and work-item ids from the amdgcn
intrinsics, and float64 transcendentals expanded in IR (a GPU has no libm). The O2 pipeline runs before code
generation: without it the kernel descriptor asks for dispatch and queue pointers the kernel never uses.
"""
from __future__ import annotations
from typing import Any
from tinycore.plugin import Compiler, LLVMRenderer, LLVMTarget
from tiny_amd.elf import link_code_object

# the wave size each supported target runs (gfx11 defaults to wave32, gfx9 CDNA to wave64)
WAVE_SIZE = {"gfx1100": 32, "gfx942": 64}
MAX_WORKGROUP_SIZE = 256


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
  """Compiles the renderer's IR for `arch` to a linked code object (`tiny_amd.elf`), cached on disk by the core."""
  binary_extension = ".hsaco"

  def __init__(self, arch: str = "gfx1100"):
    if arch not in WAVE_SIZE:
      raise ValueError(f"unsupported AMD target {arch!r}: tiny-amd compiles for {sorted(WAVE_SIZE)}")
    import llvmlite
    self.arch = arch
    self.cachekey = f"tiny-amd llvmlite-{llvmlite.__version__} {arch} O2 codeobject-1"

  def compile_object(self, src: str) -> bytes:
    """The relocatable ELF object llvmlite emits for the IR."""
    llvm = llvm_binding()
    try:
      module = llvm.parse_assembly(src)
      module.verify()
    except RuntimeError as error:
      raise RuntimeError(f"tiny-amd: the LLVM IR does not parse or verify: {error}") from error
    machine = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu=self.arch, opt=2, reloc="pic")
    module.data_layout = str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
    builder.getModulePassManager().run(module, builder)
    return machine.emit_object(module)

  def compile(self, src: str) -> bytes:
    return link_code_object(self.compile_object(src))
