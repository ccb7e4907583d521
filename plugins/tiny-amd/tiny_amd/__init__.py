"""tiny-amd: AMD GPUs for tinycore (KFD driver, PM4 compute + SDMA copy queues on HCQ2, LLVM-compiled code objects).

`TINYCORE_AMD_EMULATE=1` runs the device on `tiny_amd.emulator` (test equipment: a mock KFD, a PM4/SDMA packet
processor and an RDNA3 interpreter that execute the very packets and machine code the plugin produces).
"""
