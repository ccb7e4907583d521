"""PTX text -> a module of kernels: declarations, parameters, labels and a flat list of instructions.

Only the subset NVRTC emits for kernels is parsed: the module header, `.visible .entry` kernels with their `.param`
list, `.reg`/`.shared`/`.local` declarations, labels, scope braces and (predicated) instructions. Everything else is a
clear error naming the line, never silently skipped.
"""
from __future__ import annotations
import re
import attrs

class PTXError(Exception):
  """PTX the mock cannot parse or run; the message names the instruction and its line."""

@attrs.frozen
class Instruction:
  """One instruction: `opcode` split on dots (`["ld", "global", "f32"]`), its operand strings and its guard."""
  opcode: tuple[str, ...]
  operands: tuple[str, ...]
  guard: str | None          # predicate register name, or None
  guard_negated: bool
  line: int
  text: str

@attrs.frozen
class Param:
  """A kernel parameter: its name, type (`u64`, `b8` for byte arrays), byte offset and size in the parameter buffer."""
  name: str
  type: str
  offset: int
  size: int

@attrs.frozen
class Variable:
  """A `.shared`/`.local`/`.global` array: name, byte size (0 for `extern` dynamic shared memory) and alignment."""
  name: str
  space: str
  size: int
  align: int

@attrs.define
class Kernel:
  """A parsed `.entry`: parameters, register declarations (name -> PTX type), variables, labels and instructions."""
  name: str
  params: list[Param]
  registers: dict[str, str]
  variables: list[Variable]
  labels: dict[str, int]     # label -> index of the instruction that follows it
  instructions: list[Instruction]
  call_params: set[str] = attrs.Factory(set)   # `.param` declarations in the body: a call's arguments and results
  returns: list[str] = attrs.Factory(list)     # a `.func`'s return parameters (func_retval0, ...)

@attrs.define
class Module:
  """A parsed PTX module: header fields and its kernels by name."""
  version: str
  target: str
  address_size: int
  kernels: dict[str, Kernel]
  functions: dict[str, Kernel] = attrs.Factory(dict)   # `.func` device functions (inlined into kernels at decode)

TYPE_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
              "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 1, "f16x2": 4, "bf16x2": 4}

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)\s*\(")
_FUNC = re.compile(r"(?:\.visible\s+|\.weak\s+)?\.func\s+(?:\(([^)]*)\)\s*)?([\w$]+)\s*(\()?")
_LABEL = re.compile(r"^([\w$.]+)\s*:")
_REG_RANGE = re.compile(r"^(%?[\w$]+)<(\d+)>$")
_VAR = re.compile(r"\.(shared|local|global|const)\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$]+)\s*(?:\[(\d*)\])?")

def strip_comments(text: str) -> str:
  """PTX without `//` and `/* */` comments, newlines kept (line numbers stay right)."""
  return _COMMENTS.sub(lambda m: "\n" * m.group(0).count("\n"), text)

def parse_module(text: str) -> Module:
  """Parse PTX text (as NVRTC writes it) into a Module; raises PTXError naming the line on what it cannot read."""
  text = strip_comments(text.rstrip("\x00"))
  header = {k: m.group(1) for k in ("version", "target", "address_size")
            if (m := re.search(rf"^\s*\.{k}\s+([\w.,]+)", text, re.M))}
  if header.get("address_size", "64") != "64": raise PTXError(f"only .address_size 64 is supported, got {header}")
  kernels: dict[str, Kernel] = {}
  outside = text
  for match in _ENTRY.finditer(text):
    kernel, end = _parse_entry(text, match)
    kernels[kernel.name] = kernel
    outside = outside[:match.start()] + " " * (end + 1 - match.start()) + outside[end + 1:]
  functions: dict[str, Kernel] = {}
  for match in _FUNC.finditer(outside):
    if (function := _parse_function(outside, match)) is None: continue   # a prototype, defined further on
    function, end = function
    functions[function.name] = function
    outside = outside[:match.start()] + " " * (end + 1 - match.start()) + outside[end + 1:]
  shared = [_module_variable(var) for var in _VAR.finditer(outside) if var.group(1) == "shared"]
  for kernel in kernels.values(): kernel.variables[:0] = shared   # module-scope shared arrays belong to every kernel
  return Module(header.get("version", "?"), header.get("target", "?"), 64, kernels, functions)

def _parse_function(text: str, match: re.Match) -> tuple[Kernel, int] | None:
  """A `.func` definition (None for a prototype): its parameters, return parameters and body."""
  returns = [p.name for p in _parse_params(match.group(1) or "")]
  params, after = [], match.end()
  if match.group(3):
    close = text.index(")", match.end())
    params, after = _parse_params(text[match.end():close]), close + 1
  rest = text[after:].lstrip()
  if not rest.startswith("{"): return None
  start = text.index("{", after)
  end = _matching_brace(text, start)
  function = Kernel(match.group(2), params, {}, [], {}, [], returns=returns)
  _parse_body(function, text, start + 1, end)
  return function, end

def _matching_brace(text: str, start: int) -> int:
  depth, pos = 0, start
  while True:
    if text[pos] == "{": depth += 1
    elif text[pos] == "}":
      depth -= 1
      if depth == 0: return pos
    pos += 1

def _line_of(text: str, pos: int) -> int: return text.count("\n", 0, pos) + 1

def _parse_entry(text: str, match: re.Match) -> Kernel:
  name, close = match.group(1), text.index(")", match.end())
  params = _parse_params(text[match.end():close])
  start = text.index("{", close)
  pos = _matching_brace(text, start)
  kernel = Kernel(name, params, {}, [], {}, [])
  _parse_body(kernel, text, start + 1, pos)
  return kernel, pos

def _module_variable(var: re.Match) -> Variable:
  _, align, vtype, vname, count = var.groups()
  return Variable(vname, "shared", TYPE_SIZES[vtype] * int(count or (0 if count == "" else 1)),
                  int(align or TYPE_SIZES[vtype]))

def _parse_params(text: str) -> list[Param]:
  params, offset = [], 0
  for decl in filter(None, (d.strip() for d in text.split(","))):
    words = decl.split()
    ptype = next(w[1:] for w in words if w[1:] in TYPE_SIZES)
    align = int(words[words.index(".align") + 1]) if ".align" in words else TYPE_SIZES[ptype]
    pname, count = re.match(r"([\w$]+)(?:\[(\d+)\])?$", words[-1]).groups()
    size = TYPE_SIZES[ptype] * int(count or 1)
    offset = (offset + align - 1) // align * align   # the CUDA ABI: each parameter at its natural alignment
    params.append(Param(pname, ptype, offset, size))
    offset += size
  return params

def _parse_body(kernel: Kernel, text: str, start: int, end: int) -> None:
  line = _line_of(text, start)
  for chunk in text[start:end].split(";"):
    stmt, chunk_line = chunk, line
    line += chunk.count("\n")
    while True:   # peel scope braces and labels off the front of the statement
      lead = len(stmt) - len(stmt.lstrip())
      chunk_line += stmt[:lead].count("\n")
      stmt = stmt.lstrip()
      if stmt[:1] in ("{", "}"): stmt = stmt[1:]; continue
      if (label := _LABEL.match(stmt)) and not stmt.startswith("@"):
        kernel.labels[label.group(1)] = len(kernel.instructions)
        stmt = stmt[label.end():]; continue
      break
    if stmt: _parse_statement(kernel, " ".join(stmt.split()), chunk_line)

def _parse_statement(kernel: Kernel, stmt: str, line: int) -> None:
  if stmt.startswith(".reg"):
    words = stmt.replace(",", " ").split()
    rtype = words[1].lstrip(".")
    if words[2].startswith(".v"): raise PTXError(f"line {line}: vector registers are not supported: {stmt!r}")
    for decl in words[2:]:
      if (rng := _REG_RANGE.match(decl)):
        for i in range(int(rng.group(2))): kernel.registers[f"{rng.group(1)}{i}"] = rtype
      else: kernel.registers[decl] = rtype
    return
  if stmt.startswith((".shared", ".local", ".global", ".const", ".extern")):
    if not (var := _VAR.search(stmt)): raise PTXError(f"line {line}: cannot read declaration {stmt!r}")
    if "=" in stmt: raise PTXError(f"line {line}: initialised variables are not supported: {stmt!r}")
    space, align, vtype, vname, count = var.groups()
    if space not in ("shared", "local"): raise PTXError(f"line {line}: .{space} variables are not supported")
    size = TYPE_SIZES[vtype] * int(count or (0 if count == "" else 1))
    kernel.variables.append(Variable(vname, space, size, int(align or TYPE_SIZES[vtype])))
    return
  if stmt.startswith(".param"):   # a call's argument or result: becomes a register of that type when inlined
    words = stmt.split()
    if "[" in stmt or len(words) != 3: raise PTXError(f"line {line}: only scalar call parameters are supported: "
                                                      f"{stmt!r}")
    kernel.registers[words[2]] = words[1].lstrip(".")
    kernel.call_params.add(words[2])
    return
  if stmt.startswith((".pragma", ".maxntid", ".reqntid", ".minnctapersm", ".maxnreg", ".loc", ".file")): return
  if stmt.startswith("."): raise PTXError(f"line {line}: unsupported directive {stmt!r}")
  guard, negated = None, False
  if stmt.startswith("@"):
    pred, stmt = stmt.split(None, 1)
    negated = pred.startswith("@!")
    guard = pred[2:] if negated else pred[1:]
  opcode, _, rest = stmt.partition(" ")
  kernel.instructions.append(Instruction(tuple(opcode.split(".")), tuple(_split_operands(rest)), guard, negated,
                                         line, stmt))

def _split_operands(text: str) -> list[str]:
  """Split on top-level commas; `{a, b}` vectors and `[addr]` stay whole."""
  out, depth, cur = [], 0, ""
  for ch in text:
    if ch in "{[(": depth += 1
    elif ch in "}])": depth -= 1
    if ch == "," and depth == 0: out.append(cur.strip()); cur = ""
    else: cur += ch
  if cur.strip(): out.append(cur.strip())
  return out
