"""The core's layers depend one way (docs/internals.md, "Layers"): no module imports from a layer above its own, not
even inside a function, and no private name (`_x`) is imported from another module."""
import ast
import pathlib
import pytest
import tinycore

PACKAGE = pathlib.Path(tinycore.__file__).parent

# module (dotted, below tinycore) or package -> layer; the longest matching prefix wins
LAYERS = {
  "dtype": 0, "caches": 0, "helpers": 0, "errors": 0,
  # the profiler imports nothing of tinycore: the schedule cache, the compile path, HCQ2 and the engine record into it
  "profiler": 0,
  "uop": 1,
  "schedule": 2, "codegen": 2,
  "device": 3, "plugin.hookspecs": 3, "plugin.spec": 3, "plugin.manager": 3, "plugin.known_failures": 3,
  "hcq": 4,
  "engine": 5,
  "tensor": 6, "tensor_indexing": 6, "tensor_assign": 6, "tensor_ops": 6, "tensor_sort": 6, "tensor_math": 6,
  "tensor_nn": 6, "gradient": 6, "multi": 6,
  # the public faces: they gather the layers below for users and plugin authors
  "nn": 7, "cli": 7, "testing": 7, "jit": 7, "plugin": 7, "__init__": 7, "__main__": 7, "distributed": 7,
  # VIZ: the web page of what the compiler did (the layers report to it through tinycore.uop.capture)
  "viz": 7,
  # models people bring, written with the public faces (Tensor, nn, TinyJit), and the command that runs them
  "models": 8, "llm": 8,
}


def layer_of(module: str) -> int:
  """The layer of a dotted module name below `tinycore` ("hcq.runtime", "plugin", "__init__")."""
  parts = module.split(".")
  for n in range(len(parts), 0, -1):
    if (layer := LAYERS.get(".".join(parts[:n]))) is not None: return layer
  raise KeyError(f"tinycore.{module} belongs to no layer: add it to LAYERS in {__file__}")


def module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
  if parts[-1] == "__init__" and len(parts) > 1: parts.pop()
  return ".".join(parts)


def imports(path: pathlib.Path):
  """(line, imported tinycore module, names imported from it) for every import in the file, at any depth."""
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tinycore":
      target = node.module.removeprefix("tinycore").lstrip(".") or "__init__"
      yield node.lineno, target, [alias.name for alias in node.names]
    elif isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split(".")[0] == "tinycore":
          yield node.lineno, alias.name.removeprefix("tinycore").lstrip(".") or "__init__", []


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_from_a_higher_layer(path):
  me = module_name(path)
  upward = [f"line {line}: tinycore.{me} (layer {layer_of(me)}) imports tinycore.{target} (layer {layer_of(target)})"
            for line, target, _ in imports(path) if layer_of(target) > layer_of(me)]
  assert not upward, "\n".join(upward)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_name_crosses_a_module(path):
  private = [f"line {line}: from tinycore.{target} import {name}" for line, target, names in imports(path)
             for name in names if name.startswith("_") and not name.startswith("__")]
  assert not private, "\n".join(private)


def test_the_checker_sees_an_upward_import(tmp_path):
  """The check itself: a device module importing the engine is caught."""
  fake = PACKAGE / "device" / "buffer.py"
  found = [(line, target) for line, target, _ in imports(fake)]
  assert all(layer_of(target) <= layer_of("device.buffer") for _, target in found)
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  from tinycore.engine.realize import run_linear\n")
  assert [(2, "engine.realize")] == [(line, target) for line, target, _ in imports(bad)]
  assert layer_of("engine.realize") > layer_of("device.buffer")
