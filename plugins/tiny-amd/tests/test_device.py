"""The AMD device end to end on the emulator (TINYCORE_AMD_EMULATE=1): kernels run as the compiled machine code,
copies with host memory run on the SDMA queue (counted by the emulator's packet processor), AMD <-> AMD:1."""
from __future__ import annotations
import importlib.util
import os
import numpy as np
import pytest

emulator_missing = importlib.util.find_spec("tiny_amd.emulator") is None
pytestmark = pytest.mark.skipif(emulator_missing, reason="tiny_amd.emulator is not installed")


@pytest.fixture(scope="module")
def amd():
  os.environ["TINYCORE_AMD_EMULATE"] = "1"
  from tinycore import Device
  from tiny_amd.plugin import shared_driver
  device = Device["AMD"]
  driver, _ = shared_driver()
  return device, driver


def test_kernels_run_on_the_emulated_gpu(amd):
  from tinycore import Tensor
  device, driver = amd
  before = driver.packet_counts["pm4.DISPATCH_DIRECT"]
  x = np.arange(24, dtype=np.float32).reshape(4, 6) - 7
  t = Tensor(x, device="AMD")
  np.testing.assert_allclose(((t * 2 + 1).sum(1)).numpy(), (x * 2 + 1).sum(1), rtol=1e-6)
  np.testing.assert_array_equal((t.cast("int32") // 3).numpy(), x.astype(np.int32) // 3)  # floor division
  assert driver.packet_counts["pm4.DISPATCH_DIRECT"] >= before + 2


def test_cpu_amd_copies_run_on_the_sdma_queue(amd):
  from tinycore import Device, Tensor
  if "CPU" not in {s.prefix for s in Device.specs()}: pytest.skip("tiny-cpu is not installed")
  device, driver = amd
  x = np.random.default_rng(1).standard_normal((33, 17)).astype(np.float32)
  copies = driver.packet_counts["sdma.COPY"]
  on_amd = Tensor(x, device="CPU").realize().to("AMD").realize()
  back = (on_amd + 0).to("CPU").realize()
  np.testing.assert_array_equal(back.numpy(), x + 0)
  assert driver.packet_counts["sdma.COPY"] >= copies + 2
  target = Tensor.zeros(33, 17, device="AMD").contiguous().realize()
  copies = driver.packet_counts["sdma.COPY"]
  target.assign(Tensor(x * 3, device="CPU")).realize()
  np.testing.assert_array_equal(target.numpy(), x * 3)
  assert driver.packet_counts["sdma.COPY"] > copies


def test_amd_to_amd1_assign(amd):
  from tinycore import Tensor
  x = np.arange(10, dtype=np.int32)
  a = Tensor(x, device="AMD").realize()
  b = Tensor.zeros(10, dtype="int32", device="AMD:1").contiguous().realize()
  b.assign(a * 2).realize()
  np.testing.assert_array_equal(b.numpy(), x * 2)


def test_dumped_binaries_are_code_objects(amd, tmp_path, monkeypatch):
  from tinycore import Tensor
  from tiny_amd.elf import load_code_object
  monkeypatch.setenv("TINYCORE_DUMP_BINARIES", str(tmp_path))
  (Tensor(np.arange(5, dtype=np.float32), device="AMD") * 3.25 - 11).realize()
  dumped = list(tmp_path.glob("*.hsaco"))
  assert dumped and all(load_code_object(p.read_bytes()).descriptors for p in dumped)


def test_scratch_kernel_runs_on_the_emulated_gpu(amd):
  """A kernel with private memory: the descriptor asks for it, the device writes COMPUTE_TMPRING_SIZE and the scratch
  base into the dispatch, and the emulator runs its scratch_* instructions in that buffer."""
  from emulator_helpers import SCRATCH
  from tiny_amd.compiler import AMDCompiler
  from tiny_amd.device import AMDProgram
  from tiny_amd.emulator.pm4 import COMPUTE_DISPATCH_SCRATCH_BASE_LO, COMPUTE_TMPRING_SIZE
  device, driver = amd
  program = AMDProgram(device, "priv", AMDCompiler("gfx1100").compile(SCRATCH))
  assert program.descriptor.private_segment_bytes >= 64 and program.descriptor.rsrc2 & 1  # SCRATCH_EN
  from tinycore import dtypes
  from tinycore.device.buffer import Buffer
  idx = np.random.default_rng(2).integers(0, 16, 640).astype(np.int32)
  out_buf = Buffer("AMD", 640, dtypes.int32).allocate()
  idx_buf = Buffer("AMD", 640, dtypes.int32).allocate().copyin(memoryview(idx))
  program(out_buf.get_buf(), idx_buf.get_buf(), global_size=(640, 1, 1), local_size=(64, 1, 1), wait=True)
  out = np.zeros(640, np.int32)
  out_buf.copyout(memoryview(out))
  np.testing.assert_array_equal(out, idx * np.arange(640))
  compute = next(q for q in driver.queues if q.kind == "compute" and COMPUTE_TMPRING_SIZE in q.sh_registers)
  registers = compute.sh_registers
  assert registers[COMPUTE_TMPRING_SIZE] & 0xFFF and registers[COMPUTE_TMPRING_SIZE] >> 12  # WAVES, WAVESIZE
  base = (registers[COMPUTE_DISPATCH_SCRATCH_BASE_LO] | registers[COMPUTE_DISPATCH_SCRATCH_BASE_LO + 1] << 32) << 8
  assert base == device.scratch_buffers[-1].va


def test_gfx942_compiles_a_scratch_kernel():
  """gfx942 (architected flat scratch too): a private segment, SCRATCH_EN, and no private-segment-buffer SGPRs."""
  from emulator_helpers import SCRATCH
  from tiny_amd.compiler import AMDCompiler
  from tiny_amd.device import KernelDescriptor, check_descriptor
  from tiny_amd.elf import load_code_object
  code = load_code_object(AMDCompiler("gfx942").compile(SCRATCH))
  kd = KernelDescriptor.parse(code.image[code.descriptors["priv"]:][:64])
  assert kd.private_segment_bytes >= 64 and kd.rsrc2 & 1 and not kd.properties & 1
  check_descriptor("priv", kd, 0x100000 + code.descriptors["priv"] + kd.code_offset)
