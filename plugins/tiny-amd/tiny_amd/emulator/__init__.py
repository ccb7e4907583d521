"""Test equipment: an emulated AMD gfx1100 GPU behind the driver seam (see amd-contract / docs/plugins.md).

- `MockKFD` (kfd.py): the driver object, same methods as tiny_amd.driver.KFDDriver: memory, queues, doorbells.
- pm4.py / sdma.py: one packet-processor thread per queue, decoding the ring bytes the plugin wrote.
- rdna3.py (+ decoder, salu, vector, memory_ops): the wave32 interpreter that runs the dispatched machine code.
- loader.py: places a relocatable code object in emulated memory (for the emulator's own tests).
Nothing here reimplements a tensor op: kernels run only as the compiled RDNA3 instructions."""

from tiny_amd.emulator.kfd import EmulatedMemory, MockKFD  # noqa: E402
from tiny_amd.emulator.queues import PacketError  # noqa: E402
from tiny_amd.emulator.wave_state import EmulationError  # noqa: E402

__all__ = ["MockKFD", "EmulatedMemory", "PacketError", "EmulationError"]
