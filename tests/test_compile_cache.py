"""The compile cache holds code this process runs, so it trusts only what the user alone could have written: the
directory is created 0700, one owned by another user or writable by others is refused (a private temporary cache is
used, with a warning), and every entry is signed and checked before use (a bad entry is recompiled, never fatal)."""
from __future__ import annotations
import os
import pathlib
import stat
import pytest
from tinycore.device.compiled import Compiler, trusted_cache_dir


class CountingCompiler(Compiler):
  """A compiler whose "binary" is the source's bytes, counting its runs."""
  cachekey = "counting"

  def __init__(self) -> None: self.runs = 0

  def compile(self, src: str) -> bytes:
    self.runs += 1
    return b"BINARY:" + src.encode()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> pathlib.Path:
  monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.delenv("TINYCORE_DISABLE_COMPILER_CACHE", raising=False)
  return tmp_path / "cache"


def entries(cache: pathlib.Path) -> list[pathlib.Path]:
  return [p for p in (cache / "compiled").rglob("*") if p.is_file()]


def test_the_cache_directory_is_created_private(cache):
  compiler = CountingCompiler()
  assert compiler.compile_cached("a") == compiler.compile_cached("a") == b"BINARY:a" and compiler.runs == 1
  assert stat.S_IMODE(cache.stat().st_mode) == 0o700
  assert [stat.S_IMODE(p.stat().st_mode) for p in entries(cache)] == [0o600]
  assert stat.S_IMODE((cache / "key").stat().st_mode) == 0o600


@pytest.mark.parametrize("damage", ["flip a payload byte", "truncate", "unsigned (an old cache)", "empty"])
def test_a_corrupt_entry_is_recompiled_and_rewritten(cache, damage):
  compiler = CountingCompiler()
  compiler.compile_cached("kernel source")
  [entry] = entries(cache)
  data = entry.read_bytes()
  if damage == "flip a payload byte": data = data[:-1] + bytes([data[-1] ^ 1])
  elif damage == "truncate": data = data[:-3]
  elif damage == "unsigned (an old cache)": data = b"BINARY:kernel source"
  else: data = b""
  entry.write_bytes(data)
  assert compiler.compile_cached("kernel source") == b"BINARY:kernel source" and compiler.runs == 2
  assert compiler.compile_cached("kernel source") == b"BINARY:kernel source" and compiler.runs == 2  # rewritten


def test_an_entry_moved_to_another_name_is_not_used(cache):
  compiler = CountingCompiler()
  compiler.compile_cached("first")
  compiler.compile_cached("second")
  first, second = entries(cache)
  second.write_bytes(first.read_bytes())  # validly signed, but for another key
  assert compiler.compile_cached("first") == b"BINARY:first" and compiler.compile_cached("second") == b"BINARY:second"
  assert compiler.runs == 3


def test_an_entry_others_may_write_is_refused(cache):
  compiler = CountingCompiler()
  compiler.compile_cached("x")
  [entry] = entries(cache)
  entry.chmod(0o666)
  with pytest.warns(RuntimeWarning, match="lets other users write it"):
    assert compiler.compile_cached("x") == b"BINARY:x"
  assert compiler.runs == 2 and stat.S_IMODE(entry.stat().st_mode) == 0o600  # replaced by a private one


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a file away")
def test_an_entry_owned_by_another_user_is_refused(cache):
  compiler = CountingCompiler()
  compiler.compile_cached("y")
  [entry] = entries(cache)
  os.chown(entry, 12345, 12345)
  with pytest.warns(RuntimeWarning, match="owned by uid 12345"):
    assert compiler.compile_cached("y") == b"BINARY:y"
  assert compiler.runs == 2 and entry.stat().st_uid == os.geteuid()


def test_a_directory_others_may_write_is_refused_for_a_private_temporary_cache(cache):
  cache.mkdir()
  cache.chmod(0o777)
  with pytest.warns(RuntimeWarning, match="lets other users write it.*private temporary cache"):
    chosen = trusted_cache_dir()
  assert chosen != cache and stat.S_IMODE(chosen.stat().st_mode) == 0o700 and chosen.stat().st_uid == os.geteuid()
  compiler = CountingCompiler()
  assert compiler.compile_cached("z") == compiler.compile_cached("z") == b"BINARY:z" and compiler.runs == 1
  assert list(cache.iterdir()) == []  # nothing was written where others could change it


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a directory away")
def test_a_directory_owned_by_another_user_is_refused(cache):
  cache.mkdir(mode=0o700)
  os.chown(cache, 12345, 12345)
  with pytest.warns(RuntimeWarning, match="owned by uid 12345"):
    assert trusted_cache_dir() != cache


def test_a_shared_object_is_never_loaded_from_a_predictable_path(cache):
  # tiny-cpu loads kernels from fresh private files it removes at once: a file planted where the old cache kept
  # shared objects is never loaded
  tiny_cpu = pytest.importorskip("tiny_cpu.device")
  from tiny_cpu.compiler import CPUCompiler
  lib = CPUCompiler().compile_cached("int answer(void) { return 42; }")
  import hashlib
  planted = trusted_cache_dir() / "so" / f"{hashlib.sha256(lib).hexdigest()}.so"
  planted.parent.mkdir(exist_ok=True)
  planted.write_bytes(CPUCompiler().compile("int answer(void) { return 666; }"))
  loaded = tiny_cpu.load_shared_object(lib)
  assert loaded.answer() == 42
  assert list(planted.parent.iterdir()) == [planted]


def test_an_entry_that_is_not_a_regular_file_is_refused_without_blocking(cache):
  compiler = CountingCompiler()
  compiler.compile_cached("w")
  [entry] = entries(cache)
  entry.unlink()
  os.mkfifo(entry)  # opening a FIFO for reading would wait for a writer forever
  with pytest.warns(RuntimeWarning, match="not a regular file"):
    assert compiler.compile_cached("w") == b"BINARY:w"
  assert compiler.runs == 2 and entry.is_file()
