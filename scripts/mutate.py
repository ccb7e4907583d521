#!/usr/bin/env python3
"""Hand-made mutation testing for tinycore's compiler layers: does the fast test subset notice a wrong compiler?

A mutant is tinycore with one small deliberate bug: an operator swapped (+ -, * //, < <=, > >=, == !=, and or),
an integer constant changed (0 -> 1, 1 -> 0, n -> n+1), a `not` removed, one rule dropped from a PatternMatcher
list, a `return value` turned into `return None`, or a procedure that returns at once. Mutants are made with the
standard library's `ast` from tinycore/uop/, tinycore/schedule/ and tinycore/codegen/, and each is applied by
replacing only the source text of the mutated node, so the rest of the file (and its line numbers) is untouched.

The tool copies the repository's `tinycore/` and `tests/` to a scratch directory and runs everything there with
that copy first on PYTHONPATH: the worktree is never edited. It runs the fast subset once unmutated (it must pass;
this also fills a compile cache the mutants share, keyed by kernel source, so it stays correct), then, for a
reproducible random sample of mutants (--seed, --count), writes the mutated file, runs the subset with a timeout,
and puts the file back. A mutant is *killed* when a test fails, the run crashes or it times out; it *survives*
when the subset passes. The score is killed / total. Results go to stdout and, with --report, to a Markdown table
of survivors plus a JSON file beside it that --replay reads to rerun exactly the same mutants later.

  nice -n 19 .venv/bin/python scripts/mutate.py --seed 15 --count 60 --report bench/mutation-before.md
  .venv/bin/python scripts/mutate.py --list | head        # every mutant, without running anything
  .venv/bin/python scripts/mutate.py --only 'tinycore/uop/symbolic.py:140:7:compare'   # ids as printed
"""
from __future__ import annotations
import argparse
import ast
import copy
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_DIRS = ("tinycore/uop", "tinycore/schedule", "tinycore/codegen")
# the fast subset: the core tests, with the fuzzer on a fixed seed so a run is reproducible, plus a cheap slice of
# the device conformance suite on CPU (integer arithmetic, movement, matmul, reductions, comparisons)
CONFORMANCE_SELECTION = ("test_matmul_float32 or test_getitem or test_pad or test_floordiv or test_comparison or "
                         "test_bitwise or test_shifts or test_int32 or test_argmax or test_sum_and_max or "
                         "test_reduce_after or test_shrink or test_flip or test_cat or test_arange_int or "
                         "test_binary_float32 or test_neg_and_abs or test_right_shift or test_softmax")
FUZZ_ENV = {"TINYCORE_FUZZ_SEED": "15", "TINYCORE_FUZZ_PROGRAMS": "40"}
SWAPS: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
                           ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                           ast.NotEq: ast.Eq, ast.And: ast.Or, ast.Or: ast.And}
SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
          ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.And: "and", ast.Or: "or"}


@dataclass(frozen=True)
class Mutant:
  """One mutation: replace bytes [start, end) of `path` (relative to the repo) with `replacement`."""
  path: str
  line: int
  col: int
  kind: str
  description: str
  start: int
  end: int
  original: str
  replacement: str

  @property
  def id(self) -> str: return f"{self.path}:{self.line}:{self.col}:{self.kind}"


# ---------------------------------------------------------------------------- finding mutants
class MutantFinder:
  """Walks one module's AST and lists its mutants as byte-range replacements of its source."""

  def __init__(self, path: str, source: bytes):
    self.path, self.source = path, source
    self.line_starts = [0]
    for line in source.split(b"\n"): self.line_starts.append(self.line_starts[-1] + len(line) + 1)
    self.mutants: list[Mutant] = []
    self.skipped: set[int] = set()  # ids of nodes where mutating changes nothing (annotations, f-strings)

  def offset(self, line: int, col: int) -> int: return self.line_starts[line - 1] + col

  def add(self, node: ast.AST, kind: str, description: str, replacement: str, start: int | None = None,
          end: int | None = None) -> None:
    start = self.offset(node.lineno, node.col_offset) if start is None else start
    end = self.offset(node.end_lineno, node.end_col_offset) if end is None else end
    original = self.source[start:end].decode()
    self.mutants.append(Mutant(self.path, node.lineno, node.col_offset, kind, description, start, end, original,
                               replacement))

  def replace_expr(self, node: ast.expr, new: ast.expr, kind: str, description: str) -> None:
    self.add(node, kind, description, f"({ast.unparse(new)})")

  def find(self) -> list[Mutant]:
    tree = ast.parse(self.source)
    for node in ast.walk(tree):
      for ann in self.annotations(node):
        self.skipped.update(id(n) for n in ast.walk(ann))
      if isinstance(node, ast.JoinedStr): self.skipped.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
      if id(node) in self.skipped: continue
      self.visit(node)
    return self.mutants

  @staticmethod
  def annotations(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None: return [node.returns]
    if isinstance(node, ast.arg) and node.annotation is not None: return [node.annotation]
    if isinstance(node, ast.AnnAssign): return [node.annotation]
    return []

  def visit(self, node: ast.AST) -> None:
    if isinstance(node, ast.BinOp) and type(node.op) in SWAPS: self.swap_binop(node)
    elif isinstance(node, ast.AugAssign) and type(node.op) in SWAPS:
      new = copy.copy(node)
      new.op = SWAPS[type(node.op)]()
      self.add(node, "augassign", f"{SYMBOL[type(node.op)]}= -> {SYMBOL[type(new.op)]}=", ast.unparse(new))
    elif isinstance(node, ast.Compare): self.swap_compare(node)
    elif isinstance(node, ast.BoolOp):
      new = copy.copy(node)
      new.op = SWAPS[type(node.op)]()
      self.replace_expr(node, new, "boolop", f"{SYMBOL[type(node.op)]} -> {SYMBOL[type(new.op)]}")
    elif isinstance(node, ast.Constant) and type(node.value) is int:
      value = {0: 1, 1: 0}.get(node.value, node.value + 1)
      self.add(node, "const", f"{node.value} -> {value}", repr(value))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
      self.replace_expr(node, node.operand, "not", "drop `not`")
    elif isinstance(node, ast.Call) and self.is_pattern_matcher(node): self.drop_rules(node)
    elif isinstance(node, ast.Return) and node.value is not None and not self.is_none(node.value):
      self.add(node, "return", "return None", "return None")
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)): self.early_return(node)

  def swap_binop(self, node: ast.BinOp) -> None:
    new = copy.copy(node)
    new.op = SWAPS[type(node.op)]()
    self.replace_expr(node, new, "binop", f"{SYMBOL[type(node.op)]} -> {SYMBOL[type(new.op)]}")

  def swap_compare(self, node: ast.Compare) -> None:
    for i, op in enumerate(node.ops):
      if type(op) not in SWAPS: continue
      new = copy.copy(node)
      new.ops = list(node.ops)
      new.ops[i] = SWAPS[type(op)]()
      self.replace_expr(node, new, "compare" if i == 0 else f"compare{i}", f"{SYMBOL[type(op)]} -> "
                        f"{SYMBOL[type(new.ops[i])]}")

  @staticmethod
  def is_none(node: ast.expr) -> bool: return isinstance(node, ast.Constant) and node.value is None

  @staticmethod
  def is_pattern_matcher(node: ast.Call) -> bool:
    name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
    return name == "PatternMatcher" and len(node.args) == 1 and isinstance(node.args[0], ast.List)

  def drop_rules(self, node: ast.Call) -> None:
    rules = node.args[0].elts
    for i, rule in enumerate(rules):
      new = copy.copy(node)
      new.args = [ast.List(elts=rules[:i] + rules[i + 1:], ctx=ast.Load())]
      self.add(rule, "droprule", f"drop PatternMatcher rule {i} of {len(rules)}", f"({ast.unparse(new)})",
               start=self.offset(node.lineno, node.col_offset),
               end=self.offset(node.end_lineno, node.end_col_offset))

  def early_return(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    # a procedure (no `return value`, not a generator) that does nothing; values are covered by "return None"
    inner = [n for n in ast.walk(node) if n is not node]
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) or (isinstance(n, ast.Return) and n.value is not None)
           for n in inner): return
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
      else node.body
    if not body or body[0].lineno == node.lineno: return
    first = body[0]
    at = self.offset(first.lineno, first.col_offset)
    self.add(first, "early", f"{node.name} returns at once", "return\n" + " " * first.col_offset, start=at, end=at)


def find_mutants(root: Path = ROOT) -> list[Mutant]:
  """Every mutant of the target directories, in a stable order (by file, then position)."""
  mutants: list[Mutant] = []
  for folder in TARGET_DIRS:
    for file in sorted((root / folder).rglob("*.py")):
      rel = file.relative_to(root).as_posix()
      mutants.extend(MutantFinder(rel, file.read_bytes()).find())
  return sorted(mutants, key=lambda m: (m.path, m.start, m.end, m.kind, m.description))


def apply(mutant: Mutant, source: bytes) -> bytes:
  """The mutated source; the mutant must still parse."""
  new = source[:mutant.start] + mutant.replacement.encode() + source[mutant.end:]
  ast.parse(new)
  return new


# ---------------------------------------------------------------------------- running the subset
@dataclass
class Result:
  """What the fast subset said about one mutant."""
  id: str
  description: str
  original: str
  replacement: str
  status: str  # killed | survived | timeout | crashed
  seconds: float
  detail: str


def make_scratch() -> Path:
  """A copy of what the tests import and run, outside the worktree."""
  scratch = Path(tempfile.mkdtemp(prefix="tinycore-mutants-"))
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
  for name in ("tinycore", "tests"): shutil.copytree(ROOT / name, scratch / name, ignore=ignore)
  for name in ("pyproject.toml", "tox.ini"): shutil.copy(ROOT / name, scratch / name)
  return scratch


def subset_command(python: str, tests: list[str] | None = None) -> list[list[str]]:
  base = [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfE", "--no-header"]
  if tests: return [base + tests]
  return [base + ["tests"],
          base + ["--pyargs", "tinycore.testing", "--tinycore-device=CPU", "-k", CONFORMANCE_SELECTION]]


def run_subset(scratch: Path, python: str, timeout: float, cache_dir: Path,
               tests: list[str] | None = None) -> tuple[str, float, str]:
  """(status, seconds, detail) of the fast subset in `scratch`; stops at the first failing command."""
  env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TINYCORE_FUZZ_SEED")}
  # XDG_CACHE_HOME too: tests that start tinycore without TINYCORE_* variables must not use the user's cache
  env.update(FUZZ_ENV, PYTHONPATH=str(scratch), PYTHONDONTWRITEBYTECODE="1", TINYCORE_SPEC="1",
             TINYCORE_CACHE_DIR=str(cache_dir), XDG_CACHE_HOME=str(cache_dir / "xdg"))
  begin = time.monotonic()
  for command in subset_command(python, tests):
    left = timeout - (time.monotonic() - begin)
    try:
      proc = subprocess.run(["nice", "-n", "19"] + command, cwd=scratch, env=env, capture_output=True, text=True,
                            timeout=max(left, 1), start_new_session=True)
    except subprocess.TimeoutExpired:
      return "timeout", time.monotonic() - begin, f"over {timeout:.0f} s"
    if proc.returncode == 1: return "killed", time.monotonic() - begin, first_failure(proc.stdout)
    if proc.returncode != 0:
      return "crashed", time.monotonic() - begin, f"pytest exit {proc.returncode}: " + last_line(proc.stdout +
                                                                                                 proc.stderr)
  return "survived", time.monotonic() - begin, ""


def first_failure(output: str) -> str:
  for line in output.splitlines():
    if line.startswith(("FAILED", "ERROR")): return line[:160]
  return last_line(output)


def last_line(output: str) -> str:
  lines = [line for line in output.splitlines() if line.strip()]
  return lines[-1][:160] if lines else ""


def check_imports_from(scratch: Path, python: str) -> None:
  """The scratch copy, not the worktree, must be what `import tinycore` finds there."""
  out = subprocess.run([python, "-c", "import tinycore; print(tinycore.__file__)"], cwd=scratch, text=True,
                       env={**os.environ, "PYTHONPATH": str(scratch)}, capture_output=True, check=True).stdout
  if not out.strip().startswith(str(scratch)):
    raise SystemExit(f"in {scratch} `import tinycore` finds {out.strip()}, not the scratch copy")


# ---------------------------------------------------------------------------- choosing, reporting
def choose(mutants: list[Mutant], args: argparse.Namespace) -> list[Mutant]:
  by_id = {m.id: m for m in mutants}
  if args.only: return [by_id[i] for i in args.only]
  if args.replay:
    earlier = json.loads(Path(args.replay).read_text())
    args.seed = earlier["seed"]  # the report names the sample it repeats
    wanted = [r["id"] for r in earlier["results"]]
    missing = [i for i in wanted if i not in by_id]
    if missing: print(f"{len(missing)} mutants of {args.replay} no longer exist (the code moved): {missing}")
    return [by_id[i] for i in wanted if i in by_id]
  picked = random.Random(args.seed).sample(range(len(mutants)), min(args.count, len(mutants)))
  return [mutants[i] for i in sorted(picked)]


def score(results: list[Result]) -> str:
  killed = sum(r.status != "survived" for r in results)
  return f"{killed}/{len(results)} = {100 * killed / max(len(results), 1):.1f}%"


def write_report(path: Path, results: list[Result], args: argparse.Namespace, total: int, baseline: float) -> None:
  lines = [f"# Mutation run: {args.label or path.stem}", "",
           f"Generated by `scripts/mutate.py` (seed {args.seed}, {len(results)} of {total} mutants of "
           f"{', '.join(TARGET_DIRS)}; per-mutant timeout {args.timeout:.0f} s; unmutated subset {baseline:.1f} s).",
           "", f"**Mutation score: {score(results)}** (killed, crashed or timed out / total).", "",
           "## Survivors", "", "| mutant | change | original |", "|---|---|---|"]
  for r in results:
    if r.status == "survived":
      lines.append(f"| `{r.id}` | {r.description} | `{' '.join(r.original.split())[:70]}` |")
  lines += ["", "## All mutants", "", "| mutant | change | result | seconds | first failure |", "|---|---|---|---|---|"]
  for r in results:
    lines.append(f"| `{r.id}` | {r.description} | {r.status} | {r.seconds:.1f} | {r.detail.replace('|', '/')} |")
  path.write_text("\n".join(lines) + "\n")
  path.with_suffix(".json").write_text(json.dumps({"seed": args.seed, "total_mutants": total, "score": score(results),
                                                   "results": [asdict(r) for r in results]}, indent=1) + "\n")


def parse_args() -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seed", type=int, default=15, help="random seed of the sample (default 15)")
  parser.add_argument("--count", type=int, default=60, help="mutants in the sample (default 60)")
  parser.add_argument("--timeout", type=float, default=90, help="seconds per mutant; over it counts as killed")
  parser.add_argument("--list", action="store_true", help="print every mutant and exit")
  parser.add_argument("--only", nargs="+", metavar="ID", help="run just these mutant ids")
  parser.add_argument("--replay", metavar="JSON", help="run the mutants of an earlier report's JSON")
  parser.add_argument("--report", metavar="MD", help="write a Markdown report here (and a .json beside it)")
  parser.add_argument("--tests", nargs="+", metavar="PYTEST_ARG",
                      help="run these pytest arguments instead of the fast subset (to check that a new test kills)")
  parser.add_argument("--label", default="", help="title of the report")
  parser.add_argument("--python", default=str(ROOT / ".venv/bin/python"), help="interpreter with pytest")
  return parser.parse_args()


def main() -> None:
  args = parse_args()
  mutants = find_mutants()
  if args.list:
    for m in mutants: print(f"{m.id}  {m.description}: {' '.join(m.original.split())[:60]}")
    print(f"{len(mutants)} mutants")
    return
  chosen = choose(mutants, args)
  scratch = make_scratch()
  cache_dir = Path(tempfile.gettempdir()) / f"tinycore-mutants-cache-{os.getuid()}"
  try:
    check_imports_from(scratch, args.python)
    status, baseline, detail = run_subset(scratch, args.python, args.timeout * 4, cache_dir, args.tests)
    if status != "survived": raise SystemExit(f"the unmutated subset does not pass ({status}): {detail}")
    print(f"unmutated subset passes in {baseline:.1f} s; running {len(chosen)} of {len(mutants)} mutants", flush=True)
    results = [run_mutant(m, scratch, args, cache_dir, n, len(chosen)) for n, m in enumerate(chosen, 1)]
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  print(f"mutation score: {score(results)}")
  for r in results:
    if r.status == "survived": print(f"  survived: {r.id}  {r.description}: {' '.join(r.original.split())[:60]}")
  if args.report: write_report(Path(args.report), results, args, len(mutants), baseline)


def run_mutant(m: Mutant, scratch: Path, args: argparse.Namespace, cache_dir: Path, n: int, of: int) -> Result:
  file = scratch / m.path
  original = file.read_bytes()
  try:
    file.write_bytes(apply(m, original))
    status, seconds, detail = run_subset(scratch, args.python, args.timeout, cache_dir, args.tests)
  finally:
    file.write_bytes(original)
  print(f"[{n}/{of}] {status:8} {seconds:5.1f}s {m.id}  {m.description}  {detail[:90]}", flush=True)
  return Result(m.id, m.description, m.original, m.replacement, status, seconds, detail)


if __name__ == "__main__": main()
