import sys as _sys, importlib as _importlib
from tinycore import *  # noqa
from tinycore import Tensor, Device, dtypes, TinyJit, Context, Variable, GlobalCounters  # noqa: F401
from tinycore.uop.ops import UOp  # noqa: F401
from tinycore import nn  # noqa: F401

# tinygrad's module names that have a tinycore module of the same role
_SAME_ROLE = {"nn": "tinycore.nn", "nn.state": "tinycore.nn.state", "engine": "tinycore.engine"}
for _name, _target in _SAME_ROLE.items(): _sys.modules[f"tinygrad.{_name}"] = _importlib.import_module(_target)
from tinygrad._internals import partly_internal_module as _partly_internal_module  # noqa: E402
import tinycore.jit as _tinycore_jit, tinycore.nn.optim as _tinycore_optim  # noqa: E402,E401
_sys.modules["tinygrad.nn.optim"] = _partly_internal_module("tinygrad.nn.optim", _tinycore_optim)  # no Muon
import tinycore.uop.ops as _tinycore_ops  # noqa: E402
import tinycore.device.registry as _registry, tinycore.device.buffer as _buffer  # noqa: E402,E401
_device_module = _partly_internal_module("tinygrad.device", _registry)  # Device, and Buffer as tinygrad's module has
_device_module.Buffer = _buffer.Buffer
_sys.modules["tinygrad.device"] = _device_module
_sys.modules["tinygrad.uop"] = _partly_internal_module("tinygrad.uop", _tinycore_ops)  # (tinygrad.uop.Ops, ...)
_sys.modules["tinygrad.uop.ops"] = _partly_internal_module("tinygrad.uop.ops", _tinycore_ops)  # (sym_infer, ...)
_sys.modules["tinygrad.engine.jit"] = _partly_internal_module("tinygrad.engine.jit", _tinycore_jit)
