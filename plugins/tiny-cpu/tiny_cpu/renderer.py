"""The C renderer of the CPU device: tinycore's C-style renderer with the CPU's details."""
from tinycore.codegen.c_style import CStyleRenderer


class CPURenderer(CStyleRenderer):
  """Renders a kernel as a C function ``void name(T* restrict data0, ..., long long var0, ...)``."""
  device = "CPU"
