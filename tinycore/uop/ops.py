"""The IR: the spec op set (`Ops`) and `UOp`, an immutable, hash-consed node (op, dtype, src, arg).

One IR serves every stage: the lazy tensor graph, the schedule (LINEAR of CALLs) and the kernels inside it.
Identical nodes are the same Python object, so identity comparison and dict lookups are cheap and a graph is
its own cache key.
"""
from __future__ import annotations
import math
import os
import re
import struct
import threading
import weakref
from enum import Enum, auto
from typing import Any, Callable, Iterator, Sequence
from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod  # noqa: F401  (modules import prod from here)


class Ops(Enum):
  # members are singletons: identity hashing (in C) keeps UOp construction fast
  __hash__ = object.__hash__
  # --- graph structure
  SINK = auto()        # groups its sources; a kernel's body is a SINK of STOREs
  LINEAR = auto()      # an ordered list of CALLs: the schedule
  CALL = auto()        # src[0] is the callee (SINK kernel or COPY), src[1:] the buffers, destination first
  PROGRAM = auto()     # arg: a compiled, runnable batch of calls (HCQ2 command buffers); a CALL's callee
  NOOP = auto()

  # --- storage and identity
  DEVICE = auto()      # arg: device name (str)
  UNIQUE = auto()      # arg: a unique int; makes otherwise equal BUFFERs distinct
  BUFFER = auto()      # src: (UNIQUE, DEVICE), arg: number of elements; a named piece of device memory
  BUFFER_VIEW = auto() # src: (BUFFER,), arg: (elements, byte offset); a contiguous part of a buffer, any dtype
  PARAM = auto()       # arg: slot number; a buffer argument of a kernel
  DEFINE_VAR = auto()  # arg: (name, min, max); a symbolic integer
  BIND = auto()        # src: (DEFINE_VAR, CONST); a variable with its value

  # --- movement (tensor level; arg is the new shape or per-dim parameters)
  RESHAPE = auto()
  PERMUTE = auto()
  EXPAND = auto()
  PAD = auto()
  SHRINK = auto()
  FLIP = auto()

  # --- tensor-level ops
  CONST = auto()        # src: (DEVICE,) at tensor level, () in kernels; arg: the value
  ARANGE = auto()       # src: (DEVICE,), arg: n; the values 0..n-1 (index dtype cast by the frontend)
  REDUCE_AXIS = auto()  # arg: (Ops.ADD | Ops.MAX | Ops.MUL, axes); reduced axes keep size 1
  CONTIGUOUS = auto()   # materialize src into fresh storage
  DETACH = auto()
  COPY = auto()         # a load that changes device: an anonymous store of src into new storage on device arg
  COLLECTIVE = auto()   # a load across processes (arg: a uop.collective.Collective): an anonymous store of the
                        # processes' combined values into new storage on src's device; a CALL's callee like COPY
  STORE = auto()        # src: (target, value); tensor level: target is a view of a buffer; kernel level: an INDEX
  AFTER = auto()        # src: (buffer, *effects); the buffer's value once the effects (STOREs) ran

  # --- multi-device (tensor level; tinycore.schedule.multi lowers them to per-lane graphs)
  MSTACK = auto()       # src: one value per lane (device i); a tuple-device value of the lanes' shape
  MSELECT = auto()      # src: (tuple-device value,), arg: lane i; that lane's value, on device[i]
  UNSHARD = auto()      # src: (MSTACK,), arg: sharded axis or None (replicated); the logical tensor over the lanes
  ALLREDUCE = auto()    # src: (tuple-device value,), arg: Ops.ADD | MUL | MAX; every lane gets the lanes combined

  # --- kernel-level ops
  RANGE = auto()        # src: (CONST size,), arg: (id, kind): a loop variable in [0, size)
  REDUCE = auto()       # src: (value, *ranges), arg: the combining ALU op; value folded over the ranges
  INDEX = auto()        # src: (PARAM, offset) or (PARAM, offset, gate): an element address
  LOAD = auto()         # src: (INDEX,); the value at an address (0 when the INDEX gate is false)

  # --- ALU
  CAST = auto()
  BITCAST = auto()
  EXP2 = auto()
  LOG2 = auto()
  SIN = auto()
  SQRT = auto()
  RECIPROCAL = auto()
  NEG = auto()
  TRUNC = auto()
  ADD = auto()
  SUB = auto()
  MUL = auto()
  FDIV = auto()
  IDIV = auto()   # integer division truncating toward zero (as in C); the frontend builds floor division from it
  MOD = auto()    # remainder with the sign of the dividend (as in C)
  MAX = auto()
  CMPLT = auto()
  CMPNE = auto()
  CMPEQ = auto()
  AND = auto()
  OR = auto()
  XOR = auto()
  SHL = auto()
  SHR = auto()
  POW = auto()
  WHERE = auto()
  MULACC = auto()


class GroupOp:
  Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
  Binary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                      Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.POW})
  Ternary = frozenset({Ops.WHERE, Ops.MULACC})
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
  Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX, Ops.XOR})


# the value each reduction starts from
def identity_element(op: Ops, dtype: DType) -> Any:
  if op is Ops.ADD: return dtypes.as_const(0, dtype)
  if op is Ops.MUL: return dtypes.as_const(1, dtype)
  if op is Ops.MAX: return dtypes.min(dtype)
  raise ValueError(f"{op} is not a reduction op")


class _UOpCache(type):
  """Hash-consing: constructing a UOp equal to a live one returns that one. Thread-safe: a miss registers the new
  node under a lock (two threads building the same node get one), and a dead node's entry is dropped only if it is
  still its own."""
  cache: dict[tuple, _CacheEntry] = {}
  lock = threading.RLock()  # re-entrant: a weakref callback may run inside the locked section (garbage collection)

  def __call__(cls, op: Ops, dtype: DType | None = None, src: tuple = (), arg: Any = None, tag: Any = None):
    # a float arg is keyed by its bits: -0.0 == 0.0 in Python, but they are different constants
    key = (op, dtype, src, ("float", struct.pack("<d", arg)) if type(arg) is float else arg, tag)
    if (ref := _UOpCache.cache.get(key)) is not None and (live := ref()) is not None: return live
    # the fields are set here rather than by an __init__: one Python call less per new node (graph building's cost)
    node = object.__new__(cls)
    node.op, node.dtype, node.src, node.arg, node.tag = op, dtype, src, arg, tag
    with _UOpCache.lock:
      if (ref := _UOpCache.cache.get(key)) is not None and (live := ref()) is not None: return live
      entry = _UOpCache.cache[key] = _CacheEntry(node, _forget_uop)
      entry.key = key
    return node


class _CacheEntry(weakref.ref):
  """The hash-consing table's reference to a node, carrying its key so the node's death can drop the entry."""
  __slots__ = ("key",)


def _forget_uop(entry: _CacheEntry) -> None:
  with _UOpCache.lock:
    if _UOpCache.cache.get(entry.key) is entry: del _UOpCache.cache[entry.key]


# a forked child has only the forking thread: a lock another thread held at the fork would never be released
os.register_at_fork(after_in_child=lambda: setattr(_UOpCache, "lock", threading.RLock()))


_unique_counter = iter(range(1, 1 << 62))


class cached_property:  # noqa: N801 (named as functools' one)
  """functools.cached_property without its lock (Python 3.11 takes one on every first read): a UOp is immutable, so
  two threads computing one of its properties at once agree. About 0.3 us less per new node's shape or device."""

  def __init__(self, fn: Callable[[Any], Any]):
    self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

  def __get__(self, obj: Any, owner: Any = None) -> Any:
    if obj is None: return self
    value = obj.__dict__[self.name] = self.fn(obj)  # later reads find it in the instance dict
    return value


class UOp(metaclass=_UOpCache):
  __slots__ = ("op", "dtype", "src", "arg", "tag", "__weakref__", "__dict__")

  def __reduce__(self): return UOp, (self.op, self.dtype, self.src, self.arg, self.tag)

  def replace(self, **kwargs) -> UOp:
    fields = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg, "tag": self.tag} | kwargs
    return UOp(fields["op"], fields["dtype"], fields["src"], fields["arg"], fields["tag"])

  def __repr__(self) -> str:
    # a symbolic size (an int expression of Variables) prints as an expression: shapes read `(4, i=3)`
    return (size_repr(self) or pretty(self)) if self.op in _SIZE_REPR_OPS else pretty(self)

  # ------------------------------------------------------------------ graph walking
  def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
    """Every node reachable from self, sources before users (an ordered dict used as a set). `gate(node)` False
    keeps the node but does not walk below it."""
    return toposort_roots((self,), gate)

  def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
    """self with every occurrence of a key of `mapping` replaced by its value (bottom-up)."""
    if not mapping: return self
    done: dict[UOp, UOp] = {}
    get = mapping.get
    for node in self.toposort():
      if (mapped := get(node)) is not None: done[node] = mapped
      elif not node.src: done[node] = node
      else:
        new_src = tuple([done[s] for s in node.src])
        done[node] = node if new_src == node.src else UOp(node.op, node.dtype, new_src, node.arg, node.tag)
    return done[self]

  @cached_property
  def order_key(self) -> tuple:
    """A deterministic order of nodes by structure (a sum's terms are sorted by it, so equal sums build the same
    node). Cached per node: the sources' keys are shared, so a graph that reuses its subexpressions costs its size,
    not the number of its paths (exponential for a chain of selects over the same values)."""
    if self.op is Ops.RANGE: return (0, self.arg)
    return (1, self.op.value, repr(self.arg), tuple(s.order_key for s in self.src))

  # ------------------------------------------------------------------ derived properties (tensor level)
  @cached_property
  def shape(self) -> tuple[int, ...] | None:
    return _infer_shape(self)

  @property
  def size(self) -> int:
    assert self.shape is not None, f"{self.op} has no shape"
    return prod(self.shape)

  @cached_property
  def device(self) -> str | tuple[str, ...] | None:
    try: return self._device_from_sources()
    except RecursionError:
      # a chain of thousands of nodes none of which knows its device yet (one frame per node): the sources'
      # devices first, bottom-up, then this one's
      for node in toposort_roots(self.src, gate=lambda n: "device" not in n.__dict__): node.device  # noqa: B018
      return self._device_from_sources()

  def _device_from_sources(self) -> str | tuple[str, ...] | None:
    if (rule := _DEVICE_RULES.get(self.op)) is not None: return rule(self)  # (a table: see _infer_shape)
    for s in self.src:
      if (d := s.device) is not None: return d
    return None

  @property
  def base(self) -> UOp:
    """Self without movement ops on top."""
    node = self
    while node.op in GroupOp.Movement: node = node.src[0]
    return node

  @property
  def buffer_uop(self) -> UOp | None:
    """The BUFFER this value is a view of (through movement ops and AFTERs), or None."""
    node = self.base
    while node.op is Ops.AFTER: node = node.src[0].base
    return node if node.op is Ops.BUFFER else None

  # ------------------------------------------------------------------ constructors
  @staticmethod
  def const(dtype: DType, value: Any, device: str | None = None) -> UOp:
    """A scalar constant (a tensor-level constant carries its device)."""
    src = (UOp(Ops.DEVICE, None, (), device),) if device is not None else ()
    return UOp(Ops.CONST, dtype, src, dtypes.as_const(value, dtype))

  @staticmethod
  def new_buffer(device: str, size: int, dtype: DType) -> UOp:
    return UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, None, (), next(_unique_counter)), UOp(Ops.DEVICE, None, (), device)),
               size)

  def alu(self, op: Ops, *srcs: UOp, dtype: DType | None = None) -> UOp:
    out_dtype = dtype or (dtypes.bool if op in GroupOp.Comparison else
                          (srcs[-1].dtype if op is Ops.WHERE else self.dtype))
    return UOp(op, out_dtype, (self,) + srcs)

  def cast(self, dtype: DType) -> UOp: return self if self.dtype is dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return UOp(Ops.BITCAST, dtype, (self,))
  def const_like(self, value: Any) -> UOp: return UOp.const(self.dtype, value)

  # movement (shape-level)
  def reshape(self, shape: tuple[int, ...]) -> UOp:
    return self if self.shape == shape else UOp(Ops.RESHAPE, self.dtype, (self,), shape)
  def expand(self, shape: tuple[int, ...]) -> UOp:
    return self if self.shape == shape else UOp(Ops.EXPAND, self.dtype, (self,), shape)
  def permute(self, order: tuple[int, ...]) -> UOp:
    return self if order == tuple(range(len(order))) else UOp(Ops.PERMUTE, self.dtype, (self,), order)
  def pad(self, padding: tuple[tuple[int, int], ...]) -> UOp:
    return self if all(p == (0, 0) for p in padding) else UOp(Ops.PAD, self.dtype, (self,), padding)
  def shrink(self, bounds: tuple[tuple[int, int], ...]) -> UOp:
    return (self if all(b == (0, s) for b, s in zip(bounds, self.shape))
            else UOp(Ops.SHRINK, self.dtype, (self,), bounds))
  def flip(self, axes: tuple[bool, ...]) -> UOp:
    return self if not any(axes) else UOp(Ops.FLIP, self.dtype, (self,), axes)

  # ------------------------------------------------------------------ stores (tensor level)
  def store(self, value: UOp | Any) -> UOp:
    """STORE(self, value): write value into this view of a buffer (a Python number fills the view)."""
    if not isinstance(value, UOp):
      const = UOp.const(self.dtype, value, self.device)
      value = const.reshape((1,) * len(self.shape)).expand(self.shape) if self.shape else const
    if value.shape != self.shape: raise ValueError(f"store of shape {value.shape} into a view of shape {self.shape}")
    return UOp(Ops.STORE, None, (self, value))

  def after(self, *effects: UOp) -> UOp:
    """AFTER(self, *effects): this buffer's value once the effects (STOREs) ran."""
    return UOp(Ops.AFTER, self.dtype, (self, *effects))

  # ------------------------------------------------------------------ variables
  def bind(self, value: int) -> UOp:
    """This Variable (a DEFINE_VAR) bound to `value`: BIND(self, CONST value). The value must lie in its range."""
    if self.op is not Ops.DEFINE_VAR or self.src: raise TypeError(f"only a Variable can be bound, not {self.op}")
    name, lo, hi = self.arg
    if isinstance(value, bool) or not isinstance(value, int):
      raise TypeError(f"Variable {name!r} takes an int, got {type(value).__name__}")
    if not lo <= value <= hi:
      raise ValueError(f"cannot bind Variable {name!r} to {value}: outside its range [{lo}, {hi}]")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, value)))

  def unbind(self) -> tuple[UOp, int]:
    """(the Variable, its value) of a BIND."""
    if self.op is not Ops.BIND: raise TypeError(f"only a bound Variable can be unbound, not {self.op}")
    return self.src[0], self.src[1].arg

  @property
  def expr(self) -> str:
    """A Variable's name."""
    if self.op is Ops.BIND: return self.src[0].expr
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"{self.op} is not a Variable")
    return self.arg[0]

  # ------------------------------------------------------------------ kernel-level helpers (index arithmetic)
  def __add__(self, x): return _binop(Ops.ADD, self, x)
  def __radd__(self, x): return _binop(Ops.ADD, x, self)
  def __sub__(self, x): return _binop(Ops.SUB, self, x)
  def __rsub__(self, x): return _binop(Ops.SUB, x, self)
  def __mul__(self, x): return _binop(Ops.MUL, self, x)
  def __rmul__(self, x): return _binop(Ops.MUL, x, self)
  def __floordiv__(self, x): return _binop(Ops.IDIV, self, x)
  def __mod__(self, x): return _binop(Ops.MOD, self, x)
  def __lt__(self, x): return _binop(Ops.CMPLT, self, x)
  def __gt__(self, x): return _binop(Ops.CMPLT, x, self)
  def __le__(self, x): return _binop(Ops.CMPNE, _binop(Ops.CMPLT, x, self), True)
  def __ge__(self, x): return _binop(Ops.CMPNE, _binop(Ops.CMPLT, self, x), True)
  def __bool__(self) -> bool:
    """A comparison is true or false when the bounds of its operands decide it (`start_pos > 0` for a Variable of
    range [1, 100]); one that depends on a Variable's value raises, where Python would take any object for true."""
    if self.op not in GroupOp.Comparison: return True
    from tinycore.uop.pattern import graph_rewrite
    from tinycore.uop.symbolic import symbolic
    decided = graph_rewrite(self, symbolic)
    if decided.op is Ops.CONST: return bool(decided.arg)
    names = sorted({n.arg[0] for n in self.toposort() if n.op is Ops.DEFINE_VAR})
    raise TypeError(f"a comparison of Variables {names} is true for some of their values and false for others: "
                    "compare a bound Variable's value (v.unbind()[1]) instead")
  def __and__(self, x): return _binop(Ops.AND, self, x)
  def ne(self, x): return _binop(Ops.CMPNE, self, x)
  def where(self, a, b) -> UOp:
    dtype = a.dtype if isinstance(a, UOp) else b.dtype if isinstance(b, UOp) else None
    a, b = _as_uop(a, dtype), _as_uop(b, dtype)
    return UOp(Ops.WHERE, a.dtype, (self, a, b))
  # Python's rich comparisons are identity-based on purpose: UOps are dict keys
  __eq__ = object.__eq__
  __hash__ = object.__hash__

  @cached_property
  def vmin_vmax(self) -> tuple[Any, Any]:
    """Bounds of an integer/bool expression (used by symbolic simplification)."""
    return _bounds(self)
  @property
  def vmin(self): return self.vmin_vmax[0]
  @property
  def vmax(self): return self.vmin_vmax[1]

  @property
  def realized(self) -> Any:
    """The allocated Buffer holding this value (tinygrad's `UOp.realized`): its base's, when the base is a BUFFER the
    device layer attached allocated memory to; None for a lazy value."""
    base = self.base
    buf = base.__dict__.get(BUFFER_ATTRIBUTE) if base.op is Ops.BUFFER else None
    return buf if buf is not None and buf.is_allocated() else None

  @property
  def is_realized(self) -> bool: return self.realized is not None

  @property
  def axis(self) -> int | None:
    """The axis a value on a device tuple is sharded along (None: replicated, or on one device), as tinygrad's
    `UOp.axis`: a sharded tensor's own, else what the scheduler's multi-device lowering makes of the value."""
    if self.op is Ops.UNSHARD: return self.arg
    return _sharding_axis[0](self) if _sharding_axis else None


# the attribute of a BUFFER node its Buffer is attached under (by tinycore.device.buffers)
BUFFER_ATTRIBUTE = "attached_buffer"

# the scheduler installs how a lazy value's sharding axis is found (tinycore.schedule.multi: its lowering decides it)
_sharding_axis: list[Callable[[UOp], int | None]] = []


def install_sharding_axis(lookup: Callable[[UOp], int | None]) -> None:
  """Called once by the multi-device lowering: the sharding axis of any value (`UOp.axis`)."""
  _sharding_axis[:] = [lookup]


def _as_uop(x: Any, dtype: DType | None) -> UOp:
  if isinstance(x, UOp): return x
  if dtype is None:
    dtype = dtypes.bool if isinstance(x, bool) else dtypes.index if isinstance(x, int) else dtypes.float32
  return UOp.const(dtype, x)


def _binop(op: Ops, a: Any, b: Any) -> UOp:
  # anything else (a Tensor) gets its reflected operator: `Variable("i", 1, 9).bind(3) * tensor`
  if not all(isinstance(x, (UOp, bool, int, float)) for x in (a, b)): return NotImplemented
  ref = a if isinstance(a, UOp) else b
  a, b = _as_uop(a, ref.dtype), _as_uop(b, ref.dtype)
  return UOp(op, dtypes.bool if op in GroupOp.Comparison else a.dtype, (a, b))


# ---------------------------------------------------------------------------- shape inference
def _infer_shape(u: UOp) -> tuple[int, ...] | None:
  op = u.op
  if op in GroupOp.ALU:  # first: most new nodes of a graph are elementwise
    for s in u.src:
      if s.shape is not None: return s.shape
    return None
  # a table, not a chain of `op is Ops.X` tests: on Python 3.11 each read of an enum member goes through
  # EnumType.__getattr__'s slow attribute hook (~0.1 us), and every new node of a graph asks for its shape
  rule = _SHAPE_RULES.get(op)
  return rule(u) if rule is not None else None


def _permuted_shape(u: UOp) -> tuple:
  shape = u.src[0].shape
  return tuple([shape[i] for i in u.arg])


def _reduced_shape(u: UOp) -> tuple:
  axes = u.arg[1]
  return tuple([1 if i in axes else s for i, s in enumerate(u.src[0].shape)])


def _bitcast_shape(u: UOp) -> tuple | None:
  shape = u.src[0].shape
  if shape is None or u.dtype.itemsize == u.src[0].dtype.itemsize or not shape: return shape
  return shape[:-1] + (shape[-1] * u.src[0].dtype.itemsize // u.dtype.itemsize,)


def _unsharded_shape(u: UOp) -> tuple | None:
  lane = u.src[0].shape
  if u.arg is None or lane is None: return lane
  return lane[:u.arg] + (lane[u.arg] * len(u.src[0].device),) + lane[u.arg + 1:]


def _source_shape(u: UOp) -> tuple | None: return u.src[0].shape


# op -> the shape of a node with that op (ALU ops take their sources' shape; ops not here have none)
_SHAPE_RULES: dict[Ops, Callable[[UOp], Any]] = {
  Ops.BUFFER: lambda u: (u.arg,),
  Ops.BUFFER_VIEW: lambda u: (u.arg[0],),
  Ops.CONST: lambda u: () if u.src else None,  # a scalar on a device (tensor level)
  Ops.DEFINE_VAR: lambda u: () if u.src else None,
  Ops.BIND: _source_shape,
  Ops.ARANGE: lambda u: (u.arg,),
  Ops.RESHAPE: lambda u: tuple(u.arg),
  Ops.EXPAND: lambda u: tuple(u.arg),
  Ops.PERMUTE: _permuted_shape,
  Ops.PAD: lambda u: tuple(_add_size(_add_size(s, b), a) for s, (b, a) in zip(u.src[0].shape, u.arg)),
  Ops.SHRINK: lambda u: tuple(e if _is_zero(b) else simplify_size(e - b) for b, e in u.arg),
  Ops.FLIP: _source_shape,
  Ops.REDUCE_AXIS: _reduced_shape,
  Ops.BITCAST: _bitcast_shape,
  **{op: _source_shape for op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY, Ops.AFTER, Ops.CAST, Ops.MSTACK, Ops.MSELECT,
                                  Ops.ALLREDUCE)},
  Ops.UNSHARD: _unsharded_shape,
  Ops.COLLECTIVE: lambda u: u.arg.output_shape() if u.src and u.src[0].shape is not None else None,
}


# op -> the device of a node with that op (any other node is on the device of its first source that has one)
_DEVICE_RULES: dict[Ops, Callable[[UOp], Any]] = {
  Ops.DEVICE: lambda u: u.arg,
  Ops.COPY: lambda u: u.arg,
  Ops.BUFFER: lambda u: u.src[1].arg,
  Ops.BUFFER_VIEW: lambda u: u.src[0].device,
  Ops.MSTACK: lambda u: tuple(s.device for s in u.src),
  Ops.MSELECT: lambda u: u.src[0].device[u.arg],
}


def _is_zero(size: Any) -> bool: return not isinstance(size, UOp) and size == 0


def _add_size(a: Any, b: Any) -> Any:
  """a + b for shape entries (ints or symbolic sizes), with no `+ 0` left in a symbolic one."""
  return a if _is_zero(b) else b if _is_zero(a) else simplify_size(a + b)


def _size_terms(u: Any, scale: int, terms: dict[UOp, int]) -> int:
  """Adds the affine terms of size expression u (times scale) to `terms` (atom -> coefficient); returns the
  constant part."""
  if not isinstance(u, UOp): return u * scale
  if u.op is Ops.CONST: return u.arg * scale
  if u.op in (Ops.ADD, Ops.SUB):
    right = _size_terms(u.src[1], -scale if u.op is Ops.SUB else scale, terms)
    return _size_terms(u.src[0], scale, terms) + right
  if u.op is Ops.NEG: return _size_terms(u.src[0], -scale, terms)
  if u.op is Ops.MUL and u.src[1].op is Ops.CONST: return _size_terms(u.src[0], scale * u.src[1].arg, terms)
  if u.op is Ops.MUL and u.src[0].op is Ops.CONST: return _size_terms(u.src[1], scale * u.src[0].arg, terms)
  terms[u] = terms.get(u, 0) + scale
  return 0


def simplify_size(u: Any) -> Any:
  """A symbolic size in a canonical affine form (Variables by name, then the constant), or an int when the Variables
  cancel: the PAD of a SHRINK's gradient, `v + (10 - v)`, is 10 again."""
  if not isinstance(u, UOp) or u.op not in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL): return u
  terms: dict[UOp, int] = {}
  const = _size_terms(u, 1, terms)
  atoms = sorted((a for a, c in terms.items() if c), key=lambda a: a.expr if a.op in (Ops.BIND, Ops.DEFINE_VAR)
                 else "~" + str(id(a)))
  if not atoms: return const
  out: Any = None
  for atom in atoms:
    term = atom if terms[atom] == 1 else atom * terms[atom]
    out = term if out is None else out + term
  return out + const if const else out


# ---------------------------------------------------------------------------- bounds of index expressions
def _bounds(u: UOp) -> tuple[Any, Any]:
  lo, hi = _unwrapped_bounds(u)
  # integer arithmetic wraps: bounds past the dtype's range say nothing about the wrapped value
  if dtypes.is_int(u.dtype) and (lo < dtypes.min(u.dtype) or hi > dtypes.max(u.dtype)):
    return dtypes.min(u.dtype), dtypes.max(u.dtype)
  return lo, hi


def _unwrapped_bounds(u: UOp) -> tuple[Any, Any]:
  if u.dtype is None or u.dtype not in (dtypes.index, dtypes.int32, dtypes.int64, dtypes.bool):
    return (-math.inf, math.inf)
  op = u.op
  if op is Ops.CONST: return (u.arg, u.arg)
  if op is Ops.RANGE: return (0, u.src[0].arg - 1) if u.src[0].op is Ops.CONST else (0, u.src[0].vmax - 1)
  if op is Ops.DEFINE_VAR: return (u.arg[1], u.arg[2])
  if op is Ops.BIND: return u.src[0].vmin_vmax
  if op in GroupOp.Comparison or u.dtype is dtypes.bool: return (False, True) if op is not Ops.CONST else (u.arg, u.arg)
  if len(u.src) >= 1: a0, a1 = u.src[0].vmin_vmax
  if len(u.src) >= 2: b0, b1 = u.src[1].vmin_vmax
  if op is Ops.ADD: return (a0 + b0, a1 + b1)
  if op is Ops.SUB: return (a0 - b1, a1 - b0)
  if op is Ops.NEG: return (-a1, -a0)
  if op is Ops.MUL:
    vals = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
    vals = [0 if isinstance(v, float) and math.isnan(v) else v for v in vals]
    return (min(vals), max(vals))
  if op is Ops.MAX: return (max(a0, b0), max(a1, b1))
  if op is Ops.IDIV and b0 == b1 and isinstance(b0, int) and b0 > 0:
    return (_tdiv(a0, b0), _tdiv(a1, b0))
  if op is Ops.MOD and b0 == b1 and isinstance(b0, int) and b0 > 0:
    if a0 >= 0: return (0, min(a1, b0 - 1)) if a1 < b0 else (0, b0 - 1)
    return (-(b0 - 1), b0 - 1)
  if op is Ops.WHERE:
    c0, c1 = u.src[1].vmin_vmax
    d0, d1 = u.src[2].vmin_vmax
    return (min(c0, d0), max(c1, d1))
  if op is Ops.CAST: return u.src[0].vmin_vmax
  return (-math.inf, math.inf)


def _tdiv(a, b):
  if a in (math.inf, -math.inf): return a
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b >= 0) else -q


# ---------------------------------------------------------------------------- printing
def pretty(u: UOp, limit: int = 60) -> str:
  """A readable listing of the graph under u: one line per node, sources by line number."""
  nodes = list(u.toposort())
  if len(nodes) > limit: nodes = nodes[-limit:]
  index = {n: i for i, n in enumerate(nodes)}
  lines = []
  for i, n in enumerate(nodes):
    srcs = ",".join(f"%{index[s]}" if s in index else "…" for s in n.src)
    arg = "" if n.arg is None else f" {n.arg!r}"
    lines.append(f"%{i} = {n.op.name}{arg} ({srcs}) : {n.dtype}")
  return "\n".join(lines) if len(lines) > 1 else lines[0]


_SIZE_OPERATORS = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%"}
_SIZE_REPR_OPS = frozenset({Ops.BIND, Ops.DEFINE_VAR, Ops.MAX, Ops.NEG, Ops.CAST, *_SIZE_OPERATORS})


def size_repr(u: UOp) -> str | None:
  """A device-less int expression of Variables as text (`i=3`, `(i=3*2)`), or None for anything else."""
  if u.op is Ops.CONST and not u.src: return str(u.arg)
  if u.op is Ops.BIND and not u.src[0].src: return f"{u.src[0].arg[0]}={u.src[1].arg}"
  if u.op is Ops.DEFINE_VAR and not u.src: return u.arg[0]
  if u.op not in _SIZE_REPR_OPS or u.op in (Ops.BIND, Ops.DEFINE_VAR): return None
  parts = [size_repr(s) for s in u.src]
  if any(p is None for p in parts): return None
  if u.op is Ops.CAST: return parts[0]
  if u.op is Ops.NEG: return f"-{parts[0]}"
  if u.op is Ops.MAX: return f"max({parts[0]}, {parts[1]})"
  return f"({parts[0]}{_SIZE_OPERATORS[u.op]}{parts[1]})"


def iter_graph(u: UOp) -> Iterator[UOp]:
  yield from u.toposort()


# names the schedule gives Python scalars' kernel parameters (`schedule.scalars.scalar_placeholder`)
_RESERVED_NAME = re.compile(r"scalar\d+")


def Variable(name: str, min_val: int, max_val: int, dtype: DType | None = None) -> UOp:  # noqa: N802 (tinygrad's name)
  """A symbolic integer named `name` taking values in [min_val, max_val]: `Variable("i", 1, 10).bind(3)` is a
  value for kernels to take as an argument, so every value of it runs the same compiled program. Its dtype is
  int32 when the range fits, else int64."""
  if not isinstance(name, str) or not name.isidentifier() or _RESERVED_NAME.fullmatch(name):
    raise ValueError(f"Variable name must be an identifier other than scalar<N> (reserved), got {name!r}")
  if any(isinstance(v, bool) or not isinstance(v, int) for v in (min_val, max_val)):
    raise TypeError(f"Variable {name!r} bounds must be ints, got {min_val!r} and {max_val!r}")
  if min_val > max_val: raise ValueError(f"Variable {name!r} has an empty range [{min_val}, {max_val}]")
  if dtype is None:
    fits_int32 = dtypes.min(dtypes.int32) <= min_val and max_val <= dtypes.max(dtypes.int32)
    dtype = dtypes.int32 if fits_int32 else dtypes.int64
  if not dtypes.is_int(dtype) or not dtypes.min(dtype) <= min_val <= max_val <= dtypes.max(dtype):
    raise ValueError(f"Variable {name!r}: range [{min_val}, {max_val}] does not fit {dtype}")
  return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_val, max_val))



def conjuncts(cond: UOp) -> list[UOp]:
  """The conditions a boolean AND tree joins (cond itself when it is no AND of bools)."""
  return [c for s in cond.src for c in conjuncts(s)] if cond.op is Ops.AND and cond.dtype is dtypes.bool else [cond]


def substitute_all(roots: Sequence[UOp], mapping: dict[UOp, UOp], reached: set[UOp] | None = None) -> dict[UOp, UOp]:
  """Each root with every occurrence of a key of `mapping` replaced by its value, in one walk over the roots' union
  (one memo for all, so graphs that share nodes cost their union, not their sum); a key is not walked below. The keys
  that occur are added to `reached`, when given."""
  done: dict[UOp, UOp] = {}
  get = mapping.get
  for node in toposort_roots(roots, gate=lambda n: n not in mapping):
    if (mapped := get(node)) is not None:
      done[node] = mapped
      if reached is not None: reached.add(node)
    elif not node.src: done[node] = node
    else:
      new_src = tuple([done[s] for s in node.src])
      done[node] = node if new_src == node.src else UOp(node.op, node.dtype, new_src, node.arg, node.tag)
  return {root: done[root] for root in roots}


def toposort_roots(roots: Sequence[UOp], gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
  """Every node reachable from any of `roots`, sources before users (an ordered dict used as a set); iterative, so
  deep graphs do not hit the recursion limit. `gate(node)` False keeps the node but does not walk below it."""
  order: dict[UOp, None] = {}
  for root in roots:
    if root in order: continue
    if gate is not None and not gate(root):
      order[root] = None
      continue
    # depth first: each entry is a node and the iterator over its sources still to visit; a node is added once
    # every source is (one tuple per node, where pushing each source with a flag took two)
    stack = [(root, iter(root.src))]
    while stack:
      node, sources = stack[-1]
      for s in sources:
        if s in order: continue
        if gate is None or gate(s):
          stack.append((s, iter(s.src)))
          break
        order[s] = None
      else:
        stack.pop()
        order[node] = None
  return order
