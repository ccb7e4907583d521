"""The linearized kernel as a listing: one instruction per line, what the PYTHON device interprets.

The listing walks the same loop tree (`linearize`) the C-style renderer walks, with the same placement, loops,
accumulators and unrolled (upcast) blocks, and writes each statement as a Python literal tuple, so it is both
readable and parsed back with `ast.literal_eval` (no code is generated or executed). Every value lives in a
numbered register; a loop sets its range's register, a `vector` block runs its statements once per combination of
the upcast ranges, and registers defined in vector blocks hold one value per combination.

    ("const", REG, VALUE, DTYPE)                     floats that are not finite are written "inf", "-inf", "nan"
    ("loop", REG, SIZE) ... ("end",)                 REG counts 0..SIZE-1
    ("vector",) ... ("end",)                         an unrolled block over the upcast ranges
    ("acc", REG, IDENTITY, DTYPE, VECTOR)            an accumulator set to the reduction's identity
    ("update", REG, OP, DTYPE, VALUE_REG)            REG = REG OP VALUE (MAX keeps REG unless VALUE > REG or is NaN)
    ("load", REG, DTYPE, PARAM, OFFSET_REG, GATE_REG | None)
    ("store", PARAM, DTYPE, OFFSET_REG, GATE_REG | None, VALUE_REG)
    ("alu", REG, OP, DTYPE, SOURCE_DTYPE, (ARG_REGS...))
    ("cast" | "bitcast", REG, SOURCE_DTYPE, DTYPE, ARG_REG)
    ("var", REG, POSITION, DTYPE)                    a scalar parameter: the kernel's POSITION-th 64-bit word
"""
from __future__ import annotations
import math
from typing import Any
from tinycore.dtype import ALL, DType
from tinycore.uop.ops import GroupOp, Ops, UOp, identity_element
from tinycore.codegen.c_style import RenderedKernel
from tinycore.codegen.linearize import AccUpdate, Loop, linearize

LISTING_VERSION = 1


def literal_value(value: Any, dtype: DType) -> Any:
  """A constant as the listing writes it: ints and bools as they are, floats by repr, non-finite floats as text."""
  if isinstance(value, float) and not math.isfinite(value): return "nan" if math.isnan(value) else repr(value)
  return value


class ListingRenderer:
  """Renders a kernel SINK as a listing (see the module docstring) for the PYTHON interpreter. Stateless: each
  render keeps its registers in a local `_Listing`."""
  device = "PYTHON"
  supported_dtypes: frozenset[DType] = frozenset(ALL)

  def render(self, name: str, sink: UOp) -> RenderedKernel:
    """The listing, launched once: the interpreter runs the whole range of every loop."""
    return RenderedKernel(_Listing(name, sink).text())


class _Listing:
  def __init__(self, name: str, sink: UOp):
    self.kernel = linearize(sink)
    self.registers: dict[UOp, int] = {}
    # scalar parameters come after the buffers, in the order of their names (the kernel calling convention)
    scalars = sorted((u for u in sink.toposort() if u.op is Ops.DEFINE_VAR and not u.src), key=lambda u: u.arg[0])
    self.scalar_position = {u: i for i, u in enumerate(scalars)}
    self.lines = [f"# tinycore listing v{LISTING_VERSION}: kernel {name}",
                  repr(("params", tuple((p.arg, p.dtype.name) for p in self.kernel.params)))]
    upcast = tuple((self.register(r), r.src[0].arg) for r in self.kernel.upcast)
    self.lines.append(repr(("upcast", upcast)))
    for u in sink.toposort():
      if u.op is Ops.CONST: self.emit(0, ("const", self.register(u), literal_value(u.arg, u.dtype), u.dtype.name))
    self.emit_block(self.kernel.body, 0)

  def text(self) -> str: return "\n".join(self.lines) + "\n"

  def register(self, u: UOp) -> int:
    if (reg := self.registers.get(u)) is None: reg = self.registers[u] = len(self.registers)
    return reg

  def emit(self, depth: int, statement: tuple) -> None: self.lines.append("  " * depth + repr(statement))

  def is_vector(self, item: Any) -> bool:
    if isinstance(item, AccUpdate): return item.reduce in self.kernel.vector
    return isinstance(item, UOp) and item in self.kernel.vector

  def emit_block(self, body: list, depth: int) -> None:
    index = 0
    while index < len(body):
      if self.kernel.upcast and self.is_vector(body[index]):
        # consecutive vector statements become one unrolled block, as in the C renderer
        end = index
        while end < len(body) and self.is_vector(body[end]): end += 1
        self.emit(depth, ("vector",))
        for item in body[index:end]: self.emit_item(item, depth + 1)
        self.emit(depth, ("end",))
        index = end
        continue
      self.emit_item(body[index], depth)
      index += 1

  def emit_item(self, item: Any, depth: int) -> None:
    if isinstance(item, Loop):
      for x in item.reduces:
        identity = literal_value(identity_element(x.arg, x.dtype), x.dtype)
        self.emit(depth, ("acc", self.register(x), identity, x.dtype.name, x in self.kernel.vector))
      self.emit(depth, ("loop", self.register(item.range), item.range.src[0].arg))
      self.emit_block(item.body, depth + 1)
      self.emit(depth, ("end",))
    elif isinstance(item, AccUpdate):
      x = item.reduce
      self.emit(depth, ("update", self.register(x), x.arg.name, x.dtype.name, self.register(x.src[0])))
    else: self.emit_node(item, depth)

  def address(self, index: UOp) -> tuple[int, int, int | None]:
    gate = self.register(index.src[2]) if len(index.src) > 2 else None
    return index.src[0].arg, self.register(index.src[1]), gate

  def emit_node(self, u: UOp, depth: int) -> None:
    if u.op is Ops.REDUCE: return  # its accumulator is its value
    if u.op is Ops.STORE:
      param, offset, gate = self.address(u.src[0])
      self.emit(depth, ("store", param, u.src[0].dtype.name, offset, gate, self.register(u.src[1])))
    elif u.op is Ops.LOAD:
      param, offset, gate = self.address(u.src[0])
      self.emit(depth, ("load", self.register(u), u.dtype.name, param, offset, gate))
    elif u.op is Ops.DEFINE_VAR:
      self.emit(depth, ("var", self.register(u), self.scalar_position[u], u.dtype.name))
    elif u.op in (Ops.CAST, Ops.BITCAST):
      self.emit(depth, (u.op.name.lower(), self.register(u), u.src[0].dtype.name, u.dtype.name,
                        self.register(u.src[0])))
    elif u.op in GroupOp.ALU:
      source_dtype = u.src[1 if u.op is Ops.WHERE else 0].dtype.name  # WHERE's condition is bool, its values not
      self.emit(depth, ("alu", self.register(u), u.op.name, u.dtype.name, source_dtype,
                        tuple(self.register(s) for s in u.src)))
    else: raise NotImplementedError(f"the listing renderer cannot render {u.op}")
