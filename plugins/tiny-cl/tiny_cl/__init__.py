"""tiny-cl: the tinycore OpenCL device. Kernels are rendered to OpenCL C, built by the OpenCL driver (PoCL from PyPI
with ``pip install tiny-cl[pocl]``, or a vendor's GPU driver) and run through pyopencl.

The plugin module (tiny_cl.plugin) is cheap to import; pyopencl and the device (tiny_cl.device) load when the kind
is probed or a "CL" device is opened.
"""
