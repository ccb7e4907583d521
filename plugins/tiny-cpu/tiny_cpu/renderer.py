"""The C renderer of the CPU device: tinycore's C-style renderer with the CPU's details."""
import os
from tinycore.plugin import (CStyleRenderer, DType, GroupOp, KernelTarget, LinearKernel, Loop, Ops, Panel, UOp, dtypes,
                             find_panels, linearize)

# exp2 for float32 without a libm call, so loops over it vectorize: 2^x = 2^n * 2^f with n = rint(x), f in
# [-0.5, 0.5], 2^f from Cephes' degree-6 polynomial (relative error < 2e-7) in fused multiply-adds, 2^n built in two
# halves (n >> 1 and the rest) so that 2^-150..2^128 scale without overflowing the exponent field. Each clamp is one
# compare-select (a vmaxps/vminps) that keeps NaN, and NaN stays NaN through the polynomial and the scaling (its
# integer conversion only feeds the scale factors), so inf, -inf and nan come out as libm gives them. About 20
# vector instructions per 16 floats with AVX-512. gcc threads the lower clamp of `high` through the upper one's
# branches and vectorizes the three-way result with ~9 mask instructions; comparing x instead (the same value, as
# high == x below -150) keeps two compare-blends. clang turns the chained form into one vminps and one vmaxps.
EXP2F = r"""
static inline float tc_exp2f(float x) {
  float high = x > 128.0f ? 128.0f : x;
#ifdef __clang__
  float clamped = high < -150.0f ? -150.0f : high;
#else
  float clamped = x < -150.0f ? -150.0f : high;
#endif
  float n = __builtin_rintf(clamped), f = clamped - n;
  float p = 1.535336188319500e-4f;
  p = tc_fmaf(p, f, 1.339887440266574e-3f);
  p = tc_fmaf(p, f, 9.618437357674640e-3f);
  p = tc_fmaf(p, f, 5.550332471162809e-2f);
  p = tc_fmaf(p, f, 2.402264791363012e-1f);
  p = tc_fmaf(p, f, 6.931472028550421e-1f);
  p = tc_fmaf(p, f, 1.0f);
  int whole = (int)n, half = whole >> 1;
  unsigned int b1 = (unsigned int)(half + 127) << 23, b2 = (unsigned int)(whole - half + 127) << 23;
  float s1, s2; __builtin_memcpy(&s1, &b1, 4); __builtin_memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}
"""

# log2 for float32 without a libm call, so loops over it vectorize (a loss's log per element: binary cross entropy):
# x = 2^e * m with m in [sqrt(1/2), sqrt(2)), ln(m) = f - f^2/2 + f^3 P(f) for f = m - 1 (Cephes' logf polynomial,
# relative error < 1e-7), then log2(x) = e + ln(m) * log2(e). Subnormals are scaled by 2^23 first; each special
# value is one select at the end (0 -> -inf, x < 0 -> NaN, inf -> inf, NaN stays NaN), so the loop has no branch.
LOG2F = r"""
static inline float tc_log2f(float x) {
  float small = x < 1.17549435e-38f ? 8388608.0f : 1.0f, scaled = x * small;
  unsigned int bits; __builtin_memcpy(&bits, &scaled, 4);
  int e = (int)((bits >> 23) & 0xff) - 127 - (x < 1.17549435e-38f ? 23 : 0);
  unsigned int mantissa = (bits & 0x007fffffu) | 0x3f800000u;
  float m; __builtin_memcpy(&m, &mantissa, 4);
  int high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e += high;
  float f = m - 1.0f, z = f * f;
  float p = 7.0376836292e-2f;
  p = tc_fmaf(p, f, -1.1514610310e-1f);
  p = tc_fmaf(p, f, 1.1676998740e-1f);
  p = tc_fmaf(p, f, -1.2420140846e-1f);
  p = tc_fmaf(p, f, 1.4249322787e-1f);
  p = tc_fmaf(p, f, -1.6668057665e-1f);
  p = tc_fmaf(p, f, 2.0000714765e-1f);
  p = tc_fmaf(p, f, -2.4999993993e-1f);
  p = tc_fmaf(p, f, 3.3333331174e-1f);
  float ln = f + tc_fmaf(f * z, p, -0.5f * z);
  float r = tc_fmaf(ln, 1.44269504088896341f, (float)e);
  r = x == 0.0f ? -(1.0f / 0.0f) : r;
  r = x < 0.0f ? (0.0f / 0.0f) : r;
  r = x == (1.0f / 0.0f) ? x : r;
  return x != x ? x : r;
}
"""

# a*b+acc with one rounding. gcc vectorizes its fma builtins; clang keeps unrolled accumulators of the builtin badly
# (copies and spills), but fuses a contracted a*b+c just as well; without FMA hardware both compute a*b+c
MULTIPLY_ADD = r"""
#if defined(__clang__) || !defined(__FMA__)
static inline float tc_fmaf(float a, float b, float c) { _Pragma("clang fp contract(fast)") return a * b + c; }
static inline double tc_fma(double a, double b, double c) { _Pragma("clang fp contract(fast)") return a * b + c; }
#else
#define tc_fmaf __builtin_fmaf
#define tc_fma __builtin_fma
#endif
"""
# what a gated load inside a register tile reads where its gate is false (see CPURenderer.gated_load)
ZERO_CELLS = r"""
static const float tc_zero_float = 0.0f;
static const double tc_zero_double = 0.0;
"""
ZERO_CELL_NAMES = {dtypes.float32: "tc_zero_float", dtypes.float64: "tc_zero_double"}
# float32 math in vectorizable inline polynomials instead of libm's scalar calls
POLYNOMIAL_FUNCTIONS = {Ops.EXP2: "tc_exp2f", Ops.LOG2: "tc_log2f"}
FMA_FUNCTIONS = {dtypes.float32: "tc_fmaf", dtypes.float64: "tc_fma"}
OMP_REDUCTION = {Ops.ADD: "+", Ops.MUL: "*", Ops.MAX: "max"}
SHARES_PER_THREAD = 4   # shares a threaded kernel's outer loop is cut into, per thread (see launch_dims)
LANE_VECTORS = 4   # vector accumulators per reduction loop: enough adds in flight to hide the add latency
LANE_DTYPES = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64})


# the suffix of a kernel's entry point: `void <name>_args(const unsigned long long *args, long long core_id,
# long long core_count)` calls the kernel with its buffers and scalars read from an argument table, so a queue entry
# (or ctypes) passes any number of them as one pointer
ENTRY_SUFFIX = "_args"


class CPURenderer(CStyleRenderer):
  """Renders a kernel as a C function ``void name(T* restrict data0, ..., long long var0, ...)`` (kept out of line)
  and its entry point ``void name_args(const unsigned long long *args, long long core_id, long long core_count)``,
  which reads the buffers, then the scalars, from the argument table."""
  device = "CPU"
  kernel_qualifier = "__attribute__((noinline))"
  prelude = CStyleRenderer.prelude + MULTIPLY_ADD + EXP2F + LOG2F + ZERO_CELLS
  # kernels with at least this many loop iterations split their outermost loop across `threads` worker threads
  parallel_threshold = 1 << 16
  # a reduction's per-element values that a later loop over the same row reuses (softmax's exp) are kept in a row
  # buffer on the stack, up to 16 KiB per kernel: a 4096-float row, within L1 beside the row it is computed from
  scratch_bytes = 16 * 1024
  # gcc 12 vectorizes an unrolled register tile from the stores that end it: a tile stored with a stride (output
  # channels as columns, 196 floats apart) got no vector at all (27 ms for (8,128,14,14) on 2 cores). Its
  # accumulators are copied into a contiguous array first, kept in memory by an empty asm that reads it, then stored
  # from there: gcc vectorizes the tile from that copy (52 -> 5 ms on one core; clang is unchanged)
  staging_barrier = '__asm__ volatile("" : : "r"({name}) : "memory");'

  def __init__(self, threads: int = 1, target: KernelTarget | None = None):
    self.threads = threads
    self.kernel_target = target or host_target(threads)
    self._split: list[UOp] = []  # the loops split across the threads (see threaded_loops)

  def write_source(self, name: str, sink: UOp, kernel: LinearKernel) -> str:
    # the trip count first (the queue runs a tiny kernel on the submitting thread), and no #include to preprocess
    from tiny_cpu.kernel_source import annotated_source
    source = super().write_source(name, sink, kernel) + self.entry_point(name, sink, kernel)
    return annotated_source(source, kernel.iterations())

  def entry_point(self, name: str, sink: UOp, kernel: LinearKernel) -> str:
    """The kernel's entry point: its arguments read from a table of 64-bit words (buffers, then scalars)."""
    written = {u.src[0].src[0].arg for u in sink.src if u.op is Ops.STORE}
    args = [f"({'' if p.arg in written else 'const '}{self.storage_type(p.dtype)}*)tc_args[{i}]"
            for i, p in enumerate(kernel.params)]
    args += [f"(long long)tc_args[{len(kernel.params) + i}]" for i in range(len(self._scalar_words))]
    if self._split: args += ["core_id", "core_count"]
    return (f"void {name}{ENTRY_SUFFIX}(const unsigned long long *tc_args, long long core_id, long long core_count) "
            f"{{ {name}({', '.join(args)}); }}\n")

  def threaded_loops(self, kernel: LinearKernel) -> list[UOp]:
    """The loops to split across threads: the outermost output loop, or where a kernel's loops were all cut into
    pieces (a cat along its outer dim: codegen.optimize.split_at_gates) each piece's first loop of at least as many
    iterations as threads (every thread takes its share of every piece); none for a kernel too small (or too narrow).
    The kernel opts' "threads" setting (a kernel search's choice) overrides the size rule."""
    if not (loops := self.shareable_loops(kernel)): return []
    if (chosen := self.opts.setting("threads")) is not None: return loops if chosen else []
    return loops if (kernel.iterations() or 0) >= self.parallel_threshold else []

  def shareable_loops(self, kernel: LinearKernel) -> list[UOp]:
    """The loops threads could split (see threaded_loops), whatever the kernel's size."""
    if self.threads < 2: return []
    if (outer := self.outer_loop(kernel)) is not None and outer.src[0].arg >= self.threads: return [outer]
    return [r for chain in kernel.pieces if (r := next((r for r in chain if r.src[0].arg >= self.threads), None))]

  @staticmethod
  def outer_loop(kernel: LinearKernel) -> UOp | None:
    """The outermost output loop past loops that run once (a batch of 1 around a conv's rows); None if none."""
    loops = sorted((r for r in kernel.ranges if r.arg[1] == "loop"), key=lambda r: r.arg[0])
    return next((r for r in loops if len(r.src) > 1 or r.src[0].arg > 1), loops[0] if loops else None)

  def search_space(self, sink: UOp) -> dict[str, tuple]:
    """What a kernel search may try beyond the tiles: splitting the outer loop across threads or not, and how many
    vector accumulators a reduction loop keeps in flight (`lane_width`)."""
    kernel = linearize(sink)
    space: dict[str, tuple] = {}
    if self.shareable_loops(kernel): space["threads"] = (True, False)
    if any(u.op is Ops.REDUCE for u in sink.toposort()): space["lanes"] = (1, 2, 4, 8)
    return space

  def begin_kernel(self, kernel: LinearKernel) -> None:
    self._split = self.threaded_loops(kernel)
    self._nan_flags: dict[UOp, str] = {}
    self._panels_before: dict[int, list[Panel]] = {}
    for panel in find_panels(kernel, self.kernel_target.panel_bytes):
      self._panels_before.setdefault(id(panel.reuse), []).append(panel)
    self._packed: dict[UOp, str] = {}

  def launch_dims(self, kernel: LinearKernel) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # a threaded kernel runs once per share of its outermost loop (core_id = 0..shares-1), SHARES_PER_THREAD per
    # thread where the loop is long enough: the threads take shares as they finish (tc_parallel), so a thread that
    # starts late or is interrupted is made up for by the others
    if not self._split: return (1, 1, 1), (1, 1, 1)
    return (min(max(r.src[0].arg for r in self._split), self.threads * SHARES_PER_THREAD), 1, 1), (1, 1, 1)

  def extra_params(self) -> list[str]:
    return ["long long core_id", "long long core_count"] if self._split else []

  def loop_bounds(self, loop: Loop, lines: list[str], pad: str) -> tuple[str, str]:
    if loop.range not in self._split: return super().loop_bounds(loop, lines, pad)
    size = self.literal(loop.range.src[0].arg, dtypes.int64)
    # (the pieces' loops are siblings in one scope: each names its share apart)
    suffix = "" if len(self._split) == 1 else str(loop.range.arg[0])
    share, start, end = (f"tc_{n}{suffix}" for n in ("share", "start", "end"))
    lines.append(f"{pad}long long {share} = ({size} + core_count - 1) / core_count, {start} = core_id * {share};")
    lines.append(f"{pad}long long {end} = {start} + {share} < {size} ? {start} + {share} : {size};")
    return start, end

  def math_call(self, op: Ops, dtype: DType, args: list[str]) -> str:
    if dtype in (dtypes.float32, dtypes.float16, dtypes.bfloat16) and op in POLYNOMIAL_FUNCTIONS:
      return f"{POLYNOMIAL_FUNCTIONS[op]}({args[0]})"
    return super().math_call(op, dtype, args)

  # A vectorized float max (min is the max of negations) keeps NaN in a flag of its own: the `omp simd` reduction
  # combines the lanes' partial maxima with a plain comparison that drops NaN (gcc does; numpy's max returns NaN).
  # The flag is an integer OR reduction, so the loop still vectorizes; after the loop a set flag makes the max NaN.
  # A second flag records an element above -inf: OpenMP starts each lane's max at the type's lowest value, which
  # clang takes as -FLT_MAX (not -inf), so a max over only -inf would come out -FLT_MAX; without the flag it is -inf.
  def before_loop(self, loop: Loop, lines: list[str], pad: str) -> None:
    for panel in self._panels_before.get(id(loop), []): self.pack_panel(panel, lines, pad)
    for update in self.reduction_updates(loop):
      x = update.reduce
      # only an accumulator declared for this very loop: one kept across an outer loop needs its flag there too
      if x.arg is Ops.MAX and dtypes.is_float(x.dtype) and x in loop.reduces:
        flag = self._nan_flags[x] = f"{self._names[x]}_nan"
        lines.append(f"{pad}int {flag} = 0, {self._names[x]}_above = 0;")

  # Packing (codegen.packing): a strided or masked operand panel is copied once, before the loop that reuses it, into
  # a contiguous array on the thread's stack; the register tile then reads it with unit stride and no masks.
  def pack_panel(self, panel: Panel, lines: list[str], pad: str) -> None:
    name = self._packed[panel.load] = self._fresh("panel")
    dims = "".join(f"[{r.src[0].arg}]" for r in panel.ranges)
    lines.append(f"{pad}{self.value_type(panel.load.dtype)} {name}{dims} __attribute__((aligned(64)));")
    for depth, r in enumerate(panel.ranges):
      bound = self.literal(r.src[0].arg, dtypes.int64)
      # gcc's -O2 cost model leaves a loop scalar when its trip count (an image row: 28) needs a remainder, and the
      # padding gate a masked load; `omp simd` lifts both (a conv's copy: 1.1 of 6.5 ms on one core, scalar)
      if depth == len(panel.ranges) - 1: lines.append(f"{pad}{'  ' * depth}#pragma omp simd")
      lines.append(f"{pad}{'  ' * depth}for ({self.index_type} ridx{r.arg[0]} = 0; ridx{r.arg[0]} < {bound}; "
                   f"ridx{r.arg[0]}++) {{")
    index, memo = panel.load.src[0], {}
    value = self.load(self._name(index.src[0]), self.recomputed(index.src[1], panel.outer, memo), panel.load.dtype)
    if len(index.src) > 2:
      value = f"({self.recomputed(index.src[2], panel.outer, memo)} ? {value} : {self.literal(0, panel.load.dtype)})"
    inner_pad = pad + "  " * len(panel.ranges)
    lines.append(f"{inner_pad}{name}{self.panel_index(panel)} = {value};")
    lines.append(pad + "}" * len(panel.ranges))

  # In an unrolled register tile a gated load written `g ? x[i] : 0` is a branch around each load (the load may not
  # run where g is false), which stops both compilers' straight-line (SLP) vectorizer: clang ran a padded conv tile
  # it could not pack (8 batches x 32 output channels, (8,128,14,14)) as scalar code at 5 GFLOP/s. Selecting the
  # address instead, the element or a zero cell, is one unconditional load: the tile vectorizes (over 200 GFLOP/s).
  def gated_load(self, buffer: str, offset: str, gate: str, dtype: DType) -> str:
    unrolled = self._current_block is not None and all(r.src[0].arg <= self.max_unrolled for r in self._upcast)
    if not unrolled or dtype not in ZERO_CELL_NAMES: return super().gated_load(buffer, offset, gate, dtype)
    return f"*({gate} ? {buffer} + {offset} : &{ZERO_CELL_NAMES[dtype]})"

  @staticmethod
  def panel_index(panel: Panel) -> str: return "".join(f"[ridx{r.arg[0]}]" for r in panel.ranges)

  def recomputed(self, u: UOp, outer: frozenset[UOp], memo: dict[UOp, str]) -> str:
    """An address expression for the panel's copy loop: values of the loops around it by their names, the rest
    computed again from the loop variables (which the copy loop names as the kernel's loops do)."""
    if (done := memo.get(u)) is not None: return done
    if u.op in (Ops.CONST, Ops.RANGE): expr = self._name(u)
    elif u in self._names and u not in self._vector and {r for r in u.toposort() if r.op is Ops.RANGE} <= outer:
      expr = self._names[u]  # computed before the reuse loop, in a scope around it
    elif u.op is Ops.CAST: expr = self.cast(self.recomputed(u.src[0], outer, memo), u.src[0].dtype, u.dtype)
    elif u.op in GroupOp.ALU: expr = self.alu(u, [self.recomputed(s, outer, memo) for s in u.src])
    else: raise AssertionError(f"a packed panel's address holds {u.op}, which codegen.packing should have refused")
    memo[u] = expr
    return expr

  def packed_load(self, u: UOp) -> str | None:
    if (name := self._packed.get(u)) is None: return None
    panel = next(p for ps in self._panels_before.values() for p in ps if p.load is u)
    return f"{name}{self.panel_index(panel)}"

  def after_loop(self, loop: Loop, lines: list[str], pad: str) -> None:
    for x in loop.reduces:
      if (flag := self._nan_flags.get(x)) is not None:
        acc = self._names[x]
        lines.append(f"{pad}if ({flag}) {acc} = {self.literal(float('nan'), x.dtype)};")
        lines.append(f"{pad}else if (!{acc}_above) {acc} = {self.literal(-float('inf'), x.dtype)};")

  def accumulate(self, x: UOp) -> str:
    # a sum of products (matmul, conv) accumulates with one fused multiply-add: one rounding instead of two, as BLAS
    # does; elementwise a*b+c keeps both roundings (-ffp-contract=off), as numpy computes it
    if (flag := self._nan_flags.get(x)) is not None:
      acc, value = self._name(x), self._name(x.src[0])
      above = f"{acc}_above |= ({value} > {self.literal(-float('inf'), x.dtype)})"
      return f"({flag} |= ({value} != {value}), {above}, ({value} > {acc} ? {value} : {acc}))"
    product = x.src[0]
    # (not when the product was computed in an earlier block: its factors' names are out of scope here)
    if (x.arg is Ops.ADD and product.op is Ops.MUL and product.dtype in FMA_FUNCTIONS and
        not self.read_from_block_array(product)):
      a, b = (self._name(s) for s in product.src)
      return f"{FMA_FUNCTIONS[product.dtype]}({a}, {b}, {self._name(x)})"
    return super().accumulate(x)

  # A reduction loop over floats runs as `lane_width` independent accumulators (LANE_VECTORS vectors of them): the loop
  # becomes an outer loop over blocks and an inner `omp simd` loop over the lanes, each lane adding (or taking the
  # max of) every lane_width-th element, then the lanes combine pairwise (halving) into the accumulator. The adds
  # carry no dependency chain from one element to the next, so gcc and clang both vectorize the loop with several
  # vector accumulators in flight, with no reduction to reassociate (clang 14 vectorizes no float max reduction).
  # This reassociates a float sum, as numpy's pairwise sum and BLAS do; a max is exact in any order, and a lane
  # holding NaN keeps it (NaN wins in `max_expr`), so NaN still propagates.
  def lane_width(self) -> int:
    return self.kernel_target.vector_lanes * self.opts.setting("lanes", LANE_VECTORS)

  def lane_updates(self, loop: Loop) -> list:
    """The updates of an innermost reduction loop that lane accumulators may compute: sums and maxima of 32/64-bit
    values over a constant trip count of at least two lane widths; [] for any other loop."""
    updates, width = self.reduction_updates(loop), self.lane_width()
    if not updates or len(loop.range.src) > 1 or loop.range.src[0].arg < 2 * width: return []
    if any(isinstance(item, UOp) and item.op is Ops.STORE for item in loop.body): return []
    if all(u.reduce.arg in (Ops.ADD, Ops.MAX) and u.reduce.dtype in LANE_DTYPES for u in updates): return updates
    return []

  def emit_loop(self, loop: Loop, lines: list[str], depth: int) -> None:
    updates = self.lane_updates(loop)
    if not updates: return super().emit_loop(loop, lines, depth)
    pad, inner, width = "  " * depth, "  " * (depth + 3), self.lane_width()
    r, accumulators = self._name(loop.range), {u.reduce: self._names[u.reduce] for u in updates}
    for x, acc in accumulators.items():
      identity = self.literal(0 if x.arg is Ops.ADD else dtypes.min(x.dtype), x.dtype)  # (ADD or MAX)
      lines.append(f"{pad}{self.value_type(x.dtype)} {acc}_lanes[{width}];")
      lines.append(f"{pad}for (int tc_lane = 0; tc_lane < {width}; tc_lane++) {acc}_lanes[tc_lane] = {identity};")
      self._names[x] = f"{acc}_lanes[{r}_lane]"
    # blocks of `width` elements; in each, LANE_VECTORS unrolled vector-wide `omp simd` loops (gcc then keeps every
    # lane vector in a register, as clang does; one simd loop over all the lanes left them in the stack array)
    index, lanes = self.index_type, self.kernel_target.vector_lanes
    blocks, rest = divmod(loop.range.src[0].arg, width)
    lines.append(f"{pad}for ({index} {r}_block = 0; {r}_block < {blocks}ll; {r}_block++) {{")
    lines.append(f"{pad}  #pragma GCC unroll {LANE_VECTORS}")
    lines.append(f"{pad}  for ({index} {r}_vector = 0; {r}_vector < {width}ll; {r}_vector += {lanes}ll) {{")
    lines.append(f"{pad}    #pragma omp simd")
    lines.append(f"{pad}    for ({index} {r}_in = 0; {r}_in < {lanes}ll; {r}_in++) {{")
    lines.append(f"{inner}{index} {r}_lane = {r}_vector + {r}_in, {r} = {r}_block * {width}ll + {r}_lane;")
    self._emit_block(loop.body, lines, depth + 3)
    lines.append(f"{pad}}}}}}}")
    for x, acc in accumulators.items():
      self._names[x] = acc
      self.combine_lanes(x, f"{acc}_lanes", width, lines, pad)
    if rest:  # the elements past the last whole block (1000 = 15 x 64 + 40), one at a time into the accumulator
      lines.append(f"{pad}for ({index} {r} = {blocks * width}ll; {r} < {loop.range.src[0].arg}ll; {r}++) {{")
      self._emit_block(loop.body, lines, depth + 1)
      lines.append(f"{pad}}}")

  def combine_lanes(self, x: UOp, lanes: str, width: int, lines: list[str], pad: str) -> None:
    """acc = acc OP (the lanes combined pairwise): half the lanes into the other half until one is left."""
    def combined(a: str, b: str) -> str:
      return self.max_expr(a, b, x.dtype) if x.arg is Ops.MAX else self.alu(UOp(x.arg, x.dtype, (x, x)), [a, b])
    half = width // 2
    while half:
      lines.append(f"{pad}#pragma omp simd")
      lines.append(f"{pad}for (int tc_lane = 0; tc_lane < {half}; tc_lane++) "
                   f"{lanes}[tc_lane] = {combined(f'{lanes}[tc_lane]', f'{lanes}[tc_lane + {half}]')};")
      half //= 2
    acc = self._names[x]
    lines.append(f"{pad}{acc} = {combined(acc, f'{lanes}[0]')};")

  # gcc orders the two factors of a commutative fmaf by when each was computed. In an unrolled register tile the
  # factor that is the same in every lane of the innermost upcast range (a weight or a row of A) is computed once,
  # in lane 0's copy: written after the lane's own factor, it comes second in lane 0 and first in the others, and
  # gcc's SLP vectorizer leaves the mismatched row scalar. Its loads, written first, come first in every lane.
  def order_vector_block(self, items: list, upcast: list[UOp]) -> list:
    if not upcast or any(isinstance(item, UOp) and item.op is Ops.STORE for item in items): return items
    inner = upcast[-1]
    def lane_invariant(item: object) -> bool:
      if not isinstance(item, UOp) or item.op is Ops.REDUCE: return False
      return all(u is not inner and u.op is not Ops.REDUCE for u in item.toposort())
    # a statement that reads neither the lane's index nor an accumulator reads only other such statements
    return [item for item in items if lane_invariant(item)] + [item for item in items if not lane_invariant(item)]

  def loop_pragma(self, loop: Loop) -> str:
    # an innermost reduction loop may be reassociated, so the compiler can keep several partial sums in vectors
    updates = self.reduction_updates(loop)
    if not updates: return ""
    # a float max without a NaN flag must not be vectorized: the lanes' combination would drop NaN
    if any(u.reduce.arg is Ops.MAX and dtypes.is_float(u.reduce.dtype) and u.reduce not in self._nan_flags
           for u in updates): return ""
    clauses = " ".join(f"reduction({OMP_REDUCTION[u.reduce.arg]}:{self._names[u.reduce]})" for u in updates)
    clauses += "".join(f" reduction(|:{self._nan_flags[u.reduce]},{self._names[u.reduce]}_above)"
                       for u in updates if u.reduce in self._nan_flags)
    return f"#pragma omp simd {clauses}"


STRIP_VECTORS = 256
# rows a column-sum strip adds per pass: measured on a 2-core Zen VM (4096x4096, both compilers), 8 rows read the
# strip from L1 an eighth as often as 1 row and ran 5-10% faster than 4 (1 row: 1.0-1.1 ms, 4: 0.67-0.69, 8: 0.58-0.66)
STRIP_ROWS = 8


def host_target(cores: int) -> KernelTarget:
  """This machine for the optimizer, from the CPU flags the kernel reports (the compiler targets -march=native):
  AVX-512 has 16 float lanes and 32 registers, AVX/AVX2 8 lanes and 16, anything else 4 lanes and 16. Column-sum
  strips hold up to 256 vectors of accumulators (16 KB with AVX-512, a third of a 48 KB L1: L1 keeps them beside
  the rows streaming past, and a split column sum reads whole rows of up to 16 KB front to back), and add STRIP_ROWS
  rows per pass."""
  try:
    with open("/proc/cpuinfo") as cpuinfo: flags = next((line for line in cpuinfo if line.startswith("flags")), "")
  except OSError: flags = ""
  words = set(flags.split())
  panel = panel_budget(l2_cache_bytes())
  lanes, registers = (16, 32) if "avx512f" in words else (8, 16) if "avx" in words else (4, 16)
  return KernelTarget(lanes, registers, cores, STRIP_VECTORS, panel, STRIP_ROWS, gathers=True, broadcast_strips=True,
                      split_gates=True, blocks=True)


DEFAULT_L2_BYTES = 512 * 1024
# packed panels live on the stack of the thread running the kernel (8 MB by default for the queue's threads)
MAX_PANEL_BYTES = 1024 * 1024


def l2_cache_bytes() -> int:
  """The L2 cache of one core in bytes: from sysfs, else sysconf, else 512 KiB."""
  try:
    base = "/sys/devices/system/cpu/cpu0/cache"
    for entry in sorted(os.listdir(base)):
      with open(f"{base}/{entry}/level") as level, open(f"{base}/{entry}/size") as size:
        if level.read().strip() == "2": return parse_cache_size(size.read())
  except (OSError, ValueError): pass
  try:
    if (size := os.sysconf("SC_LEVEL2_CACHE_SIZE")) > 0: return size
  except (ValueError, OSError, AttributeError): pass
  return DEFAULT_L2_BYTES


def parse_cache_size(text: str) -> int:
  """sysfs's cache size ("1024K", "2M", "512") in bytes."""
  text = text.strip().upper()
  scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
  return int(text.rstrip("KMG")) * scale


def panel_budget(l2_bytes: int) -> int:
  """Bytes of packed operand panels one kernel may hold: three quarters of L2 (the rest keeps the other operand's
  rows and the outputs; a LLaMA MLP's down projection, 32 columns of 5632, packs 704 KiB and runs 6x faster than
  unpacked), at most MAX_PANEL_BYTES."""
  return min(l2_bytes * 3 // 4, MAX_PANEL_BYTES)
