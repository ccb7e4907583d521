"""The generic side of HCQ2: LINEAR -> command batches on device queues, ordered by signals, and their replay.

`compile_linear` turns consecutive calls that queues can run (kernels on queue devices, copies a copy queue can
do) into one `CALL(PROGRAM(CompiledBatch), *buffers)`; everything else stays a host call. A CompiledBatch holds
one encoded command buffer per (device, queue). Dependencies are tracked by buffer byte ranges: a command that
reads what another queue wrote (or writes what another queue read or wrote) waits for that queue's signal to reach
the producer's sequence number; only the latest edge per producer queue is kept, and a producer stores its
sequence number only if someone waits on it. Buffer addresses are patched in at run time, so one compiled batch
serves every call with new buffers of the same shapes.
"""
from __future__ import annotations
import ctypes
import functools
import itertools
import os
import threading
from typing import Any, Callable, Sequence, TypeVar
from tinycore.uop.ops import Ops, UOp
from tinycore.hcq.commands import Barrier, Command, Copy, Exec, InputAddress, SignalStore, SignalWait, Value
from tinycore.hcq.device import Encoded, HCQDevice, is_hcq_device
from tinycore.hcq.signal import Signal, signal_pool
from tinycore.hcq import staging

MAX_CACHED_CALLS = 32     # eager schedules with more calls than this bake nothing into the cache
MAX_TEMPLATES = 4096      # compiled eager templates kept (oldest dropped first)
SIGNAL_SETS = 2           # a compiled batch may be in flight this many times at once

# One process-wide, re-entrant lock serializes what several Python threads would otherwise race on: realizing
# (schedule, compile and template caches), submitting to queues (device epochs, batch signal sets, rings) and the
# list of work in flight. Threads still build tensor graphs in parallel; kernels run on the devices' own workers.
runtime_lock = threading.RLock()
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def holding_runtime_lock(fn: _Fn) -> _Fn:
  """`fn` runs while this thread holds `runtime_lock`."""
  @functools.wraps(fn)
  def locked(*args: Any, **kwargs: Any) -> Any:
    with runtime_lock: return fn(*args, **kwargs)
  return locked  # type: ignore[return-value]


_templates: dict[tuple, UOp] = {}
_in_flight: list[tuple[dict[HCQDevice, int], list[Any]]] = []   # (epochs to reach, buffers kept alive until then)


def _device(name: str) -> Any:
  from tinycore.device.registry import Device
  return Device[name]


def call_is_hcq(call: UOp) -> bool: return call.src[0].op is Ops.PROGRAM


def _kind(device: str) -> str: return device.split(":")[0]


def copy_enqueuer(dst: str, src: str) -> HCQDevice | None:
  """The device whose copy queue runs a copy: the source preferably (peer writes beat peer reads), non-CPU devices
  before CPU; it needs a copy queue and must address the other side (a queue device, or a kind in its host_devs)."""
  candidates = sorted([(src, dst), (dst, src)], key=lambda pair: _kind(pair[0]) == "CPU")
  for mine, other in candidates:
    dev = _device(mine)
    if is_hcq_device(dev) and dev.has_copy_queue and (is_hcq_device(_device(other)) or _kind(other) in dev.host_devs):
      return dev
  return None


def staging_direction(call: UOp) -> bool | None:
  """For a COPY between a device with a copy queue and host memory that device cannot address: True for an upload,
  False for a download; None when the copy needs no staging."""
  if call.src[0].op is not Ops.COPY: return None
  dst, src = _device(call.src[1].device), _device(call.src[2].device)
  for dev, host, upload in ((dst, src, True), (src, dst, False)):
    if (is_hcq_device(dev) and dev.has_copy_queue and not is_hcq_device(host) and
        _kind(host.device) not in dev.host_devs):
      return upload
  return None


def queue_of(call: UOp) -> tuple[HCQDevice, str] | None:
  """Where a call runs: (device, queue kind), or None for a host call."""
  callee = call.src[0]
  if callee.op is Ops.SINK:
    dev = _device(call.src[1].device)
    return (dev, "compute") if is_hcq_device(dev) else None
  if callee.op is Ops.COPY:
    dev = copy_enqueuer(call.src[1].device, call.src[2].device)
    return (dev, "copy") if dev is not None else None
  return None


def uses_queues(call: UOp) -> bool:
  """A call that compile_linear turns into queue work: it runs on a queue, or it is a copy staged through one."""
  return call.src[0].op is not Ops.PROGRAM and (queue_of(call) is not None or staging_direction(call) is not None)


def _base_and_range(buf: UOp) -> tuple[UOp, int, int]:
  if buf.op is Ops.BUFFER_VIEW: return buf.src[0], buf.arg[1], buf.arg[1] + buf.arg[0] * buf.dtype.itemsize
  return buf, 0, buf.arg * buf.dtype.itemsize


class CompiledBatch:
  """Command buffers for a run of queue calls. `slots` are the buffers, by the CALL's argument order; slots in
  `baked` had their addresses written at compile time, the rest are patched in on every run."""

  def __init__(self, calls: Sequence[UOp], slots: Sequence[UOp], baked: frozenset[int] = frozenset()):
    from tinycore.codegen import compile_kernel
    from tinycore.engine.buffers import buffer_of
    self.slot_count = len(slots)
    slot_of = {s: i for i, s in enumerate(slots)}
    placed: list[tuple[tuple[HCQDevice, str], Command, list[tuple[UOp, int, int, bool]]]] = []
    for call in calls:
      queue = queue_of(call)
      assert queue is not None, "only queue calls go into a batch"
      dev = queue[0]

      def value(buf: UOp) -> Value:
        slot = slot_of[buf.src[0] if buf.op is Ops.BUFFER_VIEW else buf]
        offset = buf.arg[1] if buf.op is Ops.BUFFER_VIEW else 0
        if slot in baked: return dev.device_address(buffer_of(slots[slot]).ensure_allocated()) + offset
        return InputAddress(slot, dev.device, offset)

      buffers = call.src[1:]
      accesses = [(*_base_and_range(b), i == 0) for i, b in enumerate(buffers)]
      if call.src[0].op is Ops.SINK:
        kernel = compile_kernel(buffers[0].device, call.src[0])
        command: Command = Exec(kernel, tuple(value(b) for b in buffers), (), kernel.global_size, kernel.local_size)
      else:
        nbytes = _base_and_range(buffers[0])[2] - _base_and_range(buffers[0])[1]
        command = Copy(value(buffers[0]), value(buffers[1]), nbytes)
      placed.append((queue, command, accesses))
    self.devices: list[HCQDevice] = list(dict.fromkeys(q[0] for q, _, _ in placed))
    self.queues: list[tuple[HCQDevice, str]] = list(dict.fromkeys(q for q, _, _ in placed))
    self.commands = len(placed)

    # sequence numbers per queue, and the waits each command needs (latest producer per other queue)
    seq: dict[tuple[HCQDevice, str], int] = {q: 0 for q in self.queues}
    numbered: list[int] = []
    history: dict[UOp, list[tuple[tuple[HCQDevice, str], int, int, int, bool]]] = {}  # by buffer
    waits: list[dict[tuple[HCQDevice, str], int]] = []
    signaled: set[tuple[tuple[HCQDevice, str], int]] = set()
    for queue, _, accesses in placed:
      seq[queue] += 1
      numbered.append(seq[queue])
      need: dict[tuple[HCQDevice, str], int] = {}
      for my_base, my_start, my_end, i_write in accesses:
        for other_queue, other_seq, start, end, wrote in history.get(my_base, ()):
          # one queue runs in order; across queues, any overlap with a write on either side is an edge
          if other_queue != queue and my_start < end and start < my_end and (wrote or i_write):
            need[other_queue] = max(need.get(other_queue, 0), other_seq)
      waits.append(need)
      signaled.update(need.items())
      for base, start, end, write in accesses:
        history.setdefault(base, []).append((queue, seq[queue], start, end, write))
    self.last_seq = dict(seq)
    signaled.update(seq.items())  # each queue's last command always reports, for the batch's end

    # one signal per queue for each of a few sets, so a batch can be in flight more than once
    self.signal_sets: list[dict[tuple[HCQDevice, str], Signal]] = [
      {q: signal_pool.new(f"{q[0].device} {q[1]} batch") for q in self.queues} for _ in range(SIGNAL_SETS)]
    self.set_epochs: list[dict[HCQDevice, int]] = [{} for _ in range(SIGNAL_SETS)]
    self.next_set = itertools.count()
    self.encoded: list[dict[tuple[HCQDevice, str], Encoded]] = []
    self.plan: dict[tuple[HCQDevice, str], list[Command]] = {}  # the abstract commands of the first set (to inspect)
    for signals in self.signal_sets:
      per_queue: dict[tuple[HCQDevice, str], list[Command]] = {q: [] for q in self.queues}
      for (queue, command, _), number, need in zip(placed, numbered, waits):
        per_queue[queue].extend(SignalWait(signals[q], s) for q, s in need.items())
        per_queue[queue].append(command)
        if (queue, number) in signaled: per_queue[queue].append(SignalStore(signals[queue], number))
      self.encoded.append({q: q[0].queues[q[1]].encode(cmds) for q, cmds in per_queue.items()})
      if not self.plan: self.plan = per_queue
    self.patches = [ref for enc in self.encoded[0].values() for _, ref in enc.patches]

  @holding_runtime_lock
  def run(self, buffers: Sequence[Any], var_vals: dict[str, int] | None = None) -> None:
    """Submit the batch with these buffers (by slot) and variable values."""
    for dev in self.devices:
      if dev.unusable is not None: raise RuntimeError(dev.unusable)
    which = next(self.next_set) % SIGNAL_SETS
    signals, encoded = self.signal_sets[which], self.encoded[which]
    # host fence: the last run that used this signal set must be done before its signals are reset
    for dev, epoch in self.set_epochs[which].items():
      if dev.timeline.value < epoch: dev.synchronize()
    for signal in signals.values(): signal.value = 0
    values: dict[Any, int] = {}
    for enc in encoded.values():
      for _, ref in enc.patches:
        if ref in values: continue
        if isinstance(ref, InputAddress): values[ref] = ref_address(ref, buffers)
        else: values[ref] = (var_vals or {})[ref.name]
    release_finished()
    # every queue first waits for everything submitted before, on this batch's devices and any still running
    previous = {d: d.epoch for d in [*self.devices, *(d for epochs, _ in _in_flight for d in epochs)]}
    # each device ends the batch on one queue (compute if it has work there) by writing its next epoch to its
    # timeline, after its other queues finished
    epochs: dict[HCQDevice, int] = {}
    finalize: dict[tuple[HCQDevice, str], list[Command]] = {}
    for dev in self.devices:
      mine = [q for q in self.queues if q[0] is dev]
      last = (dev, "compute") if (dev, "compute") in mine else mine[0]
      finalize[last] = [SignalWait(signals[q], self.last_seq[q]) for q in mine if q != last]
      finalize[last].append(SignalStore(dev.timeline, dev.epoch + 1))
      dev.epoch += 1
      epochs[dev] = dev.epoch
    for queue in self.queues:
      dev, kind = queue
      hw = dev.queues[kind]
      # first wait for everything submitted before (a single-queue device's own work is already in order), then
      # the batch, then the end-of-batch commands: one submission per queue
      waits = [SignalWait(d.timeline, e) for d, e in previous.items() if e and not (d is dev and len(dev.queues) == 1)]
      commands = hw.encode([Barrier(), *waits]) + encoded[queue]
      if queue in finalize: commands = commands + hw.encode(finalize[queue])
      hw.submit(commands, values)
    self.set_epochs[which] = epochs
    _in_flight.append((epochs, list(buffers)))


def ref_address(ref: InputAddress, buffers: Sequence[Any]) -> int:
  return _device(ref.device).device_address(buffers[ref.slot].ensure_allocated()) + ref.offset


@holding_runtime_lock
def release_finished() -> None:
  """Drop the references that kept buffers alive while queues still used them."""
  _in_flight[:] = [(epochs, bufs) for epochs, bufs in _in_flight
                   if any(d.timeline.value < e for d, e in epochs.items())]


@holding_runtime_lock
def wait_for_queues() -> None:
  """Host calls run after every queue device finished what it was given (a simple, safe fence)."""
  for epochs, _ in list(_in_flight):
    for dev in epochs: dev.synchronize()
  release_finished()


def keep_in_flight_memory(*owners: Any) -> None:
  """At exit, for a queue whose worker could not be stopped in time: the buffers of the work in flight, every signal
  and `owners` (say, the device with its allocator's cached memory) are never freed, so the kernel still running
  never touches unmapped memory while the interpreter shuts down. The process's exit releases them."""
  for owner in (_in_flight, signal_pool, *owners): ctypes.pythonapi.Py_IncRef(ctypes.py_object(owner))


# --- fork: the parent's queues are drained before the fork (the child's copy of memory is then complete), and the
# child restarts what did not survive it (worker threads), or marks the device unusable with the reason
_fork_failure: str | None = None


def _opened_queue_devices() -> list[HCQDevice]:
  from tinycore.device.registry import Device
  return [dev for dev in Device.opened().values() if is_hcq_device(dev)]


def _before_fork() -> None:
  global _fork_failure
  runtime_lock.acquire()
  _fork_failure = None
  try:
    for dev in _opened_queue_devices(): dev.synchronize()
    release_finished()
  except Exception as error:  # the child learns why when it uses the device; the parent goes on
    _fork_failure = f"its queues were still busy when the process forked ({error})"


def _after_fork_in_parent() -> None: runtime_lock.release()


def _after_fork_in_child() -> None:
  runtime_lock.release()
  for dev in _opened_queue_devices():
    reason = _fork_failure
    if reason is None:
      try: dev.restart_after_fork()
      except Exception as error: reason = f"{type(error).__name__}: {error}"
    if reason is not None:
      dev.unusable = (f"{dev.device} was opened before this process was forked and cannot be used in the child: "
                      f"{reason}. Use the 'spawn' or 'forkserver' start method "
                      "(multiprocessing.set_start_method('spawn')), or open the device only in the child")


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


_by_template: dict[tuple, UOp] = {}


@holding_runtime_lock
def compile_template(linear: UOp) -> UOp:
  """compile_linear for a cached schedule's template LINEAR (its buffers are placeholders, all patched at run time),
  cached by the template itself: a repeated computation neither compiles nor builds a cache key."""
  key = (linear, *compile_settings(linear))
  if (done := _by_template.get(key)) is not None: return done
  from tinycore.engine.buffers import linear_buffers
  compiled = linear
  if any(uses_queues(call) for call in linear.src): compiled = _compile(linear, linear_buffers(linear))
  if len(_by_template) >= MAX_TEMPLATES: _by_template.pop(next(iter(_by_template)))
  _by_template[key] = compiled
  return compiled


def compile_settings(linear: UOp) -> tuple:
  """What else a compiled batch depends on: the devices' host_devs and the staging ring (a staged copy bakes the
  ring's address and chunking)."""
  devices = sorted({b.device for call in linear.src for b in call.src[1:]})
  host_devs = tuple(getattr(_device(d), "host_devs", None) for d in devices)
  return host_devs, staging.STAGING_SIZE, staging.STAGING_SLOTS, staging._staging


@holding_runtime_lock
def compile_linear(linear: UOp, input_uops: Sequence[UOp] | None = None, profile: bool = False) -> UOp:
  """A LINEAR whose queue calls are grouped into compiled batches. `input_uops` (eager use) are the buffers whose
  addresses are patched in at every run; None (JIT use) bakes every address. Compiling a compiled LINEAR returns
  it unchanged; small eager schedules are cached as templates keyed by their buffer-free form."""
  from tinycore.schedule.cache import buffer_placeholder
  if any(call_is_hcq(call) for call in linear.src): return linear
  if input_uops is not None and len(linear.src) <= MAX_CACHED_CALLS:
    inputs = list(input_uops)
    placeholders = [buffer_placeholder(i, b) for i, b in enumerate(inputs)]
    key = (linear.substitute(dict(zip(inputs, placeholders))), profile, *compile_settings(linear))
    if (template := _templates.get(key)) is None:
      if len(_templates) >= MAX_TEMPLATES: _templates.pop(next(iter(_templates)))
      template = _templates[key] = _compile(key[0], placeholders)
    return template.substitute(dict(zip(placeholders, inputs)))
  return _compile(linear, list(input_uops) if input_uops is not None else [])


def _compile(linear: UOp, inputs: Sequence[UOp]) -> UOp:
  from tinycore.engine.buffers import linear_buffers
  expanded: list[UOp] = []
  for call in linear.src:
    direction = staging_direction(call)
    expanded.extend(staging.staged_copy_calls(call, direction) if direction is not None else [call])
  out: list[UOp] = []
  batch: list[UOp] = []

  def flush() -> None:
    if not batch: return
    slots = linear_buffers(UOp(Ops.LINEAR, None, tuple(batch)))
    input_set = set(inputs)
    baked = frozenset(i for i, s in enumerate(slots) if s not in input_set)
    compiled = CompiledBatch(batch, slots, baked)
    out.append(UOp(Ops.CALL, None, (UOp(Ops.PROGRAM, None, (), compiled), *slots)))
    batch.clear()

  for call in expanded:
    if queue_of(call) is not None: batch.append(call)
    else:
      flush()
      out.append(call)
  flush()
  return UOp(Ops.LINEAR, None, tuple(out))
