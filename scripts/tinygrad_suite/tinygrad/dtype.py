from tinycore.dtype import *  # noqa
from tinycore.dtype import DType, dtypes, least_upper_dtype, to_np_dtype, DTYPES_BY_NAME, HOST_FLOAT32  # noqa: F401
import numpy as np, torch
# tinygrad's numpy type of a dtype: the host form of one numpy lacks (bfloat16, the 8-bit floats) is float32
def _to_np_dtype(dt): return np.float32 if dt in HOST_FLOAT32 else to_np_dtype(dt).type
DTYPES_DICT = {name: dt for name, dt in DTYPES_BY_NAME.items() if dt == getattr(dtypes, name, None)}
def _to_torch_dtype(dt):
  if dt in dtypes.fp8s: return torch.uint8  # (tinygrad's mapping: the bytes)
  return getattr(torch, np.dtype(_to_np_dtype(dt)).name) if dt != dtypes.bfloat16 else torch.bfloat16
def strong_dtype(dt): return dt
def _from_torch_dtype(torch_dtype):
  if torch_dtype == torch.bfloat16: return dtypes.bfloat16
  return dtypes.from_np(torch.empty(0, dtype=torch_dtype).numpy().dtype)
from tinycore.dtype import fp8_to_float, float_to_fp8, round_to_fp8  # noqa: F401
class _Truncate(dict):
  def __missing__(self, dt):
    if dt in dtypes.fp8s: return lambda x: round_to_fp8(x, dt)
    return lambda x: np.array(x, _to_np_dtype(dt)).item() if dt != dtypes.bfloat16 else \
      float(torch.tensor(x, dtype=torch.bfloat16))
truncate = _Truncate()
