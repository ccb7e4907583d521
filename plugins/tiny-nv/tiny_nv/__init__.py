"""tiny-nv: tinycore's NVIDIA device ("NV"), CUDA C compiled by NVRTC and run on two CUDA streams as HCQ2 queues.

Modules: plugin (the hooks; cheap to import), driver (the CUDA driver API through ctypes), renderer (CUDA C),
compiler (NVRTC through ctypes), device (the HCQ2 device) and mock (test equipment: a mock CUDA driver that executes
the kernels' PTX, used with TINYCORE_NV_EMULATE=1).
"""
