"""Many processes, many machines: collectives across the processes of a job, over a collective backend plugin
(tiny-mpi: MPI through mpi4py). The core never talks to a network itself.

    mpiexec -n 2 python train.py        # each process: the same script, its own rank

    from tinycore import distributed
    distributed.init()                                  # the backend the launcher started (under mpiexec: MPI)
    distributed.broadcast_parameters(params)            # every rank starts from rank 0's weights
    loss.backward()
    distributed.all_reduce_gradients(params)            # the gradients averaged over the ranks (as DDP does)
    opt.step()

Each collective is lazy, like a copy: `all_reduce(t)` is a COLLECTIVE node that the scheduler lowers to a
`CALL(COLLECTIVE, dst, src)` in the LINEAR, run by the engine between the kernels that produce and read it, shown by
VIZ and the profiler (on the device's "collective" track), and captured and replayed by TinyJit with the rest of a
step. A tensor on several local devices (`shard`) crosses processes once per process: its lanes are gathered on the
first lane's device (a local allreduce's result is there already), one collective runs, the result fans back out.
Every collective first exchanges a small header, so ranks calling different collectives (or on other shapes or
dtypes) raise `CollectiveMismatch` naming each rank's call; a rank that fails ends the whole job (see
`tinycore.device.collective_faults`).
"""
from __future__ import annotations
import os
from typing import Iterable
from tinycore.dtype import dtypes
from tinycore.errors import ArgumentError, DTypeError
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.collective import Collective
from tinycore.uop.symbolic_shapes import has_symbolic_arg
from tinycore.device.collective import (CollectiveBackend, CollectiveError, CollectiveMismatch, current_group,
                                        started_group)
from tinycore.device.collective_faults import TIMEOUT_ENV, end_group, start_with_faults
from tinycore.device.registry import Device
from tinycore.hcq.in_flight import wait_for_queues
from tinycore.plugin.manager import collective_specs
from tinycore.plugin.spec import CollectiveSpec
from tinycore.tensor import Tensor

__all__ = ["init", "shutdown", "is_initialized", "rank", "world_size", "backend_name", "all_reduce", "all_gather",
           "broadcast", "barrier", "broadcast_parameters", "all_reduce_gradients", "CollectiveError",
           "CollectiveMismatch", "TIMEOUT_ENV"]

BACKEND_ENV = "TINYCORE_DIST_BACKEND"
INSTALL_HINT = "pip install tiny-mpi[mpich] adds one (MPI through mpi4py, with MPICH's mpiexec)"


# ---------------------------------------------------------------------------- starting
def backend_status(spec: CollectiveSpec) -> str:
  """What `tinycore devices` says about a backend: "ok (launched)", "ok (not launched: ...)" or "unavailable: ..."."""
  try: reason = spec.probe()
  except Exception as error: return f"failed: probe raised {type(error).__name__}: {error}"
  if reason: return f"unavailable: {reason}"
  if (group := started_group()) is not None and group.name == spec.name:
    return f"ok (started: rank {group.rank} of {group.world_size})"
  try: launched = spec.launched()
  except Exception as error: return f"failed: launched() raised {type(error).__name__}: {error}"
  return "ok (launched here)" if launched else "ok (not launched here)"


def choose_backend() -> CollectiveSpec:
  """The backend to start: the one TINYCORE_DIST_BACKEND names, else the launched one of highest priority."""
  specs = collective_specs()
  if not specs: raise CollectiveError(f"no collective backend is installed: {INSTALL_HINT}")
  if forced := os.environ.get(BACKEND_ENV, "").strip():
    named = [spec for spec in specs if spec.name == forced.upper()]
    if not named:
      raise CollectiveError(f"{BACKEND_ENV}={forced!r} names no installed collective backend (installed: "
                            f"{', '.join(spec.name for spec in specs)})")
    return named[0]
  launched = sorted((spec for spec in specs if spec.launched()), key=lambda spec: -spec.priority)
  if not launched:
    installed = "; ".join(f"{spec.name}: {spec.description}" for spec in specs)
    raise CollectiveError("this process was not started by the launcher of a collective backend: run the script "
                          f"under one, or name a backend in {BACKEND_ENV} (installed: {installed})")
  return launched[0]


def init() -> None:
  """Start this process's collective backend, the one the environment names (under mpiexec: MPI), once per process;
  a second call does nothing. Raises CollectiveError outside a launcher, or when the backend cannot work here."""
  if started_group() is not None: return
  spec = choose_backend()
  if reason := spec.probe():
    raise CollectiveError(f"the {spec.name} collective backend ({spec.distribution}) cannot work here: {reason}")
  backend = spec.open()
  if not isinstance(backend, CollectiveBackend):
    raise CollectiveError(f"{spec.distribution}'s {spec.name} backend opened {backend!r}, not a CollectiveBackend")
  start_with_faults(backend)


def shutdown() -> None:
  """End this process's part in the job now instead of at exit (torch's destroy_process_group): every process
  exchanges its exit header (a process still calling collectives is named), then the backend is released. A
  backend need not start twice in one process (MPI cannot)."""
  if (group := started_group()) is not None: end_group(group)


def is_initialized() -> bool:
  """Whether init() started a backend in this process."""
  return started_group() is not None


def rank() -> int:
  """This process's rank, 0 .. world_size() - 1."""
  return current_group().rank


def world_size() -> int:
  """How many processes the job has."""
  return current_group().world_size


def backend_name() -> str:
  """The started backend's name ("MPI")."""
  return current_group().name


# ---------------------------------------------------------------------------- collectives (lazy)
REDUCE_OPS = ("sum", "mean", "max", "min")


def _check_tensor(t: Tensor, name: str) -> None:
  if not isinstance(t, Tensor): raise TypeError(f"{name} takes a Tensor, got {type(t).__name__}")


def _check_reduce_op(op: str) -> None:
  if op not in REDUCE_OPS: raise ArgumentError(f"all_reduce op must be one of {', '.join(REDUCE_OPS)}, got {op!r}")


def _collective(t: Tensor, kind: str, **fields) -> Tensor:
  if any(has_symbolic_arg(n) for n in t.uop.toposort()):
    raise ArgumentError(f"{kind} of a tensor of symbolic shape {t.shape}: collectives take concrete shapes")
  for device in t.device if isinstance(t.device, tuple) else (t.device,):
    if not Device.spec_for(device).compute:
      raise ArgumentError(f"{kind} of a tensor on {device}, which runs no kernels: move it to a compute device first")
  if world_size() == 1:  # a job of one rank: every collective is its input (all_gather's with the ranks' axis)
    return Tensor(t.uop.reshape((1, *t.shape)) if kind == "all_gather" else t.uop)
  arg = Collective(kind, world_size(), tuple(t.shape), **fields)
  return Tensor(UOp(Ops.COLLECTIVE, t.dtype, (t.uop,), arg))


def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined elementwise with `op` ("sum", "mean", "max" or "min"), on every rank (lazy). A mean
  is the sum divided by the world size (integers are summed in int64 and averaged in float32, as Tensor.mean)."""
  _check_tensor(t, "all_reduce")
  _check_reduce_op(op)
  if t.dtype is dtypes.bool and op in ("sum", "mean"):
    raise DTypeError(f"all_reduce {op} of bools: cast to an integer dtype first (max is any, min is all)")
  if op != "mean": return _reduced(t, op)
  if dtypes.is_float(t.dtype): return _reduced(t, "sum") / world_size()
  return (_reduced(t.cast(dtypes.int64), "sum") / world_size()).cast(dtypes.float32)


def _reduced(t: Tensor, op: str) -> Tensor:
  """all_reduce: a small tensor (its bytes ride in the header exchange) is gathered from every rank and reduced here,
  in one exchange and a kernel (every rank computes the same result, in the same order); a larger one is the
  backend's all_reduce."""
  if t.nbytes() > current_group().inline_bytes: return _collective(t, "all_reduce", reduce_op=op)
  stacked = _collective(t, "all_gather", reduce_op=op)  # (world, *shape)
  reduced = stacked.sum(0) if op == "sum" else stacked.max(0) if op == "max" else stacked.min(0)
  return reduced.cast(t.dtype)


def all_gather(t: Tensor, axis: int = 0) -> Tensor:
  """Every rank's `t` joined along `axis` in rank order (that axis world_size() times longer; a 0-d tensor becomes a
  vector of one value per rank), on every rank (lazy). The ranks' values arrive stacked along a new first axis,
  which is then moved into place (a view)."""
  _check_tensor(t, "all_gather")
  if t.ndim == 0: t = t.reshape(1)
  if not -t.ndim <= axis < t.ndim: raise IndexError(f"all_gather axis {axis} out of range for {t.ndim} dims")
  axis %= t.ndim
  stacked = _collective(t, "all_gather")  # (world, *shape)
  order = (*range(1, axis + 1), 0, *range(axis + 1, t.ndim + 1))
  joined = tuple(s * world_size() if i == axis else s for i, s in enumerate(t.shape))
  return stacked.permute(order).reshape(joined)


def broadcast(t: Tensor, src: int = 0) -> Tensor:
  """Rank `src`'s `t`, on every rank (lazy; every rank passes a tensor of the same shape and dtype)."""
  _check_tensor(t, "broadcast")
  if not 0 <= src < world_size(): raise ValueError(f"broadcast src {src} is not a rank of {world_size()}")
  return _collective(t, "broadcast", root=src)


def barrier() -> None:
  """Wait until every rank reached this point (and this process's queued work finished)."""
  group = current_group()
  wait_for_queues()
  group.exchange("barrier")


# ---------------------------------------------------------------------------- training (data parallel)
def broadcast_parameters(params: Iterable[Tensor], src: int = 0) -> None:
  """Every rank's parameters become rank `src`'s (each assigned in place, realized now): start training in sync."""
  params = list(params)
  for p in params: p.assign(broadcast(p, src))
  if params: Tensor.realize(*params)


def all_reduce_gradients(params: Iterable[Tensor], op: str = "mean") -> None:
  """Each parameter's `.grad` replaced by its all_reduce over the ranks (lazy; "mean" by default, as DDP averages).
  The gradients of one device and dtype travel as one buffer (one collective), then are read back as views: each
  gradient's kernel stores it straight into its slice of that buffer (no copy; a cat of the gradients would compute
  them inside its copy kernel, without their matmuls' loop shapes: 8 ms instead of 0.1 for the digits MLP). In a
  job of one rank every gradient is its own sum and mean: nothing changes."""
  _check_reduce_op(op)
  if world_size() == 1: return
  buckets: dict[tuple, list[Tensor]] = {}
  for p in params:
    if p.grad is not None: buckets.setdefault((p.grad.device, p.grad.dtype), []).append(p)
  for (device, dtype), bucket in buckets.items():
    sizes = [p.grad.numel() for p in bucket]
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    flat = Tensor.empty(sum(sizes), device=device, dtype=dtype)
    for p, offset, size in zip(bucket, offsets, sizes): flat[offset:offset + size].reshape(p.grad.shape).assign(p.grad)
    combined = all_reduce(flat, op)
    for p, offset, size in zip(bucket, offsets, sizes): p.grad = combined[offset:offset + size].reshape(p.grad.shape)
