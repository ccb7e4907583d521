"""tinygrad names tinycore has no counterpart of: any name imports; using it (calling it, making an instance) skips
the test; a class name is a class nothing is an instance of."""
import sys, types, unittest

def _placeholder(qualified_name):
  def skip(*args, **kwargs): raise unittest.SkipTest(f"tinygrad's {qualified_name} is absent from tinycore")
  short_name = qualified_name.rsplit(".", 1)[-1]
  if short_name[:1].isupper(): return type(short_name, (), {"__init__": skip})
  return skip

def partly_internal_module(module_name, public_module=None):
  """A module with public_module's names; a name it lacks is a placeholder."""
  module = types.ModuleType(module_name)
  module.__path__ = []  # a package, so its submodules import too
  if public_module is not None: module.__dict__.update({k: v for k, v in vars(public_module).items() if k[:2] != "__"})
  def missing(name):
    if name.startswith("__"): raise AttributeError(name)
    return _placeholder(f"{module_name}.{name}")
  module.__getattr__ = missing
  return module

INTERNAL_MODULES = ("tinygrad.codegen", "tinygrad.codegen.late", "tinygrad.codegen.late.linearizer",
                    "tinygrad.engine.realize", "tinygrad.renderer.ptx", "tinygrad.renderer.isa",
                    "tinygrad.renderer.isa.x86", "tinygrad.renderer.cstyle", "tinygrad.renderer.llvmir",
                    "tinygrad.runtime")
for _name in INTERNAL_MODULES: sys.modules[_name] = partly_internal_module(_name)

# the Python backend's storage helper its tests use: a stored word (bfloat16's 16 bits, an 8-bit float's byte) as the
# value it holds, which is what tinycore's PYTHON device reads too
def _from_storage_scalar(x, dtype):
  from tinycore.device.scalar_ops import load_function
  load = load_function(dtype)
  return load(int(x)) if load is not None and dtype.fmt is None else x
_ops_python = types.SimpleNamespace(from_storage_scalar=_from_storage_scalar)
sys.modules["tinygrad.runtime.ops_python"] = partly_internal_module("tinygrad.runtime.ops_python", _ops_python)
