"""Names VIZ shows for rewrite passes and rules, found from the code itself.

A rule is named by its function (`fold_constants`), or, for a lambda, by the English comment above it in the rule
list (every rule carries one: "a cast to the same dtype is nothing"). A PatternMatcher is named by the module
variable that holds it (`tinycore.uop.symbolic.symbolic` is "symbolic").
"""
from __future__ import annotations
import linecache
import os
import sys
from typing import Any, Callable

# how far above a lambda to look for its rule's comment (a rule spans a few lines; a group shares one comment)
MAX_COMMENT_DISTANCE = 30

rule_names: dict[Any, str] = {}
matcher_names: dict[int, str] = {}


def rule_name(fn: Callable) -> str:
  """The name of the rule whose function is `fn` (cached per code object)."""
  code = getattr(fn, "__code__", None)
  key = code if code is not None else fn
  if (hit := rule_names.get(key)) is not None: return hit
  name = getattr(fn, "__name__", repr(fn))
  if name == "<lambda>" and code is not None:
    name = comment_above(code.co_filename, code.co_firstlineno) or \
        f"lambda at {os.path.basename(code.co_filename)}:{code.co_firstlineno}"
  rule_names[key] = name
  return name


def comment_above(filename: str, line: int) -> str | None:
  """The block of `#` comment lines nearest above `line` (1-based) in the same rule list, joined; None if the list
  starts (a line opening `PatternMatcher(`) before a comment is found."""
  lines = linecache.getlines(filename)
  index = line - 2
  while index >= 0 and line - 2 - index < MAX_COMMENT_DISTANCE:
    text = lines[index].strip()
    if text.startswith("#"):
      block = []
      while index >= 0 and (text := lines[index].strip()).startswith("#"):
        block.append(text.lstrip("#").strip())
        index -= 1
      return " ".join(reversed(block))
    if "PatternMatcher(" in text: return None
    index -= 1
  return None


def matcher_name(matcher: Any) -> str:
  """The name of the module-level variable of a tinycore module holding `matcher`, else "rewrite"."""
  if (hit := matcher_names.get(id(matcher))) is not None: return hit
  for module_name, module in list(sys.modules.items()):
    if not module_name.startswith("tinycore") or module is None: continue
    found = next((var for var, value in list(vars(module).items()) if value is matcher), None)
    if found is not None:
      matcher_names[id(matcher)] = found  # module-level matchers live as long as the process: the id stays theirs
      return found
  return "rewrite"
