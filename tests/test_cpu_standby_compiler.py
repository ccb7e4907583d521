"""tiny-cpu's standby compiler: after a compile, the next compiler process is started at once and waits for its source
on stdin, so a later kernel's compile skips the compiler's own start-up (clang: about half of a small compile)."""
from __future__ import annotations
import ctypes
import os
import pathlib
import time
import pytest

pytest.importorskip("tiny_cpu", reason="tiny-cpu is not installed")
from tiny_cpu.compiler import STANDBY_ENV, CPUCompiler, Standby  # noqa: E402
from tiny_cpu.device import load_shared_object  # noqa: E402

SOURCE = "int answer(int x) {{ return x * {factor} + 1; }}"


@pytest.fixture
def no_standbys():
  Standby.discard_all()
  yield
  Standby.discard_all()


def answer(library: bytes, x: int) -> int:
  function = load_shared_object(library).answer
  function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
  return function(x)


def waiting(compiler: CPUCompiler) -> Standby | None:
  return Standby._waiting.get((*compiler.command, *[flag for flag in compiler.flags if flag != "-shared"]))


def test_compiles_after_the_first_use_the_waiting_compiler_and_results_are_right(no_standbys):
  compiler = CPUCompiler()
  if compiler.linker is None: pytest.skip("the compiler driver links: no standby")
  assert waiting(compiler) is None
  assert answer(compiler.compile(SOURCE.format(factor=3)), 5) == 16
  first = waiting(compiler)
  assert first is not None and first.process.poll() is None  # started, waiting on stdin
  assert answer(compiler.compile(SOURCE.format(factor=7)), 5) == 36
  second = waiting(compiler)
  assert second is not None and second is not first and first.process.returncode == 0  # the first one compiled it
  assert not pathlib.Path(first.object_path).parent.exists()
  Standby.discard_all()
  assert second.process.returncode is not None and not pathlib.Path(second.object_path).parent.exists()


def test_a_source_error_through_the_standby_names_the_problem_and_keeps_standbys_on(no_standbys):
  compiler = CPUCompiler()
  if compiler.linker is None: pytest.skip("the compiler driver links: no standby")
  compiler.compile(SOURCE.format(factor=2))
  with pytest.raises(RuntimeError, match=r"(?s)failed to compile a kernel.*undeclared_name.*--- source ---"):
    compiler.compile("int broken(void) { return undeclared_name; }")
  assert answer(compiler.compile(SOURCE.format(factor=4)), 1) == 5
  assert waiting(compiler) is not None


def test_a_compiler_that_cannot_read_stdin_still_compiles_and_is_not_kept_on_standby(no_standbys, tmp_path):
  real = CPUCompiler()
  if real.linker is None: pytest.skip("the compiler driver links: no standby")
  script = tmp_path / "files-only-cc"
  script.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = - ] && {{ echo "no stdin here" >&2; exit 1; }}; done\n'
                    f'exec {real.command[0]} "$@"\n')
  script.chmod(0o755)
  compiler = CPUCompiler([str(script)])
  for factor in (2, 3, 4):
    assert answer(compiler.compile(SOURCE.format(factor=factor)), 10) == 10 * factor + 1
  assert waiting(compiler) is None


def test_the_setting_turns_it_off(no_standbys, monkeypatch):
  monkeypatch.setenv(STANDBY_ENV, "0")
  compiler = CPUCompiler()
  assert answer(compiler.compile(SOURCE.format(factor=5)), 2) == 11
  assert waiting(compiler) is None


def test_a_forked_child_compiles_without_waiting_on_the_parents_standby(run_scenario):
  # the child inherits the parent's end of the standby's stdin: unless it closes it, the parent's standby would
  # never see the end of its source; the child must not use the parent's standby either
  script = """
import os, ctypes
from tiny_cpu.compiler import CPUCompiler, Standby
from tiny_cpu.device import load_shared_object
def run(lib, x):
  f = load_shared_object(lib).answer; f.argtypes, f.restype = [ctypes.c_int], ctypes.c_int; return f(x)
def say(*words):  # one write per line: the parent's and the child's lines never interleave
  os.write(1, (" ".join(map(str, words)) + "\\n").encode())
c = CPUCompiler()
say("parent", run(c.compile("int answer(int x) { return x + 1; }"), 1))
pid = os.fork()
if pid == 0:
  say("child", run(c.compile("int answer(int x) { return x + 2; }"), 1))
  os._exit(0)
say("parent again", run(c.compile("int answer(int x) { return x + 3; }"), 1))
say("child exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
  result = run_scenario(script, timeout=120, env={"TINYCORE_COMPILE_TIMEOUT": "30"})
  assert result.returncode == 0, result.stderr
  lines = set(result.stdout.splitlines())
  assert {"parent 2", "child 3", "parent again 4", "child exit 0"} <= lines, result.stdout


@pytest.mark.parametrize("ending", ["exit", "os._exit"])
def test_no_compiler_process_or_directory_is_left_after_exit(run_scenario, ending):
  # os._exit skips the exit handlers (a multiprocessing worker ends so): the standby then reads end of file and
  # cannot write its object, because its directory is only made when it is taken
  script = f"""
import os
from tiny_cpu.compiler import CPUCompiler, Standby
c = CPUCompiler()
c.compile("int f(void) {{ return 1; }}")
[standby] = Standby._waiting.values()
print(standby.process.pid, standby.workdir, flush=True)
{"os._exit(0)" if ending == "os._exit" else ""}
"""
  result = run_scenario(script, timeout=120)
  assert result.returncode == 0, result.stderr
  if not result.stdout.strip(): pytest.skip("no standby (the compiler driver links)")
  pid, workdir = result.stdout.split()
  deadline = time.monotonic() + 30
  while pathlib.Path(f"/proc/{pid}").exists() and ending == "os._exit" and time.monotonic() < deadline:
    time.sleep(0.05)  # not our child: it ends on its own once it has read the end of its input
  assert not pathlib.Path(workdir).exists()
  try: os.kill(int(pid), 0)
  except ProcessLookupError: pass
  else:
    if pathlib.Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0:
      pytest.fail(f"the standby compiler {pid} outlived its process")
