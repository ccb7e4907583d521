from tinycore.tensor import *  # noqa
try: from tinycore.tensor import _to_np_dtype
except ImportError:
  from tinycore.dtype import to_np_dtype as _to_np_dtype
