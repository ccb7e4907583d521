"""The generic side of HCQ2: LINEAR -> command batches on device queues, ordered by signals, and their submission.

`compile_linear` turns consecutive calls that queues can run (kernels on queue devices, copies a copy queue can
do) into one `CALL(PROGRAM(CompiledBatch), *buffers)`; everything else stays a host call. A CompiledBatch holds
one encoded command buffer per (device, queue). Dependencies are tracked by buffer byte ranges: a command that
reads what another queue wrote (or writes what another queue read or wrote) waits for that queue's signal to reach
the producer's sequence number; only the latest edge per producer queue is kept, and a producer stores its
sequence number only if someone waits on it. Buffer addresses are patched in at run time, so one compiled batch
serves every call with new buffers of the same shapes. Kernels' scalar arguments (Python scalars, see
`tinycore.uop.scalars`) are patched in the same way: a new learning rate replays the batch with one new word.
"""
from __future__ import annotations
import itertools
from typing import Any, Sequence
import attrs
import tinycore.profiler as profiler
from tinycore.uop.ops import Ops, UOp
from tinycore.device.buffers import buffer_of, linear_buffers
from tinycore.device.kernels import compile_kernel
from tinycore.device.registry import Device
from tinycore.uop.scalars import call_buffers, call_scalars, scalar_value, scalar_word
from tinycore.hcq.commands import (Barrier, Command, Copy, Exec, InputAddress, SignalStore, SignalWait, Timestamp,
                                   Value, Variable)
from tinycore.hcq.device import Encoded, HCQDevice, is_hcq_device
from tinycore.hcq.signal import Signal, signal_pool
from tinycore.hcq import profiling, staging
from tinycore.hcq.in_flight import devices_in_flight, in_flight, release_finished, track_in_flight
from tinycore.hcq.lock import holding_runtime_lock
import tinycore.hcq.fork  # noqa: F401  (queue devices survive os.fork: the handlers register on import)
from tinycore.codegen.estimates import estimated_ops

SIGNAL_SETS = 2           # a compiled batch may be in flight this many times at once


def _device(name: str) -> Any: return Device[name]


def call_is_hcq(call: UOp) -> bool: return call.src[0].op is Ops.PROGRAM


def _host_memory(device: str) -> bool:
  return Device.spec_for(device).host_memory


def copy_enqueuer(dst: str, src: str) -> HCQDevice | None:
  """The device whose copy queue runs a copy: the source preferably (peer writes beat peer reads), devices with
  their own memory before host-memory ones (DeviceSpec.host_memory); it needs a copy queue and must address the
  other side in place (`HCQDevice.addresses_in_place`)."""
  candidates = sorted([(src, dst), (dst, src)], key=lambda pair: _host_memory(pair[0]))
  for mine, other in candidates:
    dev = _device(mine)
    if is_hcq_device(dev) and dev.has_copy_queue and dev.addresses_in_place(other): return dev
  return None


def staging_direction(call: UOp) -> bool | None:
  """For a COPY between a device with a copy queue and host memory that device cannot address: True for an upload,
  False for a download; None when the copy needs no staging."""
  if call.src[0].op is not Ops.COPY: return None
  dst, src = _device(call.src[1].device), _device(call.src[2].device)
  for dev, host, upload in ((dst, src, True), (src, dst, False)):
    if is_hcq_device(dev) and dev.has_copy_queue and not dev.addresses_in_place(host.device): return upload
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


Queue = tuple[HCQDevice, str]  # (device, queue kind)


@attrs.frozen
class Access:
  """A byte range [start, end) of a base buffer that a command reads or writes."""
  base: UOp
  start: int
  end: int
  write: bool

  def conflicts(self, other: Access) -> bool:
    """Whether two accesses need ordering: they overlap and at least one writes."""
    return self.start < other.end and other.start < self.end and (self.write or other.write)


@attrs.frozen
class PlacedCommand:
  """One call of the batch as an abstract command on its queue, with the buffer ranges it touches."""
  queue: Queue
  command: Command
  accesses: tuple[Access, ...]


@attrs.frozen
class Ordering:
  """The signals that order a batch: each command's sequence number on its queue, the (queue, sequence) it waits
  for on other queues, which (queue, sequence) pairs must store a signal, and each queue's last sequence number."""
  numbers: tuple[int, ...]
  waits: tuple[dict[Queue, int], ...]
  signaled: frozenset[tuple[Queue, int]]
  last_seq: dict[Queue, int]


def place_call(call: UOp, slots: Sequence[UOp], slot_of: dict[UOp, int], baked: frozenset[int],
               scalar_names: dict[UOp, str]) -> PlacedCommand:
  """A queue call as an Exec or Copy on its queue; a baked slot's address is written now, others are patched, and
  each scalar argument is the run-time variable named in `scalar_names`."""
  queue = queue_of(call)
  assert queue is not None, "only queue calls go into a batch"
  dev = queue[0]

  def value(buf: UOp) -> Value:
    slot = slot_of[buf.src[0] if buf.op is Ops.BUFFER_VIEW else buf]
    offset = buf.arg[1] if buf.op is Ops.BUFFER_VIEW else 0
    if slot in baked: return dev.device_address(buffer_of(slots[slot]).ensure_allocated()) + offset
    return InputAddress(slot, dev.device, offset)

  buffers = call_buffers(call)
  accesses = tuple(Access(*_base_and_range(b), i == 0) for i, b in enumerate(buffers))
  if call.src[0].op is Ops.SINK:
    kernel = compile_kernel(buffers[0].device, call.src[0])
    vals = tuple(Variable(scalar_names[s]) for s in call_scalars(call))
    command: Command = Exec(kernel, tuple(value(b) for b in buffers), vals, kernel.global_size, kernel.local_size)
  else:
    command = Copy(value(buffers[0]), value(buffers[1]), accesses[0].end - accesses[0].start)
  return PlacedCommand(queue, command, accesses)


def order_commands(placed: Sequence[PlacedCommand]) -> Ordering:
  """Sequence numbers per queue and the waits each command needs: for every conflicting access on another queue,
  the latest producer per queue (one queue runs in order, so earlier edges to it are implied)."""
  seq: dict[Queue, int] = {}
  numbers: list[int] = []
  history: dict[UOp, list[tuple[Queue, int, Access]]] = {}  # by base buffer
  waits: list[dict[Queue, int]] = []
  signaled: set[tuple[Queue, int]] = set()
  for item in placed:
    seq[item.queue] = seq.get(item.queue, 0) + 1
    numbers.append(seq[item.queue])
    need: dict[Queue, int] = {}
    for mine in item.accesses:
      for other_queue, other_seq, theirs in history.get(mine.base, ()):
        if other_queue != item.queue and mine.conflicts(theirs):
          need[other_queue] = max(need.get(other_queue, 0), other_seq)
    waits.append(need)
    signaled.update(need.items())
    for access in item.accesses: history.setdefault(access.base, []).append((item.queue, seq[item.queue], access))
  signaled.update(seq.items())  # each queue's last command always reports, for the batch's end
  return Ordering(tuple(numbers), tuple(waits), frozenset(signaled), dict(seq))


def queue_commands(placed: Sequence[PlacedCommand], ordering: Ordering, signals: dict[Queue, Signal],
                   timers: Sequence[tuple[Signal, Signal]] | None = None) -> dict[Queue, list[Command]]:
  """Each queue's command list with one signal set: waits before a command, a signal store after it if needed.
  With `timers` (profiling), each command is bracketed by Timestamps into its (start, end) signals."""
  per_queue: dict[Queue, list[Command]] = {item.queue: [] for item in placed}
  for i, (item, number, need) in enumerate(zip(placed, ordering.numbers, ordering.waits)):
    per_queue[item.queue].extend(SignalWait(signals[q], s) for q, s in need.items())
    if timers is None: per_queue[item.queue].append(item.command)
    else: per_queue[item.queue].extend((Timestamp(timers[i][0]), item.command, Timestamp(timers[i][1])))
    if (item.queue, number) in ordering.signaled: per_queue[item.queue].append(SignalStore(signals[item.queue], number))
  return per_queue


class CompiledBatch:
  """Command buffers for a run of queue calls. `slots` are the buffers, by the CALL's argument order; slots in
  `baked` had their addresses written at compile time, the rest are patched in on every run. `scalars` are the
  kernels' scalar arguments (the CALL's arguments after the buffers): each is patched in on every run as the
  variable `scalar<i>`. A batch compiled with `profile` times each of its commands with device timestamps
  (`tinycore.hcq.profiling`)."""

  def __init__(self, calls: Sequence[UOp], slots: Sequence[UOp], baked: frozenset[int] = frozenset(),
               scalars: Sequence[UOp] = (), profile: bool = False):
    self.slot_count = len(slots)
    slot_of = {s: i for i, s in enumerate(slots)}
    self.scalar_names = [f"scalar{i}" for i in range(len(scalars))]
    scalar_names = dict(zip(scalars, self.scalar_names))
    placed = [place_call(call, slots, slot_of, baked, scalar_names) for call in calls]
    self.devices: list[HCQDevice] = list(dict.fromkeys(item.queue[0] for item in placed))
    self.queues: list[Queue] = list(dict.fromkeys(item.queue for item in placed))
    self.commands = len(placed)
    # what one run adds to GlobalCounters.global_ops and global_mem
    self.estimated_ops = sum(estimated_ops(call.src[0]) for call in calls if call.src[0].op is Ops.SINK)
    self.bytes_touched = sum(access.end - access.start for item in placed for access in item.accesses)
    ordering = order_commands(placed)
    self.last_seq = ordering.last_seq
    # one signal per queue for each of a few sets, so a batch can be in flight more than once
    self.signal_sets: list[dict[Queue, Signal]] = [
      {q: signal_pool.new(f"{q[0].device} {q[1]} batch") for q in self.queues} for _ in range(SIGNAL_SETS)]
    self.set_epochs: list[dict[HCQDevice, int]] = [{} for _ in range(SIGNAL_SETS)]
    self.next_set = itertools.count()
    self.timed = [timed_command(call, item) for call, item in zip(calls, placed)] if profile else None
    self.timers = [profiling.timer_signals(len(placed)) for _ in range(SIGNAL_SETS)] if profile else None
    plans = [queue_commands(placed, ordering, signals, self.timers[i] if self.timers else None)
             for i, signals in enumerate(self.signal_sets)]
    self.plan: dict[Queue, list[Command]] = plans[0]  # the abstract commands of the first set (to inspect)
    self.encoded: list[dict[Queue, Encoded]] = [
      {q: q[0].queues[q[1]].encode(cmds) for q, cmds in plan.items()} for plan in plans]
    self.patches = [ref for enc in self.encoded[0].values() for _, ref in enc.patches]
    # what every run patches (each once), with the device whose address of the input it needs
    self.inputs = [(ref, _device(ref.device)) for ref in dict.fromkeys(self.patches) if isinstance(ref, InputAddress)]
    self.variables = [ref for ref in dict.fromkeys(self.patches) if not isinstance(ref, InputAddress)]
    # each set's command buffers behind the barrier a submission starts with, for runs that wait on nothing else
    self.after_barrier: list[dict[Queue, Encoded]] = [
      {q: q[0].queues[q[1]].encode([Barrier()]) + enc for q, enc in encoded.items()} for encoded in self.encoded]
    self.whole_runs = self.encode_whole_runs()

  def encode_whole_runs(self) -> list[Encoded] | None:
    """For a batch on the one queue of its device, when that queue patches signal values: each set's complete
    submission (barrier, batch, the timeline's store of the epoch as a patch), so a run when nothing else is in
    flight encodes nothing. None otherwise."""
    if len(self.queues) != 1: return None
    dev, kind = self.queues[0]
    hw = dev.queues[kind]
    if len(dev.queues) != 1 or not hw.patched_signal_values: return None
    end = hw.encode([SignalStore(dev.timeline, EPOCH)])  # type: ignore[arg-type]
    return [after[self.queues[0]] + end for after in self.after_barrier]

  def scalar_values(self, scalars: Sequence[UOp]) -> dict[str, int]:
    """The variable values (64-bit words) of a run whose CALL passes these scalar arguments."""
    return {name: scalar_word(scalar_value(s), s.dtype) for name, s in zip(self.scalar_names, scalars)}

  @holding_runtime_lock
  def run(self, buffers: Sequence[Any], var_vals: dict[str, int] | None = None) -> None:
    """Submit the batch with these buffers (by slot) and variable values (64-bit words, by name)."""
    if profiler.enabled: return self.run_profiled(buffers, var_vals)
    self.submit(buffers, var_vals)

  def run_profiled(self, buffers: Sequence[Any], var_vals: dict[str, int] | None) -> None:
    """`run` while profiling: a submit span on the host, and the device timestamps of a batch compiled to have
    them, recorded once the run finished."""
    if self.timers is not None:
      for dev in self.devices: profiling.calibrate(dev)
    start = profiler.clock_ns()
    which, epochs = self.submit(buffers, var_vals)
    profiler.record(f"submit {self.commands} commands", "submit", profiler.HOST_PROCESS, "submit", start,
                    profiler.clock_ns(), commands=self.commands, timed=self.timers is not None,
                    queues=[f"{dev.device} {kind}" for dev, kind in self.queues])
    if self.timed is not None and self.timers is not None:
      profiling.add_pending(self.timed, self.timers[which], epochs)

  def submit(self, buffers: Sequence[Any], var_vals: dict[str, int] | None) -> tuple[int, dict[HCQDevice, int]]:
    """Write the batch into its queues; returns the signal set used and the epochs that mark the run finished."""
    for dev in self.devices:
      if dev.unusable is not None: raise RuntimeError(dev.unusable)
    which = next(self.next_set) % SIGNAL_SETS
    signals, encoded = self.signal_sets[which], self.encoded[which]
    # host fence: the last run that used this signal set must be done before its signals are reset
    for dev, epoch in self.set_epochs[which].items():
      if dev.timeline.value < epoch: dev.synchronize()
    if self.timers is not None: profiling.collect_finished()  # the set's timestamps are read before reuse
    for signal in signals.values(): signal.value = 0
    values: dict[Any, int] = {ref: dev.device_address(buffers[ref.slot].ensure_allocated()) + ref.offset
                              for ref, dev in self.inputs}
    for ref in self.variables: values[ref] = (var_vals or {})[ref.name]
    if in_flight: release_finished()
    if self.whole_runs is not None and not in_flight: return self.run_whole(which, values, buffers)
    # every queue first waits for everything submitted before, on this batch's devices and any still running
    previous = {d: d.epoch for d in [*self.devices, *devices_in_flight()]}
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
      commands = hw.encode([Barrier(), *waits]) + encoded[queue] if waits else self.after_barrier[which][queue]
      if queue in finalize: commands = commands + hw.encode(finalize[queue])
      hw.submit(commands, values)
    self.set_epochs[which] = epochs
    track_in_flight(epochs, buffers)  # (a tiny batch may have run already)
    return which, epochs

  def run_whole(self, which: int, values: dict[Any, int], buffers: Sequence[Any]) -> tuple[int, dict[HCQDevice, int]]:
    """`submit` of a batch with `whole_runs` when nothing else is in flight: it waits for nothing, and its device's
    timeline gets the next epoch."""
    assert self.whole_runs is not None
    dev, kind = self.queues[0]
    dev.epoch += 1
    values[EPOCH] = dev.epoch
    dev.queues[kind].submit(self.whole_runs[which], values)
    self.set_epochs[which] = epochs = {dev: dev.epoch}
    track_in_flight(epochs, buffers)
    return which, epochs


EPOCH = Variable("timeline epoch")  # the epoch a whole run's end stores (a name no kernel scalar has)


def timed_command(call: UOp, item: PlacedCommand) -> profiling.TimedCommand:
  """How the profiler names and measures a batch's command (a kernel's estimated ops, the bytes it touches)."""
  nbytes = sum(access.end - access.start for access in item.accesses)
  ops = estimated_ops(call.src[0]) if call.src[0].op is Ops.SINK else None
  return profiling.describe(item.command, item.queue[0], item.queue[1], nbytes, ops)


def ref_address(ref: InputAddress, buffers: Sequence[Any]) -> int:
  return _device(ref.device).device_address(buffers[ref.slot].ensure_allocated()) + ref.offset


def queue_settings(devices: Sequence[str]) -> tuple:
  """What a compiled batch over these devices bakes in besides its calls: the devices' host_devs and the staging
  ring (a staged copy bakes the ring's address and chunking). A batch compiled under other settings is stale."""
  host_devs = tuple(getattr(_device(d), "host_devs", None) for d in devices)
  return host_devs, staging.STAGING_SIZE, staging.STAGING_SLOTS, staging._staging


@holding_runtime_lock
def compile_linear(linear: UOp, input_uops: Sequence[UOp] | None = None, profile: bool = False) -> UOp:
  """A LINEAR whose runs of consecutive queue calls are each one compiled batch (host calls stay as they are).
  `input_uops` are the buffers whose addresses are patched in at every run (a plan's placeholders, TinyJit's
  inputs); every other buffer's address is written in now. Compiling a compiled LINEAR returns it unchanged."""
  if any(call_is_hcq(call) for call in linear.src): return linear
  inputs = list(input_uops) if input_uops is not None else []
  start = profiler.clock_ns() if profiler.enabled else 0
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
    scalars = list(dict.fromkeys(s for call in batch for s in call_scalars(call)))
    compiled = CompiledBatch(batch, slots, baked, scalars, profile)
    out.append(UOp(Ops.CALL, None, (UOp(Ops.PROGRAM, None, (), compiled), *slots, *scalars)))
    batch.clear()

  for call in expanded:
    if queue_of(call) is not None: batch.append(call)
    else:
      flush()
      out.append(call)
  flush()
  if start and profiler.enabled:
    profiler.record("compile queue batches", "compile", profiler.HOST_PROCESS, "compile", start, profiler.clock_ns(),
                    calls=len(expanded), timed=profile)
  return UOp(Ops.LINEAR, None, tuple(out))
