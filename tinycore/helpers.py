"""Process-wide settings as in tinygrad: `ContextVar`s read from the environment, changed for a block by `Context`.

    from tinycore.helpers import Context, TRAINING
    with Context(TRAINING=1): ...      # BatchNorm uses batch statistics, optimizers may step
"""
from __future__ import annotations
import contextlib
import os
from typing import Any, ClassVar


def getenv(key: str, default: Any = 0) -> Any:
  """The environment variable `key` converted to the type of `default` (default when unset)."""
  value = os.environ.get(key)
  if value is None: return default
  return type(default)(value) if not isinstance(default, bool) else value not in ("", "0", "false", "False")


class ContextVar:
  """A named setting whose start value comes from the environment; `Context` changes it for a block."""
  registry: ClassVar[dict[str, ContextVar]] = {}

  def __init__(self, key: str, default: Any):
    if key in ContextVar.registry: raise RuntimeError(f"ContextVar {key} already exists")
    ContextVar.registry[key] = self
    self.key, self.value = key, getenv(key, default)

  def __bool__(self) -> bool: return bool(self.value)
  def __eq__(self, other: Any) -> bool: return self.value == other
  def __hash__(self) -> int: return hash(self.key)
  def __int__(self) -> int: return int(self.value)
  def __repr__(self) -> str: return f"{self.key}={self.value!r}"


class Context(contextlib.ContextDecorator):
  """`with Context(TRAINING=1):` sets ContextVars for the block (or the decorated function) and restores them."""

  def __init__(self, **settings: Any):
    unknown = [k for k in settings if k not in ContextVar.registry]
    if unknown: raise KeyError(f"unknown Context settings {unknown}; known: {sorted(ContextVar.registry)}")
    self.settings = settings
    self.saved: list[dict[str, Any]] = []

  def __enter__(self) -> Context:
    self.saved.append({k: ContextVar.registry[k].value for k in self.settings})
    for k, v in self.settings.items(): ContextVar.registry[k].value = v
    return self

  def __exit__(self, *exc: Any) -> None:
    for k, v in self.saved.pop().items(): ContextVar.registry[k].value = v


# training mode: BatchNorm normalizes with batch statistics (and updates its running ones), dropout drops
TRAINING = ContextVar("TRAINING", 0)
# multi-device allreduce: RING>=2 (ALL2ALL>=2) forces a ring (all-to-all) allreduce, >=1 allows it on more than two
# devices past 256k elements; ALLREDUCE_CAST keeps float16/bfloat16 data in that dtype while it is copied
RING = ContextVar("RING", 1)
ALL2ALL = ContextVar("ALL2ALL", 0)
ALLREDUCE_CAST = ContextVar("ALLREDUCE_CAST", 1)
