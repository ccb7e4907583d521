"""Exceptions the core raises for a user's mistake, where one Python class would break somebody's code.

tinygrad raises ValueError for some shape mistakes (a reshape to the wrong size) and RuntimeError for others (a
permutation that isn't one, a dim repeated in flip, a dot of mismatched shapes), and user code catches either.
`ShapeError` is both, so an `except ValueError` and an `except RuntimeError` written against tinygrad still work.
"""


class ShapeError(ValueError, RuntimeError):
  """Shapes or dims that don't fit the op: a reshape to another size, a bad permutation, a repeated flip dim,
  a matmul of mismatched shapes, more paddings than dims."""


class ArgumentError(ValueError, RuntimeError):
  """An argument the op does not accept (a rounding mode or approximation it doesn't know, clip without bounds, a
  negative int power of an int tensor), where tinygrad raises RuntimeError and numpy or torch ValueError."""


class DTypeError(TypeError, RuntimeError):
  """A tensor of a dtype the op does not take (one_hot of floats), where tinygrad raises RuntimeError and numpy or
  torch TypeError."""


class UnknownDTypeError(TypeError, AttributeError):
  """A dtype name that names no dtype (`dtype="flaot32"`), where tinygrad raises AttributeError (it looks the name up
  on `dtypes`) and numpy or torch TypeError."""


class FormulaError(ArgumentError, AssertionError):
  """An einops formula that does not parse or whose names do not match (`rearrange("a b -> a c")`), where tinygrad
  fails an assert (AssertionError) and einops raises its own error."""


class IndexTypeError(IndexError, TypeError):
  """An index of a type that cannot index (a float, a bool, a string), where tinygrad raises IndexError and numpy
  IndexError or TypeError."""


class MaskIndexError(IndexError, NotImplementedError):
  """Reading through a boolean mask index (`t[mask]`): its result's shape would depend on the data, which a lazy
  tensor's shape cannot (tinygrad raises IndexError)."""


class SettingError(ValueError):
  """An environment setting with a value it cannot take (`TINYCORE_CPU_THREADS=abc`): raised where the setting is
  read, naming it, and never taken for a device that is merely unavailable (the default device does not fall back
  to another device past it)."""


class DeviceUnavailable(RuntimeError):
  """Raised by a plugin's `tinycore_open_device` for a device that is present but cannot work here (its driver
  builds no kernel on this CPU): `tinycore devices` lists it "unavailable" with the message (its cause and remedy),
  not "failed", which is for a plugin that broke."""
