"""The lazy Tensor frontend. Every op builds UOps; `realize()` schedules, compiles and runs them.

The API follows tinygrad's public Tensor API (names, signatures and semantics) for everything implemented here.
"""
from __future__ import annotations
import math
import pathlib
import sys
from typing import Any, Callable, Sequence
from tinycore.dtype import (HOST_FLOAT32, NARROW_FLOATS, DType, dtypes, least_upper_dtype, least_upper_float, to_dtype,
                            to_np_dtype, from_np_dtype)
from tinycore.uop.ops import Ops, UOp, Variable, prod, simplify_size
from tinycore.uop.symbolic_shapes import (check_shape_expr, evaluate, evaluate_shape, max_int, max_numel, min_int,
                                            view_in_buffer)
from tinycore.device.registry import Device
from tinycore.gradient import compute_gradient, full_like, functional
from tinycore.helpers import Context, TRAINING
from tinycore.engine.jit import JitError, is_capturing, record_random_draw
from tinycore.engine.realize import realize_roots
from tinycore.hcq.lock import runtime_lock
from tinycore.tensor_assign import Rebinding, all_tensors, register_tensor, uop_changed
from tinycore.tensor_ops import TensorOps
from tinycore.errors import ArgumentError, DTypeError, ShapeError



def _canonical_device(device: str | tuple | None) -> str | tuple:
  """The canonical name of a device the caller asked for; an unknown or unopenable device fails here, at creation."""
  if device is None: return Device.DEFAULT
  name = Device.canonicalize(device)
  for each in (name,) if isinstance(name, str) else name: Device[each]
  return name


def _is_user_variable(u: UOp) -> bool:
  """A Variable (DEFINE_VAR), a bound one (BIND) as `Variable(...)` makes them (on no device), or an int expression
  of bound ones (`v * 2 + 1`, a symbolic size)."""
  if u.op is Ops.DEFINE_VAR: return not u.src
  if u.op is Ops.BIND: return not u.src[0].src
  return u.device is None and u.dtype is not None and dtypes.is_int(u.dtype) and \
    any(n.op is Ops.BIND for n in u.toposort())


def _bound_variable(u: UOp, device: str) -> UOp:
  """A bound Variable (or an expression of them) as a tensor-level scalar on `device`: each BIND becomes
  BIND(DEFINE_VAR on the device, CONST value) and each constant a constant on the device. Realizing passes the
  values to the kernels as arguments (schedule.cache swaps the BIND for its DEFINE_VAR in the key)."""
  if u.op is Ops.DEFINE_VAR: raise ValueError(f"Variable {u.arg[0]!r} is not bound: use it as .bind(value)")
  check_shape_expr(u, "a Variable expression")
  on_device: dict[UOp, UOp] = {}
  for leaf in u.toposort():
    if leaf.op is Ops.BIND:
      var, value = leaf.unbind()
      device_var = UOp(Ops.DEFINE_VAR, var.dtype, (UOp(Ops.DEVICE, None, (), device),), var.arg)
      on_device[leaf] = UOp(Ops.BIND, var.dtype, (device_var, UOp.const(var.dtype, value)))
    elif leaf.op is Ops.CONST: on_device[leaf] = UOp.const(leaf.dtype, leaf.arg, device)
  return u.substitute(on_device)


def _check_sizes(what: str, values: Sequence[Any]) -> None:
  """Sizes are ints or int expressions of bound Variables (symbolic sizes)."""
  for v in values:
    if isinstance(v, UOp): check_shape_expr(v, what)


def _concrete(x: Any) -> Any:
  """A size with its Variables at their bound values (an int stays itself)."""
  return evaluate(x) if isinstance(x, UOp) else x


def _flatten_nested(data: Any) -> tuple[list[Any], tuple[int, ...]]:
  """A nested list as a flat list plus its shape; ragged nesting is an error."""
  if not isinstance(data, (list, tuple)): return [data], ()
  if len(data) == 0: return [], (0,)
  parts = [_flatten_nested(x) for x in data]
  shapes = {p[1] for p in parts}
  if len(shapes) != 1: raise ValueError(f"ragged nested list: element shapes {sorted(shapes)} differ")
  return [v for p in parts for v in p[0]], (len(data),) + parts[0][1]


def _numbers_array(data: Sequence, dtype: DType | None) -> Any:
  """A nested list of plain numbers as numpy reads it (in C: a 256 x 1024 list of floats took 470 ms element by
  element, 20 here), in the dtype `_from_python` would infer or `dtype` of the same kind; None wherever the element
  walk decides (ragged lists, non-numbers, ints past the target's range or int64, a dtype of another kind)."""
  import numpy as np
  first = data
  while isinstance(first, (list, tuple)) and first: first = first[0]
  if isinstance(first, (list, tuple)) or not isinstance(first, (bool, int, float)): return None
  try: arr = np.array(data)
  except (ValueError, OverflowError, TypeError): return None
  kind = arr.dtype.kind
  if kind == "b": target = dtypes.bool
  elif kind == "f": target = dtypes.default_float
  elif kind == "i" and arr.size:
    low, high = int(arr.min()), int(arr.max())
    target = dtypes.int_for(low) if dtypes.int_for(low) is not dtypes.default_int else dtypes.int_for(high)
  else: return None
  if dtype is not None and dtype is not target:
    same_kind = (dtypes.is_float(dtype) and dtype not in HOST_FLOAT32 and kind == "f") or (
      dtypes.is_int(dtype) and kind == "i" and dtypes.min(dtype) <= low and high <= dtypes.max(dtype))
    if not same_kind: return None
    target = dtype
  return arr.astype(to_np_dtype(target), copy=False)


def _unpickled_tensor(holder: list, shape: tuple[int, ...], dtype_name: str, device: str, requires_grad: Any) -> Tensor:
  """The tensor `Tensor.__reduce_ex__` pickled: its bytes (the one item of `holder`) as `dtype_name` of `shape`, on
  `device` if it computes here (else the default device), realized."""
  import numpy as np
  raw = holder.pop()
  dtype = to_dtype(dtype_name)
  try: target = device if Device[device].can_compute else None
  except Exception: target = None  # a device this process does not have
  if not memoryview(raw).nbytes: t = Tensor.empty(*shape, dtype=dtype, device=target)
  elif dtype in HOST_FLOAT32: t = Tensor(np.frombuffer(raw, np.uint8), device=target).bitcast(dtype).reshape(shape)
  else: t = Tensor(np.frombuffer(raw, to_np_dtype(dtype)).reshape(shape), device=target)
  t.realize()  # copied in now: an out-of-band buffer stays the caller's (and is freed as soon as it is read)
  t.requires_grad = requires_grad
  return t


def _check_tensors(op: str, values: Sequence[Any]) -> None:
  """cat/stack join tensors only: `a.cat(b, 1)` passes the dim as a tensor (it must be `dim=1`)."""
  for v in values:
    if isinstance(v, (list, tuple)): raise TypeError(f"{op} takes tensors as arguments, got a {type(v).__name__}: "
                                                     f"unpack it, Tensor.{op}(*tensors)")
    if not isinstance(v, Tensor):
      raise TypeError(f"{op} joins tensors, got a {type(v).__name__} ({v!r}); pass the dim as a keyword (dim=...)")


def _check_int_convertible(values: Sequence[Any], dtype: DType | None) -> None:
  """Python data for an int dtype has no inf or NaN: it has no int value (tinygrad and torch raise too)."""
  if dtype is None or not dtypes.is_int(dtype): return
  for v in values:
    if isinstance(v, float) and not math.isfinite(v):
      error = ValueError if math.isnan(v) else OverflowError
      raise error(f"cannot convert {v} to {dtype.name}: it has no integer value")


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  """numpy's broadcast of these shapes; shapes that do not broadcast are a ShapeError (a ValueError) naming them."""
  if len(shapes) == 2:  # the common cases of a binary op: equal shapes, or a scalar operand
    if shapes[0] == shapes[1] or not shapes[1]: return tuple(shapes[0])
    if not shapes[0]: return tuple(shapes[1])
  ndim = max(len(s) for s in shapes)
  padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
  out = []
  for sizes in zip(*padded):
    non_one = {s for s in sizes if s != 1}
    if len(non_one) > 1: raise ShapeError(f"cannot broadcast shapes {' and '.join(str(tuple(s)) for s in shapes)}")
    out.append(non_one.pop() if non_one else 1)
  return tuple(out)


def _normalize_axis(axis: int, ndim: int) -> int:
  if not -max(ndim, 1) <= axis < max(ndim, 1):
    raise IndexError(f"dimension {axis} out of range for a tensor with {ndim} dims")
  return axis % max(ndim, 1)


MAX_BROADCAST_CONSTANTS = 256
# (dtype, device, shape, number's type, number, sign) -> the constant broadcast to that shape (Tensor._broadcast_scalar)
_broadcast_constants: dict[tuple, UOp] = {}


def _int_bounds(arg: Sequence[Any], shape: tuple) -> tuple[tuple[int, int], ...] | None:
  """shrink's (begin, end) per dim (None: the whole dim) when every bound and size is an int, else None."""
  bounds = []
  for bound, size in zip(arg, shape):
    if type(size) is not int: return None
    if bound is None: bounds.append((0, size))
    else:
      begin, end = bound
      if type(begin) is not int or type(end) is not int: return None
      bounds.append((begin, end))
  return tuple(bounds)


def _broadcast_uop(uop: UOp, shape: tuple[int, ...]) -> UOp:
  """uop broadcast to `shape` (numpy's rules: missing leading dims are 1): a reshape to the same rank, an expand."""
  return uop.reshape((1,) * (len(shape) - len(uop.shape)) + uop.shape).expand(shape)



def _is_numpy_scalar(value: Any) -> bool:
  """A numpy scalar (np.float32(2), np.int64(3), np.bool_(True)), without importing numpy."""
  return type(value).__module__ == "numpy" and getattr(value, "shape", None) == () and hasattr(value, "item")

class TensorType(type):
  """Tensor's class. `Tensor.training` is the TRAINING setting itself: `Tensor.training = True` (classic tinygrad
  scripts) turns training mode on for BatchNorm, dropout and the optimizers, and reads True inside
  `Context(TRAINING=1)`."""

  @property
  def training(cls) -> bool: return bool(TRAINING)

  @training.setter
  def training(cls, mode: bool) -> None: TRAINING.value = int(mode)


class Tensor(TensorOps, metaclass=TensorType):
  """A lazily evaluated multi-dimensional array on a device."""
  __slots__ = ("uop", "requires_grad", "grad", "view_of", "forward_graph", "_ref", "__weakref__")
  __array_priority__ = 1000  # numpy defers `np.float32(2) * t` and `array + t` to the Tensor's operators, as torch
  _seed: int = 0
  _rng_counter: int = 0

  def __init__(self, data: Any, device: str | tuple | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None):
    self.requires_grad, self.grad, self.view_of = requires_grad, None, None
    # (value, graph): while this tensor holds `value`, the unrealized graph backward differentiates (tensor_assign)
    self.forward_graph: tuple[UOp, UOp] | None = None
    dtype = to_dtype(dtype) if dtype is not None else None
    if isinstance(data, UOp) and _is_user_variable(data):
      uop = _bound_variable(data, _canonical_device(device))  # a 0-d tensor of a bound Variable's value
    elif isinstance(data, UOp):
      uop = data
      if device is not None and data.device is not None and Device.canonicalize(device) != data.device:
        uop = UOp(Ops.COPY, data.dtype, (data,), Device.canonicalize(device))
    elif isinstance(data, (bool, int, float)):
      _check_int_convertible([data], dtype)
      uop = UOp.const(dtype or dtypes.from_py(data), data, _canonical_device(device))
      dtype = None
    elif isinstance(data, (list, tuple)):
      uop = self._from_python(data, device, dtype)
      dtype = None
    elif isinstance(data, (bytes, bytearray, memoryview)):
      import numpy as np
      uop = self._from_numpy(np.frombuffer(bytes(data), dtype=np.uint8), device)
    elif isinstance(data, pathlib.Path):
      path = data.resolve()
      try: size = path.stat().st_size
      except OSError as e: raise FileNotFoundError(f"cannot make a Tensor from {path}: {e.strerror}") from e
      uop = Tensor.empty(size, dtype=dtypes.uint8, device=f"DISK:{path}").uop
      if device is not None: uop = Tensor(uop).to(device).uop
    elif data is None:  # tinygrad's Tensor(None): the number 0.0 (in `dtype` when given)
      uop = UOp.const(dtype or dtypes.default_float, 0.0, _canonical_device(device))
      dtype = None
    else:
      try: import numpy as np
      except ImportError: np = None
      if np is not None and isinstance(data, (np.ndarray, np.generic)):
        uop = self._from_numpy(np.asarray(data), device)
      else: raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
    if dtype is not None and uop.dtype is not dtype: uop = uop.cast(dtype)
    self.uop = uop
    register_tensor(self)

  # ------------------------------------------------------------------ construction helpers
  @staticmethod
  def _from_python(data: Sequence, device: str | None, dtype: DType | None) -> UOp:
    import numpy as np
    if (arr := _numbers_array(data, dtype)) is not None: return Tensor._from_numpy(arr, device)
    flat, shape = _flatten_nested(data)
    flat = [v.item() if isinstance(v, np.generic) else v for v in flat]  # numpy scalars in a list: their values
    if not all(isinstance(v, (bool, int, float)) for v in flat):
      bad = next(v for v in flat if not isinstance(v, (bool, int, float)))
      raise TypeError(f"Tensor data must be numbers, got {type(bad).__name__}")
    target = dtype or (dtypes.from_py(flat) if flat else dtypes.default_float)
    _check_int_convertible(flat, target)
    # build the bytes in the inferred dtype's host form, then cast on the device (casts run on the target)
    host_dtype = target if target not in HOST_FLOAT32 else dtypes.float32
    values = [dtypes.as_const(v, host_dtype) if not dtypes.is_float(host_dtype) else float(v) for v in flat]
    arr = np.array(values, dtype=to_np_dtype(host_dtype)).reshape(shape)
    uop = Tensor._from_numpy(arr, device)
    return uop.cast(target) if target is not host_dtype else uop

  @staticmethod
  def _from_numpy(arr, device: str | None) -> UOp:
    import numpy as np
    from tinycore.device.buffer import Buffer
    from tinycore.device.buffers import attach_buffer
    shape = arr.shape
    arr = np.ascontiguousarray(arr)  # (this makes 0-d arrays 1-d: the shape is kept above)
    dtype = from_np_dtype(arr.dtype)
    flat = arr.reshape(-1)
    buf_uop = UOp.new_buffer("NPY", flat.size, dtype)
    opaque = flat.view(np.uint8) if flat.size else np.empty(0, np.uint8)
    attach_buffer(buf_uop, Buffer("NPY", flat.size, dtype, opaque=opaque))
    uop = buf_uop.reshape(shape)
    target = _canonical_device(device)
    return uop if target == "NPY" else UOp(Ops.COPY, dtype, (uop,), target)

  @staticmethod
  def _rebuild(uop: UOp, requires_grad: bool | None = None) -> Tensor:
    t = Tensor.__new__(Tensor)
    t.uop, t.requires_grad, t.grad, t.view_of, t.forward_graph = uop, requires_grad, None, None, None
    register_tensor(t)
    return t

  def _apply(self, uop: UOp) -> Tensor: return Tensor._rebuild(uop, self.requires_grad)

  def _view(self, uop: UOp) -> Tensor:
    """A movement of this tensor that shares its storage: `view_of` names the tensor that owns that storage (the
    first of a chain of views), so an assign into the view writes there and nowhere else."""
    t = self._apply(uop)
    t.view_of = self.view_of if self.view_of is not None else self
    return t

  # ------------------------------------------------------------------ properties
  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str: return self.uop.device
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str: return f"<Tensor {self.shape} {self.dtype} on {self.device}>"
  def __hash__(self) -> int: return id(self)
  def __bool__(self) -> bool:
    if self.numel() != 1: raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
    return bool(self.item())

  # ------------------------------------------------------------------ creation
  @staticmethod
  def _shape_arg(shape: tuple) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    for s in shape:
      if isinstance(s, UOp): check_shape_expr(s, "shape")  # a symbolic size
      elif not isinstance(s, int) or s < 0:
        raise ShapeError(f"invalid shape {shape}: shape must be ints >= 0")
    return tuple(shape)

  @staticmethod
  def empty(*shape, device: str | None = None, dtype: DType | str | None = None, **kwargs) -> Tensor:
    shape = Tensor._shape_arg(shape)
    dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
    target = _canonical_device(device)
    if isinstance(target, tuple):  # a buffer on every device of the tuple
      from tinycore.schedule.multi import multi_value
      return Tensor(multi_value([UOp.new_buffer(d, prod(shape), dtype).reshape(shape) for d in target], None), **kwargs)
    buf = UOp.new_buffer(target, max_numel(shape), dtype)
    return Tensor(view_in_buffer(buf, shape), **kwargs)

  @staticmethod
  def full(shape: tuple[int, ...] | int, fill_value: Any, dtype: DType | str | None = None, device: str | None = None,
           **kwargs) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (dtype: from the Python value unless given); dtype comes before
    device when passed positionally, as in tinygrad."""
    shape = Tensor._shape_arg((shape,) if isinstance(shape, int) else tuple(shape))
    kwargs.pop("buffer", None)  # tinygrad's storage hint: a filled tensor gets storage when an op needs it
    if isinstance(fill_value, (list, tuple, str, Tensor)):  # (a tensor of values is `Tensor(data)` or `expand`)
      raise TypeError(f"full needs one number as fill_value, got {type(fill_value).__name__} {fill_value!r}")
    dtype = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
    _check_int_convertible([fill_value], dtype)
    const = UOp.const(dtype, fill_value, _canonical_device(device))
    return Tensor(const.reshape((1,) * len(shape)).expand(shape), **kwargs)

  @staticmethod
  def zeros(*shape, **kwargs) -> Tensor:
    return Tensor.full(Tensor._shape_arg(shape), 0.0 if "dtype" not in kwargs else 0,
                       **{"dtype": dtypes.default_float} | kwargs)
  @staticmethod
  def ones(*shape, **kwargs) -> Tensor:
    return Tensor.full(Tensor._shape_arg(shape), 1.0 if "dtype" not in kwargs else 1,
                       **{"dtype": dtypes.default_float} | kwargs)

  def full_like(self, fill_value: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs) -> Tensor:
    """A tensor of this shape (and dtype and device unless given) filled with `fill_value`."""
    return Tensor.full(self.shape, fill_value, dtype or self.dtype, device or self.device, **kwargs)
  def const_like(self, value: Any, dtype: DType | str | None = None) -> Tensor:
    """`value` broadcast to this shape, on this device, in this dtype unless given (tinygrad's const_like)."""
    return self.full_like(value, dtype)
  def zeros_like(self, **kwargs) -> Tensor: return self.full_like(0, **kwargs)
  def ones_like(self, **kwargs) -> Tensor: return self.full_like(1, **kwargs)

  @staticmethod
  def arange(start: int | float, stop: int | float | None = None, step: int | float = 1, **kwargs) -> Tensor:
    if stop is None: start, stop = 0, start
    if any(isinstance(v, UOp) for v in (start, stop, step)): return Tensor._symbolic_arange(start, stop, step, **kwargs)
    if step == 0: raise ValueError("arange step must not be zero")
    count = max(0, math.ceil((stop - start) / step))
    dtype = to_dtype(kwargs.pop("dtype")) if "dtype" in kwargs else Tensor._arange_dtype(start, stop, step, count)
    low, high = sorted((start, start + (count - 1) * step)) if count else (0, 0)
    if low < dtypes.min(dtype) or high > dtypes.max(dtype):
      raise OverflowError(f"arange({start}, {stop}, {step}) has values outside the range of {dtype}")
    device_uop = UOp(Ops.DEVICE, None, (), _canonical_device(kwargs.pop("device", None)))
    # positions past int32's range count in int64
    position_dtype = dtypes.int32 if count <= dtypes.max(dtypes.int32) + 1 else dtypes.int64
    index = Tensor(UOp(Ops.ARANGE, position_dtype, (device_uop,), count), **kwargs)
    return (index.cast(dtype) * step + start).cast(dtype) if count else index.cast(dtype)

  @staticmethod
  def _symbolic_arange(start: int | UOp, stop: int | UOp, step: int, **kwargs) -> Tensor:
    """arange with a bound Variable (or an expression of them) as start or stop: a symbolic length."""
    _check_sizes("arange", [v for v in (start, stop) if isinstance(v, UOp)])
    if isinstance(step, UOp) or not isinstance(step, int) or step == 0 or not all(isinstance(v, (int, UOp))
                                                                                for v in (start, stop)):
      raise ValueError(f"arange with Variables needs int start/stop and a nonzero int step, got {start}, {stop}, "
                       f"{step}")
    length = simplify_size(stop - start if step > 0 else start - stop)
    count = length if abs(step) == 1 else (length + (abs(step) - 1)) // abs(step)
    if min_int(count) < 0:
      raise ValueError(f"arange({start}, {stop}, {step}): the length can be negative for some Variable values")
    dtype = to_dtype(kwargs.pop("dtype")) if "dtype" in kwargs else dtypes.int32
    device_uop = UOp(Ops.DEVICE, None, (), _canonical_device(kwargs.pop("device", None)))
    index = Tensor(UOp(Ops.ARANGE, dtypes.int32, (device_uop,), count), **kwargs)
    ramp = index * step if step != 1 else index
    return (ramp + start if not (isinstance(start, int) and start == 0) else ramp).cast(dtype)

  @staticmethod
  def _arange_dtype(start: int | float, stop: int | float, step: int | float, count: int) -> DType:
    """default_float if any bound is a float, else default_int, or int64 when the values leave its range."""
    if any(isinstance(v, float) for v in (start, stop, step)): return dtypes.default_float
    last = start + (count - 1) * step if count else start
    fits = all(dtypes.min(dtypes.default_int) <= v <= dtypes.max(dtypes.default_int) for v in (start, last))
    return dtypes.default_int if fits else dtypes.int64

  @staticmethod
  def linspace(start: int | float, stop: int | float, steps: int, **kwargs) -> Tensor:
    if steps < 0: raise ValueError(f"linspace needs steps >= 0, got {steps}")
    dtype = to_dtype(kwargs.pop("dtype")) if "dtype" in kwargs else dtypes.default_float
    if dtype is dtypes.bool: raise ValueError("linspace with dtype bool is not supported (as in tinygrad)")
    if steps == 1: return Tensor([start], dtype=dtype, **kwargs)
    ramp = Tensor.arange(steps, dtype=dtypes.default_float, **kwargs)
    return (start + ramp * ((stop - start) / max(steps - 1, 1))).cast(dtype)

  @staticmethod
  def eye(n: int, m: int | None = None, **kwargs) -> Tensor:
    m = n if m is None else m
    # a whole float (eye(2.0)) is its int, as tinygrad takes it; any other non-int is an error
    n, m = (int(v) if isinstance(v, float) and v.is_integer() else v for v in (n, m))
    if not isinstance(n, int) or not isinstance(m, int): raise TypeError(f"eye needs int sizes, got {n!r}, {m!r}")
    if n < 0 or m < 0: raise ValueError(f"eye needs non-negative sizes, got {n}, {m}")
    dtype = to_dtype(kwargs.pop("dtype")) if "dtype" in kwargs else dtypes.default_float
    rows = Tensor.arange(n, **kwargs).reshape(n, 1)
    cols = Tensor.arange(m, **kwargs).reshape(1, m)
    return (rows == cols).cast(dtype)

  # --- random numbers: a counter-based hash evaluated in the kernel, so the same seed gives the same values
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    Tensor._seed, Tensor._rng_counter = int(seed), 0

  @staticmethod
  def _random_bits(count: int, device: str | None) -> Tensor:
    """`count` pseudo-random uint32s: murmur3's finalizer over (counter, seed)."""
    seed = (Tensor._seed * 0x9E3779B9 + 0x85EBCA6B) & 0xFFFFFFFF
    # (a symbolic count draws its bound value's worth; a replay moves the counter past the largest)
    start = Tensor._next_random_start(evaluate(count))
    # in a TinyJit capture the start is a Variable (a kernel argument) that every replay sets anew: fresh numbers
    if is_capturing(): start = Variable(record_random_draw(max_int(count)), 0, 0xFFFFFFFF).bind(start)
    if isinstance(count, int) and count > 2**32:
      # past 2**32 numbers the counter's carry is mixed in, so the stream does not repeat (it is unchanged before)
      position = Tensor.arange(count, device=device, dtype=dtypes.uint64) + start
      x = (position & 0xFFFFFFFF).cast(dtypes.uint32) ^ ((position >> 32).cast(dtypes.uint32) * 0x9E3779B1)
    else: x = Tensor.arange(count, device=device, dtype=dtypes.uint32) + start
    for key in (seed, (seed ^ 0x27D4EB2F) & 0xFFFFFFFF):
      x = (x ^ key) * 0xCC9E2D51
      x = x ^ (x >> 16)
      x = x * 0x85EBCA6B
      x = x ^ (x >> 13)
      x = x * 0xC2B2AE35
      x = x ^ (x >> 16)
    return x

  @staticmethod
  def _next_random_start(count: int) -> int:
    """The counter value (mixed with the seed) a draw of `count` numbers starts at; the counter moves past them."""
    offset = Tensor._rng_counter
    Tensor._rng_counter += count
    return (offset + (Tensor._seed * 0x9E3779B9 + 0x85EBCA6B)) & 0xFFFFFFFF

  @staticmethod
  def rand(*shape, device: str | None = None, dtype: DType | str | None = None, **kwargs) -> Tensor:
    """Uniform in [0, 1). (tinygrad's contiguous= hint is accepted: the result is the same either way.)"""
    kwargs.pop("contiguous", None)
    shape = Tensor._shape_arg(shape)
    dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dtypes.is_float(dtype):  # uniform [0, 1) in an int dtype would be all zeros
      raise DTypeError(f"rand needs a float dtype, got {dtype} (rand_like of an int tensor: pass dtype=)")
    bits = Tensor._random_bits(prod(shape), device)
    # as many random bits as the dtype's significand holds, so the cast is exact and 1.0 is never reached
    precision = min(dtypes.finfo(dtype)[1] + 1, 32)  # (float64: the 32 bits a draw has)
    compute = dtypes.float64 if precision > 24 else dtypes.float32
    values = (bits >> (32 - precision)).cast(compute) * (1.0 / (1 << precision))
    return Tensor(values.reshape(shape).cast(dtype).uop, **kwargs)

  @staticmethod
  def randn(*shape, device: str | None = None, dtype: DType | str | None = None, **kwargs) -> Tensor:
    """Standard normal (Box-Muller over two uniform draws)."""
    shape = Tensor._shape_arg(shape)
    dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
    u = Tensor.rand(2, *shape, device=device)
    radius = (1.0 - u[0]).log().mul(-2.0).sqrt()
    return Tensor((radius * (u[1] * (2 * math.pi)).cos()).cast(dtype).uop, **kwargs)

  @staticmethod
  def randint(*shape, low: int = 0, high: int = 10, **kwargs) -> Tensor:
    if not isinstance(low, int) or not isinstance(high, int):
      raise TypeError(f"randint needs int low and high, got {low!r} and {high!r}")
    if high <= low: raise ValueError(f"randint needs low < high, got {low}, {high}")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.int32))
    if not dtypes.is_int(dtype): raise DTypeError(f"randint needs an integer dtype, got {dtype}")
    return (Tensor.rand(*shape, **kwargs) * (high - low) + low).floor().cast(dtype)

  @staticmethod
  def uniform(*shape, low: float = 0.0, high: float = 1.0, **kwargs) -> Tensor:
    dtype = kwargs.pop("dtype", None)
    return (Tensor.rand(*shape, **kwargs) * (high - low) + low).cast(dtype or dtypes.default_float)

  def rand_like(self, **kwargs) -> Tensor:
    return Tensor.rand(*self.shape, **{"device": self.device, "dtype": self.dtype} | kwargs)

  # ------------------------------------------------------------------ realization
  def schedule_linear(self, *others: Tensor) -> UOp:
    """The LINEAR of CALLs that would realize these tensors (running it is `run_linear`)."""
    from tinycore.engine.realize import schedule_roots
    linear, _ = schedule_roots([t.uop for t in (self, *others)])
    return linear

  def realize(self, *others: Tensor, do_update_stats: bool = True) -> Tensor:
    """Compute this tensor (and `others`) now; do_update_stats is accepted for tinygrad compatibility."""
    with runtime_lock:
      rebinding = Rebinding()  # which results live tensors read, found before the run (the others may share memory)
      realize_roots([t.uop for t in (self, *others)], rebinding.find)
      rebinding.apply()
    return self

  def contiguous(self, **kwargs: Any) -> Tensor:
    """This value in its own dense storage (tinygrad's optimizer hints in kwargs are accepted and ignored)."""
    return self._apply(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def detach(self) -> Tensor:
    """The same value with no gradient flowing back through it."""
    return Tensor._rebuild(UOp(Ops.DETACH, self.dtype, (self.uop,)), False)

  def clone(self, device: str | None = None) -> Tensor:
    """A copy in fresh storage (on `device` when given): new empty storage with the value stored into it. A `.grad`
    is cloned along, as tinygrad's."""
    target = self.device if device is None else Device.canonicalize(device)
    copy = Tensor.empty(*self.shape, device=target, dtype=self.dtype).assign(self)
    if self.grad is not None: copy.grad = self.grad.clone(device)
    return copy

  def shard(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
    """This tensor split evenly along `axis` over a tuple of devices (replicated on each when axis is None)."""
    from tinycore.multi import shard
    return shard(self, devices, axis)

  def shard_like(self, y: Tensor) -> Tensor:
    """This tensor sharded as y is: over y's devices, along y's sharding axis (`y.uop.axis`; one device: moved)."""
    return self.shard(y.device, y.uop.axis) if isinstance(y.device, tuple) else self.to(y.device)

  def shard_(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
    """Shard this tensor in place: it now lives on the device tuple (see shard)."""
    return self.replace(self.shard(devices, axis))

  def to(self, device: str | tuple | None) -> Tensor:
    if device is None: return self
    target = Device.canonicalize(device)
    if target == self.device: return self
    if isinstance(target, tuple) or isinstance(self.device, tuple):
      from tinycore.multi import to_devices
      return to_devices(self, target)
    Device[target]  # fail early and clearly on an unknown device
    if target == self.device: return self
    # a copy to a storage device (DISK) is a store into fresh storage there; any other device change is a COPY
    if not Device.spec_for(target).compute: return self.clone(target)
    return self._apply(UOp(Ops.COPY, self.dtype, (self.uop,), target))

  def to_(self, device: str | tuple | None) -> Tensor:
    """Move this tensor (and its gradient) to `device` in place; returns it."""
    moved = self.to(device)
    if self.grad is not None: self.grad = self.grad.to(device)
    return self.replace(moved)

  def _readable_buffer(self):
    """A realized Buffer holding exactly this tensor's elements in row-major order."""
    from tinycore.device.buffers import buffer_of
    from tinycore.schedule.copies import has_buffer_identity
    if is_capturing(): raise JitError("reading tensor data inside a TinyJit function would bake the value into the "
                                      "replays: return the tensor and read it after the call")
    t = self if not isinstance(self.device, tuple) else self.to(self.device[0])  # gathered
    if not has_buffer_identity(t.uop):
      device = t.device if Device[t.device].can_compute else Device.host_compute_device()
      t = t.clone(device)
    t.realize()
    return buffer_of(t.uop.buffer_uop)

  def _prefix_buffer(self):
    """A realized Buffer whose first elements are this tensor's, row-major: how a tensor of symbolic shape is read
    (its buffer holds the largest size)."""
    t = self
    if t.uop.base.op is not Ops.BUFFER or view_in_buffer(t.uop.base, t.shape) is not t.uop:
      t = t.clone(t.device if Device[t.device].can_compute else Device.host_compute_device())
    return Tensor(t.realize().uop.base)._readable_buffer()

  def _concrete_shape(self) -> tuple[int, ...]:
    """The shape with its Variables at their bound values (reading data needs ints)."""
    return evaluate_shape(self.shape)

  def _data(self) -> memoryview:
    if prod(shape := self._concrete_shape()) == 0: return memoryview(bytearray(0))
    if shape == self.shape: return self._readable_buffer().as_memoryview()
    return self._prefix_buffer().as_memoryview().cast("B")[:prod(shape) * self.dtype.itemsize]

  def numpy(self):
    """A numpy array with this tensor's values (one copy: read straight from a host-visible buffer)."""
    import numpy as np
    if isinstance(self.device, tuple): return self.to(self.device[0]).numpy()  # gathered
    if self.dtype in HOST_FLOAT32:
      readable = self if Device[self.device].can_compute else self.to(Device.host_compute_device())
      return readable.cast(dtypes.float32).numpy()
    shape = self._concrete_shape()
    if prod(shape) == 0: return np.empty(shape, to_np_dtype(self.dtype))
    buffer = self._readable_buffer() if shape == self.shape else self._prefix_buffer()  # alive while read
    data = np.frombuffer(buffer.as_memoryview(allow_zero_copy=True), dtype=to_np_dtype(self.dtype))[:prod(shape)]
    # a zero-copy view is the device's live memory: copy it; bytes copied out (DISK) are already this array's own
    return data.reshape(shape).copy() if buffer.allocator.supports_as_buffer else data.reshape(shape)

  def __reduce_ex__(self, protocol: int):
    """A tensor pickles as its values (a lazy one is realized, as torch and numpy tensors hold theirs), shape, dtype,
    device and requires_grad; it unpickles onto its device when that computes here, else the default device (a DISK
    tensor's bytes are never written back into its file). From pickle protocol 5 the values are a PickleBuffer over
    the tensor's memory (zero-copy where the device has a host view), so out-of-band pickling copies nothing."""
    if isinstance(self.device, tuple):
      raise TypeError(f"a tensor sharded over {self.device} cannot be pickled: pickle its value on one device "
                      "(t.to(device)) and shard it again after loading")
    if any(isinstance(s, UOp) for s in self.shape):
      raise TypeError(f"a tensor of symbolic shape {self.shape} cannot be pickled: bind its Variables first")
    if prod(self.shape) == 0: raw: Any = b""
    elif protocol >= 5:
      import pickle
      raw = pickle.PickleBuffer(self._readable_buffer().as_memoryview(allow_zero_copy=True))
    else: raw = bytes(self._data())
    # (in a list the loader empties: pickle's memo keeps the argument tuple, and with it the bytes, to the end)
    return _unpickled_tensor, ([raw], self.shape, self.dtype.name, self.device, self.requires_grad)

  def tolist(self) -> Any: return self.numpy().tolist()
  def item(self) -> Any:
    if prod(self._concrete_shape()) != 1:
      raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
    return self.numpy().reshape(()).item()
  def data(self) -> memoryview:
    """The values as a memoryview in this dtype's struct format and this shape, as tinygrad (raw bytes for a dtype
    without a format: bfloat16, the 8-bit floats; and float16 before Python 3.12, whose memoryview cannot cast to
    "e")."""
    raw = self._data().cast("B")
    if self.dtype.fmt is None or (self.dtype.fmt == "e" and sys.version_info < (3, 12)): return raw
    shape = self._concrete_shape()
    return raw.cast(self.dtype.fmt) if prod(shape) == 0 else raw.cast(self.dtype.fmt, shape)

  def assign(self, x: Tensor | Any) -> Tensor:
    """Write x into this tensor's storage (or into the view of it that this tensor is). Lazy, like every op."""
    from tinycore.tensor_assign import assign_tensor
    from tinycore.tensor_indexing import assign_through_index
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if not assign_through_index(self, x): assign_tensor(self, x)
    return self

  def replace(self, x: Tensor) -> Tensor:
    if x.shape != self.shape: raise ValueError(f"replace needs the same shape, got {x.shape} for {self.shape}")
    self.uop = x.uop
    uop_changed(self)
    return self

  # ------------------------------------------------------------------ movement
  def reshape(self, shape, *args) -> Tensor:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,) + args
    if UOp in map(type, (*shape, *self.shape)): return self._symbolic_reshape(shape)  # (a symbolic size is a UOp)
    if shape.count(-1) > 1: raise ShapeError(f"reshape to {shape}: only one dimension can be -1")
    if None in shape: shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
    if -1 in shape:
      known = prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known:
        raise ShapeError(f"cannot reshape a tensor of shape {self.shape} to {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
    if any(not isinstance(s, int) or s < 0 for s in shape): raise ShapeError(f"invalid reshape target {shape}")
    if prod(shape) != self.numel():
      raise ShapeError(f"cannot reshape a tensor of shape {self.shape} ({self.numel()} elements) to {shape}")
    return self._view(self.uop.reshape(shape))

  def _reshape_intermediate(self, *shape) -> Tensor:
    """`reshape` of a tensor only its caller holds (an op's intermediate result): a plain tensor, not a view of it,
    so nothing keeps the intermediate alive (every realize's rebinding walks the graph of each live lazy tensor)."""
    out = self.reshape(*shape)
    out.view_of = None
    return out

  def _symbolic_reshape(self, shape: tuple) -> Tensor:
    """A reshape from or to a symbolic shape: checked with the Variables at their bound values (a -1 is the rest of
    the elements, as an int)."""
    _check_sizes("reshape", shape)
    shape = tuple(self.shape[i] if s is None else simplify_size(s) for i, s in enumerate(shape))
    numel = prod(evaluate_shape(self.shape))
    if sum(1 for s in shape if isinstance(s, int) and s == -1) > 1:
      raise ValueError(f"reshape to {shape}: only one dimension can be -1")
    if any(isinstance(s, int) and s == -1 for s in shape):
      known = prod(_concrete(s) for s in shape if not (isinstance(s, int) and s == -1))
      if known == 0 or numel % known: raise ValueError(f"cannot reshape a tensor of shape {self.shape} to {shape}")
      shape = tuple(numel // known if isinstance(s, int) and s == -1 else s for s in shape)
    if any(_concrete(s) < 0 or isinstance(s, int) and min_int(s) < 0 for s in shape):
      raise ValueError(f"invalid reshape target {shape}")
    if prod(evaluate_shape(shape)) != numel:
      raise ValueError(f"cannot reshape a tensor of shape {self.shape} ({numel} elements) to {shape}")
    # a reshape of a reshape is one reshape: the view then holds no concrete shape a new Variable value would change
    source = self.uop.src[0] if self.uop.op is Ops.RESHAPE else self.uop
    return self._view(source.reshape(shape))

  def view(self, *shape) -> Tensor: return self.reshape(*shape)

  def expand(self, shape, *args) -> Tensor:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,) + args
    if len(shape) < self.ndim: raise ShapeError(f"cannot expand shape {self.shape} to {shape}: fewer dims")
    base = (1,) * (len(shape) - self.ndim) + self.shape
    new_shape = tuple(b if s == -1 else s for s, b in zip(shape, base))
    for s, b in zip(new_shape, base):
      if b != 1 and s != b: raise ShapeError(f"cannot expand shape {self.shape} to {shape}")
    return self._view(self.uop.reshape(base).expand(new_shape))

  def permute(self, order, *args) -> Tensor:
    order = tuple(order) if isinstance(order, (tuple, list)) else (order,) + args
    ndim = self.ndim
    order = tuple([_normalize_axis(o, ndim) for o in order])
    if sorted(order) != list(range(ndim)):
      raise ShapeError(f"permute order {order} is not a permutation of {ndim} dims")
    return self._view(self.uop.permute(order))

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    order = list(range(self.ndim))
    a, b = _normalize_axis(dim0, self.ndim), _normalize_axis(dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor:
    """tinygrad's `.T`: `transpose()`, which swaps dims 0 and 1 (not numpy's reversal of every dim)."""
    return self.transpose()

  def flip(self, axis, *args) -> Tensor:
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,) + args
    normalized = [_normalize_axis(a, self.ndim) for a in axes]
    if len(set(normalized)) != len(normalized): raise ShapeError(f"flip{axes}: a dim can appear only once")
    axes = set(normalized)
    return self._view(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    if len(arg) != self.ndim: raise ShapeError(f"shrink needs {self.ndim} bounds, got {len(arg)}")
    if (bounds := _int_bounds(arg, self.shape)) is not None:  # no Variables: no symbolic checks (slicing's cost)
      if any(not 0 <= b <= e <= s for (b, e), s in zip(bounds, self.shape)):
        raise ShapeError(f"shrink bounds {bounds} out of range for shape {self.shape}")
      return self._view(self.uop.shrink(bounds))
    _check_sizes("shrink", [x for b in arg if b is not None for x in b])
    bounds = tuple((0, s) if b is None else tuple(simplify_size(x) for x in b) for b, s in zip(arg, self.shape))
    for (b, e), s in zip(bounds, self.shape):
      if not 0 <= _concrete(b) <= _concrete(e) <= _concrete(s):
        raise ShapeError(f"shrink bounds {bounds} out of range for shape {self.shape}")
      # a symbolic bound must stay in range for every value of its Variables (a replay may bind another one)
      if min_int(b) < 0 or max_int(e) > max_int(s):
        raise ShapeError(f"shrink bounds {bounds} can leave shape {self.shape} for some Variable values: a Variable's "
                         "range must fit the dim")
    return self._view(self.uop.shrink(bounds))

  def pad(self, padding, mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad with `value` (mode "constant") or by "reflect", "replicate" or "circular"; padding is torch's flat
    (last dim first) or one (before, after) pair (or None) per dim; negative amounts crop."""
    sizes = [x for p in padding if p is not None for x in (p if isinstance(p, (tuple, list)) else [p])]
    _check_sizes("pad", sizes)
    if all(isinstance(p, (int, UOp)) for p in padding):  # torch-style flat padding, last dim first
      if len(padding) % 2: raise ValueError(f"flat padding needs an even length, got {padding}")
      if len(padding) // 2 > self.ndim:
        raise ShapeError(f"flat padding {padding} pads {len(padding) // 2} dims of a {self.ndim}-d tensor")
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2): pairs[self.ndim - 1 - i] = (padding[2 * i], padding[2 * i + 1])
    else:
      if any(p is not None and not (isinstance(p, (tuple, list)) and len(p) == 2) for p in padding):
        raise TypeError(f"padding {padding} mixes forms: give ints (flat, last dim first) or one (before, after) "
                            "pair or None per dim")
      if len(padding) != self.ndim: raise ShapeError(f"padding {padding} does not match {self.ndim} dims")
      pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    if any(isinstance(x, UOp) for x in sizes):
      if mode != "constant": raise NotImplementedError(f"pad mode {mode!r} with Variable sizes is not supported")
      return self._symbolic_pad(tuple(pairs), value)
    if mode != "constant": return self._pad_with_mode(pairs, mode)
    # negative padding shrinks
    shrink = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, self.shape))
    x = self.shrink(shrink) if any(b < 0 or a < 0 for b, a in pairs) else self
    positive = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
    padded = x._view(x.uop.pad(positive))
    # the PAD op fills with +0; -0.0 needs a where, unless the tensor has no -0.0 (an int or bool keeps its dtype)
    is_plus_zero = value == 0 and (math.copysign(1.0, value) > 0 or not dtypes.is_float(self.dtype))
    if is_plus_zero or all(p == (0, 0) for p in positive): return padded
    # -0.0 (cat's pieces): the negation padded with +0, negated back (two sign flips, exact; no mask to build)
    if value == 0: return -(-x)._view((-x).uop.pad(positive))
    inside = Tensor.full(x.shape, True, device=self.device, dtype=dtypes.bool)
    inside = inside._apply(inside.uop.pad(positive))
    return inside.where(padded, value)

  def _symbolic_pad(self, pairs: tuple, value: float) -> Tensor:
    """pad by bound Variables (or expressions of them): every amount must be >= 0 for all their values."""
    pairs = tuple(tuple(simplify_size(x) for x in pair) for pair in pairs)
    if any(min_int(x) < 0 for pair in pairs for x in pair):
      raise ValueError(f"padding {pairs} with Variables must be >= 0 for every value of them")
    padded = self._view(self.uop.pad(pairs))
    if value == 0 and math.copysign(1.0, value) > 0: return padded  # the PAD op fills with +0
    inside = Tensor.full(self.shape, True, device=self.device, dtype=dtypes.bool)
    return inside._apply(inside.uop.pad(pairs)).where(padded, value)

  def __getitem__(self, indices) -> Tensor:
    from tinycore.tensor_indexing import getitem
    return getitem(self, indices)

  def __setitem__(self, indices, value) -> None:
    from tinycore.tensor_indexing import (advanced_setitem, boolean_mask, from_numpy_indices, is_advanced_index,
                                          masked_setitem, scalar_value)
    indices = from_numpy_indices(indices)
    value = scalar_value(self, value)
    if (mask := boolean_mask(indices)) is not None: return masked_setitem(self, mask, value)
    if any(is_advanced_index(i) for i in (indices if isinstance(indices, tuple) else (indices,))):
      value = value if isinstance(value, Tensor) else Tensor(value, device=self.device, dtype=self.dtype)
      return advanced_setitem(self, indices if isinstance(indices, tuple) else (indices,), value)
    self[indices].assign(value if isinstance(value, Tensor) else Tensor(value, device=self.device, dtype=self.dtype))

  def squeeze(self, dim: int | None = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    if not isinstance(dim, int): raise TypeError(f"squeeze takes one dim (an int) or None, as tinygrad, got {dim!r}")
    dim = _normalize_axis(dim, self.ndim)
    return self if self.ndim == 0 or self.shape[dim] != 1 else self.reshape(self.shape[:dim] + self.shape[dim + 1:])

  def unsqueeze(self, dim: int) -> Tensor:
    dim = _normalize_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    start, end = _normalize_axis(start_dim, self.ndim), _normalize_axis(end_dim, self.ndim)
    return self.reshape(self.shape[:start] + (prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

  def unflatten(self, dim: int, sizes: tuple[int, ...]) -> Tensor:
    dim = _normalize_axis(dim, self.ndim)
    return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])

  def repeat(self, repeats, *args) -> Tensor:
    repeats = tuple(repeats) if isinstance(repeats, (tuple, list)) else (repeats,) + args
    if len(repeats) < self.ndim: raise ValueError(f"repeat needs at least {self.ndim} counts, got {repeats}")
    if any(not isinstance(r, int) or r < 0 for r in repeats): raise ValueError(f"repeat counts must be ints >= 0, "
                                                                               f"got {repeats}")
    base = (1,) * (len(repeats) - self.ndim) + self.shape
    interleaved = tuple(x for s in base for x in (1, s))
    expanded = tuple(x for r, s in zip(repeats, base) for x in (r, s))
    return self.reshape(interleaved).expand(expanded).reshape(tuple(r * s for r, s in zip(repeats, base)))

  def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
    tensors = [self, *others]
    _check_tensors("cat", tensors)
    if any(t.ndim == 0 for t in tensors):  # (an IndexError, as tinygrad's: dim 0 does not exist)
      raise IndexError(f"cat of 0-d tensors: they have no dim to join along, use stack ({[t.shape for t in tensors]})")
    dim = _normalize_axis(dim, self.ndim)
    for t in tensors:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != dim):
        raise ShapeError(f"cat needs equal shapes except in dim {dim}, got {[t.shape for t in tensors]}")
    dtype = least_upper_dtype(*[t.dtype for t in tensors])
    total = sum(t.shape[dim] for t in tensors)
    out, offset = None, 0
    for t in tensors:
      padding = [(0, 0)] * self.ndim
      padding[dim] = (offset, total - offset - t.shape[dim])
      offset += t.shape[dim]
      # float pieces pad with -0.0, the exact identity of +: with 0.0 a -0.0 in the data would come out as 0.0
      piece = t.cast(dtype).pad(padding, value=-0.0 if dtypes.is_float(dtype) else 0)
      out = piece if out is None else (out | piece if dtype is dtypes.bool else out + piece)
    return out

  def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
    """Join tensors of one shape along a new dim: `a.stack(b, c)`, `Tensor.stack(a, b)` or `Tensor.stack([a, b])`."""
    if isinstance(self, (list, tuple)):
      if not self: raise ValueError("stack needs at least one tensor")
      if others: raise ArgumentError("stack takes tensors, or one list of them, not a list and more tensors")
      return Tensor.stack(*self, dim=dim)
    if len(others) == 1 and isinstance(others[0], (list, tuple)): others = tuple(others[0])
    tensors = (self, *others)
    _check_tensors("stack", tensors)
    if any(t.shape != self.shape for t in tensors):
      raise ShapeError(f"stack needs tensors of one shape, got {[t.shape for t in tensors]}")
    dim = _normalize_axis(dim, self.ndim + 1)
    return Tensor.cat(*[t.unsqueeze(dim) for t in tensors], dim=dim) if others else self.unsqueeze(dim)

  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    dim = _normalize_axis(dim, self.ndim)
    if isinstance(sizes, int):
      if sizes <= 0 and self.shape[dim]: raise ValueError(f"split size must be > 0, got {sizes}")
      sizes = [min(sizes, self.shape[dim] - i) for i in range(0, max(self.shape[dim], 1), max(sizes, 1))]
    if sum(sizes) != self.shape[dim]: raise ShapeError(f"split sizes {sizes} do not add up to {self.shape[dim]}")
    out, offset = [], 0
    for s in sizes:
      bounds = [None] * self.ndim
      bounds[dim] = (offset, offset + s)
      out.append(self.shrink(bounds))
      offset += s
    return tuple(out)

  def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
    """At most `chunks` pieces of one size along dim (the last may be smaller); an empty dim gives chunks empties."""
    if chunks <= 0: raise ValueError(f"chunk needs chunks > 0, got {chunks}")
    dim = _normalize_axis(dim, self.ndim)
    return list(self.split(math.ceil(self.shape[dim] / chunks) if self.shape[dim] else [0] * chunks, dim))

  # ------------------------------------------------------------------ elementwise
  def _const_like(self, value: Any, dtype: DType | None = None) -> Tensor:
    return Tensor.full(self.shape, value, device=self.device, dtype=dtype or self.dtype)

  def _scalar_dtype(self, value: Any) -> DType:
    """The dtype a Python scalar takes when it meets this tensor (a weak type, as in tinygrad)."""
    if isinstance(value, bool): return self.dtype
    if isinstance(value, int):
      if not dtypes.min(dtypes.int64) <= value <= dtypes.max(dtypes.uint64):
        raise OverflowError(f"Python int {value} does not fit in any integer dtype (int64 or uint64)")
      if dtypes.is_bool(self.dtype): return dtypes.from_py(value)  # a bool tensor takes the int's dtype
      # an int tensor keeps its dtype, and an int it cannot hold raises (numpy 2's rule; tinygrad and torch wrap it)
      if dtypes.is_int(self.dtype) and not dtypes.min(self.dtype) <= value <= dtypes.max(self.dtype):
        raise OverflowError(f"Python int {value} is out of bounds for the tensor's dtype {self.dtype.name} "
                            f"([{dtypes.min(self.dtype)}, {dtypes.max(self.dtype)}]): cast the tensor to a wider dtype")
      return self.dtype
    if isinstance(value, float): return self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
    hint = ": make it a Tensor first (Tensor(array))" if hasattr(value, "__array_interface__") else ""
    raise TypeError(f"unsupported operand type {type(value).__name__} for a Tensor{hint}")

  def _broadcasted(self, other: Tensor | Any, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    x: Tensor = self
    if (const := self._broadcast_scalar(other)) is not None:
      y = Tensor._rebuild(const)
      return (y, x) if reverse else (x, y)
    if _is_numpy_scalar(other): return self._broadcasted(other.item(), reverse, match_dtype)  # np.float32(2)
    if isinstance(other, UOp): y = Tensor(other, self.device, self._scalar_dtype(1))  # a bound Variable
    elif not isinstance(other, Tensor):
      dtype = self._scalar_dtype(other)
      y = Tensor(UOp.const(dtype, other, self.device))
    else: y = other
    if x.device != y.device: raise RuntimeError(f"operands are on different devices: {x.device} and {y.device}")
    if match_dtype and x.dtype is not y.dtype:
      out = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(out), y.cast(out)
    if reverse: x, y = y, x
    shape = broadcast_shape(x.shape, y.shape)
    return x._broadcast_to(shape), y._broadcast_to(shape)

  def _broadcast_scalar(self, value: Any) -> UOp | None:
    """A Python number of this tensor's dtype (`_scalar_dtype`) as a constant broadcast to this tensor's shape, or
    None for anything else (a tensor, a number of another dtype). The common eager case (`x + 1`), built without
    Tensors in between and from a small cache of the broadcast nodes."""
    if type(value) not in (int, float, bool): return None
    uop = self.uop
    shape, device = uop.shape, uop.device
    # keyed by the number's type and bits: 1 == 1.0 == True and 0.0 == -0.0 are different constants
    key = (uop.dtype, device, shape, type(value), value, math.copysign(1.0, value) if type(value) is float else 0)
    if (hit := _broadcast_constants.get(key)) is not None: return hit
    dtype = self._scalar_dtype(value)
    if dtype is not uop.dtype: return None
    const = UOp.const(dtype, value, device).reshape((1,) * len(shape)).expand(shape)
    if len(_broadcast_constants) >= MAX_BROADCAST_CONSTANTS: _broadcast_constants.pop(next(iter(_broadcast_constants)))
    _broadcast_constants[key] = const
    return const

  def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
    return self if self.shape == shape else self._apply(_broadcast_uop(self.uop, shape))

  def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
    if not reverse and (const := self._broadcast_scalar(other)) is not None: return self._apply(self.uop.alu(op, const))
    x, y = self._broadcasted(other, reverse)
    return x._apply(x.uop.alu(op, y.uop))

  def _unary(self, op: Ops) -> Tensor: return self._apply(self.uop.alu(op))
  def _float_unary(self, op: Ops) -> Tensor:
    x = self.cast(least_upper_float(self.dtype)) if not dtypes.is_float(self.dtype) else self
    return x._unary(op)

  def add(self, x, reverse: bool = False) -> Tensor: return self._binary(Ops.ADD, x, reverse)
  def sub(self, x, reverse: bool = False) -> Tensor: return self._binary(Ops.SUB, x, reverse)
  def mul(self, x, reverse: bool = False) -> Tensor: return self._binary(Ops.MUL, x, reverse)

  def div(self, x, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    num, den = self._broadcasted(x, reverse)
    if rounding_mode is None:
      dtype = least_upper_float(num.dtype)
      num, den = num.cast(dtype), den.cast(dtype)
      return num._apply(num.uop.alu(Ops.FDIV, den.uop))
    if rounding_mode == "trunc":
      if dtypes.is_int(num.dtype): return num._apply(num.uop.alu(Ops.IDIV, den.uop))
      return num.div(den).trunc().cast(num.dtype)
    if rounding_mode == "floor":
      if dtypes.is_int(num.dtype): return num._floor_idiv(den)
      return num.div(den).floor().cast(num.dtype)
    raise ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")

  def _floor_idiv(self, den: Tensor) -> Tensor:
    # C truncates; floor differs by one when the signs differ and there is a remainder
    quotient = self._apply(self.uop.alu(Ops.IDIV, den.uop))
    if dtypes.is_unsigned(self.dtype): return quotient
    remainder = self._apply(self.uop.alu(Ops.MOD, den.uop))
    adjust = (remainder != 0) & ((remainder < 0) != (den < 0))
    return adjust.where(quotient - 1, quotient)

  def idiv(self, x, reverse: bool = False) -> Tensor:
    num, den = self._broadcasted(x, reverse)
    if not dtypes.is_int(num.dtype): raise TypeError(f"idiv needs integer tensors, got {num.dtype}")
    return num._apply(num.uop.alu(Ops.IDIV, den.uop))

  def mod(self, x, reverse: bool = False) -> Tensor:
    num, den = self._broadcasted(x, reverse)
    if dtypes.is_float(num.dtype):
      # numpy's remainder: the sign of the divisor (a zero too: 0.0 % -2 is -0.0); a finite x % inf is x where the
      # signs agree, else inf (x - inf * floor(x / inf) would be NaN)
      out = num - den * (num / den).floor()
      by_inf = den.isinf() & num.isfinite()
      out = by_inf.where(((num == 0) | ((num < 0) == (den < 0))).where(num, den), out)
      return (out == 0).where(out.abs().copysign(den), out)
    remainder = num._apply(num.uop.alu(Ops.MOD, den.uop))
    if dtypes.is_unsigned(num.dtype): return remainder
    # Python's sign convention: the result has the divisor's sign
    adjust = (remainder != 0) & ((remainder < 0) != (den < 0))
    return adjust.where(remainder + den, remainder)

  def __floordiv__(self, x) -> Tensor: return self.div(x, rounding_mode="floor")
  def __rfloordiv__(self, x) -> Tensor: return self.div(x, reverse=True, rounding_mode="floor")

  def neg(self) -> Tensor: return self.logical_not() if self.dtype is dtypes.bool else self._unary(Ops.NEG)
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._binary(Ops.CMPNE, True)
  def exp(self) -> Tensor:
    x = self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))
    # halves scale in float32: x / ln 2 rounded to a half is off by up to 0.3% after the exp2 for |x| near 10
    scaled = x.cast(least_upper_dtype(x.dtype, dtypes.float32)).mul(1 / math.log(2))
    return scaled._unary(Ops.EXP2).cast(x.dtype)
  def exp2(self) -> Tensor: return self._float_unary(Ops.EXP2)
  def log(self) -> Tensor: return self._float_unary(Ops.LOG2).mul(math.log(2))
  def log2(self) -> Tensor: return self._float_unary(Ops.LOG2)
  def sqrt(self) -> Tensor: return self._float_unary(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def sin(self) -> Tensor: return self._float_unary(Ops.SIN)
  def cos(self) -> Tensor:
    x = self.cast(least_upper_float(self.dtype))
    # sin(pi/2 - x), the subtraction in at least float32 (in a half it would lose the low bits of x, as tinygrad)
    return ((math.pi / 2) - x.cast(least_upper_dtype(x.dtype, dtypes.float32))).sin().cast(x.dtype)
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def reciprocal(self) -> Tensor: return self._float_unary(Ops.RECIPROCAL)
  def trunc(self) -> Tensor: return self if not dtypes.is_float(self.dtype) else self._unary(Ops.TRUNC)
  def floor(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self) -> Tensor:
    """Round half to even, like numpy."""
    if not dtypes.is_float(self.dtype): return self
    nearest = (self + 0.5).floor()
    is_half = (nearest - self) == 0.5
    odd = (nearest - (nearest * 0.5).floor() * 2) != 0
    return (is_half & odd).where(nearest - 1, nearest)
  def sign(self) -> Tensor:
    signs = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return self.isnan().where(self, signs) if dtypes.is_float(self.dtype) else signs
  def abs(self) -> Tensor:
    if dtypes.is_unsigned(self.dtype) or self.dtype is dtypes.bool: return self
    if not dtypes.is_float(self.dtype): return (self < 0).where(-self, self)
    # 0.0 - x: both zeros become 0.0, like numpy; a zero (or NaN) passes no gradient, as torch's and tinygrad's abs
    return (self > 0).where(self, (self < 0).where(0.0 - self, 0.0 - self.detach()))
  def relu(self) -> Tensor: return (self > 0)._or_nan(self).where(self, 0)  # NaN stays NaN, -0.0 becomes 0.0
  def sigmoid(self) -> Tensor:
    """1 / (1 + exp(-x)), from exp(-|x|) only (<= 1): no overflow, so no NaN in the gradient where it saturates."""
    x = self._as_float()  # -x of a bool is its logical not, of an unsigned int a wrap
    non_negative = x >= 0
    small = non_negative.where(-x, x).exp()  # exp(-|x|), its gradient the right sign on each side of 0
    positive = (1 + small).reciprocal()
    return non_negative.where(positive, small * positive)
  def tanh(self) -> Tensor: return 2.0 * (2.0 * self).sigmoid() - 1.0
  def square(self) -> Tensor: return self * self
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor: return (self < 0).where(self * neg_slope, self)
  def silu(self) -> Tensor: return self * self.sigmoid()
  def swish(self) -> Tensor: return self.silu()
  def elu(self, alpha: float = 1.0) -> Tensor: return (self > 0).where(self, alpha * (self.exp() - 1))
  def isnan(self) -> Tensor: return self != self
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    return ((self == math.inf) & detect_positive) | ((self == -math.inf) & detect_negative)
  def lerp(self, end: Tensor, weight: Tensor | float) -> Tensor: return self + (end - self) * weight

  def _or_nan(self, x: Tensor) -> Tensor:
    """This bool tensor, or-ed with "x is NaN" when x is a float tensor."""
    return self | x.isnan() if dtypes.is_float(x.dtype) else self
  # NaN in either operand gives NaN, and of two equal values (0.0 and -0.0) the second, as numpy's do on x86
  # floats use the MAX op, whose gradient splits a tie in halves (as tinygrad's); min(a, b) is -max(-a, -b)
  def _int_in_range(self, value: Any) -> Any:
    """A Python int meeting an int tensor in maximum/minimum, clamped into the tensor's dtype: beyond it, it would
    wrap (u8.maximum(-1) is u8, not 255); the clamped bound gives the same result. Anything else as is."""
    if type(value) is not int or not dtypes.is_int(self.dtype): return value
    return min(max(value, dtypes.min(self.dtype)), dtypes.max(self.dtype))

  def _compare(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
    """A comparison; a Python int outside an int tensor's dtype compares by its value (int8 < 1000 is all True, as
    in tinygrad), not wrapped into the dtype: every element is below it (or above it), so the answer is a constant."""
    if type(other) is int and dtypes.is_int(self.dtype) and self._int_in_range(other) != other:
      above = other > dtypes.max(self.dtype)
      truth = {Ops.CMPLT: above != reverse, Ops.CMPEQ: False, Ops.CMPNE: True}[op]
      return self._const_like(truth, dtypes.bool)
    return self._binary(op, other, reverse)

  def maximum(self, x) -> Tensor:
    a, b = self._broadcasted(self._int_in_range(x))
    if dtypes.is_float(a.dtype): return a._apply(a.uop.alu(Ops.MAX, b.uop))
    return (a > b)._or_nan(a).where(a, b)
  def minimum(self, x) -> Tensor:
    a, b = self._broadcasted(self._int_in_range(x))
    if dtypes.is_float(a.dtype): return -((-a).maximum(-b))
    return (a < b)._or_nan(a).where(a, b)
  def clip(self, min_=None, max_=None) -> Tensor:
    if min_ is None and max_ is None: raise ArgumentError("clip needs at least one of min_ or max_")
    if dtypes.is_float(self.dtype):
      # a value on a bound keeps its whole gradient, as torch's and tinygrad's clamp (maximum would split the tie)
      low = self if min_ is None else (self < min_).where(min_, self)
      return low if max_ is None else (low > max_).where(max_, low)
    out = self
    if min_ is not None: out = out.maximum(min_)
    if max_ is not None: out = out.minimum(max_)
    return out
  clamp = clip

  def pow(self, x, reverse: bool = False) -> Tensor:
    base, exponent = self._broadcasted(x, reverse)
    if not reverse and not dtypes.is_float(base.dtype) and isinstance(x, int) and x < 0:
      raise ArgumentError(f"{base.dtype} tensor ** {x}: negative powers of integers need a float base (cast first)")
    if not dtypes.is_float(base.dtype):
      # integer powers: repeated squaring on the device would need loops; compute in float64 and round
      base64 = base.cast(dtypes.float64)
      result = base64._apply(base64.uop.alu(Ops.POW, exponent.cast(dtypes.float64).uop))
      return result.round().cast(base.dtype)
    return base._apply(base.uop.alu(Ops.POW, exponent.uop))

  def where(self, x, y) -> Tensor:
    cond = self.cast(dtypes.bool)
    if isinstance(x, Tensor): ref = x
    elif isinstance(y, Tensor): ref = y
    else: ref = None
    if ref is None:
      dtype = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
      x, y = Tensor(UOp.const(dtype, x, self.device)), Tensor(UOp.const(dtype, y, self.device))
    else:
      x = x if isinstance(x, Tensor) else Tensor(UOp.const(ref._scalar_dtype(x), x, self.device))
      y = y if isinstance(y, Tensor) else Tensor(UOp.const(ref._scalar_dtype(y), y, self.device))
    dtype = least_upper_dtype(x.dtype, y.dtype)
    x, y = x.cast(dtype), y.cast(dtype)
    shape = broadcast_shape(cond.shape, x.shape, y.shape)
    cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
    return x._apply(UOp(Ops.WHERE, dtype, (cond.uop, x.uop, y.uop)))

  def cast(self, dtype: DType | str) -> Tensor:
    dtype = to_dtype(dtype)
    return self if self.dtype is dtype else self._apply(self.uop.cast(dtype))

  def bitcast(self, dtype: DType | str) -> Tensor:
    dtype = to_dtype(dtype)
    if dtype.itemsize != self.dtype.itemsize:
      if not self.shape or (self.shape[-1] * self.dtype.itemsize) % dtype.itemsize:
        raise ShapeError(f"cannot bitcast shape {self.shape} of {self.dtype} to {dtype}: "
                         "the last dim's bytes don't divide")
    return self if self.dtype is dtype else self._view(self.uop.bitcast(dtype))

  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def short(self) -> Tensor: return self.cast(dtypes.int16)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)

  # --- bitwise
  def _check_bitwise(self, name: str, x: Any = None) -> None:
    if dtypes.is_float(self.dtype): raise DTypeError(f"{name} needs integer or bool tensors, got {self.dtype}")
    if isinstance(x, float) or (isinstance(x, Tensor) and dtypes.is_float(x.dtype)):
      raise DTypeError(f"{name} needs an integer or bool operand, got {x.dtype if isinstance(x, Tensor) else x!r}")
  def _bit_pattern(self, x: Any) -> Any:
    """A Python int operand of a bitwise op on a signed int tensor, read as a bit pattern of the dtype's width when
    it is one (`int32 | 0xFFFFFFFF` sets every bit: -1, as in tinygrad); any other value is left to the usual rule."""
    if type(x) is int and dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype):
      bits = 8 * self.dtype.itemsize
      if dtypes.max(self.dtype) < x < 1 << bits: return x - (1 << bits)
    return x
  def bitwise_and(self, x, reverse: bool = False) -> Tensor:
    self._check_bitwise("&", x)
    return self._binary(Ops.AND, self._bit_pattern(x), reverse)
  def bitwise_or(self, x, reverse: bool = False) -> Tensor:
    self._check_bitwise("|", x)
    return self._binary(Ops.OR, self._bit_pattern(x), reverse)
  def bitwise_xor(self, x, reverse: bool = False) -> Tensor:
    self._check_bitwise("^", x)
    return self._binary(Ops.XOR, self._bit_pattern(x), reverse)
  def bitwise_not(self) -> Tensor:
    self._check_bitwise("~")
    if self.dtype is dtypes.bool: return self.logical_not()
    return self.bitwise_xor(-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))
  def _check_shift(self, name: str, x) -> None:
    """Shifts need ints: a bool shifted by a bool has no int dtype to shift in (tinygrad raises too)."""
    self._check_bitwise(name, x)
    if self.dtype is dtypes.bool and (type(x) is bool or (isinstance(x, Tensor) and x.dtype is dtypes.bool)):
      raise TypeError(f"{name} needs integer tensors, got bool and bool (cast to an int dtype first)")
  def lshift(self, x, reverse: bool = False) -> Tensor:
    self._check_shift("<<", x)
    return self._binary(Ops.SHL, x, reverse)
  def rshift(self, x, reverse: bool = False) -> Tensor:
    self._check_shift(">>", x)
    return self._binary(Ops.SHR, x, reverse)

  # --- operators
  def __neg__(self) -> Tensor: return self.neg()
  def __add__(self, x) -> Tensor: return self.add(x)
  def __radd__(self, x) -> Tensor: return self.add(x, True)
  def __sub__(self, x) -> Tensor: return self.sub(x)
  def __rsub__(self, x) -> Tensor: return self.sub(x, True)
  def __mul__(self, x) -> Tensor: return self.mul(x)
  def __rmul__(self, x) -> Tensor: return self.mul(x, True)
  def __truediv__(self, x) -> Tensor: return self.div(x)
  def __rtruediv__(self, x) -> Tensor: return self.div(x, True)
  def __mod__(self, x) -> Tensor: return self.mod(x)
  def __rmod__(self, x) -> Tensor: return self.mod(x, True)
  def __pow__(self, x) -> Tensor: return self.pow(x)
  def __rpow__(self, x) -> Tensor: return self.pow(x, True)
  def __matmul__(self, x) -> Tensor: return self.matmul(x)
  def __rmatmul__(self, x) -> Tensor: return Tensor(x).matmul(self) if not isinstance(x, Tensor) else x.matmul(self)
  def __and__(self, x) -> Tensor: return self.bitwise_and(x)
  def __rand__(self, x) -> Tensor: return self.bitwise_and(x, True)
  def __or__(self, x) -> Tensor: return self.bitwise_or(x)
  def __ror__(self, x) -> Tensor: return self.bitwise_or(x, True)
  def __xor__(self, x) -> Tensor: return self.bitwise_xor(x)
  def __rxor__(self, x) -> Tensor: return self.bitwise_xor(x, True)
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __lshift__(self, x) -> Tensor: return self.lshift(x)
  def __rshift__(self, x) -> Tensor: return self.rshift(x)
  def __rlshift__(self, x) -> Tensor: return self.lshift(x, True)
  def __rrshift__(self, x) -> Tensor: return self.rshift(x, True)
  def __lt__(self, x) -> Tensor: return self._compare(Ops.CMPLT, x)
  def __gt__(self, x) -> Tensor: return self._compare(Ops.CMPLT, x, True)
  # less-or-equal is "less or equal", not "not greater": NaN compares false, as numpy and torch
  def __le__(self, x) -> Tensor: return self._compare(Ops.CMPLT, x) | self._compare(Ops.CMPEQ, x)
  def __ge__(self, x) -> Tensor: return self._compare(Ops.CMPLT, x, True) | self._compare(Ops.CMPEQ, x)
  def __eq__(self, x) -> Tensor: return self._compare(Ops.CMPEQ, x)  # type: ignore[override]
  def __ne__(self, x) -> Tensor: return self._compare(Ops.CMPNE, x)  # type: ignore[override]
  def __iadd__(self, x) -> Tensor: return self.assign(self + x)
  def __isub__(self, x) -> Tensor: return self.assign(self - x)
  def __imul__(self, x) -> Tensor: return self.assign(self * x)
  def __itruediv__(self, x) -> Tensor: return self.assign(self / x)
  # the other in-place operators write the result into this tensor's storage too (assign), as tinygrad does;
  # `%=` rebinds the name to a new tensor, as in tinygrad (which has no __imod__)
  def __ifloordiv__(self, x) -> Tensor: return self.assign(self // x)
  def __ipow__(self, x) -> Tensor: return self.assign(self ** x)
  def __imatmul__(self, x) -> Tensor: return self.assign(self @ x)
  def __iand__(self, x) -> Tensor: return self.assign(self & x)
  def __ior__(self, x) -> Tensor: return self.assign(self | x)
  def __ixor__(self, x) -> Tensor: return self.assign(self ^ x)
  def __ilshift__(self, x) -> Tensor: return self.assign(self << x)
  def __irshift__(self, x) -> Tensor: return self.assign(self >> x)

  # ------------------------------------------------------------------ reductions
  def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if self.ndim == 0:  # a 0-d tensor takes axis 0 or -1 (as tinygrad and torch) and reduces over nothing
      for a in axes: _normalize_axis(a, 0)
      return ()
    return tuple(sorted({_normalize_axis(a, self.ndim) for a in axes}))

  def _reduce(self, op: Ops, axis=None, keepdim: bool = False) -> Tensor:
    # (the scheduler splits a big reduction into per-core partials: tinycore/schedule/split_reduce.py)
    axes = self._axes(axis)
    if not axes or not self.ndim: return self if keepdim else self.reshape(self.shape)
    reduced = UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes))
    if keepdim: return self._apply(reduced)
    # the reshape that drops the reduced axes is no view of anything a caller can reach: a plain new tensor
    return self._apply(reduced.reshape(tuple([s for i, s in enumerate(self.shape) if i not in axes])))

  @staticmethod
  def _sum_dtype(dtype: DType) -> DType:
    if dtypes.is_unsigned(dtype): return least_upper_dtype(dtype, dtypes.uint32)
    if dtypes.is_int(dtype) or dtype is dtypes.bool: return least_upper_dtype(dtype, dtypes.int32)
    return least_upper_dtype(dtype, dtypes.float32)

  def sum(self, axis=None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else Tensor._sum_dtype(self.dtype)
    out = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
    return out.cast(self.dtype) if dtype is None and self.dtype in NARROW_FLOATS else out

  def prod(self, axis=None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """The product over `axis`, in this tensor's dtype unless `dtype` is given (tinygrad does not widen ints; the
    product of bools is their logical and)."""
    acc = to_dtype(dtype) if dtype is not None else self.dtype
    if acc is dtypes.bool: return self.all(axis, keepdim)
    return self.cast(acc)._reduce(Ops.MUL, axis, keepdim)

  def max(self, axis=None, keepdim: bool = False) -> Tensor:
    self._check_nonempty_reduce(axis, "max")
    return self._reduce(Ops.MAX, axis, keepdim)

  def _inverse(self) -> Tensor:
    if dtypes.is_float(self.dtype) or (dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype)): return -self
    return self.logical_not() if self.dtype is dtypes.bool else ~self

  def min(self, axis=None, keepdim: bool = False) -> Tensor:
    self._check_nonempty_reduce(axis, "min")
    if dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype):
      return ~((~self).max(axis, keepdim))  # -x overflows for the minimum value, ~x does not
    return self._inverse().max(axis, keepdim)._inverse()

  def _check_nonempty_reduce(self, axis, name: str) -> None:
    if any(self.shape[a] == 0 for a in self._axes(axis)):
      raise ValueError(f"{name} of an empty axis (shape {self.shape}) has no identity")

  def any(self, axis=None, keepdim: bool = False) -> Tensor:
    return self.bool().max(axis, keepdim) if self.numel() else self.bool().sum(axis, keepdim) > 0
  def all(self, axis=None, keepdim: bool = False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()

  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    out_dtype = self.dtype if dtypes.is_float(self.dtype) else dtypes.float32
    count = prod(self.shape[a] for a in self._axes(axis))
    total = self.cast(Tensor._sum_dtype(self.dtype) if not dtypes.is_float(self.dtype) else
                      least_upper_dtype(self.dtype, dtypes.float32)).sum(axis, keepdim)
    return total.div(count if count else math.nan).cast(out_dtype) if count else total.cast(out_dtype) * math.nan

  def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    squares = (self - self.mean(axis, keepdim=True)).square()
    count = prod(self.shape[a] for a in self._axes(axis))
    return squares.sum(axis, keepdim).div(count - correction if isinstance(count, UOp) else max(0, count - correction))

  def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    return self.var(axis, keepdim, correction).sqrt()

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum (over the flattened tensor when axis is None)."""
    if axis is None: return self.flatten().argmax(0)
    axis = _normalize_axis(axis, self.ndim)
    self._check_nonempty_reduce(axis, "argmax")
    n = self.shape[axis]
    is_max = (self == self.max(axis, keepdim=True))._or_nan(self)  # the first NaN, when there is one, like numpy
    # int32 positions (tinygrad's dtype) while they fit; past int32's range int64 (numpy's and torch's)
    index_dtype = dtypes.int64 if isinstance(n, int) and n > dtypes.max(dtypes.int32) else dtypes.int32
    countdown = Tensor.arange(n, 0, -1, device=self.device, dtype=index_dtype)
    countdown = countdown.reshape((n,) + (1,) * (self.ndim - axis - 1))
    return (n - (is_max * countdown).max(axis, keepdim)).cast(index_dtype)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first minimum. Ints flip their order with ~x, which (unlike -x) has no overflowing value."""
    return (~self if dtypes.is_int(self.dtype) else self._inverse()).argmax(axis, keepdim)

  def _shift_for_exp(self, axis) -> Tensor:
    """The max over axis (keepdim), by which exp-sums shift their inputs; 0 where that axis is empty (the sum of no
    exps is 0 whatever the shift) or the max is infinite (-inf - -inf would be NaN)."""
    if any(self.shape[a] == 0 for a in self._axes(axis)): return self.sum(axis, keepdim=True)
    peak = self.max(axis, keepdim=True).detach()  # (the shift cancels: no gradient, not one that sums to ~0)
    return peak.isinf().where(0, peak)

  def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over axis, shifted by the max (ints and bools in float; -inf over an empty axis)."""
    x = self._as_float()
    m = x._shift_for_exp(axis)
    return (x - m).exp().sum(axis, keepdim=True).log().add(m).reshape(x.sum(axis, keepdim).shape)

  def _softmax_input(self, dtype: DType | str | None) -> Tensor:
    return self.cast(dtype) if dtype is not None else self._as_float()

  def softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) over `axis`, computed in `dtype` when given (ints and bools in float)."""
    x = self._softmax_input(dtype)
    shifted = x - x.max(axis, keepdim=True).detach() if x.numel() else x  # (the shift cancels: no gradient of its own)
    e = shifted.exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """x - logsumexp(x) over `axis`, computed in `dtype` when given (ints and bools in float)."""
    x = self._softmax_input(dtype)
    shifted = x - x.max(axis, keepdim=True).detach() if x.numel() else x
    return shifted - shifted.exp().sum(axis, keepdim=True).log()

  # ------------------------------------------------------------------ linear algebra
  def dot(self, w: Tensor, dtype: DType | str | None = None) -> Tensor:
    """Matrix product (numpy's matmul broadcasting); `dtype`: the accumulation and result dtype."""
    x_shape, w_shape = self.shape, w.shape
    if not x_shape or not w_shape:
      raise ShapeError(f"dot needs at least 1-d tensors, got {x_shape} and {w_shape}")
    k_self, k_w = x_shape[-1], w_shape[-min(len(w_shape), 2)]
    if k_self != k_w: raise ShapeError(f"matmul shape mismatch: {x_shape} @ {w_shape} ({k_self} != {k_w})")
    x = self
    common = least_upper_dtype(self.dtype, w.dtype)
    acc = to_dtype(dtype) if dtype is not None else Tensor._sum_dtype(common)
    if dtypes.is_float(acc) and dtypes.is_float(common) and acc.itemsize > common.itemsize:
      x, w = x.cast(acc), w.cast(acc)  # halves multiply in the accumulation dtype: exact products, one rounding
    if len(w_shape) == 1:
      out = (x * w).sum(-1, dtype=dtype)
    elif UOp not in map(type, (*x_shape, *w_shape)):  # concrete sizes (a symbolic one is a UOp)
      out = x._matmul_product(w).sum(-1, dtype=dtype)
    else:  # symbolic sizes: the Tensor reshape folds reshapes of reshapes (see `_symbolic_reshape`)
      # x (..., n, k) -> (..., n, 1, k); w (..., k, m) -> (..., 1, m, k)
      xe = x.reshape(x.shape[:-1] + (1, k_self))
      we = w.transpose(-1, -2).reshape(w.shape[:-2] + (1,) + (w.shape[-1], k_w)) if x.ndim > 1 else w.transpose(-1, -2)
      out = (xe * we).sum(-1, dtype=dtype)
    return out.cast(common if dtype is None else to_dtype(dtype))

  def _matmul_product(self, w: Tensor) -> Tensor:
    """The elementwise product whose sum over the last axis is `self @ w` (w at least 2-d, concrete shapes):
    x (..., n, k) as (..., n, 1, k) times w (..., k, m) as (..., 1, m, k), broadcast. Built on the UOps directly:
    the same graph as the Tensor ops would build, without their intermediate Tensors and checks (a matmul's fixed
    cost is mostly graph building)."""
    if self.device != w.device: raise RuntimeError(f"operands are on different devices: {self.device} and {w.device}")
    x_shape, w_shape = self.shape, w.shape
    x_uop = self.uop.reshape(x_shape[:-1] + (1, x_shape[-1]))
    w_rank = len(w_shape)
    w_uop = w.uop.permute((*range(w_rank - 2), w_rank - 1, w_rank - 2))
    if len(x_shape) > 1: w_uop = w_uop.reshape(w_shape[:-2] + (1, w_shape[-1], w_shape[-2]))
    if self.dtype is not w.dtype:  # (cast after the reshapes, as `*` would)
      common = least_upper_dtype(self.dtype, w.dtype)
      x_uop, w_uop = x_uop.cast(common), w_uop.cast(common)
    shape = broadcast_shape(x_uop.shape, w_uop.shape)
    return self._apply(_broadcast_uop(x_uop, shape).alu(Ops.MUL, _broadcast_uop(w_uop, shape)))

  def matmul(self, x: Tensor, reverse: bool = False, dtype: DType | str | None = None) -> Tensor:
    return x.dot(self, dtype) if reverse else self.dot(x, dtype)

  def sequential(self, layers: list[Callable[[Tensor], Tensor]]) -> Tensor:
    out = self
    for layer in layers: out = layer(out)
    return out

  # ------------------------------------------------------------------ autograd (rules in tinycore/gradient.py)
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
    """The gradients of this tensor with respect to `targets` (lazy tensors, one per target; zeros for a target
    this tensor does not depend on). Without `gradient`, this tensor must be a scalar and its gradient is 1."""
    if gradient is None and self.shape != (): raise RuntimeError(
      f"gradient of a tensor of shape {self.shape}: pass gradient= (a tensor of that shape) or reduce it first")
    if not self.is_floating_point() or not all(t.is_floating_point() for t in targets):
      raise RuntimeError(f"only float tensors have gradients: got {self.dtype} with respect to "
                         f"{[t.dtype.name for t in targets]}")
    if gradient is None: seed = full_like(self.uop, 1.0)
    else:
      if gradient.shape != self.shape:
        raise ValueError(f"gradient= has shape {gradient.shape}, the tensor {self.shape}")
      seed = gradient.cast(self.dtype).uop
    grads = compute_gradient(self._differentiated_graph(), seed, {t.uop for t in targets})
    found = [grads[t.uop] if t.uop in grads else full_like(t.uop, 0.0) for t in targets]
    # gradients read forward values as pure expressions, never as versions of an assigned buffer
    found = list(functional(UOp(Ops.SINK, None, tuple(found))).src) if found else found
    return [Tensor._rebuild(g, False) for g in found]

  def _differentiated_graph(self) -> UOp:
    """The graph gradients flow through: the one kept from before a realize stored parts of it, else the uop."""
    kept = self.forward_graph
    return kept[1] if kept is not None and kept[0] is self.uop else self.uop

  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    """Set requires_grad in place (False: backward() and the optimizers leave this tensor alone)."""
    self.requires_grad = requires_grad
    return self

  # tinygrad's newer name for the same flag: every tensor is a parameter unless marked otherwise
  @property
  def is_param(self) -> bool: return self.requires_grad is not False
  def is_param_(self, is_param: bool = True) -> Tensor:
    """Mark this tensor as a parameter (True) or a buffer the optimizers only realize (False): requires_grad_."""
    return self.requires_grad_(is_param)

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Fill `.grad` of every float tensor this one was computed from (its requires_grad not False), adding to a
    `.grad` that is already there. Lazy: the gradients are computed when realized (e.g. by an optimizer step)."""
    graph_root = self._differentiated_graph()
    if graph_root.base.op is Ops.BUFFER:
      raise RuntimeError("backward of a realized tensor: realizing it (realize, item, numpy) replaced its graph with "
                         "its buffer, so there is nothing to differentiate; call backward() first, realize after")
    graph = graph_root.toposort()
    live = [t for ref in list(all_tensors) if (t := ref()) is not None]
    need = [t for t in live if t.uop in graph and t.requires_grad is not False and t.is_floating_point()]
    if not need: raise RuntimeError("backward: no float tensor in this tensor's graph needs a gradient")
    for t, g in zip(need, self.gradient(*need, gradient=gradient)):
      t.grad = g if t.grad is None else t.grad + g.to(t.grad.device)
    return self

  class train(Context):
    """`with Tensor.train():` (or `Tensor.train(False)`): training mode on (off) for the block, as
    `Context(TRAINING=1)`; BatchNorm and the optimizers read it."""
    def __init__(self, mode: bool = True):
      super().__init__(TRAINING=int(mode))
      self.mode = mode

  class test(train):
    """`with Tensor.test():` training mode off for the block."""
    def __init__(self, mode: bool = True): super().__init__(not mode)

  # ------------------------------------------------------------------ neural network ops (used by tinycore.nn)
  def linear(self, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
    """self @ weight (+ bias); a 1-d weight scales the last axis elementwise. With `dtype`, all three are cast to
    it first."""
    if dtype is not None:
      dtype = to_dtype(dtype)
      return self.cast(dtype).linear(weight.cast(dtype), None if bias is None else bias.cast(dtype))
    out = self * weight if weight.ndim == 1 else self @ weight
    return out if bias is None else out + bias

  def one_hot(self, num_classes: int | None = None) -> Tensor:
    """Integer class indices -> a one-hot int32 tensor with a new last axis of num_classes (left out: the largest
    index plus one, which reads the data; a negative count raises, as tinygrad's)."""
    if not dtypes.is_int(self.dtype): raise DTypeError(f"one_hot needs integer class indices, got {self.dtype}")
    if num_classes is not None and num_classes < 0:
      raise ArgumentError(f"one_hot num_classes must be non-negative, got {num_classes}")
    if num_classes is None: num_classes = int(self.max().item()) + 1 if self.numel() else 0
    classes = Tensor.arange(num_classes, device=self.device, dtype=self.dtype)
    return (self.unsqueeze(-1) == classes).cast(dtypes.int32)

  def dropout(self, p: float = 0.5) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); only in training mode (TRAINING)."""
    if not 0 <= p <= 1: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not TRAINING or p == 0: return self
    keep = Tensor.rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0) * (1 / (1 - p)) if p < 1 else self * 0

  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over axis (biased variance)."""
    centered = self - self.mean(axis, keepdim=True)
    return centered * (centered.square().mean(axis, keepdim=True) + eps).rsqrt()

  def _windows(self, axis: int, kernel: int, stride: int, dilation: int) -> Tensor:
    """Sliding windows along axis: that axis becomes the output positions and a new last axis of size kernel holds
    x[o*stride + k*dilation]. Movement ops only: the elements are repeated kernel times and re-read with a row
    length of n + dilation, so row k starts k*dilation further on."""
    n = self.shape[axis]
    span = dilation * (kernel - 1) + 1
    if n < span: raise ShapeError(f"kernel {kernel} (dilation {dilation}) is larger than the input size {n}")
    x = self.transpose(axis, -1)
    lead = x.shape[:-1]
    x = x.unsqueeze(-2).expand(*lead, kernel, n).reshape(*lead, kernel * n).pad(((0, 0),) * len(lead) + (
      (0, kernel * dilation),)).reshape(*lead, kernel, n + dilation)[..., :n - span + 1:stride]
    return x.transpose(-1, -2).transpose(axis, -2)

  def _pool(self, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
    """(..., *spatial) -> (..., *out_spatial, *kernel): the windows of the last len(kernel) dims."""
    x, spatial = self, self.ndim - len(kernel)
    for i, (k, s, d) in enumerate(zip(kernel, stride, dilation)):
      x = x._windows(spatial + i, k, s, d)
    return x

  def _pad2d(self, padding: int | Sequence[int], value: float = 0.0) -> Tensor:
    """padding: an int, (pad_h, pad_w) or (left, right, top, bottom) for the last two dims."""
    return self._pad_spatial(padding, 2, value)

  def _pad_spatial(self, padding: int | Sequence[int], dims: int, value: float = 0.0) -> Tensor:
    """This tensor with its last `dims` dims padded by `padding` (see _spatial_padding) with `value`."""
    if not any(Tensor._flat(padding)): return self
    return self.pad(((0, 0),) * (self.ndim - dims) + Tensor._spatial_padding(padding, dims), value=value)

  @staticmethod
  def _flat(value: int | Sequence[int]) -> tuple[int, ...]: return (value,) if isinstance(value, int) else tuple(value)

  @staticmethod
  def _spatial_padding(padding: int | Sequence[int], dims: int) -> tuple[tuple[int, int], ...]:
    """(before, after) for each of the last `dims` dims, from an int, one int per dim (both sides), or torch's flat
    order (left, right, top, bottom, ...: the last dim first)."""
    flat = Tensor._flat(padding)
    if len(flat) == 1: flat = flat * dims
    if len(flat) == dims: return tuple((p, p) for p in flat)
    if len(flat) == 2 * dims: return tuple((flat[2 * i], flat[2 * i + 1]) for i in reversed(range(dims)))
    raise ArgumentError(f"padding for {dims} spatial dims must be an int, {dims} or {2 * dims} ints, got {padding}")

  @staticmethod
  def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)

  @staticmethod
  def _per_dim(value: int | Sequence[int], dims: int, name: str) -> tuple[int, ...]:
    """An int repeated for each of `dims` spatial dims, or exactly `dims` ints."""
    values = Tensor._flat(value) * (dims if isinstance(value, int) else 1)
    if len(values) != dims: raise ArgumentError(f"{name} needs an int or {dims} ints, got {value}")
    return values

  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
             dtype: DType | str | None = None) -> Tensor:
    """Convolution (cross-correlation, as torch) over any number of spatial dims, as tinygrad's conv2d:
    self (N, C_in, *spatial), weight (C_out, C_in/groups, *kernel); `dtype`: the accumulation dtype."""
    dims = weight.ndim - 2
    if dims < 1 or self.ndim != weight.ndim:
      raise ShapeError(f"conv2d needs input (N, C, *spatial) and weight (C_out, C_in/groups, *kernel) with the same "
                       f"number of dims, got {self.shape} and {weight.shape}")
    batch, cin, cout, kernel = self.shape[0], self.shape[1], weight.shape[0], weight.shape[2:]
    if cin != weight.shape[1] * groups or cout % groups:
      raise ShapeError(f"conv2d channels: input {cin}, weight {weight.shape} with groups={groups} do not match")
    x = self._pad_spatial(padding, dims)
    windows = x._pool(kernel, Tensor._per_dim(stride, dims, "stride"), Tensor._per_dim(dilation, dims, "dilation"))
    out_spatial = windows.shape[2:2 + dims]
    windows = windows.reshape(batch, groups, 1, cin // groups, *out_spatial, *kernel)
    weight = weight.reshape(1, groups, cout // groups, cin // groups, *(1,) * dims, *kernel)
    reduced = (3,) + tuple(range(4 + dims, 4 + 2 * dims))
    out = (windows * weight).sum(reduced, dtype=dtype)._reshape_intermediate(batch, cout, *out_spatial)
    return out if bias is None else out + bias.reshape(1, cout, *(1,) * dims)

  def _pool_windows(self, kernel: tuple[int, ...], stride: int | Sequence[int] | None, dilation: int | Sequence[int],
                    padding: int | Sequence[int], ceil_mode: bool, value: float) -> tuple[Tensor, list[tuple]]:
    """The windows of the last len(kernel) dims, padded by `padding` with `value`; ceil_mode adds the right padding
    (also `value`) that a last partial window needs, as torch: such a window must start inside the input or its
    left padding. Also returns (before, after, ceil extra) per dim."""
    dims = len(kernel)
    stride = kernel if stride is None else Tensor._per_dim(stride, dims, "stride")
    dilation = Tensor._per_dim(dilation, dims, "dilation")
    sides = []
    for n, k, s, d, (before, after) in zip(self.shape[-dims:], kernel, stride, dilation,
                                           Tensor._spatial_padding(padding, dims)):
      room = n + before + after - (d * (k - 1) + 1)
      if room < 0: raise ShapeError(f"pooling window {kernel} (dilation {dilation}) is larger than the padded input "
                                    f"{self.shape[-dims:]}")
      extra = 0
      if ceil_mode:
        count = -(-room // s) + 1
        if (count - 1) * s >= n + before: count -= 1
        extra = max(0, (count - 1) * s - room)
      sides.append((before, after, extra))
    pads = ((0, 0),) * (self.ndim - dims) + tuple((b, a + e) for b, a, e in sides)
    x = self.pad(pads, value=value) if any(any(p) for p in pads) else self
    return x._pool(kernel, stride, dilation), sides

  def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The max of each window of the last len(kernel_size) dims (an int kernel: two dims; stride defaults to the
    kernel size; padding is the dtype's lowest value, -inf for floats, so ints pool in their own dtype);
    return_indices (2-d only): also where each max is, as an int32 index into the flattened (H*W) plane (the first,
    on ties)."""
    kernel = Tensor._pair(kernel_size)
    windows, sides = self._pool_windows(kernel, stride, dilation, padding, ceil_mode, dtypes.min(self.dtype))
    reduced = tuple(range(-len(kernel), 0))
    if not return_indices: return windows.max(reduced)
    if len(kernel) != 2: raise ArgumentError("max_pool2d(return_indices=True) supports 2-d pooling")
    stride = kernel if stride is None else Tensor._pair(stride)
    return windows.max(reduced), self._pool_argmax(windows, sides, kernel, stride, Tensor._pair(dilation))

  def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """The mean of each window of the last len(kernel_size) dims (stride defaults to the kernel size). The padding
    counts in the divisor when count_include_pad; the extra right padding of ceil_mode never does (as torch)."""
    kernel = Tensor._pair(kernel_size)
    windows, sides = self._pool_windows(kernel, stride, dilation, padding, ceil_mode, 0.0)
    reduced = tuple(range(-len(kernel), 0))
    if not any(e for _, _, e in sides) and (count_include_pad or not any(b or a for b, a, _ in sides)):
      return windows.mean(reduced)
    # the divisor of each window: how many of its places are input (or counted padding)
    ones = Tensor.ones(*self.shape[-len(kernel):], device=self.device, dtype=dtypes.float32)
    if count_include_pad: ones = ones.pad(tuple((b, a) for b, a, _ in sides), value=1.0)
    counted = tuple((0, e) if count_include_pad else (b, a + e) for b, a, e in sides)
    strides = kernel if stride is None else Tensor._per_dim(stride, len(kernel), "stride")
    divisor = ones.pad(counted)._pool(kernel, strides, Tensor._per_dim(dilation, len(kernel), "dilation")).sum(reduced)
    out_dtype = self.dtype if dtypes.is_float(self.dtype) else dtypes.float32
    return (windows.sum(reduced).cast(least_upper_dtype(out_dtype, dtypes.float32)) / divisor).cast(out_dtype)

  # --- losses
  @staticmethod
  def _reduce_loss(loss: Tensor, reduction: str, count: Tensor | int | None = None) -> Tensor:
    if reduction == "none": return loss
    if reduction == "sum": return loss.sum()
    if reduction == "mean": return loss.sum() / (count if count is not None else max(loss.numel(), 1))
    raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")

  def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross-entropy of logits self (..., classes) against integer labels Y (...); labels equal to ignore_index
    count for nothing (and not in the mean). ignore_index=-1 (the default) ignores nothing, as tinygrad: a label -1
    picks no class but its smoothing term and its place in the mean stay."""
    if Y.shape != self.shape[:-1]: raise ValueError(f"labels of shape {Y.shape} for logits of shape {self.shape}")
    log_probs = self.log_softmax(-1)
    classes = self.shape[-1]
    # the label's log-probability selected, not multiplied out by a one-hot (0 * -inf at a masked class is NaN)
    picked = Y.one_hot(classes).cast(dtypes.bool).where(log_probs, 0).sum(-1)
    loss = -picked if not label_smoothing else -(1 - label_smoothing) * picked - label_smoothing * log_probs.mean(-1)
    valid = Y != ignore_index if ignore_index != -1 else Y.ones_like(dtype=dtypes.bool)
    loss = valid.where(loss, 0)
    return Tensor._reduce_loss(loss, reduction, valid.sum().cast(loss.dtype) if reduction == "mean" else None)

  def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
    """-(Y log p + (1 - Y) log(1 - p)) for probabilities self."""
    loss = -(Y * self.log() + (1 - Y) * (1 - self).log())
    return Tensor._reduce_loss(loss, reduction)

  # --- initializers (tinygrad's names)
  @staticmethod
  def glorot_uniform(*shape, **kwargs) -> Tensor:
    shape = Tensor._shape_arg(shape)
    bound = math.sqrt(6 / (shape[0] + prod(shape[1:])))
    return Tensor.uniform(*shape, low=-bound, high=bound, **kwargs)

  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.01, **kwargs) -> Tensor:
    shape = Tensor._shape_arg(shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return Tensor.uniform(*shape, low=-bound, high=bound, **kwargs)
