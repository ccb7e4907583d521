"""What tiny-cpu adds to a rendered kernel's C source for compile latency and for its queue.

Every kernel's source starts with a comment naming its total loop trip count (`kernel_iterations` reads it back:
the queue runs a tiny kernel on the submitting thread), and declares the libm functions kernels call instead of
including <math.h>: without an #include there is nothing to preprocess, a few milliseconds less per kernel
compiled (the first result of a new kernel waits for its compile).
"""
from __future__ import annotations

ITERATIONS_COMMENT = "/* tiny-cpu loop iterations: "  # then the count (-1: symbolic) and " */"
MATH_INCLUDE = "#include <math.h>\n"
# as <math.h> declares them: the functions the C renderer calls (`math_functions`) and its half helpers' fabs
MATH_DECLARATIONS = "".join(f"double {name}(double{', double' if name == 'pow' else ''}); "
                            f"float {name}f(float{', float' if name == 'pow' else ''});\n"
                            for name in ("exp2", "log2", "sin", "sqrt", "trunc", "pow", "fabs"))


def annotated_source(source: str, iterations: int | None) -> str:
  """The renderer's source with the trip-count comment first (None: unknown) and <math.h> replaced by the
  declarations."""
  return f"{ITERATIONS_COMMENT}{-1 if iterations is None else iterations} */\n" + \
    source.replace(MATH_INCLUDE, MATH_DECLARATIONS, 1)


def kernel_iterations(source: str) -> int | None:
  """The total loop trip count a CPU kernel's source declares on its first line; None when unknown (symbolic)."""
  if not source.startswith(ITERATIONS_COMMENT): return None
  count = int(source[len(ITERATIONS_COMMENT):source.index(" ", len(ITERATIONS_COMMENT))])
  return count if count >= 0 else None
