"""How fast the PTX interpreter runs: `python -m tiny_nv.mock.bench` (needs NVRTC: tiny-nv[nvrtc]).

Prints, for a 4096-thread elementwise kernel and a shared-memory tree reduction, the launch time, the instructions
issued per launch (one per instruction per group of lanes run together) and thread-instructions per second (each
issued instruction times the lanes it ran for, counting inactive lanes of a divergent group as run)."""
from __future__ import annotations
import time
import numpy as np
from tiny_nv.compiler import nvrtc_compile
from tiny_nv.mock.memory import DeviceMemory
from tiny_nv.mock.ptx import load_module

ELEMENTWISE = r"""extern "C" __global__ void __launch_bounds__(256) E_4096(float* out, const float* a, const float* b) {
  int i = blockIdx.x * 256 + threadIdx.x;
  float x = a[i], y = b[i];
  out[i] = (x < y ? y : x) + exp2f(x * 1.442695f) + sqrtf(y) + 1.0f / (x + 1.0f); }"""
REDUCTION = r"""extern "C" __global__ void __launch_bounds__(256) r_4096(float* out, const float* x) {
  __shared__ float part[256];
  int t = threadIdx.x;
  part[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) { if (t < s) part[t] += part[t + s]; __syncthreads(); }
  if (t == 0) out[blockIdx.x] = part[0]; }"""

def measure(source: str, name: str, buffers: int, repeats: int = 20) -> dict:
  """Launch `name` over 16 blocks of 256 threads `repeats` times; the median time and the instruction rates."""
  memory, threads = DeviceMemory(), 4096
  addresses = [memory.allocate(threads * 4) for _ in range(buffers)]
  for address in addresses[1:]:
    memory.view(address, threads * 4).view(np.float32)[:] = np.random.default_rng(0).random(threads)
  kernel = load_module(nvrtc_compile(source, "compute_90")).kernel(name)
  params = np.array(addresses, np.uint64).tobytes()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    issued = kernel.launch(memory, (16, 1, 1), (256, 1, 1), 0, params)
    times.append(time.perf_counter() - start)
  seconds = float(np.median(times))
  return {"kernel": name, "ms": seconds * 1e3, "issued": issued, "issued_per_s": issued / seconds,
          "thread_instructions_per_s": issued * threads / seconds}

def main() -> None:
  for row in (measure(ELEMENTWISE, "E_4096", 3), measure(REDUCTION, "r_4096", 2)):
    print(f"{row['kernel']}: {row['ms']:.2f} ms per launch, {row['issued']} instructions issued, "
          f"{row['issued_per_s'] / 1e3:.0f} k issued/s, {row['thread_instructions_per_s'] / 1e6:.0f} M thread-instr/s")

if __name__ == "__main__":
  main()
