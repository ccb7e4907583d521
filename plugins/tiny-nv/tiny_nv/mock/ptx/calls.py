"""Inline `.func` calls: a kernel that calls device functions becomes one flat kernel before it is decoded.

Each call site gets a copy of the callee's body with its registers and labels renamed (`%fd3@2`, call site 2). The
`.param` passing becomes register moves: `st.param [param0]` in the caller and `ld.param [f_param_0]` in the callee
both name the call's argument register, `st.param [func_retval0]` / `ld.param [retval0]` its result register; the
callee's `ret` jumps to just after the call. Recursion is refused (the interpreter has no call stack).
"""
from __future__ import annotations
import itertools
import re
from tiny_nv.mock.ptx.parse import Instruction, Kernel, PTXError

MAX_DEPTH = 16
_NAME = re.compile(r"[%\w$]+")

def inline_calls(kernel: Kernel, functions: dict[str, Kernel]) -> Kernel:
  """`kernel` with every `call` replaced by the callee's body (the kernel itself when it makes no calls)."""
  if not any(ins.opcode[0] == "call" for ins in kernel.instructions): return kernel
  registers = dict(kernel.registers)
  items = _expand(kernel, {}, functions, registers, itertools.count(1), (kernel.name,), None)
  instructions, labels = [], {}
  for kind, value in items:
    if kind == "label": labels[value] = len(instructions)
    else: instructions.append(value)
  return Kernel(kernel.name, kernel.params, registers, kernel.variables, labels, instructions)

def _expand(body: Kernel, names: dict[str, str], functions: dict, registers: dict, counter, stack: tuple,
            return_label: str | None) -> list:
  """The body as ("label", name) / ("ins", Instruction) items, its names mapped by `names`, calls expanded."""
  labels_at: dict[int, list[str]] = {}
  for label, index in body.labels.items(): labels_at.setdefault(index, []).append(label)
  parameters = body.call_params | {p.name for p in body.params} | set(body.returns)
  items = []
  for index, ins in enumerate(body.instructions):
    items += [("label", names.get(label, label)) for label in labels_at.get(index, [])]
    renamed = _rename(ins, names)
    name = ins.opcode[0]
    if name == "call": items += _inline_one(renamed, ins, functions, registers, counter, stack)
    elif name in ("ret", "exit") and return_label is not None and name == "ret":
      items.append(("ins", Instruction(("bra",), (return_label,), renamed.guard, renamed.guard_negated, ins.line,
                                       f"{ins.text} (return)")))
    elif name in ("ld", "st") and "param" in ins.opcode and _param_name(ins) in parameters and \
        (return_label is not None or _param_name(ins) in body.call_params):
      items.append(("ins", _param_move(renamed, names.get(_param_name(ins), _param_name(ins)), ins)))
    else: items.append(("ins", renamed))
  items += [("label", names.get(label, label)) for label in labels_at.get(len(body.instructions), [])]
  return items

def _inline_one(call: Instruction, original: Instruction, functions: dict, registers: dict, counter,
                stack: tuple) -> list:
  """The callee's body for one call site (`call.uni (ret), f, (a, b)` with names already mapped to the caller's)."""
  operands = list(call.operands)
  results = _names(operands.pop(0)) if operands and operands[0].startswith("(") else []
  callee_name = operands.pop(0)
  arguments = _names(operands.pop(0)) if operands else []
  if callee_name not in functions:
    raise PTXError(f"line {original.line}: call of {callee_name!r}, which is not defined in this module "
                   "(indirect calls are not supported)")
  if callee_name in stack or len(stack) > MAX_DEPTH:
    raise PTXError(f"line {original.line}: recursive call of {callee_name} (the interpreter has no call stack)")
  if call.guard is not None: raise PTXError(f"line {original.line}: predicated calls are not supported")
  callee = functions[callee_name]
  if len(arguments) != len(callee.params) or len(results) != len(callee.returns):
    raise PTXError(f"line {original.line}: call of {callee_name} with {len(arguments)} arguments and {len(results)} "
                   f"results; it takes {len(callee.params)} and gives {len(callee.returns)}")
  site = next(counter)
  names = {name: f"{name}@{site}" for name in (*callee.registers, *callee.labels)}
  names.update({p.name: argument for p, argument in zip(callee.params, arguments)})
  names.update(dict(zip(callee.returns, results)))
  for register, rtype in callee.registers.items(): registers[names[register]] = rtype
  return_label = f"$return@{site}"
  return _expand(callee, names, functions, registers, counter, (*stack, callee_name), return_label) + \
    [("label", return_label)]

def _rename(ins: Instruction, names: dict[str, str]) -> Instruction:
  if not names: return ins
  operands = tuple(_NAME.sub(lambda m: names.get(m.group(0), m.group(0)), op) for op in ins.operands)
  guard = names.get(ins.guard, ins.guard) if ins.guard else None
  return Instruction(ins.opcode, operands, guard, ins.guard_negated, ins.line, ins.text)

def _param_name(ins: Instruction) -> str:
  address = ins.operands[1] if ins.opcode[0] == "ld" else ins.operands[0]
  return address.strip("[]").partition("+")[0].strip()

def _param_move(renamed: Instruction, register: str, original: Instruction) -> Instruction:
  """`st.param.T [p+0], x` -> `mov.T p, x`; `ld.param.T x, [p+0]` -> `mov.T x, p`."""
  address = original.operands[1] if original.opcode[0] == "ld" else original.operands[0]
  offset = address.strip("[]").partition("+")[2].strip()
  if offset not in ("", "0"): raise PTXError(f"line {original.line}: call parameters at an offset: {original.text!r}")
  ptype = original.opcode[-1]
  operands = (renamed.operands[0], register) if original.opcode[0] == "ld" else (register, renamed.operands[1])
  return Instruction(("mov", ptype), operands, renamed.guard, renamed.guard_negated, original.line, original.text)

def _names(group: str) -> list[str]:
  return [name.strip() for name in group.strip("()").split(",") if name.strip()]
