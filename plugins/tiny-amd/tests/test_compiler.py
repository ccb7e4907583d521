"""The compiler: every collected kernel compiles for gfx1100 (wave32) and gfx942 (wave64) into a linked code object
with one `.kd` symbol per kernel, e_flags naming the target, and descriptors pointing at 256-byte aligned code."""
from __future__ import annotations
import shutil
import struct
import subprocess
import pytest
from tiny_amd.compiler import AMDCompiler, AMDRenderer
from tiny_amd.device import KernelDescriptor, check_descriptor
from tiny_amd.elf import link_code_object, load_code_object, parse_sections

EF_AMDGPU_MACH = {"gfx1100": 0x41, "gfx942": 0x4C}


@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_every_kernel_compiles_to_a_code_object(kernels, arch):
  renderer, compiler = AMDRenderer(arch), AMDCompiler(arch)
  assert len(kernels) >= 20
  for name, sink in kernels:
    blob = compiler.compile(renderer.render(name, sink).source)
    _, flags, sections = parse_sections(blob)
    assert flags & 0xFF == EF_AMDGPU_MACH[arch], name
    assert struct.unpack_from("<H", blob, 16)[0] == 3  # ET_DYN: linked
    code = load_code_object(blob)
    assert list(code.descriptors) == [name]
    kd = KernelDescriptor.parse(code.image[code.descriptors[name]:][:64])
    entry = code.descriptors[name] + kd.code_offset
    text = next(s for s in sections if s.name == ".text")
    assert text.addr <= entry < text.addr + text.size, name
    check_descriptor(name, kd, 0x100000 + entry)  # only the kernarg pointer, aligned code, no dynamic stack
    assert bool(kd.properties & (1 << 10)) == (arch == "gfx1100")  # wave32 on gfx11 only


def test_relocations_are_applied(kernels):
  """The object's R_AMDGPU_REL64 makes the descriptor's code offset the distance from descriptor to code."""
  src = AMDRenderer().render("k", _tiny_kernel(kernels)).source
  obj = AMDCompiler().compile_object(src)
  _, _, sections = parse_sections(obj)
  assert any(s.name == ".rela.rodata" for s in sections)
  code = load_code_object(link_code_object(obj))
  kd_at = code.descriptors["k"]
  (offset,) = struct.unpack_from("<q", code.image, kd_at + 16)
  assert kd_at + offset == 0x100  # .text comes first in the image


def test_bad_input_is_refused():
  with pytest.raises(ValueError, match="not a 64-bit"):
    link_code_object(b"not an elf")
  with pytest.raises(ValueError, match="unsupported AMD target"):
    AMDCompiler("gfx9999")
  with pytest.raises(RuntimeError, match="does not parse"):
    AMDCompiler().compile("define void @broken(")


@pytest.mark.skipif(shutil.which("llvm-objdump-19") is None, reason="llvm-objdump-19 (apt llvm-19) is not installed")
def test_llvm_objdump_disassembles_the_code_object(kernels, tmp_path):
  path = tmp_path / "k.hsaco"
  path.write_bytes(AMDCompiler().compile(AMDRenderer().render("k", _tiny_kernel(kernels)).source))
  out = subprocess.run(["llvm-objdump-19", "-d", "--mcpu=gfx1100", str(path)], capture_output=True, text=True,
                       check=True).stdout
  assert "<k>:" in out and "s_endpgm" in out and "global_store" in out


def _tiny_kernel(kernels):
  return next(sink for name, sink in kernels if name.startswith("E_"))


def test_check_archs_compiles_each_kernel_for_gfx942_too(kernels, tmp_path, monkeypatch):
  """TINYCORE_AMD_CHECK_ARCHS=gfx942: a gfx1100 compile also makes (and dumps) the kernel's gfx942 code object."""
  monkeypatch.setenv("TINYCORE_AMD_CHECK_ARCHS", "gfx942")
  monkeypatch.setenv("TINYCORE_DUMP_BINARIES", str(tmp_path))
  compiler = AMDCompiler("gfx1100")
  assert "gfx942" in compiler.cachekey
  compiler.compile(AMDRenderer().render("k", _tiny_kernel(kernels)).source)
  (dumped,) = tmp_path.glob("k-gfx942-*.hsaco")
  assert parse_sections(dumped.read_bytes())[1] & 0xFF == EF_AMDGPU_MACH["gfx942"]
  monkeypatch.setenv("TINYCORE_AMD_CHECK_ARCHS", "gfx9999")
  with pytest.raises(ValueError, match="not tiny-amd targets"):
    AMDCompiler("gfx1100")
