"""Helpers shared by the DISK tests."""
from __future__ import annotations
import os
import pathlib
import stat


def disk(path: str | os.PathLike) -> str:
  """The DISK device name of a file."""
  return f"DISK:{os.fspath(path)}"


def make_read_only(path: pathlib.Path) -> None:
  """No write permission bits for anyone: DISK opens it read-only (even as root, who could otherwise write it)."""
  path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


def free_buffers() -> None:
  """Collect garbage so that buffers without a tensor are freed (and their files closed) now."""
  import gc
  gc.collect()
