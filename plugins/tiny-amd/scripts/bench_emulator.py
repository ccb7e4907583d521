"""Emulator speed: instructions per second of the RDNA3 interpreter on a 4096-thread elementwise kernel and on a
256-thread-workgroup LDS tree reduction (real gfx1100 code compiled by llvmlite).

  python plugins/tiny-amd/scripts/bench_emulator.py
"""
import struct
import time

import numpy as np

from tiny_amd.emulator.loader import compile_ir, load_code_object
from tiny_amd.emulator.memory import MemoryRegistry
from tiny_amd.emulator.rdna3 import DispatchRegisters, run_dispatch

ELEMENTWISE = """declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare float @llvm.exp2.f32(float)
define amdgpu_kernel void @ew(ptr addrspace(1) noalias %c, ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %g, 256
  %i = add i32 %base, %t
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %e = call float @llvm.exp2.f32(float %x)
  %m = fmul float %e, %y
  %z = fadd float %m, %x
  %pc = getelementptr float, ptr addrspace(1) %c, i32 %i
  store float %z, ptr addrspace(1) %pc
  ret void
}"""


def run(ir: str, name: str, buffers: list, grid: int, block: int, lds: int, repeat: int = 5):
  memory = MemoryRegistry()
  _, kernels = load_code_object(compile_ir(ir), memory)
  k = kernels[name]
  ptrs = []
  for b in buffers:
    m = memory.allocate(b.nbytes)
    m.bytes[:] = b.view(np.uint8)
    ptrs.append(m.va)
  args = memory.allocate(8 * len(ptrs))
  args.bytes[:] = np.frombuffer(struct.pack(f"<{len(ptrs)}Q", *ptrs), np.uint8)
  regs = DispatchRegisters(k.code_address, k.rsrc1, k.rsrc2 | (-(-lds // 512)) << 15, k.rsrc3,
                           (args.va & 0xFFFFFFFF, args.va >> 32) + (0,) * 14, (block, 1, 1), (grid, 1, 1))
  best = None
  for _ in range(repeat):
    t0 = time.perf_counter()
    stats = run_dispatch(regs, memory)
    dt = time.perf_counter() - t0
    best = dt if best is None or dt < best else best
  return stats, best


def main() -> None:
  import sys
  sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0] + "/tests")
  from test_emulator_rdna3 import LDS_SUM
  n = 4096
  a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
  for label, (stats, dt) in (
      ("elementwise 4096 threads", run(ELEMENTWISE, "ew", [np.zeros(n, np.float32), a, b], n // 256, 256, 0)),
      ("LDS reduction 16x256 threads", run(LDS_SUM, "lds_sum", [np.zeros(16, np.float32), np.random.rand(4096)
                                                               .astype(np.float32)], 16, 256, 1024))):
    print(f"{label}: {stats.wave_instructions} wave-instructions in {dt * 1e3:.2f} ms = "
          f"{stats.wave_instructions / dt / 1e6:.2f} M wave-instr/s ({32 * stats.wave_instructions / dt / 1e6:.0f} M "
          f"lane-instr/s)")


if __name__ == "__main__":
  main()
