"""DeviceSpec: the row a plugin registers for each device kind it provides."""
from __future__ import annotations
from typing import Callable
import attrs


@attrs.frozen
class DeviceSpec:
  """One device kind.

  prefix: the name before ":" ("CPU", "CL", "DISK").
  description: a short human line for ``tinycore devices``.
  priority: default-device order; the highest-priority kind that opens becomes the default. Host-only kinds
    (DISK, NPY) use a negative priority so they are never the default.
  instances: returns the names of the instances present now (["CL", "CL:1"]); None means one instance, ``prefix``.
    Kinds with unbounded names (CPU:N, DISK:/path) list only their canonical first instance.
  probe: returns None when the kind is usable here, else the reason it is not ("no OpenCL platform"). It may
    import drivers; it must not raise for an ordinary absence.
  compute: whether the kind runs kernels (False for storage devices such as DISK).
  names_are_paths: whether the part after ":" is a path kept verbatim (DISK:/data/x:0 is the file "/data/x:0"),
    not an instance index (only an index ":0" is dropped: "CPU:0" is "CPU").
  distribution / version: filled in by the plugin manager from the entry point's distribution.
  """
  prefix: str
  description: str
  priority: int = 0
  instances: Callable[[], list[str]] | None = None
  probe: Callable[[], str | None] | None = None
  compute: bool = True
  names_are_paths: bool = False
  distribution: str = ""
  version: str = ""
