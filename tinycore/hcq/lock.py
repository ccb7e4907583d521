"""The runtime lock: one process-wide, re-entrant lock around what several Python threads would otherwise race on.

Realizing (scheduling, planning and their cache), submitting to queues (device epochs, batch signal sets, rings) and
the list of work in flight all hold it. Threads still build tensor graphs in parallel, and kernels run on the devices'
own workers.
"""
from __future__ import annotations
import functools
import threading
from typing import Any, Callable, TypeVar

runtime_lock = threading.RLock()
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def holding_runtime_lock(fn: _Fn) -> _Fn:
  """`fn` runs while this thread holds `runtime_lock`."""
  @functools.wraps(fn)
  def locked(*args: Any, **kwargs: Any) -> Any:
    with runtime_lock: return fn(*args, **kwargs)
  return locked  # type: ignore[return-value]
