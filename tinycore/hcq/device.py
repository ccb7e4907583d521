"""The device side of HCQ2: what a queue-driven device implements (`HCQDevice`, `HWQueue`)."""
from __future__ import annotations
import functools
import struct
import time
from typing import Any, Sequence
import attrs
from tinycore.device.compiled import Compiled, seconds_setting
from tinycore.device.python import HOST_DEVICE
from tinycore.device.registry import Device
from tinycore.hcq.commands import (Barrier, Command, Copy, Exec, InputAddress, SignalStore, SignalWait, Timestamp,
                                   Value, Variable)
from tinycore.hcq.in_flight import release_finished
from tinycore.hcq.lock import runtime_lock
from tinycore.hcq.signal import Signal, signal_pool


class HCQTimeoutError(RuntimeError):
  """A device made no progress within its wait timeout (a wait on a signal nobody writes, or a hang)."""


QUEUE_TIMEOUT_ENV = "TINYCORE_QUEUE_TIMEOUT"
DEFAULT_QUEUE_TIMEOUT_S = 30.0


def queue_timeout_s() -> float:
  """How long a host wait on a queue device may see no progress (one kernel running longer counts as none) before
  HCQTimeoutError: $TINYCORE_QUEUE_TIMEOUT seconds (default 30)."""
  return seconds_setting(QUEUE_TIMEOUT_ENV, DEFAULT_QUEUE_TIMEOUT_S)


def raise_timeout_hint() -> str:
  """The sentence a timeout error ends with: how to allow more time."""
  return (f"if the work is only slow (a long kernel), allow more time with {QUEUE_TIMEOUT_ENV}=<seconds> "
          f"(now {queue_timeout_s():g})")


@attrs.define
class Encoded:
  """A queue's commands in the device's format: `blob` plus `patches`, the byte offsets in the blob where a 64-bit
  little-endian run-time value goes (input addresses and variables; everything else is written at encode time).
  `entries` counts the records written (a CPU queue's ring entries); `commands` counts the kernels and copies inside
  (what GlobalCounters counts)."""
  blob: bytearray
  patches: list[tuple[int, InputAddress | Variable]] = attrs.field(factory=list)
  entries: int = 0
  commands: int = 0

  def __add__(self, other: Encoded) -> Encoded:
    """Two command buffers back to back (queues whose format is a sequence of records concatenate)."""
    shift = len(self.blob)
    return Encoded(self.blob + other.blob, self.patches + [(offset + shift, ref) for offset, ref in other.patches],
                   self.entries + other.entries, self.commands + other.commands)

  def patched(self, values: dict[Any, int]) -> bytearray:
    if not self.patches: return self.blob
    out = bytearray(self.blob)
    pack_word = _WORD.pack_into
    for offset, ref in self.patches: pack_word(out, offset, values[ref] & 0xFFFFFFFFFFFFFFFF)
    return out


_WORD = struct.Struct("<Q")  # one patched 64-bit word (compiled once: every eager submission patches a few)


class CommandWriter:
  """Where a queue writes one command buffer: records of 64-bit little-endian words. A word that is an InputAddress
  or a Variable is written as 0 and recorded as a patch (its byte offset), filled in at every run."""

  def __init__(self) -> None:
    self.blob = bytearray()
    self.patches: list[tuple[int, InputAddress | Variable]] = []
    self.records = 0

  def words(self, values: Sequence[Value], pad_to: int = 0) -> None:
    """Append one record: `values` as 64-bit words, zero-padded to `pad_to` words (fixed-size records)."""
    if pad_to and len(values) > pad_to: raise ValueError(f"a record of {len(values)} words exceeds {pad_to}")
    start = len(self.blob)
    ints = [value if isinstance(value, int) else 0 for value in values]
    self.patches += [(start + 8 * i, value) for i, value in enumerate(values) if not isinstance(value, int)]
    self.blob += _words_struct(len(ints)).pack(*ints)
    if pad_to > len(ints): self.blob += bytes(8 * (pad_to - len(ints)))
    self.records += 1


@functools.lru_cache(maxsize=None)
def _words_struct(count: int) -> struct.Struct: return struct.Struct(f"<{count}Q")


class HWQueue:
  """One hardware queue of a device ("compute" or "copy"). Commands on one queue run in order.

  A device writes one method per command, each appending the command to a CommandWriter in the device's format:
  `exec(out, Exec)`, `copy(out, Copy)`, `signal(out, SignalStore)`, `wait(out, SignalWait)`,
  `timestamp(out, Timestamp)` and `barrier(out, Barrier)`; plus `submit`. `encode` (in the core) dispatches the
  commands to those methods and counts kernels and copies."""

  # True when `signal` takes a Variable as the stored value (written as a patch, as in `CommandWriter.words`): the
  # runtime then encodes a batch's end once and patches the epoch in at every run
  patched_signal_values: bool = False

  def __init__(self, device: HCQDevice, kind: str):
    self.device, self.kind = device, kind

  def encode(self, commands: Sequence[Command]) -> Encoded:
    """The commands in this device's command format. A Value that is an InputAddress or Variable gets a patch."""
    out = CommandWriter()
    counted = 0
    for command in commands:
      method = COMMAND_METHODS.get(type(command))
      if method is None: raise TypeError(f"{self!r} cannot run a {type(command).__name__}: not an HCQ2 command")
      getattr(self, method)(out, command)
      counted += isinstance(command, (Exec, Copy))
    return Encoded(out.blob, out.patches, out.records, counted)

  def exec(self, out: CommandWriter, command: Exec) -> None:
    """Run a kernel: `command.program` (a CompiledKernel) with `buffers` (addresses) and `vals`."""
    raise NotImplementedError(f"{type(self).__name__} cannot run kernels")

  def copy(self, out: CommandWriter, command: Copy) -> None:
    """Copy `nbytes` from address `src` to address `dst`."""
    raise NotImplementedError(f"{type(self).__name__} cannot copy")

  def signal(self, out: CommandWriter, command: SignalStore) -> None:
    """Store `value` into the signal at `signal.addr` once everything before it on this queue finished."""
    raise NotImplementedError(f"{type(self).__name__} cannot store signals")

  def wait(self, out: CommandWriter, command: SignalWait) -> None:
    """Wait until the signal at `signal.addr` is >= `value`."""
    raise NotImplementedError(f"{type(self).__name__} cannot wait on signals")

  def timestamp(self, out: CommandWriter, command: Timestamp) -> None:
    """Store the device clock into the signal: nanoseconds, or ticks of the device's `timestamp_period_ns`."""
    raise NotImplementedError(f"{type(self).__name__} cannot write timestamps")

  def barrier(self, out: CommandWriter, command: Barrier) -> None:
    """Make everything before visible to everything after (a queue that runs in order on coherent memory may
    write nothing, but must say so by overriding this)."""
    raise NotImplementedError(f"{type(self).__name__} has no barrier")

  def submit(self, encoded: Encoded, values: dict[Any, int]) -> None:
    """Write the encoded commands, with run-time values patched in, to the queue and ring its doorbell."""
    raise NotImplementedError(f"{type(self).__name__} cannot submit")

  def __repr__(self) -> str: return f"<{self.device.device} {self.kind} queue>"


COMMAND_METHODS: dict[type, str] = {Exec: "exec", Copy: "copy", SignalStore: "signal", SignalWait: "wait",
                                    Timestamp: "timestamp", Barrier: "barrier"}


def is_hcq_device(dev: Any) -> bool: return isinstance(dev, HCQDevice)


class HCQDevice(Compiled):
  """A device driven through hardware command queues.

  Subclasses set `queues` ({"compute": ..., "copy": ...}) and give their allocator a `_map` for memory of other
  devices the queues address (see `device_address`). `has_copy_queue` says whether a DMA queue exists (copies go to
  the allocator otherwise); `host_devs` are the host device kinds whose memory the queues address in place (others
  are staged through a ring in the core's host memory). The core's host kind (`HOST_DEVICE`, where the ring lives) is
  always addressed in place, listed or not. The allocator's host copies (`_copyin`, `_copyout`) are called with the
  runtime lock held, one thread at a time, as submissions are. `timeline` is written by the device at the end of
  each batch with the batch's epoch; `epoch` is the last one the host submitted. `timestamp_period_ns` is the length
  of one unit of the device clock that Timestamp commands write (1: nanoseconds).
  """
  host_devs: frozenset[str] = frozenset({HOST_DEVICE})
  timestamp_period_ns: float = 1.0  # nanoseconds per unit of what a Timestamp command writes (the profiler reads it)

  def __init__(self, device: str, allocator: Any, renderer: Any = None, compiler: Any = None, runtime: Any = None):
    super().__init__(device, allocator, renderer, compiler, runtime)
    allocator.host_copy_lock = runtime_lock  # host copies share the queues: one thread at a time
    self.queues: dict[str, HWQueue] = {}
    self.timeline: Signal = signal_pool.new(f"{device} timeline")
    self.epoch = 0
    self.unusable: str | None = None  # why this device cannot run work in this process (set in a forked child)

  @property
  def has_copy_queue(self) -> bool: return "copy" in self.queues  # type: ignore[override]

  def addresses_in_place(self, device: str) -> bool:
    """Whether this device's queues address `device`'s memory in place: a queue device, the core's host kind, or a
    kind in `host_devs`."""
    kind = device.partition(":")[0]
    return kind == HOST_DEVICE or kind in self.host_devs or is_hcq_device(Device[device])

  @property
  def wait_timeout_ms(self) -> int:
    """The no-progress limit of host waits, from TINYCORE_QUEUE_TIMEOUT (read at each wait)."""
    return int(queue_timeout_s() * 1000)

  def device_address(self, buf: Any) -> int:
    """The address this device's queues use for `buf`: a Buffer of this device, of another queue device, or of a
    host kind in `host_devs`. Memory of another device is mapped by this device's allocator (`Allocator.map`) and
    the mapping is cached on the Buffer (`Buffer.get_storage`)."""
    if buf.device != self.device and not self.addresses_in_place(buf.device):
      raise RuntimeError(f"{self.device} cannot address {buf.device} memory (host_devs={sorted(self.host_devs)}): "
                         "copies with it are staged")
    return self.handle_address(buf.get_buf(self.device))

  def handle_address(self, handle: Any) -> int:
    """The address in a handle of this device (its own memory or a mapping); `handle.addr` unless overridden."""
    return handle.addr

  @property
  def in_flight(self) -> bool: return self.timeline.value < self.epoch

  def synchronize(self, timeout_ms: int | None = None) -> None:
    """Wait until the device finished everything submitted. No progress for `timeout_ms` (default
    `wait_timeout_ms`) raises HCQTimeoutError naming the device, its queues and the signal values."""
    if self.unusable is not None and self.in_flight: raise RuntimeError(self.unusable)
    timeout = (self.wait_timeout_ms if timeout_ms is None else timeout_ms) / 1000
    last_seen, last_change = self.timeline.value, time.perf_counter()
    while (current := self.timeline.value) < self.epoch:
      now = time.perf_counter()
      if current != last_seen: last_seen, last_change = current, now
      elif now - last_change > timeout:
        raise HCQTimeoutError(f"{self.device}: no progress for {timeout * 1000:.0f} ms: timeline signal is {current}, "
                              f"waiting for {self.epoch}; {self.queue_state()}; {raise_timeout_hint()}")
      # block at most until the no-progress limit, in slices so progress is seen and Ctrl-C is answered
      self.host_wait_signal(self.timeline, self.epoch, min(0.05, timeout))
    release_finished()

  def host_wait_signal(self, signal: Signal, value: int, timeout_s: float) -> bool:
    """Block the host until `signal` >= `value`, for at most about `timeout_s` seconds; True if it got there.
    synchronize() calls it in a loop (and raises HCQTimeoutError without progress). This default polls: a few
    looks, then 50 us sleeps. A device that can block on the signal in native code (without the GIL) overrides it."""
    deadline, spins = time.perf_counter() + timeout_s, 0
    while signal.value < value:
      if time.perf_counter() > deadline: return False
      spins += 1
      if spins > 64: time.sleep(0.00005)
    return True

  def restart_after_fork(self) -> None:
    """Called in a forked child (os.fork, multiprocessing's "fork" start method) for a device the parent opened; the
    parent drained every queue before the fork, so memory is complete. Re-create what did not survive the fork (worker
    threads, driver contexts). A device that cannot do so raises, and is then refused in the child with the reason."""
    raise NotImplementedError(f"{type(self).__name__} does not support fork")

  def queue_state(self) -> str:
    """A description of each queue's progress, for error messages."""
    return ", ".join(f"{kind} queue {q!r}" for kind, q in self.queues.items()) or "no queues"
