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
  compute: whether the kind runs kernels (False for storage devices such as DISK). Checked when a device opens:
    a compute device must have a renderer, a compiler and a runtime, and a storage device none of them.
  names_are_paths: whether the part after ":" is a path kept verbatim (DISK:/data/x:0 is the file "/data/x:0"),
    not an instance index (only an index ":0" is dropped: "CPU:0" is "CPU").
  host_memory: whether its buffers are host memory at page-aligned, stable addresses (the core's PYTHON memory,
    CPU): a queue device can register such memory and address it in place, and a kind that also computes is
    where the core runs host-side work (reading back a view of a storage device) when no device is given.
  copy_below_movement: the storage-only copy rule: a copy off this kind moves below permute, flip, pad and
    expand, so those run on the target and only contiguous bytes leave this device. None (the default) means
    ``not compute``: a device that cannot compute cannot run the movement itself.
  slow: kernels run far slower than compiled code (an interpreter): the conformance suite skips the tests
    marked ``slow`` on it, with the reason.
  distribution / version: filled in by the plugin manager from the entry point's distribution.

  What an opened device can do beyond this is on its `Compiled`: ``zero_copy_host_view`` (the allocator has
  ``_as_buffer``), ``has_copy_queue`` and ``host_devs`` (the host kinds its queues address in place).
  """
  prefix: str
  description: str
  priority: int = 0
  instances: Callable[[], list[str]] | None = None
  probe: Callable[[], str | None] | None = None
  compute: bool = True
  names_are_paths: bool = False
  host_memory: bool = False
  copy_below_movement: bool | None = None
  slow: bool = False
  distribution: str = ""
  version: str = ""

  @property
  def copies_below_movement(self) -> bool:
    """Whether a copy off this kind moves below permute, flip, pad and expand (``copy_below_movement``, resolved)."""
    return (not self.compute) if self.copy_below_movement is None else self.copy_below_movement


@attrs.frozen
class CollectiveSpec:
  """One collective backend: a way for the processes of a job to combine memory (MPI today; NCCL later).

  name: what it is called ("MPI"): upper-case, non-empty; ``TINYCORE_DIST_BACKEND`` names it to force it.
  description: a short human line for ``tinycore devices``.
  launched: returns whether the environment says this process was started by the backend's launcher (for MPI:
    ``mpiexec`` sets PMI_RANK / OMPI_COMM_WORLD_RANK / PMIX_RANK). ``tinycore.distributed.init()`` picks the
    launched backend of highest priority. Cheap: reads the environment only.
  probe: returns None when the backend can work here, else why not ("mpi4py is not installed: pip install
    tiny-mpi[mpich]"); may import its library (without starting it); must not raise for an ordinary absence.
  open: returns the started `tinycore.plugin.CollectiveBackend` of this process (its rank and world size known).
    Called once per process, by ``tinycore.distributed.init()``.
  library: returns which library and version it runs on ("MPICH 5.0.2"), for ``tinycore devices``; called only
    after a passing probe. None: not shown.
  priority: which launched backend wins when several are (higher first).
  distribution / version: filled in by the plugin manager from the entry point's distribution.
  """
  name: str
  description: str
  launched: Callable[[], bool]
  probe: Callable[[], str | None]
  open: Callable[[], object]
  library: Callable[[], str] | None = None
  priority: int = 0
  distribution: str = ""
  version: str = ""
