"""Split a kernel into basic blocks and compile each into two Python functions (all lanes / masked lanes), once."""
from __future__ import annotations
from tiny_nv.mock.ptx.instructions import translate_instruction
from tiny_nv.mock.ptx.parse import Instruction, Kernel, PTXError
from tiny_nv.mock.ptx.translate import CONTROL, Block, DecodedKernel, Terminator, Translator

def decode_kernel(kernel: Kernel) -> DecodedKernel:
  """Translate `kernel` into blocks of generated Python; raises PTXError naming the first unsupported instruction."""
  translator = Translator(kernel)
  instructions = kernel.instructions
  leaders = sorted({0, *kernel.labels.values(), *(i + 1 for i, ins in enumerate(instructions)
                                                  if ins.opcode[0] in CONTROL)} - {len(instructions)})
  block_of = {start: index for index, start in enumerate(leaders)}
  blocks = []
  for index, start in enumerate(leaders):
    end = leaders[index + 1] if index + 1 < len(leaders) else len(instructions)
    body = instructions[start:end]
    last = body[-1] if body else None
    terminator = _terminator(translator, last, index, block_of, kernel) if last and last.opcode[0] in CONTROL \
      else Terminator("fall", index + 1 if end < len(instructions) else -1)
    if terminator.kind == "fall" and terminator.next == -1: terminator = Terminator("exit", -1)
    straight = body[:-1] if last is not None and last.opcode[0] in CONTROL else body
    run = _compile(translator, straight, None, f"{kernel.name}_bb{index}")
    run_masked = _compile(translator, straight, "m", f"{kernel.name}_bb{index}_masked")
    blocks.append(Block(run, run_masked, terminator, len(body)))
  return DecodedKernel(kernel.name, blocks, translator.slot_types,
                       {name: slot for name, slot in translator.slots.items() if name.startswith("%") and
                        name.split(".")[0][1:] in ("tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "nwarpid",
                                                   "smid", "nsmid", "gridid", "warpsize")},
                       translator.shared_size, translator.local_size, kernel.params)

def _terminator(translator: Translator, ins: Instruction, index: int, block_of: dict, kernel: Kernel) -> Terminator:
  guard = translator.slots[ins.guard] if ins.guard is not None else -1
  if ins.guard is not None and ins.guard not in translator.slots:
    raise PTXError(f"line {ins.line}: unknown predicate {ins.guard}")
  name = ins.opcode[0]
  if name in ("bar", "barrier"):
    if guard != -1: raise PTXError(f"line {ins.line}: a predicated barrier is not supported: {ins.text!r}")
    if any(m in ins.opcode for m in ("arrive", "red")): raise PTXError(f"line {ins.line}: unsupported {ins.text!r}")
    return Terminator("barrier", index + 1)
  if name in ("ret", "exit"): return Terminator("exit", index + 1, -1, guard, ins.guard_negated)
  target = ins.operands[0]
  if target not in kernel.labels: raise PTXError(f"line {ins.line}: unknown branch target {target}")
  return Terminator("jump", index + 1, block_of[kernel.labels[target]], guard, ins.guard_negated)

def _compile(translator: Translator, body: list, mask: str | None, name: str):
  lines = [statement for ins in body for statement in translate_instruction(translator, ins, mask)]
  source = f"def {name}(R, {'m, ' if mask else ''}X):\n" + "".join(f"  {line}\n" for line in lines) + "  return\n"
  namespace = dict(translator.constants)
  exec(compile(source, f"<ptx {name}>", "exec"), namespace)
  function = namespace[name]
  function.source = source   # kept for debugging: print(block.run.source)
  return function
