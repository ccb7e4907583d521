"""A collective backend for the core's tests, with no second process: MIRROR. This process is rank `rank` of
`world_size`, and every other rank is its mirror image, passing exactly what this one passes (an all_reduce sum is
world_size times the value, an all_gather world_size copies). `edit_peer_record` lets a test make the other ranks'
header records differ (a mismatch), `takes_device_memory` pass Buffers instead of host views; `calls` counts each
method's calls. Nothing in the core names it: it is found through the `tinycore_collective_backends` hook like MPI.
"""
from __future__ import annotations
from typing import Any, Callable
from tinycore.plugin import API_VERSION, Buffer, CollectiveBackend, CollectiveSpec, hookimpl

SETTINGS: dict[str, Any] = {"world_size": 2, "rank": 0, "device_memory": False, "launched": False}


class MirrorBackend(CollectiveBackend):
  name = "MIRROR"

  def __init__(self) -> None:
    self.world_size, self.rank = SETTINGS["world_size"], SETTINGS["rank"]
    self.device_memory = SETTINGS["device_memory"]
    self.edit_peer_record: Callable[[int, bytearray], None] | None = None
    self.calls: dict[str, int] = {"all_gather": 0, "all_reduce": 0, "broadcast": 0}
    self.seen: list[tuple[str, type, bool]] = []  # (method, type of send, whether send is recv)
    self.finalized = False

  def all_gather(self, send: Any, recv: Any, dtype: Any) -> None:
    self.calls["all_gather"] += 1
    self.seen.append(("all_gather", type(send), send is recv))
    data = read(send)
    for rank in range(self.world_size):
      piece = bytearray(data)
      if rank != self.rank and self.edit_peer_record is not None: self.edit_peer_record(rank, piece)
      write(recv, bytes(piece), rank * len(data))

  def all_reduce(self, send: Any, recv: Any, dtype: Any, op: str) -> None:
    import numpy as np
    self.calls["all_reduce"] += 1
    self.seen.append(("all_reduce", type(send), send is recv))
    values = np.frombuffer(read(send), dtype=np.dtype(dtype.name if dtype.name != "bfloat16" else "uint16"))
    if op == "sum" and dtype.name != "bool": values = sum([values] * self.world_size)  # the mirrors' sum, in order
    write(recv, values.astype(values.dtype).tobytes(), 0)

  def broadcast(self, buffer: Any, dtype: Any, root: int) -> None:
    self.calls["broadcast"] += 1
    self.seen.append(("broadcast", type(buffer), True))  # every rank holds the root's value already

  def abort(self, code: int) -> None:
    raise SystemExit(f"MIRROR abort({code})")

  def takes_device_memory(self, device: str) -> bool: return self.device_memory

  def finalize(self) -> None: self.finalized = True


def read(x: Any) -> bytes:
  if isinstance(x, Buffer):
    out = memoryview(bytearray(x.nbytes))
    x.copyout(out)
    return bytes(out)
  return bytes(x)


def write(x: Any, data: bytes, offset: int) -> None:
  if isinstance(x, Buffer):
    whole = memoryview(bytearray(x.nbytes))
    x.copyout(whole)
    whole[offset:offset + len(data)] = data
    x.copyin(whole)
  else: x[offset:offset + len(data)] = data


OPENED: list[MirrorBackend] = []


def open_mirror() -> MirrorBackend:
  OPENED.append(MirrorBackend())
  return OPENED[-1]


@hookimpl
def tinycore_api_version() -> str: return API_VERSION


@hookimpl
def tinycore_collective_backends() -> list[CollectiveSpec]:
  return [CollectiveSpec("MIRROR", "every other rank mirrors this process (test equipment)",
                         launched=lambda: SETTINGS["launched"], probe=lambda: None, open=open_mirror,
                         library=lambda: "mirror 1.0")]
