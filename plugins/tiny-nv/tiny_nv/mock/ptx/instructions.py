"""One translation function per PTX operation: (translator, instruction, modifiers, types, mask) -> Python statements.

`mask` is the name of the active-lane mask in the generated code, or None when every lane is active. Float operations
run in the operand's numpy type (float32 arithmetic rounds like PTX's .rn); approximate ones (ex2/lg2/sin/cos/rsqrt)
are computed in float32 too.
"""
from __future__ import annotations
from typing import Callable
from tiny_nv.mock.ptx.parse import Instruction, PTXError
from tiny_nv.mock.ptx.translate import CACHE_HINTS, CMP_SIGNED, NUMPY_TYPES, WINDOWS, Translator, split_opcode

Emit = Callable[[Translator, Instruction, list, list, "str | None"], list]
OPERATIONS: dict[str, Emit] = {}

def operation(*names: str):
  def register(fn: Emit) -> Emit:
    for name in names: OPERATIONS[name] = fn
    return fn
  return register

def _is_float(ptype: str) -> bool: return ptype in ("f16", "bf16", "f32", "f64")

def _float_in(t: Translator, op: str, ptype: str) -> str:
  """A float operand; bf16 is widened to float32 for the arithmetic."""
  value = t.read(op, ptype)
  return f"nm.bf16_to_f32({value})" if ptype == "bf16" else value

def _float_out(expr: str, ptype: str, modifiers: list) -> str:
  """Apply .ftz/.sat to a float result and narrow bf16 back to its bits."""
  if "ftz" in modifiers: expr = f"nm.flush_subnormal({expr})"
  if "sat" in modifiers: expr = f"nm.saturate({expr})"
  return f"nm.f32_to_bf16({expr})" if ptype == "bf16" else expr

_FLOAT_BINARY = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
                 "min": "np.fmin({a}, {b})", "max": "np.fmax({a}, {b})", "copysign": "np.copysign({b}, {a})"}
_INT_BINARY = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "nm.int_div({a}, {b})",
               "rem": "nm.int_rem({a}, {b})", "min": "np.minimum({a}, {b})", "max": "np.maximum({a}, {b})",
               "and": "({a} & {b})", "or": "({a} | {b})", "xor": "({a} ^ {b})", "shl": "nm.shift_left({a}, {b})",
               "shr": "nm.shift_right({a}, {b})"}
_WIDER = {"s16": "s32", "u16": "u32", "s32": "s64", "u32": "u64", "b16": "b32", "b32": "b64"}

@operation("add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr", "copysign")
def binary(t, ins, mods, types, mask):
  (ptype,), (d, a, b) = types, ins.operands
  name = ins.opcode[0]
  if ptype == "pred": return t.write(d, "pred", _INT_BINARY[name].format(a=t.read(a, ptype), b=t.read(b, ptype)), mask)
  if _is_float(ptype):
    if name in ("min", "max") and "NaN" in mods: template = f"np.{name}imum({{a}}, {{b}})"
    else: template = _FLOAT_BINARY[name]
    x, y = _float_in(t, a, ptype), _float_in(t, b, ptype)
    if "ftz" in mods: x, y = f"nm.flush_subnormal({x})", f"nm.flush_subnormal({y})"
    rounding = next((m for m in mods if m in ("rz", "rm", "rp")), None)
    if rounding and name in ("add", "sub", "mul", "div"):   # exact-ish in a wider type, then rounded as asked
      wide, narrow = ("np.longdouble", "f64") if ptype == "f64" else ("f64", "f16" if ptype == "f16" else "f32")
      expr = f"nm.round_float({template.format(a=f'np.asarray({x}).astype({wide})', b=y)}, {narrow}, {rounding!r})"
    else: expr = template.format(a=x, b=y)
    return t.write(d, ptype, _float_out(expr, ptype, mods), mask)
  if name == "shl" or name == "shr":
    return t.write(d, ptype, _INT_BINARY[name].format(a=t.read(a, ptype), b=t.read(b, "u32")), mask)
  if name == "mul" and "wide" in mods:
    wide = _WIDER[ptype]
    return t.write(d, wide, f"({t.read(a, ptype)}.astype({NUMPY_TYPES[wide]}) * {t.read(b, ptype)}"
                            f".astype({NUMPY_TYPES[wide]}))", mask)
  if name == "mul" and "hi" in mods:
    return t.write(d, ptype, f"nm.mul_hi({t.read(a, ptype)}, {t.read(b, ptype)})", mask)
  if name in ("add", "sub") and "sat" in mods:
    expr = f"nm.saturate_int({t.read(a, ptype)}.astype(i64) {'+' if name == 'add' else '-'} {t.read(b, ptype)}, i32)"
    return t.write(d, ptype, expr, mask)
  if "cc" in mods or name in ("addc", "subc"): raise PTXError("carry arithmetic (.cc) is not supported")
  return t.write(d, ptype, _INT_BINARY[name].format(a=t.read(a, ptype), b=t.read(b, ptype)), mask)

_FLOAT_UNARY = {"neg": "(-{a})", "abs": "np.abs({a})", "sqrt": "np.sqrt({a})", "rsqrt": "(1 / np.sqrt({a}))",
                "rcp": "(1 / {a})", "ex2": "np.exp2({a})", "lg2": "np.log2({a})", "sin": "np.sin({a})",
                "cos": "np.cos({a})", "tanh": "np.tanh({a})"}

@operation("neg", "abs", "not", "cnot", "sqrt", "rsqrt", "rcp", "ex2", "lg2", "sin", "cos", "tanh", "popc", "clz",
           "brev")
def unary(t, ins, mods, types, mask):
  (ptype,), (d, a) = types, ins.operands
  name = ins.opcode[0]
  if _is_float(ptype):
    if name == "neg" or name == "abs":   # sign-bit operations, exact on every float including NaN
      return t.write(d, ptype, _float_out(_FLOAT_UNARY[name].format(a=_float_in(t, a, ptype)), ptype, mods), mask)
    source = _float_in(t, a, ptype)
    if "ftz" in mods: source = f"nm.flush_subnormal({source})"
    return t.write(d, ptype, _float_out(_FLOAT_UNARY[name].format(a=source), ptype, mods), mask)
  source = t.read(a, ptype)
  if name == "popc": return t.write(d, "u32", f"nm.popcount({source})", mask)
  if name == "clz": return t.write(d, "u32", f"nm.count_leading_zeros({source})", mask)
  if name == "brev": return t.write(d, ptype, f"nm.bit_reverse({source})", mask)
  if name == "cnot": return t.write(d, ptype, f"({source} == 0).astype({NUMPY_TYPES[ptype]})", mask)
  expr = {"neg": "(-{a})", "abs": "np.abs({a})", "not": "(~{a})"}[name].format(a=source)
  return t.write(d, ptype, expr, mask)

@operation("mad", "fma")
def multiply_add(t, ins, mods, types, mask):
  (ptype,), (d, a, b, c) = types, ins.operands
  if _is_float(ptype):
    ntype = "f32" if ptype == "bf16" else NUMPY_TYPES[ptype]
    args = [_float_in(t, x, ptype) for x in (a, b, c)]
    if "ftz" in mods: args = [f"nm.flush_subnormal({x})" for x in args]
    rounding = next((m for m in mods if m in ("rz", "rm", "rp")), "rn")
    expr = f"nm.fma({args[0]}, {args[1]}, {args[2]}, {ntype}, {rounding!r})"
    return t.write(d, ptype, _float_out(expr, ptype, mods), mask)
  if "wide" in mods:
    wide = _WIDER[ptype]
    nwide = NUMPY_TYPES[wide]
    expr = f"({t.read(a, ptype)}.astype({nwide}) * {t.read(b, ptype)}.astype({nwide}) + {t.read(c, wide)})"
    return t.write(d, wide, expr, mask)
  if "hi" in mods:
    return t.write(d, ptype, f"(nm.mul_hi({t.read(a, ptype)}, {t.read(b, ptype)}) + {t.read(c, ptype)})", mask)
  return t.write(d, ptype, f"({t.read(a, ptype)} * {t.read(b, ptype)} + {t.read(c, ptype)})", mask)

def _compare(t: Translator, cmp: str, ptype: str, a: str, b: str) -> str:
  """A boolean expression for setp/set's comparison, with PTX's ordered/unordered float rules."""
  if _is_float(ptype):
    x, y = _float_in(t, a, ptype), _float_in(t, b, ptype)
    if cmp == "num": return f"~(np.isnan({x}) | np.isnan({y}))"
    if cmp == "nan": return f"(np.isnan({x}) | np.isnan({y}))"
    if cmp.endswith("u"):   # unordered: true when either is NaN
      return f"(({x} {CMP_SIGNED[cmp[:-1]]} {y}) | np.isnan({x}) | np.isnan({y}))"
    if cmp == "ne": return f"(({x} != {y}) & ~np.isnan({x}) & ~np.isnan({y}))"
    return f"({x} {CMP_SIGNED[cmp]} {y})"
  if cmp in ("lo", "ls", "hi", "hs"): ptype = "u" + ptype[1:]
  return f"({t.read(a, ptype)} {CMP_SIGNED[cmp]} {t.read(b, ptype)})"

def _combine(t: Translator, expr: str, mods: list, operands: tuple) -> tuple[str, str]:
  """setp/set with a .and/.or/.xor predicate: (value, value of the negated comparison)."""
  boolean = next((m for m in mods if m in ("and", "or", "xor")), None)
  negated = f"(~{expr})"
  if boolean is None: return expr, negated
  op = {"and": "&", "or": "|", "xor": "^"}[boolean]
  c = t.read(operands[3], "pred")
  return f"({expr} {op} {c})", f"({negated} {op} {c})"

@operation("setp")
def set_predicate(t, ins, mods, types, mask):
  (ptype,), cmp = types, mods[0]
  dest, a, b = ins.operands[:3]
  value, negated = _combine(t, _compare(t, cmp, ptype, a, b), mods, ins.operands)
  p, _, q = dest.partition("|")
  out = t.write(p, "pred", value, mask)
  return out + (t.write(q, "pred", negated, mask) if q else [])

@operation("set")
def set_value(t, ins, mods, types, mask):
  (dtype, ptype), cmp = types, mods[0]
  d, a, b = ins.operands[:3]
  value, _ = _combine(t, _compare(t, cmp, ptype, a, b), mods, ins.operands)
  true = "1.0" if dtype == "f32" else "-1"
  return t.write(d, dtype, f"np.where({value}, {t.read(true, dtype)}, {t.read('0', dtype)})", mask)

@operation("selp")
def select(t, ins, mods, types, mask):
  (ptype,), (d, a, b, p) = types, ins.operands
  return t.write(d, ptype, f"np.where({t.read(p, 'pred')}, {t.read(a, ptype)}, {t.read(b, ptype)})", mask)

@operation("slct")
def select_by_sign(t, ins, mods, types, mask):
  (ptype, ctype), (d, a, b, c) = types, ins.operands
  return t.write(d, ptype, f"np.where({t.read(c, ctype)} >= 0, {t.read(a, ptype)}, {t.read(b, ptype)})", mask)

@operation("testp")
def test_property(t, ins, mods, types, mask):
  (ptype,), (d, a) = types, ins.operands
  x = _float_in(t, a, ptype)
  tiny = f"np.finfo({NUMPY_TYPES.get(ptype, 'f32')}).tiny"
  expr = {"finite": f"np.isfinite({x})", "infinite": f"np.isinf({x})", "number": f"~np.isnan({x})",
          "notanumber": f"np.isnan({x})", "normal": f"(np.isfinite({x}) & (np.abs({x}) >= {tiny}))",
          "subnormal": f"((np.abs({x}) < {tiny}) & ({x} != 0))"}[mods[0]]
  return t.write(d, "pred", expr, mask)

@operation("cvt")
def convert(t, ins, mods, types, mask):
  (dtype, atype), (d, a) = types, ins.operands
  rounding = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "rna")), None)
  if rounding == "rna": raise PTXError("cvt.rna (round away from zero) is not supported")
  source = _float_in(t, a, atype) if _is_float(atype) else t.read(a, atype)
  if "ftz" in mods and _is_float(atype): source = f"nm.flush_subnormal({source})"
  if _is_float(dtype) and _is_float(atype):
    if dtype == atype or (rounding or "").endswith("i"):   # round to an integral value within the same type
      expr = f"nm.round_integral({source}, {rounding!r})" if rounding else source
    elif dtype == "bf16": expr = f"nm.f32_to_bf16(np.asarray({source}).astype(f32), {rounding or 'rn'!r})"
    elif atype == "bf16": expr = f"np.asarray({source}).astype({NUMPY_TYPES[dtype]})"
    else: expr = f"nm.round_float({source}, {NUMPY_TYPES[dtype]}, {rounding or 'rn'!r})"
    expr = f"nm.f32_to_bf16({expr})" if dtype == "bf16" and atype == "bf16" else expr
    return t.write(d, dtype, _float_out(expr, "f32", [m for m in mods if m in ("sat",)]), mask)
  if _is_float(atype):   # float -> int: round, saturate, NaN -> 0
    return t.write(d, dtype, f"nm.float_to_int({source}, {NUMPY_TYPES[dtype]}, {(rounding or 'rzi')!r})", mask)
  if _is_float(dtype):   # int -> float
    target = "f32" if dtype == "bf16" else NUMPY_TYPES[dtype]
    expr = f"nm.round_float(np.asarray({source}).astype(f64), {target}, {(rounding or 'rn')!r})"
    if rounding in (None, "rn"): expr = f"np.asarray({source}).astype({target})"
    if dtype == "bf16": expr = f"nm.f32_to_bf16({expr})"
    return t.write(d, dtype, _float_out(expr, "f32", [m for m in mods if m == "sat"]), mask)
  if "sat" in mods: return t.write(d, dtype, f"nm.saturate_int({source}, {NUMPY_TYPES[dtype]})", mask)
  return t.write(d, dtype, f"np.asarray({source}).astype({NUMPY_TYPES[dtype]})", mask)

@operation("cvta")
def convert_address(t, ins, mods, types, mask):
  """Generic addresses: global ones are themselves, shared/local ones carry a window tag above user space."""
  (ptype,), (d, a) = types, ins.operands
  space = next(m for m in mods if m in ("global", "shared", "local", "const", "param"))
  source = t.read(a, ptype)
  if space in ("global", "const", "param"): return t.write(d, ptype, source, mask)
  window = t.constant(WINDOWS[space], NUMPY_TYPES[ptype])
  expr = f"({source} - {window})" if "to" in mods else f"({source} + {window})"
  return t.write(d, ptype, expr, mask)

@operation("mov")
def move(t, ins, mods, types, mask):
  (ptype,), (d, a) = types, ins.operands
  if d.startswith("{"):   # unpack: mov.b32 {lo, hi}, r
    parts = [p.strip() for p in d[1:-1].split(",")]
    bits = {"b32": 32, "b64": 64, "b16": 16}[ptype] // len(parts)
    part_type = {8: "b8", 16: "b16", 32: "b32"}[bits]
    source = t.read(a, ptype)
    out = []
    for i, part in enumerate(parts):
      expr = f"np.asarray({source} >> {t.read(str(i * bits), ptype)}).astype({NUMPY_TYPES[part_type]})"
      out += t.write(part, part_type, expr, mask)
    return out
  if a.startswith("{"):   # pack: mov.b64 d, {lo, hi}
    parts = [p.strip() for p in a[1:-1].split(",")]
    bits = {"b32": 32, "b64": 64, "b16": 16}[ptype] // len(parts)
    part_type = {8: "b8", 16: "b16", 32: "b32"}[bits]
    ntype = NUMPY_TYPES[ptype]
    terms = [f"(np.asarray({t.read(p, part_type)}).astype({ntype}) << {t.read(str(i * bits), ptype)})"
             for i, p in enumerate(parts)]
    return t.write(d, ptype, " | ".join(terms), mask)
  return t.write(d, ptype, t.read(a, ptype), mask)

def _memory_type(types: list, mods: list) -> tuple[str, int]:
  width = next((int(m[1:]) for m in mods if m in ("v2", "v4", "v8")), 1)
  return types[-1], width

def _space(mods: list, symbol_space: str | None, ins: Instruction) -> str:
  spaces = [m for m in mods if m in ("global", "shared", "local", "param", "const")]
  unknown = [m for m in mods if m not in ("global", "shared", "local", "param", "const", "v2", "v4", "v8")
             and not CACHE_HINTS.match(m) and m != "ptr"]
  if unknown: raise PTXError(f"unsupported memory modifier(s) {unknown}")
  if spaces and spaces[0] == "const": raise PTXError("the .const space is not supported")
  return spaces[0] if spaces else (symbol_space or "generic")

@operation("ld", "ldu")
def load(t, ins, mods, types, mask):
  ptype, width = _memory_type(types, mods)
  dest, addr = ins.operands
  address, symbol_space = t.address(addr)
  space = _space(mods, symbol_space, ins)
  ntype = NUMPY_TYPES[ptype] if ptype != "pred" else "u8"
  targets = [p.strip() for p in dest[1:-1].split(",")] if dest.startswith("{") else [dest]
  call = f"X.load({space!r}, {address}, {ntype}, {width}, {mask or 'None'})"
  if width == 1: return t.write(targets[0], ptype, call, mask)
  out = [f"v = {call}"]
  for i, target in enumerate(targets): out += t.write(target, ptype, f"v[{i}]", mask)
  return out

@operation("st")
def store(t, ins, mods, types, mask):
  ptype, width = _memory_type(types, mods)
  addr, value = ins.operands
  address, symbol_space = t.address(addr)
  space = _space(mods, symbol_space, ins)
  if space == "param": raise PTXError("st.param (device function calls) is not supported")
  ntype = NUMPY_TYPES[ptype]
  sources = [p.strip() for p in value[1:-1].split(",")] if value.startswith("{") else [value]
  values = ", ".join(t.read(s, ptype) for s in sources)
  return [f"X.store({space!r}, {address}, {ntype}, ({values},), {mask or 'None'})"]

@operation("atom", "red")
def atomic(t, ins, mods, types, mask):
  (ptype,) = types[-1:]
  space = next((m for m in mods if m in ("global", "shared")), "generic")
  op = next(m for m in mods if m in ("add", "min", "max", "exch", "cas", "and", "or", "xor", "inc", "dec"))
  operands = list(ins.operands)
  dest = operands.pop(0) if ins.opcode[0] == "atom" else None
  address, _ = t.address(operands[0])
  values = ", ".join(t.read(o, ptype) for o in operands[1:])
  call = f"X.atomic({space!r}, {address}, {NUMPY_TYPES[ptype]}, {op!r}, ({values},), {mask or 'None'})"
  return t.write(dest, ptype, call, mask) if dest else [call]

@operation("bfe")
def bit_field_extract(t, ins, mods, types, mask):
  (ptype,), (d, a, b, c) = types, ins.operands
  return t.write(d, ptype, f"nm.bit_field_extract({t.read(a, ptype)}, {t.read(b, 'u32')}, {t.read(c, 'u32')})", mask)

@operation("bfi")
def bit_field_insert(t, ins, mods, types, mask):
  (ptype,), (d, a, b, c, e) = types, ins.operands
  expr = f"nm.bit_field_insert({t.read(a, ptype)}, {t.read(b, ptype)}, {t.read(c, 'u32')}, {t.read(e, 'u32')})"
  return t.write(d, ptype, expr, mask)

@operation("prmt")
def permute(t, ins, mods, types, mask):
  if any(m in mods for m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")): raise PTXError("prmt modes are not supported")
  (d, a, b, c) = ins.operands
  return t.write(d, "b32", f"nm.permute_bytes({t.read(a, 'b32')}, {t.read(b, 'b32')}, {t.read(c, 'b32')})", mask)

def translate_instruction(t: Translator, ins: Instruction, mask: str | None) -> list:
  """Python statements for one (non-control) instruction; a guard narrows the mask to the lanes its predicate holds."""
  name = ins.opcode[0]
  if name in ("membar", "fence", "prefetch", "prefetchu", "pmevent", "nanosleep", "discard"): return []
  if name not in OPERATIONS: raise PTXError(f"line {ins.line}: unsupported instruction {ins.text!r}")
  out = []
  if ins.guard is not None:
    guard = t.read(ins.guard, "pred")
    guard = f"~{guard}" if ins.guard_negated else guard
    out.append(f"g = {guard}" if mask is None else f"g = {mask} & {guard}")
    mask = "g"
  _, mods, types = split_opcode(ins)
  try: return out + OPERATIONS[name](t, ins, mods, types, mask)
  except PTXError as error: raise PTXError(f"line {ins.line}: {error} in {ins.text!r}") from None
  except (ValueError, KeyError, IndexError, StopIteration) as error:
    raise PTXError(f"line {ins.line}: cannot translate {ins.text!r} ({type(error).__name__}: {error})") from None
