"""Public parts of tinygrad's test/helpers.py, rewritten for tinycore; kernel-count helpers skip (internals)."""
import os, functools, unittest
import numpy as np
from tinygrad import Tensor, dtypes, Device
from tinygrad.dtype import _to_np_dtype, truncate

slow = unittest.skipUnless(os.getenv("RUN_SLOW"), "slow test, set RUN_SLOW=1 to run")

class KernelCountException(Exception): pass

def _internal(*args, **kwargs): raise unittest.SkipTest("kernel/schedule counts are tinygrad internals")
check_schedule = assert_kernel_count = assert_jit_cache_len = call_is_graph = _internal

def min_normal(dt): return float(np.finfo(_to_np_dtype(dt)).tiny) if dt != dtypes.bfloat16 else 2.0 ** -126

def rand_for_dtype(dt, size, allow_subnormal=True):
  if dt == dtypes.bool: return np.random.choice([True, False], size=size)
  if dtypes.is_int(dt):
    return np.random.randint(0 if dtypes.is_unsigned(dt) else -100, 100, size=size, dtype=_to_np_dtype(dt))
  values = np.random.uniform(-10, 10, size=size).astype(_to_np_dtype(dt))
  if dt == dtypes.bfloat16 or dt in dtypes.fp8s: values = np.array([truncate[dt](v) for v in values], values.dtype)
  if not allow_subnormal: values = np.where(np.abs(values) < min_normal(dt), 0, values)
  return values

def not_support_multi_device(): return False

def needs_second_gpu(fn):
  @functools.wraps(fn)
  def wrapper(self, *args, **kwargs):
    try: Tensor.zeros(10, device=f"{Device.DEFAULT}:1").contiguous().realize()
    except Exception as e: self.skipTest(f"second device not available: {e}")
    return fn(self, *args, **kwargs)
  return wrapper
