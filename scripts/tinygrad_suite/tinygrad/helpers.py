import os
from tinycore.helpers import *  # noqa
from tinycore.helpers import Context, DEBUG, getenv, ContextVar  # noqa: F401
from tinycore import GlobalCounters  # noqa: F401
class _V:
  def __init__(self, v): self.value=v
  def __bool__(self): return bool(self.value)
  def __ge__(self, o): return self.value >= o
  def __eq__(self, o): return self.value == o
  def __gt__(self, o): return self.value > o
  def tolist(self, namespace=None): return []  # EMULATED_DTYPES: tinycore emulates no dtype in software
try: from tinycore.helpers import IMAGE
except ImportError: IMAGE = _V(0)
JIT = _V(int(os.environ.get("JIT", "1")))
EMULATED_DTYPES = _V("")
class _Dev:
  device = ""
  renderer = ""
  interface = ""
  value = ""
DEV = _Dev()
import tempfile, ctypes
def temp(name): return os.path.join(tempfile.gettempdir(), name)
def mv_address(mv): return ctypes.addressof(ctypes.c_char.from_buffer(mv))
# tinygrad's internal switches that its tests set (UOp spec checks, atomics, index bound checks): no tinycore meaning
from tinycore.helpers import ContextVar as _ContextVar
for _name in ("USE_ATOMICS", "SPEC", "CHECK_OOB"):
  if _name not in _ContextVar.registry: _ContextVar(_name, 0)
  globals()[_name] = _ContextVar.registry[_name]
# tinygrad's software emulation of dtypes a device lacks: tinycore computes every dtype natively, so its tests run
# the native path (the setting exists for their Context(EMULATED_DTYPES=...); EMULATED_DTYPES.tolist() is empty)
if "EMULATED_DTYPES" not in _ContextVar.registry: _ContextVar("EMULATED_DTYPES", "")
