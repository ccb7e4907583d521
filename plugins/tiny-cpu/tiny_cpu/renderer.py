"""The C renderer of the CPU device: tinycore's C-style renderer with the CPU's details."""
from tinycore.codegen.c_style import CStyleRenderer
from tinycore.codegen.linearize import Loop
from tinycore.uop.ops import Ops

OMP_REDUCTION = {Ops.ADD: "+", Ops.MUL: "*", Ops.MAX: "max"}


class CPURenderer(CStyleRenderer):
  """Renders a kernel as a C function ``void name(T* restrict data0, ..., long long var0, ...)``."""
  device = "CPU"

  def loop_pragma(self, loop: Loop) -> str:
    # an innermost reduction loop may be reassociated, so the compiler can keep several partial sums in vectors
    updates = self.reduction_updates(loop)
    if not updates: return ""
    clauses = " ".join(f"reduction({OMP_REDUCTION[u.reduce.arg]}:{self._names[u.reduce]})" for u in updates)
    return f"#pragma omp simd {clauses}"
