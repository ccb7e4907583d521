"""Decode a parsed kernel once into Python: each basic block becomes one generated function over the register file.

Registers live in a list `R` of numpy values (an array with one lane per thread, or a scalar while the value is the
same for every thread: parameters, block sizes, constants). Each instruction becomes one or two Python statements; a
block is compiled twice, for all threads active (`m` unused) and for a partial mask `m` (writes merge with
`where(m, new, old)`, memory touches only active lanes). The scheduler in `execute.py` picks which block runs next.
"""
from __future__ import annotations
import re
from typing import Callable
import attrs
import numpy as np
from tiny_nv.mock.ptx import numerics
from tiny_nv.mock.ptx.parse import TYPE_SIZES, Instruction, Kernel, PTXError

NUMPY_TYPES = {"b8": "u8", "u8": "u8", "s8": "i8", "b16": "u16", "u16": "u16", "s16": "i16", "f16": "f16",
               "bf16": "u16", "b32": "u32", "u32": "u32", "s32": "i32", "f32": "f32", "b64": "u64", "u64": "u64",
               "s64": "i64", "f64": "f64", "pred": "pred"}
DTYPES = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "f16": np.float16, "u32": np.uint32,
          "i32": np.int32, "f32": np.float32, "u64": np.uint64, "i64": np.int64, "f64": np.float64, "pred": np.bool_}
SPECIAL_REGISTERS = [f"%{name}.{axis}" for name in ("tid", "ntid", "ctaid", "nctaid") for axis in "xyz"] + \
  ["%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid", "%warpsize"]
CONTROL = {"bra", "ret", "exit", "bar", "barrier"}
# generic addresses of shared and local memory carry these tags (above any user-space host address)
WINDOWS = {"shared": 1 << 56, "local": 2 << 56}
CMP_SIGNED = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "lo": "<", "ls": "<=", "hi": ">",
              "hs": ">="}
CACHE_HINTS = re.compile(r"^(nc|ca|cg|cs|lu|cv|wb|wt|weak|volatile|relaxed|acquire|release|sys|gpu|cta|cluster|"
                         r"L1::.*|L2::.*|unified)$")

@attrs.frozen
class Terminator:
  """How a block ends: kind is 'fall', 'jump', 'exit' or 'barrier'; a guarded jump/exit has a predicate slot."""
  kind: str
  next: int               # block index after this one (fall-through)
  target: int = -1        # block index jumped to
  guard: int = -1         # register slot of the predicate, -1 when unconditional
  negated: bool = False

@attrs.frozen
class Block:
  """A basic block: its code for all threads (`run(R, X)`), for some threads (`run_masked(R, m, X)`), its end."""
  run: Callable
  run_masked: Callable
  terminator: Terminator
  instruction_count: int

@attrs.define
class DecodedKernel:
  """A kernel ready to run: blocks, register slot count and types, special register slots, memory layout."""
  name: str
  blocks: list[Block]
  slot_types: list[str]
  special_slots: dict[str, int]
  shared_size: int          # static shared bytes (dynamic shared memory starts here)
  local_size: int           # per-thread local bytes
  params: list

class Translator:
  """Turns one kernel's instructions into Python source; operands become `R[slot]` reads with numpy views."""
  def __init__(self, kernel: Kernel):
    self.kernel = kernel
    self.slots: dict[str, int] = {}
    self.slot_types: list[str] = []
    self.constants: dict[str, object] = {"np": np, "nm": numerics, "where": numerics.where,
                                         **{name: dtype for name, dtype in DTYPES.items()}}
    for reg, rtype in kernel.registers.items(): self._slot(reg, NUMPY_TYPES[rtype])
    for special in SPECIAL_REGISTERS: self._slot(special, "u32")
    self.symbols: dict[str, tuple[str, int]] = {}
    self.shared_size = self.local_size = 0
    for var in kernel.variables:
      size = "shared_size" if var.space == "shared" else "local_size"
      offset = (getattr(self, size) + var.align - 1) // var.align * var.align
      self.symbols[var.name] = (var.space, offset)
      setattr(self, size, offset + var.size)
    self.params = {p.name: p for p in kernel.params}

  def _slot(self, name: str, ntype: str) -> int:
    self.slots[name] = len(self.slot_types)
    self.slot_types.append(ntype)
    return self.slots[name]

  def constant(self, value, ntype: str) -> str:
    name = f"k{len(self.constants)}"
    self.constants[name] = value if ntype == "obj" else np.array(value).astype(DTYPES[ntype])[()]
    return name

  # ----- operands
  def read(self, op: str, ptype: str) -> str:
    """An expression for operand `op` read as PTX type `ptype` (bf16 reads as its uint16 bits)."""
    ntype = NUMPY_TYPES[ptype]
    if op in self.slots:
      slot, stored = self.slots[op], self.slot_types[self.slots[op]]
      if stored == ntype or ntype == "pred": return f"R[{slot}]"
      if np.dtype(DTYPES[stored]).itemsize == np.dtype(DTYPES[ntype]).itemsize: return f"R[{slot}].view({ntype})"
      return f"R[{slot}].astype({ntype})"
    if op.startswith("!") and op[1:] in self.slots: return f"(~R[{self.slots[op[1:]]}])"
    if op == "%globaltimer" or op.startswith("%globaltimer"): return "X.globaltimer()"
    if op in ("%clock", "%clock64"): return f"np.array(X.globaltimer()).astype({ntype})[()]"
    if op in self.symbols: return self.constant(self.symbols[op][1], ntype)
    return self.constant(parse_immediate(op, ptype), ntype)

  def write(self, op: str, ptype: str, expr: str, mask: str | None) -> list[str]:
    """Statements storing `expr` (of PTX type `ptype`) into register `op`, merged under `mask` when given."""
    if op == "_": return []
    if op not in self.slots: raise PTXError(f"unknown destination register {op}")
    slot, stored, ntype = self.slots[op], self.slot_types[self.slots[op]], NUMPY_TYPES[ptype]
    if stored != ntype:
      same_size = np.dtype(DTYPES[stored]).itemsize == np.dtype(DTYPES[ntype]).itemsize
      expr = f"({expr}).view({stored})" if same_size and "pred" not in (stored, ntype) else f"({expr}).astype({stored})"
    if mask is None: return [f"R[{slot}] = {expr}"]
    return [f"R[{slot}] = where({mask}, {expr}, R[{slot}])"]

  def address(self, op: str) -> tuple[str, str | None]:
    """`[base+offset]` -> (int64 address expression, the symbol's space when the base is a variable or param)."""
    inner = op.strip()[1:-1].replace(" ", "")
    base, _, offset = inner.partition("+")
    offset_value = int(offset, 0) if offset else 0
    if base in self.params: return str(self.params[base].offset + offset_value), "param"
    if base in self.symbols:
      space, symbol_offset = self.symbols[base]
      return str(symbol_offset + offset_value), space
    if base in self.slots:
      stored = self.slot_types[self.slots[base]]
      value = f"R[{self.slots[base]}]" if stored == "i64" else f"R[{self.slots[base]}].astype(i64)"
      return (f"({value} + {offset_value})" if offset_value else value), None
    try: return str(int(base, 0) + offset_value), None
    except ValueError: raise PTXError(f"cannot read address {op}") from None

def parse_immediate(text: str, ptype: str):
  """A PTX immediate: 0fXXXXXXXX (f32 bits), 0dXXXXXXXXXXXXXXXX (f64 bits), decimal/hex/octal ints, decimal floats."""
  if re.fullmatch(r"0[fF][0-9a-fA-F]{8}", text): return np.uint32(int(text[2:], 16)).view(np.float32)
  if re.fullmatch(r"0[dD][0-9a-fA-F]{16}", text): return np.uint64(int(text[2:], 16)).view(np.float64)
  ntype = NUMPY_TYPES[ptype]
  try: value = int(text.rstrip("Uu"), 0)
  except ValueError:
    try: return float(text)
    except ValueError: raise PTXError(f"unknown operand {text!r}") from None
  if ntype in ("f16", "f32", "f64"): return float(value)
  if ntype == "pred": return bool(value)
  bits = np.dtype(DTYPES[ntype]).itemsize * 8
  unsigned = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
  return unsigned(value & ((1 << bits) - 1)).view(DTYPES[ntype])

def split_opcode(ins: Instruction) -> tuple[str, list[str], list[str]]:
  """(operation, modifiers, types): `setp.lt.and.f32` -> ('setp', ['lt', 'and'], ['f32'])."""
  parts = list(ins.opcode)
  types = [p for p in parts[1:] if p in TYPE_SIZES]
  modifiers = [p for p in parts[1:] if p not in TYPE_SIZES]
  return parts[0], modifiers, types
