from tinycore.dtype import *  # noqa
from tinycore.dtype import DType, dtypes, least_upper_dtype, to_np_dtype as _to_np_dtype, DTYPES_BY_NAME  # noqa: F401
import numpy as np, torch
DTYPES_DICT = {name: dt for name, dt in DTYPES_BY_NAME.items() if dt == getattr(dtypes, name, None)}
def _to_torch_dtype(dt): return getattr(torch, np.dtype(_to_np_dtype(dt)).name) if dt != dtypes.bfloat16 else torch.bfloat16
def strong_dtype(dt): return dt
def _no_fp8(*args, **kwargs): raise NotImplementedError("tinycore has no fp8 dtypes")
fp8_to_float = float_to_fp8 = _no_fp8
class _Truncate(dict):
  def __missing__(self, dt): return lambda x: np.array(x, _to_np_dtype(dt)).item() if dt != dtypes.bfloat16 else \
    float(torch.tensor(x, dtype=torch.bfloat16))
truncate = _Truncate()
