"""The LLVM IR renderer: a linearized kernel -> one LLVM IR function, for any LLVM target (`LLVMTarget`).

The statement structure is the C-style renderer's (the same loop tree, the same grid mapping of the outer output
loops, the same numerics rules); what differs is the language. Loop counters and reduction accumulators live in
`alloca`s of the entry block and every other value is an SSA register: the target's O2 pipeline (mem2reg) turns the
allocas into registers, so the renderer never writes a phi. Upcast (unrolled) ranges are unrolled here, one SSA
value per lane.

Numerics, as in `c_style`: integer add/sub/mul/neg wrap (LLVM's plain `add` is two's complement); shifts by at least
the width give 0 (or -1 for a negative value shifted right); x / 0 and x % 0 are 0 and MIN / -1 is MIN; max
propagates NaN; float -> int casts give the minimum of the intermediate type for NaN and out-of-range values
(numpy on x86). float16 and bfloat16 compute in float and are rounded back after every op (float16 with the
target's conversion instruction, bfloat16 by integer rounding); casts from double to a 16-bit float go through
round-to-odd so they round once. Nothing relies on poison being ignored except in the unchosen arm of a `select`.
Targets without a math library (GPUs) get the float64 transcendentals and `pow` as IR expansions (`math_in_ir`).
"""
from __future__ import annotations
import copy
import itertools
import math
import struct
from typing import Any
import attrs
from tinycore.dtype import ALL, FP8_FORMATS, FP8S, NARROW_FLOATS, DType, dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp, identity_element
from tinycore.uop.scalars import kernel_scalars
from tinycore.codegen.c_style import CStyleRenderer, RenderedKernel
from tinycore.codegen.linearize import AccUpdate, LinearKernel, Loop, linearize
from tinycore.codegen.optimize import opts_of

SIXTEEN_BIT = (dtypes.float16, dtypes.bfloat16)
INT_BITS = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}


@attrs.frozen
class LLVMTarget:
  """What the IR of one LLVM target needs: its triple and data layout, the address space of global memory, the
  kernel calling convention and attributes, and the intrinsics that read a work-item's position (a `{axis}` in the
  name is x, y or z). A target with `grid_dims` 0 runs the whole kernel as one call (the loops stay loops)."""
  triple: str
  datalayout: str = ""
  global_addrspace: int = 0
  local_addrspace: int = 3          # LDS / shared memory (for renderers that declare it)
  private_addrspace: int = 0        # where allocas live (5 on amdgcn)
  calling_convention: str = ""      # e.g. "amdgpu_kernel"
  kernel_attributes: str = "nounwind"
  workgroup_id: str = ""            # e.g. "llvm.amdgcn.workgroup.id.{axis}" (returns i32)
  workitem_id: str = ""             # e.g. "llvm.amdgcn.workitem.id.{axis}" (returns i32)
  grid_dims: int = 0
  max_local_size: int = 256
  math_in_ir: bool = False          # no libm: float64 exp2/log2/sin and every pow are expanded in IR


def ir_type(dtype: DType) -> str:
  """The IR type a value of `dtype` is computed in (16-bit floats compute in float)."""
  if dtype is dtypes.bool: return "i1"
  if dtypes.is_int(dtype): return INT_BITS[dtype.itemsize]
  return {dtypes.float64: "double"}.get(dtype, "float")


def storage_ir_type(dtype: DType) -> str:
  """The IR type of a dtype in memory: bool is one byte, float16 a `half`, bfloat16 a 16-bit word."""
  if dtype is dtypes.bool: return "i8"
  if dtype is dtypes.float16: return "half"
  if dtype is dtypes.bfloat16: return "i16"
  if dtype in FP8S: return "i8"
  return ir_type(dtype)


def float_literal(value: float, dtype: DType) -> str:
  """A float constant as LLVM's exact hex form (a float is written as the double of its value)."""
  if dtype is not dtypes.float64 and math.isfinite(value):
    try: value = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError: value = math.copysign(math.inf, value)  # beyond float's range rounds to infinity
  bits = struct.unpack("<Q", struct.pack("<d", value))[0]
  if math.isnan(value): bits = 0x7FF8000000000000 | (bits & (1 << 63))
  return f"0x{bits:016X}"


def literal(value: Any, dtype: DType) -> str:
  """A constant of `dtype` in its computing type."""
  if dtype is dtypes.bool: return "true" if value else "false"
  if dtypes.is_float(dtype): return float_literal(float(value), dtype)
  bits = dtype.itemsize * 8
  value = int(value) & ((1 << bits) - 1)
  return str(value - (1 << bits) if value >> (bits - 1) else value)


# helpers defined in the module when a kernel uses them (internal, so O2 inlines them and drops the rest)
BF16_HELPERS = """
define internal i16 @tc_float_to_bf16(float %f) alwaysinline {
  %x = bitcast float %f to i32
  %abs = and i32 %x, 2147483647
  %nan = icmp ugt i32 %abs, 2139095040
  %hi = lshr i32 %x, 16
  %quiet = or i32 %hi, 64
  %odd = and i32 %hi, 1
  %bias = add i32 %odd, 32767
  %sum = add i32 %x, %bias
  %rounded = lshr i32 %sum, 16
  %word = select i1 %nan, i32 %quiet, i32 %rounded
  %w16 = trunc i32 %word to i16
  ret i16 %w16
}
define internal float @tc_bf16_to_float(i16 %h) alwaysinline {
  %w = zext i16 %h to i32
  %x = shl i32 %w, 16
  %f = bitcast i32 %x to float
  ret float %f
}
define internal float @tc_round_bf16(float %f) alwaysinline {
  %h = call i16 @tc_float_to_bf16(float %f)
  %r = call float @tc_bf16_to_float(i16 %h)
  ret float %r
}
"""


def fp8_helpers(dtype: DType) -> str:
  """An 8-bit float's conversions in IR, branch-free (selects), the same algorithm as the C renderer's
  (`tinycore.codegen.c_style.fp8_helpers`): to float, a normal byte's fields moved into float position, a subnormal
  one its mantissa times the step; from float, a subnormal count of steps by rint (ties to even), a normal magnitude
  rebiased and rounded on its bits, clamped to the largest finite byte, then the sign and the NaN/infinity bytes."""
  f, name = FP8_FORMATS[dtype], dtype.name
  e_mask, m_mask, shift = (1 << f.exponent_bits) - 1, (1 << f.mantissa_bits) - 1, 23 - f.mantissa_bits
  step = 2.0 ** (1 - f.bias - f.mantissa_bits)
  if f.kind == "fn": special = ["  %low = and i32 %w, 127", "  %isnan = icmp eq i32 %low, 127",
                                "  %out = select i1 %isnan, i32 %nanbits, i32 %sbits"]
  elif f.kind == "ieee": special = ["  %top = icmp eq i32 %e, " + str(e_mask), "  %mzero = icmp eq i32 %m, 0",
                                    "  %infbits = or i32 %signbit, 2139095040",
                                    "  %spec = select i1 %mzero, i32 %infbits, i32 %nanbits",
                                    "  %out = select i1 %top, i32 %spec, i32 %sbits"]
  else: special = ["  %isnan = icmp eq i32 %w, 128", "  %out = select i1 %isnan, i32 2143289344, i32 %sbits"]
  nan = "128" if f.kind == "fnuz" else "%nanword"
  infinity = "%infword" if f.kind == "ieee" else nan
  sign_rule = (["  %iszero = icmp eq i32 %clamped, 0", "  %signed0 = or i32 %clamped, %s",
                "  %signed = select i1 %iszero, i32 0, i32 %signed0"] if f.kind == "fnuz"
               else ["  %signed = or i32 %clamped, %s"])
  return "\n".join([
    f"define internal float @tc_{name}_to_float(i8 %c) alwaysinline {{",
    "  %w = zext i8 %c to i32", "  %sign = and i32 %w, 128", "  %signbit = shl i32 %sign, 24",
    f"  %e0 = lshr i32 %w, {f.mantissa_bits}", f"  %e = and i32 %e0, {e_mask}", f"  %m = and i32 %w, {m_mask}",
    f"  %eb = add i32 %e, {127 - f.bias}", "  %es = shl i32 %eb, 23", f"  %ms = shl i32 %m, {shift}",
    "  %nbits = or i32 %es, %ms", "  %normal = bitcast i32 %nbits to float", "  %mf = uitofp i32 %m to float",
    f"  %sub = fmul float %mf, {float_literal(step, dtypes.float32)}", "  %issub = icmp eq i32 %e, 0",
    "  %mag = select i1 %issub, float %sub, float %normal", "  %magbits = bitcast float %mag to i32",
    "  %sbits = or i32 %magbits, %signbit", "  %nanbits = or i32 %signbit, 2143289344", *special,
    "  %r = bitcast i32 %out to float", "  ret float %r", "}",
    f"define internal i8 @tc_float_to_{name}(float %x) alwaysinline {{",
    "  %bits = bitcast float %x to i32", "  %s0 = lshr i32 %bits, 24", "  %s = and i32 %s0, 128",
    "  %mag = and i32 %bits, 2147483647", f"  %issub = icmp ult i32 %mag, {(128 - f.bias) << 23}",
    "  %magf = bitcast i32 %mag to float", "  %small = select i1 %issub, float %magf, float 0.0",
    f"  %scaled = fmul float %small, {float_literal(1 / step, dtypes.float32)}",
    "  %even = call float @llvm.rint.f32(float %scaled)", "  %subcode = fptoui float %even to i32",
    f"  %reb = sub i32 %mag, {(127 - f.bias) << 23}", f"  %lsb0 = lshr i32 %reb, {shift}", "  %lsb = and i32 %lsb0, 1",
    f"  %half = add i32 %reb, {(1 << (shift - 1)) - 1}", "  %sum = add i32 %half, %lsb",
    f"  %ncode = lshr i32 %sum, {shift}", "  %code = select i1 %issub, i32 %subcode, i32 %ncode",
    f"  %over = icmp ugt i32 %code, {f.max_code}", f"  %clamped = select i1 %over, i32 {f.max_code}, i32 %code",
    *sign_rule, "  %nanword = or i32 %s, 127", "  %infword = or i32 %s, 124",
    "  %isnan = icmp ugt i32 %mag, 2139095040", "  %isinf = icmp eq i32 %mag, 2139095040",
    f"  %c1 = select i1 %isinf, i32 {infinity}, i32 %signed", f"  %c2 = select i1 %isnan, i32 {nan}, i32 %c1",
    "  %c8 = trunc i32 %c2 to i8", "  ret i8 %c8", "}",
    f"define internal float @tc_round_{name}(float %f) alwaysinline {{",
    f"  %h = call i8 @tc_float_to_{name}(float %f)", f"  %r = call float @tc_{name}_to_float(i8 %h)",
    "  ret float %r", "}", "declare float @llvm.rint.f32(float)", ""])

# double -> float by round-to-odd: a following rounding to 16 bits then rounds once (see c_style)
ROUND_ODD_HELPER = """
define internal float @tc_float_round_odd(double %d) alwaysinline {
  %f = fptrunc double %d to float
  %back = fpext float %f to double
  %exact = fcmp ueq double %back, %d
  %bits = bitcast float %f to i32
  %af = call double @llvm.fabs.f64(double %back)
  %ad = call double @llvm.fabs.f64(double %d)
  %above = fcmp ogt double %af, %ad
  %down = sub i32 %bits, 1
  %toward = select i1 %above, i32 %down, i32 %bits
  %odd = or i32 %toward, 1
  %oddf = bitcast i32 %odd to float
  %r = select i1 %exact, float %f, float %oddf
  ret float %r
}
"""


class LLVMRenderer(CStyleRenderer):
  """Renders a kernel as one LLVM IR function `void @name(ptr data0, ..., i64 var0, ...)` for `target`: buffers
  (global address space, `noalias`), then the scalar parameters as 64-bit words. The grid mapping (`parallel_loops`,
  `launch_dims`) is the C-style renderer's; the outer output loops become workgroup id * local size + work-item id
  (the local size is a constant of the kernel)."""
  supported_dtypes: frozenset[DType] = frozenset(ALL)

  def __init__(self, target: LLVMTarget):
    self.target = target
    self.device = target.triple
    self.global_dims, self.max_local_size = target.grid_dims, target.max_local_size

  def render(self, name: str, sink: UOp) -> RenderedKernel:
    kernel = linearize(sink)
    writer = copy.copy(self)  # this kernel's names and state live on the copy
    writer.opts = opts_of(sink)
    global_size, local_size = writer.launch_dims(kernel)
    return RenderedKernel(writer.write_ir(name, sink, kernel, local_size), global_size, local_size)

  # ------------------------------------------------------------------ module text
  def write_ir(self, name: str, sink: UOp, kernel: LinearKernel, local_size: tuple[int, ...]) -> str:
    self._lines: list[str] = []
    self._allocas: list[str] = []
    self._names: dict[Any, str] = {}
    self._counter = 0
    self._lane: dict[UOp, int] = {}
    self._declares: set[str] = set()
    self._helpers: set[str] = set()
    self._local_size = local_size
    self._vector, self._upcast = kernel.vector, kernel.upcast
    parallel = self.parallel_loops(kernel) if self.global_dims else []
    self._grid_dims = {id(loop): len(parallel) - 1 - i for i, loop in enumerate(parallel)}
    self._block = "body"
    scalars = kernel_scalars(sink)
    self._scalar_words = {u: f"%var{i}" for i, u in enumerate(scalars)}
    self._emit_block(kernel.body)
    self._lines.append("  br label %exit")
    return self._module_text(name, kernel.params, scalars)

  def _module_text(self, name: str, params: list[UOp], scalars: list[UOp]) -> str:
    t = self.target
    space = f" addrspace({t.global_addrspace})" if t.global_addrspace else ""
    args = [f"ptr{space} noalias %data{p.arg}" for p in params] + [f"i64 %var{i}" for i in range(len(scalars))]
    cc = f"{t.calling_convention} " if t.calling_convention else ""
    header = [f'target triple = "{t.triple}"'] + ([f'target datalayout = "{t.datalayout}"'] if t.datalayout else [])
    function = ([f"define {cc}void @{name}({', '.join(args)}) #0 {{", "entry:"] + self._allocas +
                ["  br label %body", "body:"] + self._lines + ["exit:", "  ret void", "}"])
    helpers, declares = helper_definitions(self._helpers)
    declares = sorted(self._declares | declares)
    return "\n".join(header + declares + helpers + function + [f"attributes #0 = {{ {t.kernel_attributes} }}", ""])

  # ------------------------------------------------------------------ emission primitives
  def _fresh(self, prefix: str = "v") -> str:
    self._counter += 1
    return f"%{prefix}{self._counter}"

  def _emit(self, text: str) -> str:
    """Append `%vN = text` and return %vN."""
    name = self._fresh()
    self._lines.append(f"  {name} = {text}")
    return name

  def _label(self, prefix: str) -> str:
    self._counter += 1
    return f"{prefix}{self._counter}"

  def _start_block(self, label: str) -> None:
    self._lines.append(f"{label}:")
    self._block = label

  def _call(self, ret: str, fn: str, args: list[tuple[str, str]]) -> str:
    """Call an intrinsic (declared on first use) or a helper."""
    if fn.startswith("llvm."):
      self._declares.add(f"declare {ret} @{fn}({', '.join(t for t, _ in args)})")
    elif fn in HELPER_TEXT: self._helpers.add(fn)
    return self._emit(f"call {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})")

  def _alloca(self, ir: str) -> str:
    """A stack slot in the entry block; refer to it as `{self._slot} {name}`."""
    name = self._fresh("slot")
    space = self.target.private_addrspace
    self._allocas.append(f"  {name} = alloca {ir}" + (f", addrspace({space})" if space else ""))
    return name

  @property
  def _slot(self) -> str:
    return f"ptr addrspace({self.target.private_addrspace})" if self.target.private_addrspace else "ptr"

  # ------------------------------------------------------------------ names of values
  def _key(self, u: UOp) -> Any:
    return (u, tuple(sorted((r.arg[0], v) for r, v in self._lane.items()))) if u in self._vector else u

  def _value(self, u: UOp) -> str:
    if u.op is Ops.CONST: return literal(u.arg, u.dtype)
    if u.op is Ops.RANGE and u.arg[1] == "upcast": return str(self._lane[u])
    if u.op is Ops.REDUCE: return self._emit(f"load {ir_type(u.dtype)}, {self._slot} {self._names[self._key(u)]}")
    return self._names[self._key(u)]

  # ------------------------------------------------------------------ the loop tree
  def _emit_block(self, body: list) -> None:
    for item in body:
      if self._is_lanes(item): self._emit_lanes(item)
      elif isinstance(item, Loop): self._emit_loop(item)
      elif isinstance(item, AccUpdate): self._emit_update(item)
      else: self._emit_node(item)

  def _is_lanes(self, item: Any) -> bool:
    """A vector item outside an unrolled block: it is emitted once per lane."""
    if self._lane: return False
    if isinstance(item, AccUpdate): return item.reduce in self._vector
    return isinstance(item, UOp) and item in self._vector

  def _upcast_lanes(self) -> list[dict[UOp, int]]:
    """Every combination of the upcast ranges' values (one lane each)."""
    ranges = self._upcast
    return [dict(zip(ranges, values)) for values in itertools.product(*(range(r.src[0].arg) for r in ranges))]

  def _emit_lanes(self, item: Any) -> None:
    for lane in self._upcast_lanes():
      self._lane = lane
      self._emit_block([item])
    self._lane = {}

  def _emit_loop(self, loop: Loop) -> None:
    for x in loop.reduces: self._declare_accumulator(x)
    size = loop.range.src[0].arg
    index = ir_type(loop.range.dtype)
    if id(loop) in self._grid_dims:
      self._names[loop.range] = position = self._grid_position(self._grid_dims[id(loop)], index)
      inside = self._label("grid")
      self._emit_branch(self._emit(f"icmp slt {index} {position}, {size}"), inside, "exit")
      self._start_block(inside)
      self._emit_block(loop.body)
      return
    counter = self._alloca(index)
    self._lines.append(f"  store {index} 0, {self._slot} {counter}")
    head, body, done = self._label("loop"), self._label("body"), self._label("done")
    self._lines.append(f"  br label %{head}")
    self._start_block(head)
    value = self._names[loop.range] = self._emit(f"load {index}, {self._slot} {counter}")
    self._emit_branch(self._emit(f"icmp slt {index} {value}, {size}"), body, done)
    self._start_block(body)
    self._emit_block(loop.body)
    self._lines.append(f"  store {index} {self._emit(f'add {index} {value}, 1')}, {self._slot} {counter}")
    self._lines.append(f"  br label %{head}")
    self._start_block(done)

  def _emit_branch(self, condition: str, yes: str, no: str) -> None:
    self._lines.append(f"  br i1 {condition}, label %{yes}, label %{no}")

  def _grid_position(self, dim: int, index: str) -> str:
    """workgroup id * local size + work-item id in grid dimension `dim`, as an `index` integer."""
    axis, width = "xyz"[dim], self._local_size[dim]
    group = self._emit(f"zext i32 {self._call('i32', self.target.workgroup_id.format(axis=axis), [])} to {index}")
    if width == 1: return group
    item = self._emit(f"zext i32 {self._call('i32', self.target.workitem_id.format(axis=axis), [])} to {index}")
    return self._emit(f"add {index} {self._emit(f'mul {index} {group}, {width}')}, {item}")

  def _declare_accumulator(self, x: UOp) -> None:
    lanes = self._upcast_lanes() if x in self._vector else [{}]
    for lane in lanes:
      self._lane = lane
      slot = self._names[self._key(x)] = self._alloca(ir_type(x.dtype))
      identity = literal(identity_element(x.arg, x.dtype), x.dtype)
      self._lines.append(f"  store {ir_type(x.dtype)} {identity}, {self._slot} {slot}")
    self._lane = {}

  def _emit_update(self, item: AccUpdate) -> None:
    x = item.reduce
    slot, kind = self._names[self._key(x)], ir_type(x.dtype)
    acc, value = self._emit(f"load {kind}, {self._slot} {slot}"), self._value(x.src[0])
    updated = self.binary(x.arg, x.dtype, value, acc) if x.arg is Ops.MAX else self.binary(x.arg, x.dtype, acc, value)
    self._lines.append(f"  store {kind} {updated}, {self._slot} {slot}")

  # ------------------------------------------------------------------ statements
  def _address(self, index: UOp) -> tuple[str, str | None]:
    buffer, offset = index.src[0], index.src[1]
    space = f" addrspace({self.target.global_addrspace})" if self.target.global_addrspace else ""
    pointer = self._emit(f"getelementptr inbounds {storage_ir_type(buffer.dtype)}, ptr{space} %data{buffer.arg}, "
                         f"{ir_type(offset.dtype)} {self._value(offset)}")
    return f"ptr{space} {pointer}", (self._value(index.src[2]) if len(index.src) > 2 else None)

  def _emit_node(self, u: UOp) -> None:
    if u.op is Ops.REDUCE: return  # its accumulator is its value
    if u.op is Ops.STORE: return self._emit_store(u)
    if u.op is Ops.LOAD: value = self._emit_load(u)
    elif u.op is Ops.CAST: value = self.cast(self._value(u.src[0]), u.src[0].dtype, u.dtype)
    elif u.op is Ops.BITCAST: value = self.bitcast(self._value(u.src[0]), u.src[0].dtype, u.dtype)
    elif u.op is Ops.DEFINE_VAR: value = self.scalar_parameter(self._scalar_words[u], u.dtype)
    elif u.op in GroupOp.ALU: value = self.alu(u, [self._value(s) for s in u.src])
    else: raise NotImplementedError(f"the LLVM IR renderer cannot render {u.op}")
    self._names[self._key(u)] = value

  def _guarded(self, gate: str | None, emit: Any) -> tuple[str | None, str]:
    """Run `emit()` only where `gate` holds: returns (the block it ran in, the block after), or emits inline."""
    if gate is None:
      emit()
      return None, self._block
    yes, join = self._label("gated"), self._label("join")
    before = self._block
    self._emit_branch(gate, yes, join)
    self._start_block(yes)
    result = emit()
    inside = self._block
    self._lines.append(f"  br label %{join}")
    self._start_block(join)
    self._guarded_result = result
    return before, inside

  def _emit_load(self, u: UOp) -> str:
    pointer, gate = self._address(u.src[0])
    dtype = u.dtype
    def load() -> str: return self._from_storage(self._emit(f"load {storage_ir_type(dtype)}, {pointer}"), dtype)
    if gate is None: return load()
    before, inside = self._guarded(gate, load)
    return self._emit(f"phi {ir_type(dtype)} [ {self._guarded_result}, %{inside} ], "
                      f"[ {literal(0, dtype)}, %{before} ]")

  def _emit_store(self, u: UOp) -> None:
    pointer, gate = self._address(u.src[0])
    dtype = u.src[0].src[0].dtype
    value = self._value(u.src[1])
    def store() -> None:
      self._lines.append(f"  store {storage_ir_type(dtype)} {self._to_storage(value, dtype)}, {pointer}")
    self._guarded(gate, store)

  def _from_storage(self, word: str, dtype: DType) -> str:
    if dtype is dtypes.bool: return self._emit(f"icmp ne i8 {word}, 0")
    if dtype is dtypes.float16: return self._emit(f"fpext half {word} to float")
    if dtype is dtypes.bfloat16: return self._call("float", "tc_bf16_to_float", [("i16", word)])
    if dtype in FP8S: return self._call("float", f"tc_{dtype.name}_to_float", [("i8", word)])
    return word

  def _to_storage(self, value: str, dtype: DType) -> str:
    if dtype is dtypes.bool: return self._emit(f"zext i1 {value} to i8")
    if dtype is dtypes.float16: return self._emit(f"fptrunc float {value} to half")
    if dtype is dtypes.bfloat16: return self._call("i16", "tc_float_to_bf16", [("float", value)])
    if dtype in FP8S: return self._call("i8", f"tc_float_to_{dtype.name}", [("float", value)])
    return value

  def scalar_parameter(self, word: str, dtype: DType) -> str:  # type: ignore[override]
    """A scalar parameter's value from its 64-bit word (`tinycore.uop.scalars.scalar_word`)."""
    if dtype is dtypes.bool: return self._emit(f"icmp ne i64 {word}, 0")
    if dtypes.is_int(dtype):
      return word if dtype.itemsize == 8 else self._emit(f"trunc i64 {word} to {ir_type(dtype)}")
    if dtype is dtypes.float64: return self._emit(f"bitcast i64 {word} to double")
    if dtype is dtypes.float32: return self._emit(f"bitcast i32 {self._emit(f'trunc i64 {word} to i32')} to float")
    if dtype in FP8S: return self._from_storage(self._emit(f"trunc i64 {word} to i8"), dtype)
    return self._from_storage(self._emit(f"bitcast i16 {self._emit(f'trunc i64 {word} to i16')} to half")
                              if dtype is dtypes.float16 else self._emit(f"trunc i64 {word} to i16"), dtype)

  # ------------------------------------------------------------------ 16-bit floats
  def round_narrow(self, value: str, dtype: DType) -> str:  # type: ignore[override]
    """A float value rounded to a narrow float (float16, bfloat16, 8-bit; kept as float); other dtypes unchanged."""
    if dtype is dtypes.float16: return self._emit(f"fpext half {self._emit(f'fptrunc float {value} to half')} to float")
    if dtype is dtypes.bfloat16: return self._call("float", "tc_round_bf16", [("float", value)])
    if dtype in FP8S: return self._call("float", f"tc_round_{dtype.name}", [("float", value)])
    return value

  def float_for_narrow(self, value: str, src: DType) -> str:  # type: ignore[override]
    """The float a 16-bit float is rounded from: doubles and 32/64-bit ints round to float by round-to-odd."""
    if src is dtypes.float64 or (dtypes.is_int(src) and src.itemsize >= 4):
      double = value if src is dtypes.float64 else self._int_to_float(value, src, "double")
      return self._call("float", "tc_float_round_odd", [("double", double)])
    if src is dtypes.bool or dtypes.is_int(src): return self._int_to_float(value, src, "float")
    return value  # float32 and the narrow floats are already floats

  # ------------------------------------------------------------------ casts
  def cast(self, value: str, src: DType, dst: DType) -> str:  # type: ignore[override]
    if dst is dtypes.bool:
      if dtypes.is_float(src): return self._emit(f"fcmp une {ir_type(src)} {value}, 0.0")
      return value if src is dtypes.bool else self._emit(f"icmp ne {ir_type(src)} {value}, 0")
    if dst in NARROW_FLOATS: return self.round_narrow(self.float_for_narrow(value, src), dst)
    if dtypes.is_float(dst):
      if not dtypes.is_float(src): return self._int_to_float(value, src, ir_type(dst))
      return self._float_resize(value, ir_type(src), ir_type(dst))
    if dtypes.is_float(src): return self.float_to_int(value, ir_type(src), dst)
    return self._int_resize(value, src, dst)

  def _int_to_float(self, value: str, src: DType, to: str) -> str:
    signed = src is not dtypes.bool and not dtypes.is_unsigned(src)
    return self._emit(f"{'sitofp' if signed else 'uitofp'} {ir_type(src)} {value} to {to}")

  def _float_resize(self, value: str, src: str, dst: str) -> str:
    if src == dst: return value
    return self._emit(f"{'fpext' if dst == 'double' else 'fptrunc'} {src} {value} to {dst}")

  def _int_resize(self, value: str, src: DType, dst: DType) -> str:
    a, b = ir_type(src), ir_type(dst)
    if a == b: return value
    src_bits, dst_bits = (1 if src is dtypes.bool else src.itemsize * 8), dst.itemsize * 8
    if dst_bits < src_bits: return self._emit(f"trunc {a} {value} to {b}")
    widen = "zext" if src is dtypes.bool or dtypes.is_unsigned(src) else "sext"
    return self._emit(f"{widen} {a} {value} to {b}")

  def _float_to_signed(self, value: str, kind: str, bits: int) -> str:
    """value truncated to a signed int of `bits`, NaN and out-of-range values giving the minimum (x86's "integer
    indefinite", which numpy returns)."""
    limit = float(2 ** (bits - 1))
    lit = float_literal(limit, dtypes.float64 if kind == "double" else dtypes.float32)
    neg = float_literal(-limit, dtypes.float64 if kind == "double" else dtypes.float32)
    below = self._emit(f"fcmp olt {kind} {value}, {lit}")
    above = self._emit(f"fcmp oge {kind} {value}, {neg}")
    inside = self._emit(f"and i1 {below}, {above}")
    converted = self._emit(f"fptosi {kind} {value} to i{bits}")
    return self._emit(f"select i1 {inside}, i{bits} {converted}, i{bits} {-(2 ** (bits - 1))}")

  def float_to_int(self, value: str, kind: str, dst: DType) -> str:  # type: ignore[override]
    """A float cast to an int dtype with numpy's results on x86 for every input (see c_style.float_to_int)."""
    if dst is dtypes.uint64:
      top = float_literal(2.0 ** 63, dtypes.float64 if kind == "double" else dtypes.float32)
      past = float_literal(2.0 ** 64, dtypes.float64 if kind == "double" else dtypes.float32)
      high_part = self._emit(f"fptosi {kind} {self._emit(f'fsub {kind} {value}, {top}')} to i64")
      high = self._emit(f"xor i64 {high_part}, {-(2 ** 63)}")
      high = self._emit(f"select i1 {self._emit(f'fcmp oge {kind} {value}, {past}')}, i64 0, i64 {high}")
      low = self._float_to_signed(value, kind, 64)
      return self._emit(f"select i1 {self._emit(f'fcmp oge {kind} {value}, {top}')}, i64 {high}, i64 {low}")
    bits = 64 if dst.itemsize == 8 or dst is dtypes.uint32 else 32
    wide = self._float_to_signed(value, kind, bits)
    return wide if dst.itemsize * 8 == bits else self._emit(f"trunc i{bits} {wide} to {ir_type(dst)}")

  def bitcast(self, value: str, src: DType, dst: DType) -> str:  # type: ignore[override]
    """Reinterpret bits; 16-bit floats go through their 16-bit storage word, bool through its byte."""
    word = self._to_storage(value, src)
    source_ir = storage_ir_type(src)
    if src is dtypes.float16: word, source_ir = self._emit(f"bitcast half {word} to i16"), "i16"
    target_ir = "i16" if dst in SIXTEEN_BIT else storage_ir_type(dst)
    raw = word if source_ir == target_ir else self._emit(f"bitcast {source_ir} {word} to {target_ir}")
    if dst is dtypes.float16: raw = self._emit(f"bitcast i16 {raw} to half")
    return self._from_storage(raw, dst)

  # ------------------------------------------------------------------ arithmetic
  def alu(self, u: UOp, args: list[str]) -> str:  # type: ignore[override]
    op, dtype = u.op, u.dtype
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.TRUNC, Ops.POW):
      return self.round_narrow(self.math(op, dtype, args), dtype)
    if op is Ops.RECIPROCAL:
      return self.round_narrow(self._emit(f"fdiv {ir_type(dtype)} {literal(1.0, dtype)}, {args[0]}"), dtype)
    if op is Ops.NEG:
      if dtype is dtypes.bool: return self._emit(f"xor i1 {args[0]}, true")
      if dtypes.is_int(dtype): return self._emit(f"sub {ir_type(dtype)} 0, {args[0]}")
      return self._emit(f"fneg {ir_type(dtype)} {args[0]}")
    if op is Ops.WHERE:
      return self._emit(f"select i1 {args[0]}, {ir_type(dtype)} {args[1]}, {ir_type(dtype)} {args[2]}")
    if op is Ops.MULACC:
      # a 16-bit float product stays in float and the sum is rounded once, as the C-style renderer does it
      product = self.binary(Ops.MUL, dtype, args[0], args[1], round_result=False)
      return self.binary(Ops.ADD, dtype, product, args[2])
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ): return self.compare(op, u.src[0].dtype, args[0], args[1])
    if op in (Ops.IDIV, Ops.MOD): return self.int_division(op, args[0], args[1], u.src[1], dtype)
    return self.binary(op, dtype, args[0], args[1])

  def binary(self, op: Ops, dtype: DType, a: str, b: str, round_result: bool = True) -> str:
    """a OP b for the commutative and shift ops (what reductions and MULACC use too)."""
    t = ir_type(dtype)
    if op is Ops.MAX: return self.max_value(a, b, dtype)
    if dtype is dtypes.bool and op in (Ops.ADD, Ops.MUL):
      return self._emit(f"{'or' if op is Ops.ADD else 'and'} i1 {a}, {b}")
    if op in (Ops.SHL, Ops.SHR): return self.shift(op, a, b, dtype)
    if op in (Ops.AND, Ops.OR, Ops.XOR): return self._emit(f"{op.name.lower()} {t} {a}, {b}")
    if dtypes.is_float(dtype):
      instruction = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}[op]
      result = self._emit(f"{instruction} {t} {a}, {b}")
      return self.round_narrow(result, dtype) if round_result else result
    return self._emit(f"{ {Ops.ADD: 'add', Ops.SUB: 'sub', Ops.MUL: 'mul'}[op]} {t} {a}, {b}")

  def compare(self, op: Ops, dtype: DType, a: str, b: str) -> str:
    t = ir_type(dtype)
    if dtypes.is_float(dtype):
      return self._emit(f"fcmp {({Ops.CMPLT: 'olt', Ops.CMPNE: 'une', Ops.CMPEQ: 'oeq'})[op]} {t} {a}, {b}")
    less = "slt" if dtypes.is_int(dtype) and not dtypes.is_unsigned(dtype) else "ult"
    return self._emit(f"icmp {({Ops.CMPLT: less, Ops.CMPNE: 'ne', Ops.CMPEQ: 'eq'})[op]} {t} {a}, {b}")

  def max_value(self, a: str, b: str, dtype: DType) -> str:
    """The larger of a and b; for floats NaN wins (numpy's maximum propagates NaN)."""
    t = ir_type(dtype)
    if dtype is dtypes.bool: return self._emit(f"or i1 {a}, {b}")
    if dtypes.is_float(dtype):
      nan = self._emit(f"fcmp uno {t} {a}, {a}")
      larger = self._emit(f"or i1 {nan}, {self._emit(f'fcmp ogt {t} {a}, {b}')}")
    else: larger = self._emit(f"icmp {'ugt' if dtypes.is_unsigned(dtype) else 'sgt'} {t} {a}, {b}")
    return self._emit(f"select i1 {larger}, {t} {a}, {t} {b}")

  def shift(self, op: Ops, a: str, b: str, dtype: DType) -> str:  # type: ignore[override]
    """a << b or a >> b with numpy's results on x86 for every count (see c_style.shift)."""
    t, bits = ir_type(dtype), dtype.itemsize * 8
    too_far = self._emit(f"icmp uge {t} {b}, {bits}")
    count = self._emit(f"and {t} {b}, {bits - 1}")
    if op is Ops.SHL: return self._emit(f"select i1 {too_far}, {t} 0, {t} {self._emit(f'shl {t} {a}, {count}')}")
    if dtypes.is_unsigned(dtype):
      return self._emit(f"select i1 {too_far}, {t} 0, {t} {self._emit(f'lshr {t} {a}, {count}')}")
    fill = self._emit(f"select i1 {self._emit(f'icmp slt {t} {a}, 0')}, {t} -1, {t} 0")
    return self._emit(f"select i1 {too_far}, {t} {fill}, {t} {self._emit(f'ashr {t} {a}, {count}')}")

  def int_division(self, op: Ops, a: str, b: str, divisor: UOp, dtype: DType) -> str:  # type: ignore[override]
    """Truncating a / b or a % b: x / 0 and x % 0 are 0, MIN / -1 wraps to MIN and MIN % -1 is 0 (numpy). The
    divisor is replaced by 1 where the hardware would trap or LLVM would be undefined."""
    t, unsigned = ir_type(dtype), dtypes.is_unsigned(dtype)
    name = ("u" if unsigned else "s") + ("div" if op is Ops.IDIV else "rem")
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return self._emit(f"{name} {t} {a}, {b}")
    zero = self._emit(f"icmp eq {t} {b}, 0")
    bad = zero if unsigned else self._emit(f"or i1 {zero}, {self._emit(f'icmp eq {t} {b}, -1')}")
    quotient = self._emit(f"{name} {t} {a}, {self._emit(f'select i1 {bad}, {t} 1, {t} {b}')}")
    if not unsigned:
      minus_one = self._emit(f"sub {t} 0, {a}") if op is Ops.IDIV else "0"
      quotient = self._emit(f"select i1 {self._emit(f'icmp eq {t} {b}, -1')}, {t} {minus_one}, {t} {quotient}")
    return self._emit(f"select i1 {zero}, {t} 0, {t} {quotient}")

  # ------------------------------------------------------------------ math functions
  def math(self, op: Ops, dtype: DType, args: list[str]) -> str:
    """exp2, log2, sin, sqrt, trunc, pow through LLVM intrinsics, or IR expansions where the target has no libm."""
    t = ir_type(dtype)
    suffix = "f64" if t == "double" else "f32"
    typed = [(t, a) for a in args]
    if op is Ops.POW and self.target.math_in_ir: return self.power(args[0], args[1], t)
    if self.target.math_in_ir and t == "double" and op in (Ops.EXP2, Ops.LOG2, Ops.SIN):
      return self._call("double", f"tc_{op.name.lower()}_f64", typed)
    if self.target.math_in_ir and op is Ops.SIN:  # a GPU's sine instruction is exact only for small arguments
      return self._call("float", "tc_sin_f32", typed)
    name = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc",
            Ops.POW: "pow"}[op]
    return self._call(t, f"llvm.{name}.{suffix}", typed)

  def power(self, base: str, exponent: str, t: str) -> str:
    """pow(base, exponent) as exp2(exponent * log2|base|) with numpy's special cases: x ** 0 and 1 ** y are 1, a
    negative base needs an integer exponent (its parity gives the sign) and is NaN otherwise."""
    fn = "tc_pow_f64" if t == "double" else "tc_pow_f32"
    return self._call(t, fn, [(t, base), (t, exponent)])


def _pow_helper(t: str, suffix: str, exp2: str, log2: str) -> str:
  nan = "0x7FF8000000000000"
  return f"""
define internal {t} @tc_pow_{suffix}({t} %a, {t} %b) alwaysinline {{
  %abs = call {t} @llvm.fabs.{suffix}({t} %a)
  %l = call {t} @{log2}({t} %abs)
  %p = fmul {t} %b, %l
  %r = call {t} @{exp2}({t} %p)
  %bt = call {t} @llvm.trunc.{suffix}({t} %b)
  %isint = fcmp oeq {t} %bt, %b
  %half = fmul {t} %b, 0x3FE0000000000000
  %ht = call {t} @llvm.trunc.{suffix}({t} %half)
  %even = fcmp oeq {t} %ht, %half
  %neg = fneg {t} %r
  %signed = select i1 %even, {t} %r, {t} %neg
  %negres = select i1 %isint, {t} %signed, {t} {nan}
  %isneg = fcmp olt {t} %a, 0.0
  %res = select i1 %isneg, {t} %negres, {t} %r
  %zero = fcmp oeq {t} %b, 0.0
  %one = fcmp oeq {t} %a, 1.0
  %trivial = or i1 %zero, %one
  %out = select i1 %trivial, {t} 1.0, {t} %res
  ret {t} %out
}}
declare {t} @llvm.fabs.{suffix}({t})
declare {t} @llvm.trunc.{suffix}({t})
"""


def horner(x: str, coefficients: tuple[str, ...], result: str) -> str:
  """IR lines (double) computing c0 * x**(n-1) + c1 * x**(n-2) + ... + c(n-1) by Horner's rule into `%result`: one
  multiply and one add per coefficient after the first (intermediates are %result.mK and %result.aK)."""
  lines, acc = [], coefficients[0]
  for k, c in enumerate(coefficients[1:]):
    total = f"%{result}" if k == len(coefficients) - 2 else f"%{result}.a{k}"
    lines += [f"  %{result}.m{k} = fmul double {acc}, %{x}", f"  {total} = fadd double %{result}.m{k}, {c}"]
    acc = total
  return "\n".join(lines)


# e**y = sum y**k / k! for k = 13..0 (Taylor), y = f * ln 2
EXP2_COEFFICIENTS = ("0x3DE6124613A86D09", "0x3E21EED8EFF8D898", "0x3E5AE64567F544E4", "0x3E927E4FB7789F5C",
  "0x3EC71DE3A556C734", "0x3EFA01A01A01A01A", "0x3F2A01A01A01A01A", "0x3F56C16C16C16C17", "0x3F81111111111111",
  "0x3FA5555555555555", "0x3FC5555555555555", "0x3FE0000000000000", "1.0", "1.0")
# atanh(s) / s = sum z**k / (2k + 1), z = s**2, k = 10..1 (the last: 1)
LOG2_COEFFICIENTS = ("0x3FAAF286BCA1AF28", "0x3FAE1E1E1E1E1E1E", "0x3FB1111111111111", "0x3FB3B13B13B13B14",
  "0x3FB745D1745D1746", "0x3FBC71C71C71C71C", "0x3FC2492492492492", "0x3FC999999999999A", "0x3FD5555555555555",
  "1.0")
# fdlibm's sin kernel: sin(r) = r + r * z * P(z), z = r**2
SIN_COEFFICIENTS = ("0x3DE5D93A5ACFD57C", "0xBE5AE5E68A2B9CEB", "0x3EC71DE357B1FE7D", "0xBF2A01A019C161D5",
  "0x3F8111111110F8A6", "0xBFC5555555555549")
# fdlibm's cos kernel: cos(r) = 1 - z / 2 + z * z * Q(z)
COS_COEFFICIENTS = ("0xBDA8FAE9BE8838D4", "0x3E21EE9EBDB4B1C4", "0xBE927E4F809C52AD", "0x3EFA01A019CB1590",
  "0xBF56C16C16C15177", "0x3FA555555555554C")

# float64 exp2 / log2 / sin for targets without libm: argument reduction + polynomials, good to a few ulp on
# ordinary arguments (sin reduces by a three-part pi/2, so its error grows for |x| beyond ~1e5)
F64_EXP2 = """
define internal double @tc_exp2_f64(double %x) alwaysinline {
  %big = fcmp ogt double %x, 1024.0
  %small = fcmp olt double %x, -1080.0
  %nan = fcmp uno double %x, %x
  %c = call double @llvm.maxnum.f64(double %x, double -1080.0)
  %cl = call double @llvm.minnum.f64(double %c, double 1024.0)
  %n = call double @llvm.rint.f64(double %cl)
  %f = fsub double %cl, %n
  %y = fmul double %f, 0x3FE62E42FEFA39EF
@EXP2_POLY@
  %ni = fptosi double %n to i32
  %r = call double @llvm.ldexp.f64.i32(double %e, i32 %ni)
  %r1 = select i1 %big, double 0x7FF0000000000000, double %r
  %r2 = select i1 %small, double 0.0, double %r1
  %r3 = select i1 %nan, double %x, double %r2
  ret double %r3
}
declare double @llvm.maxnum.f64(double, double)
declare double @llvm.minnum.f64(double, double)
declare double @llvm.rint.f64(double)
declare double @llvm.ldexp.f64.i32(double, i32)
""".replace("@EXP2_POLY@", horner("y", EXP2_COEFFICIENTS, "e"))

# log2(x) = e + log2(m), m in [sqrt(1/2), sqrt(2)) (exponent and mantissa from the bits: LLVM's frexp does not
# legalize as a vector on x86), log(m) = 2 atanh(s), s = (m - 1) / (m + 1)
F64_LOG2 = """
define internal double @tc_log2_f64(double %x) alwaysinline {
  %tiny = fcmp olt double %x, 0x0010000000000000
  %scaled = fmul double %x, 0x4350000000000000
  %xs = select i1 %tiny, double %scaled, double %x
  %bits = bitcast double %xs to i64
  %field = lshr i64 %bits, 52
  %biased = and i64 %field, 2047
  %eb = trunc i64 %biased to i32
  %eu = sub i32 %eb, 1022
  %eadj = sub i32 %eu, 54
  %e0 = select i1 %tiny, i32 %eadj, i32 %eu
  %mbits = and i64 %bits, -9218868437227405313
  %mset = or i64 %mbits, 4602678819172646912
  %m0 = bitcast i64 %mset to double
  %low = fcmp olt double %m0, 0x3FE6A09E667F3BCD
  %m2 = fmul double %m0, 2.0
  %m = select i1 %low, double %m2, double %m0
  %e1 = sub i32 %e0, 1
  %e = select i1 %low, i32 %e1, i32 %e0
  %num = fsub double %m, 1.0
  %den = fadd double %m, 1.0
  %s = fdiv double %num, %den
  %z = fmul double %s, %s
@LOG2_POLY@
  %ln = fmul double %b2, %s
  %ln2 = fmul double %ln, 2.0
  %l2 = fmul double %ln2, 0x3FF71547652B82FE
  %ef = sitofp i32 %e to double
  %r = fadd double %ef, %l2
  %zero = fcmp oeq double %x, 0.0
  %neg = fcmp olt double %x, 0.0
  %inf = fcmp oeq double %x, 0x7FF0000000000000
  %nan = fcmp uno double %x, %x
  %r1 = select i1 %zero, double 0xFFF0000000000000, double %r
  %r2 = select i1 %neg, double 0x7FF8000000000000, double %r1
  %r3 = select i1 %inf, double %x, double %r2
  %r4 = select i1 %nan, double %x, double %r3
  ret double %r4
}
""".replace("@LOG2_POLY@", horner("z", LOG2_COEFFICIENTS, "b2"))

# sin(x): x = k * pi/2 + r (pi/2 in three parts: good while k * pi/2 is exact, |x| up to ~1e5 with few ulp), then
# the sin or cos polynomial of r (fdlibm's coefficients) by k mod 4
F64_SIN = """
define internal double @tc_sin_f64(double %x) alwaysinline {
  %q = fmul double %x, 0x3FE45F306DC9C883
  %k = call double @llvm.rint.f64(double %q)
  %h1 = fmul double %k, 0x3FF921FB54400000
  %r1 = fsub double %x, %h1
  %h2 = fmul double %k, 0x3DD0B4611A600000
  %r2 = fsub double %r1, %h2
  %h3 = fmul double %k, 0x3BA3198A2E037073
  %r = fsub double %r2, %h3
  %kq = fmul double %k, 0.25
  %kf = call double @llvm.floor.f64(double %kq)
  %k4 = fmul double %kf, 4.0
  %km = fsub double %k, %k4
  %quad = fptosi double %km to i32
  %res = call double @tc_sin_reduced(double %r, i32 %quad)
  %bad = fcmp uno double %r, %r
  %checked = select i1 %bad, double %r, double %res
  %zero = fcmp oeq double %x, 0.0
  %out = select i1 %zero, double %x, double %checked
  ret double %out
}
declare double @llvm.rint.f64(double)
declare double @llvm.floor.f64(double)
"""

# sin(r + quad * pi/2) for |r| <= pi/4
SIN_REDUCED = """
define internal double @tc_sin_reduced(double %r, i32 %quad) alwaysinline {
  %z = fmul double %r, %r
@SIN_POLY@
  %s1m = fmul double %s2, %z
  %s1 = fmul double %s1m, %r
  %sin = fadd double %r, %s1
@COS_POLY@
  %c1m = fmul double %c2, %z
  %c1 = fmul double %c1m, %z
  %hz = fmul double %z, 0.5
  %c0 = fsub double 1.0, %hz
  %cos = fadd double %c0, %c1
  %odd = trunc i32 %quad to i1
  %bit1 = and i32 %quad, 2
  %flip = icmp ne i32 %bit1, 0
  %v = select i1 %odd, double %cos, double %sin
  %nv = fneg double %v
  %res = select i1 %flip, double %nv, double %v
  ret double %res
}
""".replace("@SIN_POLY@", horner("z", SIN_COEFFICIENTS, "s2")).replace(
  "@COS_POLY@", horner("z", COS_COEFFICIENTS, "c2"))

# float32 sin: |x| < 2**16 through the float64 path; beyond, Payne-Hanek reduction: x = m * 2**e (m: 24 bits), and
# x * 2/pi mod 4 = m * (128 bits of 2/pi from bit e + 126) / 2**126 mod 4, exactly, from floor(2/pi * 2**256)
# (its 64-bit words are the i128 constants below; selects and i128 shifts, no memory: GPUs would spill a table)
F32_SIN = """
define internal float @tc_sin_f32(float %x) alwaysinline {
  %ax = call float @llvm.fabs.f32(float %x)
  %small = fcmp olt float %ax, 65536.0
  %xd = fpext float %x to double
  %near = call double @tc_sin_f64(double %xd)
  %bits = bitcast float %ax to i32
  %ef = lshr i32 %bits, 23
  %e = sub i32 %ef, 150
  %mant = and i32 %bits, 8388607
  %m = or i32 %mant, 8388608
  %shift0 = sub i32 130, %e
  %shift = call i32 @llvm.umin.i32(i32 %shift0, i32 191)
  %word = lshr i32 %shift, 6
  %bit32 = and i32 %shift, 63
  %bit = zext i32 %bit32 to i128
  %w0 = icmp eq i32 %word, 0
  %w1 = icmp eq i32 %word, 1
  %lo1 = select i1 %w1, i128 335169735719490880175270950034913595457, i128 216630482969909636093804454941121895872
  %lo = select i1 %w0, i128 291612810388623577912198875041123517793, i128 %lo1
  %hi1 = select i1 %w1, i128 11743562013128004905, i128 0
  %hi = select i1 %w0, i128 18169587780923219392, i128 %hi1
  %low_part = lshr i128 %lo, %bit
  %hi_up = shl i128 %hi, 64
  %up_by = sub i128 64, %bit
  %high_part = shl i128 %hi_up, %up_by
  %f = or i128 %low_part, %high_part
  %m128 = zext i32 %m to i128
  %prod = mul i128 %m128, %f
  %quad128 = lshr i128 %prod, 126
  %quad0 = trunc i128 %quad128 to i32
  %fraction = shl i128 %prod, 2
  %top = lshr i128 %fraction, 75
  %top64 = trunc i128 %top to i64
  %topd = uitofp i64 %top64 to double
  %frac = fmul double %topd, 0x3CA0000000000000
  %up = fcmp ogt double %frac, 0.5
  %fm1 = fsub double %frac, 1.0
  %fr = select i1 %up, double %fm1, double %frac
  %q1 = add i32 %quad0, 1
  %quad = select i1 %up, i32 %q1, i32 %quad0
  %r = fmul double %fr, 0x3FF921FB54442D18
  %k = call double @tc_sin_reduced(double %r, i32 %quad)
  %neg = fcmp olt float %x, 0.0
  %kn = fneg double %k
  %far = select i1 %neg, double %kn, double %k
  %res = select i1 %small, double %near, double %far
  %rf = fptrunc double %res to float
  %nan = fcmp uno float %x, %x
  %inf = fcmp oeq float %ax, 0x7FF0000000000000
  %bad = or i1 %nan, %inf
  %out = select i1 %bad, float 0x7FF8000000000000, float %rf
  ret float %out
}
declare float @llvm.fabs.f32(float)
declare i32 @llvm.umin.i32(i32, i32)
"""

ROUND_ODD_HELPER += "declare double @llvm.fabs.f64(double)\n"
POW_F32 = """
define internal float @tc_pow_f32(float %a, float %b) alwaysinline {
  %a64 = fpext float %a to double
  %b64 = fpext float %b to double
  %r64 = call double @tc_pow_f64(double %a64, double %b64)
  %r = fptrunc double %r64 to float
  ret float %r
}
"""

# each helper's text and the helpers it calls
HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {
  "tc_float_to_bf16": (BF16_HELPERS, ()), "tc_bf16_to_float": (BF16_HELPERS, ()),
  "tc_round_bf16": (BF16_HELPERS, ()), "tc_float_round_odd": (ROUND_ODD_HELPER, ()),
  "tc_exp2_f64": (F64_EXP2, ()), "tc_log2_f64": (F64_LOG2, ()), "tc_sin_f64": (F64_SIN, ("tc_sin_reduced",)),
  "tc_sin_reduced": (SIN_REDUCED, ()), "tc_sin_f32": (F32_SIN, ("tc_sin_f64", "tc_sin_reduced")),
  "tc_pow_f64": (_pow_helper("double", "f64", "tc_exp2_f64", "tc_log2_f64"), ("tc_exp2_f64", "tc_log2_f64")),
  "tc_pow_f32": (POW_F32, ("tc_pow_f64",)),
}
for _fp8 in FP8S:
  HELPERS.update(dict.fromkeys((f"tc_{_fp8.name}_to_float", f"tc_float_to_{_fp8.name}", f"tc_round_{_fp8.name}"),
                               (fp8_helpers(_fp8), ())))
HELPER_TEXT = HELPERS  # the names `_call` recognizes as helpers


def helper_definitions(names: set[str]) -> tuple[list[str], set[str]]:
  """The definitions of the helpers `names` and those they call (each once), and the intrinsics they declare."""
  texts: dict[str, None] = {}
  todo = list(names)
  while todo:
    text, calls = HELPERS[todo.pop()]
    texts[text] = None
    todo.extend(c for c in calls if HELPERS[c][0] not in texts)
  body, declares = [], set()
  for text in texts:
    for line in text.strip("\n").split("\n"):
      (declares.add(line) if line.startswith("declare ") else body.append(line))
  return body, declares
