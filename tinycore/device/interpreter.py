"""The PYTHON device's runtime: a listing (`tinycore.codegen.listing`) interpreted over memoryviews.

Loading a listing decodes each instruction once into a small Python function over a register list (threaded code),
so running a kernel does no parsing and no dispatch on op names; the semantics of each op and dtype come from
`tinycore.device.scalar_ops`. Nothing is compiled: no C compiler, no generated Python source, no numpy.
Roughly a million instructions a second: fine for tests and for checking another device's results, slow for work.
"""
from __future__ import annotations
import ast
import itertools
import time
from typing import Any, Callable, Sequence
from tinycore.dtype import DTYPES_BY_NAME, DType
from tinycore.uop.ops import Ops
from tinycore.device import scalar_ops

Step = Callable[[list], None]


class ListingError(ValueError):
  """A listing that cannot be interpreted (malformed, or from another listing version)."""


def parse_listing(text: str) -> list[tuple]:
  """The listing's statements (comment lines dropped) as tuples, each with its indentation depth first."""
  statements = []
  for number, line in enumerate(text.splitlines(), 1):
    stripped = line.strip()
    if not stripped or stripped.startswith("#"): continue
    try: statement = ast.literal_eval(stripped)
    except (ValueError, SyntaxError) as error:
      raise ListingError(f"line {number} of the listing is not a literal tuple: {stripped!r} ({error})") from None
    if not isinstance(statement, tuple) or not statement or not isinstance(statement[0], str):
      raise ListingError(f"line {number} of the listing is not an instruction: {stripped!r}")
    statements.append(statement)
  return statements


def _dtype(name: str) -> DType:
  if name not in DTYPES_BY_NAME: raise ListingError(f"unknown dtype {name!r} in the listing")
  return DTYPES_BY_NAME[name]


class _Decoder:
  """Turns the statements into nested lists of steps. A register defined in one vector block and read in another,
  and a vector accumulator, holds one value per upcast combination (in the vector storage at the end of the register
  list); a vector block swaps those in and out around each combination it runs."""

  def __init__(self, statements: list[tuple]):
    self.statements, self.position = statements, 0
    header = {s[0]: s for s in statements[:2]}
    if set(header) != {"params", "upcast"}: raise ListingError("a listing starts with its params and upcast lines")
    self.params = [(slot, _dtype(name)) for slot, name in header["params"][1]]
    self.upcast = list(header["upcast"][1])
    self.combos = list(itertools.product(*(range(size) for _, size in self.upcast)))
    self.position = 2
    self.register_count = 1 + max([r for s in statements for r in _registers(s)], default=0)
    self.constants: dict[int, Any] = {}
    self.vector_registers: set[int] = set()
    self.vector_accumulators: set[int] = set()
    self.blocks_using: dict[int, set[int]] = {}  # register -> the vector blocks (by start line) that name it
    self.vector_blocks: list[tuple[set[int], list[int]]] = []  # (registers a block names, those it swaps)
    self.body = self.block(in_vector=False)
    # which registers outlive one run of their block is known only now that every block has been decoded
    for used, shared in self.vector_blocks:
      shared.extend(sorted(r for r in used if r in self.vector_accumulators or
                           (r in self.vector_registers and len(self.blocks_using[r]) > 1)))

  def block(self, in_vector: bool) -> list[Step]:
    steps: list[Step] = []
    while self.position < len(self.statements):
      statement = self.statements[self.position]
      self.position += 1
      kind = statement[0]
      if kind == "end": return steps
      if kind == "const": self.constants[statement[1]] = scalar_ops.const_value(statement[2], _dtype(statement[3]))
      elif kind == "loop": steps.append(self.loop(statement[1], statement[2], in_vector))
      elif kind == "vector": steps.append(self.vector())
      else:
        steps.append(self.instruction(statement))
        if in_vector and kind not in ("store", "update"): self.vector_registers.add(statement[1])
    return steps

  def loop(self, register: int, size: int, in_vector: bool) -> Step:
    body = self.block(in_vector)
    def run_loop(regs: list) -> None:
      for value in range(size):
        regs[register] = value
        for step in body: step(regs)
    return run_loop

  def vector(self) -> Step:
    start = self.position
    body = self.block(in_vector=True)
    used = {r for s in self.statements[start:self.position] for r in _registers(s)}
    for register in used: self.blocks_using.setdefault(register, set()).add(start)
    upcast_registers = [r for r, _ in self.upcast]
    combos = self.combos
    shared: list[int] = []  # filled in once the whole listing is decoded (see __init__)
    self.vector_blocks.append((used, shared))

    def run_vector(regs: list) -> None:
      store = regs[-1]
      for index, combo in enumerate(combos):
        for register, value in zip(upcast_registers, combo): regs[register] = value
        for register in shared:
          if register in store: regs[register] = store[register][index]
        for step in body: step(regs)
        for register in shared: store.setdefault(register, [None] * len(combos))[index] = regs[register]
    return run_vector

  def instruction(self, statement: tuple) -> Step:
    decode = _DECODERS.get(statement[0])
    if decode is None: raise ListingError(f"unknown instruction {statement!r}")
    if statement[0] == "acc" and statement[4]: self.vector_accumulators.add(statement[1])
    return decode(self, *statement[1:])


def _registers(statement: tuple) -> list[int]:
  """The registers a statement names."""
  kind = statement[0]
  if kind in ("const", "acc", "loop"): return [statement[1]]
  if kind == "update": return [statement[1], statement[4]]
  if kind == "load": return [r for r in (statement[1], statement[4], statement[5]) if r is not None]
  if kind == "store": return [r for r in (statement[3], statement[4], statement[5]) if r is not None]
  if kind == "alu": return [statement[1], *statement[5]]
  if kind in ("cast", "bitcast"): return [statement[1], statement[4]]
  if kind == "var": return [statement[1]]
  if kind == "upcast": return [r for r, _ in statement[1]]
  return []


def _decode_acc(decoder: _Decoder, register: int, identity: Any, dtype_name: str, vector: bool) -> Step:
  value = scalar_ops.const_value(identity, _dtype(dtype_name))
  if not vector:
    def init(regs: list) -> None: regs[register] = value
    return init
  count = len(decoder.combos)
  def init_vector(regs: list) -> None: regs[-1][register] = [value] * count
  return init_vector


def _decode_update(decoder: _Decoder, register: int, op: str, dtype_name: str, value: int) -> Step:
  if Ops[op] is Ops.MAX:
    def update_max(regs: list) -> None:
      new = regs[value]
      if new != new or new > regs[register]: regs[register] = new  # a NaN value wins, as in the C renderer
    return update_max
  combine = scalar_ops.alu_function(Ops[op], _dtype(dtype_name))
  def update(regs: list) -> None: regs[register] = combine(regs[register], regs[value])
  return update


def _decode_load(decoder: _Decoder, register: int, dtype_name: str, param: int, offset: int,
                 gate: int | None) -> Step:
  convert = scalar_ops.load_function(_dtype(dtype_name))
  zero = scalar_ops.const_value(0, _dtype(dtype_name))
  if gate is None and convert is None:
    def load(regs: list) -> None: regs[register] = regs[-2][param][regs[offset]]
    return load
  def load_converted(regs: list) -> None:
    if gate is not None and not regs[gate]:
      regs[register] = zero
      return
    word = regs[-2][param][regs[offset]]
    regs[register] = convert(word) if convert is not None else word
  return load_converted


def _decode_store(decoder: _Decoder, param: int, dtype_name: str, offset: int, gate: int | None, value: int) -> Step:
  convert = scalar_ops.store_function(_dtype(dtype_name))
  if gate is None and convert is None:
    def store(regs: list) -> None: regs[-2][param][regs[offset]] = regs[value]
    return store
  def store_converted(regs: list) -> None:
    if gate is not None and not regs[gate]: return
    regs[-2][param][regs[offset]] = convert(regs[value]) if convert is not None else regs[value]
  return store_converted


def _decode_alu(decoder: _Decoder, register: int, op: str, dtype_name: str, source_dtype: str,
                args: Sequence[int]) -> Step:
  compute = scalar_ops.alu_function(Ops[op], _dtype(dtype_name))
  if len(args) == 1:
    (a,) = args
    def unary(regs: list) -> None: regs[register] = compute(regs[a])
    return unary
  if len(args) == 2:
    a, b = args
    def binary(regs: list) -> None: regs[register] = compute(regs[a], regs[b])
    return binary
  a, b, c = args
  def ternary(regs: list) -> None: regs[register] = compute(regs[a], regs[b], regs[c])
  return ternary


def _decode_cast(decoder: _Decoder, register: int, source: str, target: str, arg: int) -> Step:
  convert = scalar_ops.cast_function(_dtype(source), _dtype(target))
  def cast(regs: list) -> None: regs[register] = convert(regs[arg])
  return cast


def _decode_bitcast(decoder: _Decoder, register: int, source: str, target: str, arg: int) -> Step:
  convert = scalar_ops.bitcast_function(_dtype(source), _dtype(target))
  def bitcast(regs: list) -> None: regs[register] = convert(regs[arg])
  return bitcast


def _decode_var(decoder: _Decoder, register: int, position: int, dtype_name: str) -> Step:
  convert = scalar_ops.word_function(_dtype(dtype_name))
  def scalar(regs: list) -> None: regs[register] = convert(regs[-3][position])
  return scalar


_DECODERS: dict[str, Callable[..., Step]] = {
  "var": _decode_var, "acc": _decode_acc, "update": _decode_update, "load": _decode_load, "store": _decode_store,
  "alu": _decode_alu, "cast": _decode_cast, "bitcast": _decode_bitcast,
}


class PythonProgram:
  """A listing loaded for the interpreter. Called as ``program(*buffers, global_size=, local_size=, vals=, wait=)``
  with one buffer per kernel parameter, in parameter order: a memoryview or a handle with a ``view`` memoryview
  (`HostMemory`), and ``vals``, the scalar parameters as 64-bit words. ``wait=True`` returns the seconds it took;
  the launch sizes are not used."""

  def __init__(self, name: str, lib: bytes):
    self.name = name
    decoder = _Decoder(parse_listing(lib.decode()))
    self.params, self.body = decoder.params, decoder.body
    self.register_count, self.constants = decoder.register_count, decoder.constants
    self.formats = [scalar_ops.storage_format(dtype) for _, dtype in self.params]

  def __call__(self, *bufs: memoryview, global_size: Sequence[int] = (1, 1, 1), local_size: Sequence[int] = (1, 1, 1),
               vals: Sequence[int] = (), wait: bool = False) -> float | None:
    if len(bufs) != len(self.params):
      raise TypeError(f"kernel {self.name} takes {len(self.params)} buffers, got {len(bufs)}")
    start = time.perf_counter()
    views = {slot: _typed_view(buf, fmt) for (slot, _), buf, fmt in zip(self.params, bufs, self.formats)}
    # the register list: registers, then the scalar words, the typed views by parameter slot, the vector storage
    regs: list = [None] * self.register_count + [tuple(vals), views, {}]
    for register, value in self.constants.items(): regs[register] = value
    for step in self.body: step(regs)
    for view in views.values(): view.release()
    return time.perf_counter() - start if wait else None


def _typed_view(buf: Any, fmt: str) -> memoryview:
  raw = memoryview(getattr(buf, "view", buf))
  return (raw if raw.format == "B" and raw.ndim == 1 else raw.cast("B")).cast(fmt)
