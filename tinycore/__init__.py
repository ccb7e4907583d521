"""tinycore: a small tensor compiler whose devices are plugins.

    from tinycore import Tensor
    (Tensor([1.0, 2.0, 3.0]) * 2 + 1).numpy()
"""
from tinycore.dtype import DType, dtypes
from tinycore.device.registry import Device
from tinycore.uop.ops import Variable
from tinycore.tensor import Tensor
from tinycore.engine.realize import GlobalCounters
from tinycore.helpers import Context
from tinycore.jit import TinyJit
from tinycore.profiler import profile

__all__ = ["Tensor", "Variable", "Device", "dtypes", "DType", "GlobalCounters", "Context", "TinyJit", "profile"]
__version__ = "0.1.0"

import os as _os
if _os.environ.get("TINYCORE_VIZ", "") not in ("", "0"):  # VIZ: capture this run and serve its page at exit
  from tinycore.viz import enable_from_env as _enable_viz
  _enable_viz()
