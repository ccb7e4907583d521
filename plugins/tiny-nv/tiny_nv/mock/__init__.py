"""Test equipment: a mock CUDA driver whose kernels run on a PTX interpreter (TINYCORE_NV_EMULATE=1).

`MockCudaDriver` has the methods of tiny_nv.driver.CudaDriver (the one seam between the plugin and the driver);
`tiny_nv.mock.ptx` is the interpreter. Not a GPU model: no timing, no caches, one device, blocks of a grid batched.
"""
from tiny_nv.mock.driver import COMPUTE_CAPABILITY, DEVICE_NAME, MockCudaDriver, MockCudaError

__all__ = ["MockCudaDriver", "MockCudaError", "DEVICE_NAME", "COMPUTE_CAPABILITY"]
