"""Running a COLLECTIVE call: the processes of a job combine a buffer through a collective backend (a plugin's, found
through the `tinycore_collective_backends` hook).

Each call, in this order:
1. the header: every process gathers every other's (which collective, its dtype, its shape and its number), through
   the backend's all_gather of a small fixed-size record; a mismatch raises `CollectiveMismatch` naming each rank's
   call, on every rank at once, before any payload moves (so no process is left inside a collective the others never
   entered). The exchange completes only when every process reached it: it is also the barrier. A small all_gather
   or broadcast payload rides in the record (`inline_bytes`: one backend call, not two);
2. the payload, in host memory: a buffer with a zero-copy host view (CPU, PYTHON memory) is passed as it is, any
   other staged through host memory (copied out, combined, copied back in), unless the backend takes that device's
   memory itself (`CollectiveBackend.takes_device_memory`);
3. meanwhile the watch (`tinycore.device.collective_faults`) ends the job when this process waits longer than
   TINYCORE_DIST_TIMEOUT seconds, or as soon as another process of the job on this machine exits.
"""
from __future__ import annotations
import struct
import zlib
from typing import Any, NamedTuple
from tinycore.dtype import DType, dtypes
from tinycore.uop.collective import Collective
from tinycore.device.buffer import Buffer


class CollectiveError(RuntimeError):
  """A collective that cannot run: no backend started, or one that cannot be used here."""


class CollectiveMismatch(CollectiveError):
  """The processes of a job called different collectives (or on different dtypes or shapes) at the same point."""


class CollectiveBackend:
  """A started collective backend (what `CollectiveSpec.open` returns): this process's `rank` among `world_size`.

  Subclass it and implement the methods below. The core calls them in the same order on every process, only after
  the header exchange agreed, and never from two threads at once. Host memory arrives as memoryviews of format "B"
  (the core's buffers, zero-copy: write the result into `recv` in place) with the element dtype alongside."""
  name = ""
  rank = 0
  world_size = 1

  def all_gather(self, send: Any, recv: Any, dtype: DType) -> None:
    """recv := every rank's `send` one after another, in rank order (recv is world_size times send's size)."""
    raise NotImplementedError

  def all_reduce(self, send: Any, recv: Any, dtype: DType, op: str) -> None:
    """recv := the elementwise `op` ("sum", "max" or "min") of every rank's send. `send is recv` means in place.
    float16 and bfloat16 travel as 16 bits (combined pairwise, each result rounded to the dtype), not as float32."""
    raise NotImplementedError

  def broadcast(self, buffer: Any, dtype: DType, root: int) -> None:
    """buffer := rank `root`'s buffer, on every rank."""
    raise NotImplementedError

  def abort(self, code: int) -> None:
    """End every process of the job now with exit status `code` (the core has printed why). May be called from
    another thread while one waits inside a collective. Must not return."""
    raise NotImplementedError

  def takes_device_memory(self, device: str) -> bool:
    """Whether this backend reads and writes `device`'s memory itself: then send/recv/buffer are that device's
    `Buffer`s (allocated, synchronized) instead of host memoryviews. Default: no (the core stages through host
    memory)."""
    return False

  def finalize(self) -> None:
    """Called once at exit, after the last collective every process agreed on (release the library)."""


# ---------------------------------------------------------------------------- the header
HEADER_WORDS = 16
HEADER_BYTES = HEADER_WORDS * 8
HEADER_FORMAT = f"<{HEADER_WORDS}q"
MAGIC = 0x74696E79636F7265  # "tinycore"
SHOWN_DIMS = HEADER_WORDS - 7
NUMBER_OFFSET = 8  # the collective's number: the second word
MAX_HEADERS = 1024  # packed headers kept (one per distinct collective a program runs)
NUMBER_WORD = struct.Struct("<q")
# what a header says a process is doing (the first three are its collectives)
KIND_CODES = {"all_reduce": 1, "all_gather": 2, "broadcast": 3, "barrier": 4, "exit": 5, "start": 6}
KIND_NAMES = {code: name for name, code in KIND_CODES.items()}
REDUCE_CODES = {"sum": 1, "max": 2, "min": 3}


def dtype_word(dtype: DType | None) -> int:
  """A dtype's name in one int64 (every name has at most 8 characters)."""
  return int.from_bytes((dtype.name if dtype is not None else "").encode()[:8].ljust(8, b"\0"), "little", signed=True)


def header_words(kind: str, number: int, detail: int = 0, dtype: DType | None = None,
                 shape: tuple[int, ...] = ()) -> tuple[int, ...]:
  """[magic, number, kind, detail (reduce op or root), dtype, ndim, crc of the shape, the first dims...]."""
  dims = tuple(shape[:SHOWN_DIMS]) + (0,) * (SHOWN_DIMS - min(len(shape), SHOWN_DIMS))
  return (MAGIC, number, KIND_CODES[kind], detail, dtype_word(dtype), len(shape),
          zlib.crc32(repr(tuple(shape)).encode()), *dims)


def describe_header(words: tuple[int, ...]) -> str:
  """What a header says, for a message: "all_reduce sum float32 (4, 3) (collective #7)"."""
  if words[0] != MAGIC: return "no tinycore collective (a call of the backend that tinycore did not make)"
  kind = KIND_NAMES.get(words[2], f"kind {words[2]}")
  if kind == "exit": return f"exiting after {words[1] - 1} collective{'' if words[1] == 2 else 's'}"
  if kind == "start": return "starting (tinycore.distributed.init)"
  if kind == "barrier": return f"barrier (collective #{words[1]})"
  dtype = words[4].to_bytes(8, "little", signed=True).rstrip(b"\0").decode(errors="replace")
  ndim = words[5]
  shape = tuple(words[7:7 + min(ndim, SHOWN_DIMS)]) + (("...",) if ndim > SHOWN_DIMS else ())
  detail = {"all_reduce": " " + next((op for op, code in REDUCE_CODES.items() if code == words[3]), "?"),
            "broadcast": f" from rank {words[3]}"}.get(kind, "")
  return f"{kind}{detail} {dtype} {shape} (collective #{words[1]})"


def mismatch_message(rows: list[tuple[int, ...]]) -> str:
  """Which rank called what, grouped: "ranks 0, 2: all_reduce sum float32 (4,) ...; rank 1: ..."."""
  groups: dict[tuple[int, ...], list[int]] = {}
  for rank, words in enumerate(rows): groups.setdefault(words, []).append(rank)
  parts = [f"{'ranks' if len(ranks) > 1 else 'rank'} {', '.join(map(str, ranks))}: {describe_header(words)}"
           for words, ranks in groups.items()]
  return "the processes called different collectives at the same point: " + "; ".join(parts)


# ---------------------------------------------------------------------------- the group this process belongs to
# Each rank's record in the header exchange: the header, then room for a small payload. A small all_gather or
# broadcast rides in it (one backend call instead of two); the room shrinks as the job grows, so the exchange stays
# within RECORDS_BYTES (and vanishes past 512 ranks). Every rank computes the same size from the world size.
RECORDS_BYTES = 64 * 1024
MOST_INLINE_BYTES = 4096


def inline_bytes(world_size: int) -> int:
  """The payload bytes that ride in a rank's header record, for a job of `world_size` ranks."""
  room = RECORDS_BYTES // world_size - HEADER_BYTES
  return max(0, min(MOST_INLINE_BYTES, room - room % 8))


class PreparedCollective(NamedTuple):
  """A collective's header (its number word 0), whether its payload rides in the header records, and if so where
  each rank's piece starts in the records and where it lands in the result."""
  header: bytes
  inline: bool
  pieces: tuple[tuple[int, int], ...]


class CollectiveGroup:
  """The started backend of this process, its watch, and the number of collectives run so far."""

  def __init__(self, backend: CollectiveBackend, watch: Any):
    self.backend, self.watch = backend, watch
    self.rank, self.world_size, self.name = backend.rank, backend.world_size, backend.name
    self.number = 0
    self.inline_bytes = inline_bytes(self.world_size)
    self.record_bytes = HEADER_BYTES + self.inline_bytes
    self.record_send = memoryview(bytearray(self.record_bytes))
    self.records = memoryview(bytearray(self.record_bytes * self.world_size))
    self.own_record = self.rank * self.record_bytes
    self.record_starts = [i * self.record_bytes for i in range(self.world_size) if i != self.rank]
    self.staging: dict[str, memoryview] = {}
    self.headers: dict[tuple, bytes] = {}
    self.prepared_steps: dict[tuple, PreparedCollective] = {}
    self.previous_excepthook: Any = None  # the fault handling's (tinycore.device.collective_faults)
    self.exception_hook: Any = None

  def exchange(self, kind: str, detail: int = 0, dtype: DType | None = None, shape: tuple[int, ...] = (),
               payload: memoryview | None = None) -> memoryview:
    """Every rank's record for this step, one backend all_gather (the barrier): each a header (raises
    CollectiveMismatch when they differ) and, when given, this rank's small payload after it."""
    return self.exchange_header(self.header(kind, detail, dtype, shape), payload)

  def exchange_header(self, header: bytes, payload: memoryview | None) -> memoryview:
    """`exchange` of a packed header (its number word is filled in here)."""
    self.number += 1
    send, size, watch = self.record_send, self.record_bytes, self.watch
    send[:HEADER_BYTES] = header
    NUMBER_WORD.pack_into(send, NUMBER_OFFSET, self.number)
    if payload is not None: send[HEADER_BYTES:HEADER_BYTES + payload.nbytes] = payload
    watch.entering(self.describe_exchange)
    try: self.backend.all_gather(send, self.records, dtypes.uint8)
    finally: watch.left()
    received = self.records.tobytes()
    mine = received[self.own_record:self.own_record + HEADER_BYTES]  # what this rank sent
    for start in self.record_starts:
      if received[start:start + HEADER_BYTES] != mine:
        raise CollectiveMismatch(mismatch_message([struct.unpack_from(HEADER_FORMAT, received, i * size)
                                                   for i in range(self.world_size)]))
    return self.records

  def describe_exchange(self) -> str:
    """What the header exchange under way is about (the watch's message when it waits too long)."""
    return f"{describe_header(struct.unpack_from(HEADER_FORMAT, self.record_send))}, exchanging headers"

  def header(self, kind: str, detail: int, dtype: DType | None, shape: tuple[int, ...]) -> bytes:
    """The header of such a collective (its number left 0), packed once per distinct collective."""
    key = (kind, detail, dtype, shape)
    if (packed := self.headers.get(key)) is None:
      if len(self.headers) >= MAX_HEADERS: self.headers.clear()
      packed = self.headers[key] = struct.pack(HEADER_FORMAT, *header_words(kind, 0, detail, dtype, shape))
    return packed

  def scratch(self, role: str, nbytes: int) -> memoryview:
    """Host memory to stage `nbytes` through (one per role, grown as needed, kept)."""
    held = self.staging.get(role)
    if held is None or held.nbytes < nbytes: held = self.staging[role] = memoryview(bytearray(nbytes))
    return held[:nbytes]

  def prepared(self, collective: Collective, dtype: DType, nbytes: int) -> PreparedCollective:
    """What running this collective on `nbytes` of `dtype` needs besides the buffers, worked out once."""
    key = (collective, dtype, nbytes)
    if (found := self.prepared_steps.get(key)) is None:
      # (a gathered all_reduce's header says all_reduce: ranks that disagree on its size are named as the user wrote
      # it)
      kind = "all_reduce" if collective.reduce_op is not None else collective.kind
      detail = collective.root if kind == "broadcast" else REDUCE_CODES.get(collective.reduce_op or "", 0)
      inline = collective.kind != "all_reduce" and 0 < nbytes <= self.inline_bytes
      ranks = range(self.world_size) if collective.kind == "all_gather" else (collective.root,)
      header = self.header(kind, detail, dtype, collective.shape)
      # where each rank's inline payload starts in the records, and where it goes in the destination
      pieces = tuple((rank * self.record_bytes + HEADER_BYTES, i * nbytes) for i, rank in enumerate(ranks))
      if len(self.prepared_steps) >= MAX_HEADERS: self.prepared_steps.clear()
      found = self.prepared_steps[key] = PreparedCollective(header, inline, pieces)
    return found

  def run(self, collective: Collective, dst: Buffer, src: Buffer) -> None:
    """Run one collective: the header exchange (with the payload in it when it is a small all_gather or
    broadcast), then the payload from src into dst (see the module docstring)."""
    nbytes = src.nbytes
    step = self.prepared(collective, src.dtype, nbytes)
    if step.inline:
      records = self.exchange_header(step.header, self.host_view(src, "send", read=True)[0])
      recv, staged = self.host_view(dst, "recv", read=False)
      for start, at in step.pieces: recv[at:at + nbytes] = records[start:start + nbytes]
      if staged: dst.copyin(recv)
      return
    self.exchange_header(step.header, None)
    if nbytes:
      number = self.number
      self.watch.entering(lambda: f"{collective.describe()} {src.dtype.name} (collective #{number})")
      try: self.move_payload(collective, dst, src)
      finally: self.watch.left()

  def move_payload(self, collective: Collective, dst: Buffer, src: Buffer) -> None:
    backend = self.backend
    in_place = src.base is dst.base and src.offset == dst.offset and src.nbytes == dst.nbytes
    if backend.takes_device_memory(dst.device) and backend.takes_device_memory(src.device):
      send, recv = (dst, dst) if in_place else (src.ensure_allocated(), dst.ensure_allocated())
      staged = False
    else:
      recv, staged = self.host_view(dst, "recv", read=in_place)
      send = recv if in_place else self.readable_copy(src, dst)
    if collective.kind == "all_reduce": backend.all_reduce(send, recv, src.dtype, collective.reduce_op)
    elif collective.kind == "all_gather": backend.all_gather(send, recv, src.dtype)
    else:
      if self.rank == collective.root and send is not recv: copy_into(recv, send)
      backend.broadcast(recv, src.dtype, collective.root)
    if staged: dst.copyin(recv)

  def host_view(self, buffer: Buffer, role: str, read: bool) -> tuple[memoryview, bool]:
    """(buffer's bytes in host memory, whether they are a staged copy): its zero-copy host view when it has one."""
    if (view := buffer.ensure_allocated().host) is not None: return view, False
    staged = self.scratch(role, buffer.nbytes)
    if read: buffer.copyout(staged)
    return staged, True

  def readable_copy(self, src: Buffer, dst: Buffer) -> memoryview:
    """src's bytes in host memory, not overlapping dst's (a source inside the destination is copied first)."""
    view, staged = self.host_view(src, "send", read=True)
    if not staged and src.base is dst.base and overlaps(src, dst):
      copy = self.scratch("send", src.nbytes)
      copy[:] = view
      return copy
    return view


def overlaps(a: Buffer, b: Buffer) -> bool:
  return a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes


def copy_into(dst: Any, src: Any) -> None:
  """dst := src, for host memoryviews or Buffers (a backend that takes device memory)."""
  if isinstance(dst, Buffer): dst.copy_from(src)
  else: dst[:] = src


_group: list[CollectiveGroup] = []  # the group this process started (at most one)


def start_group(backend: CollectiveBackend, watch: Any) -> CollectiveGroup:
  """Make `backend` the one this process's collectives run through (tinycore.distributed.init does)."""
  if _group: raise CollectiveError(f"a collective backend is already started ({_group[0].name})")
  _group.append(CollectiveGroup(backend, watch))
  return _group[0]


def current_group() -> CollectiveGroup:
  """The started group; a CollectiveError saying what to do when there is none."""
  if not _group:
    raise CollectiveError("no collective backend is started in this process: call tinycore.distributed.init() "
                          "first, in a script its backend's launcher started (tinycore devices lists the backends)")
  return _group[0]


def started_group() -> CollectiveGroup | None:
  return _group[0] if _group else None


def forget_group() -> None:
  """No group started any more (after its exit exchange: tinycore.distributed.shutdown)."""
  _group.clear()


def run_collective(collective: Collective, dst: Buffer, src: Buffer) -> None:
  """Execute CALL(COLLECTIVE, dst, src) in this process's group (see the module docstring)."""
  current_group().run(collective, dst, src)
