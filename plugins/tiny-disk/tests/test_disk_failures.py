"""Files that fail under DISK: truncated by another process, a full disk, a save that fails midway. Each scenario runs
in a child process and the test asserts on its exit status: a signal (SIGBUS from a mapped page) is a failure, an
OSError naming the file is the expected outcome."""
from __future__ import annotations
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("cpu_device")

PRELUDE = """
import os, pathlib, sys
import numpy as np
from tinycore import Tensor, dtypes
from tinycore.nn.state import safe_load, safe_save
path = sys.argv[1]
def report(what):
  try: what()
  except OSError as error:
    print("OSError", error.errno, error.strerror)
  else: print("no error")
"""


def run_child(code: str, *args: str) -> str:
  """Run ``code`` (after PRELUDE) in a fresh interpreter; its stdout. Dying by a signal fails the test."""
  out = subprocess.run([sys.executable, "-c", PRELUDE + code, *map(str, args)], capture_output=True, text=True,
                       timeout=120)
  if out.returncode < 0:
    pytest.fail(f"the child was killed by {signal.Signals(-out.returncode).name}: {out.stderr[-2000:]}")
  assert out.returncode == 0, out.stderr[-2000:]
  return out.stdout


TRUNCATED = {
  "numpy": "t.numpy()",
  "to-cpu": "t.to('CPU').realize()",
  "slice": "t[1000:1010].numpy()",
  "bitcast-view": "t.bitcast(dtypes.uint8)[4000:4100].to('CPU').numpy()",
}


@pytest.mark.parametrize("read", list(TRUNCATED.values()), ids=list(TRUNCATED))
def test_reading_a_truncated_file_is_an_os_error_not_sigbus(tmp_path, read):
  path = tmp_path / "shrunk.bin"
  out = run_child(f"""
t = Tensor(np.arange(1 << 16, dtype=np.float32)).to("DISK:" + path).realize()
t.numpy()  # read once: the file is open
os.truncate(path, 0)  # another process shrinks it
report(lambda: {read})
print("size", os.path.getsize(path))
""", path)
  assert f"OSError 5 DISK file {path} ends at byte" in out and "truncated" in out
  assert "size 0" in out  # reading never grows it back


def test_writing_a_truncated_file_writes_it(tmp_path):
  """A write after another process truncated the file writes where it was asked to (no signal, no lost bytes)."""
  path = tmp_path / "shrunk.bin"
  out = run_child("""
t = Tensor(np.zeros(1 << 16, dtype=np.float32)).to("DISK:" + path).realize()
os.truncate(path, 0)
t[100:200].assign(Tensor(np.ones(100, dtype=np.float32))).realize()
print("size", os.path.getsize(path), "sum", t.numpy().sum())
""", path)
  assert "size 262144 sum 100.0" in out


@pytest.fixture
def full_disk():
  """A 1 MiB tmpfs mounted for the test; skips where mounting is not permitted (not root, a container without the
  capability, not Linux)."""
  if sys.platform != "linux": pytest.skip("tmpfs mounts are a Linux feature")
  mountpoint = pathlib.Path(tempfile.mkdtemp(prefix="tinycore-full-disk-"))
  reason = "not root"
  if os.geteuid() == 0:
    try:
      mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mountpoint)],
                               capture_output=True, text=True, timeout=30)
      reason = "" if mounted.returncode == 0 else mounted.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as error:  # no mount command
      reason = str(error)
  if reason:
    mountpoint.rmdir()
    pytest.skip(f"cannot mount a small tmpfs here: {reason}")
  try:
    yield mountpoint
  finally:
    subprocess.run(["umount", str(mountpoint)], check=False)
    mountpoint.rmdir()


def test_full_disk_is_an_os_error_naming_the_file(full_disk):
  path = full_disk / "big.bin"
  out = run_child("""
report(lambda: Tensor(np.ones(1 << 19, dtype=np.float32)).to("DISK:" + path).realize())  # 2 MiB on 1 MiB
print("size", os.path.getsize(path) if os.path.exists(path) else None)
report(lambda: Tensor(np.arange(1000, dtype=np.float32)).to("DISK:" + path + ".small").realize())
print("small", np.fromfile(path + ".small", np.float32).sum())
""", path)
  assert f"OSError 28 cannot grow DISK file {path} from 0 to 2097152 bytes" in out
  assert "size 0" in out  # the failed reservation was given back
  assert "no error" in out and "small 499500.0" in out  # the disk is usable again


def test_full_disk_write_into_a_sparse_file_is_an_os_error(full_disk):
  """A file grown sparse before (by someone else): the space is only taken when written, and the write fails."""
  path = full_disk / "sparse.bin"
  with open(path, "wb") as f: f.truncate(4 << 20)
  out = run_child("""
t = Tensor.empty(1 << 20, dtype=dtypes.float32, device="DISK:" + path)
report(lambda: t.assign(Tensor.ones(1 << 20, dtype=dtypes.float32)).realize())
""", path)
  assert "OSError 28 write of" in out and f"to DISK file {path} at byte" in out


def test_safe_save_on_a_full_disk_leaves_the_old_file(full_disk):
  path = full_disk / "model.safetensors"
  out = run_child("""
safe_save({"w": Tensor(np.arange(1000, dtype=np.float32))}, path)
before = open(path, "rb").read()
report(lambda: safe_save({"w": Tensor(np.ones(1 << 19, dtype=np.float32))}, path))
print("unchanged", open(path, "rb").read() == before, "files", sorted(os.listdir(os.path.dirname(path))))
print("loads", safe_load(path)["w"].numpy().sum())
""", path)
  assert f"OSError 28 cannot save {path} (it is unchanged)" in out
  assert "unchanged True files ['model.safetensors']" in out and "loads 499500.0" in out


def test_safe_save_write_failure_is_an_os_error_and_leaves_the_old_file(tmp_path, monkeypatch):
  """The same without a mount: a write that fails with EIO midway through the save."""
  import errno
  import tiny_disk.device as disk_device
  from tinycore import Tensor
  from tinycore.nn.state import safe_load, safe_save
  path = tmp_path / "m.safetensors"
  safe_save({"w": Tensor(np.arange(10, dtype=np.float32))}, path)
  before = path.read_bytes()
  real_pwrite, calls = os.pwrite, []

  def failing_pwrite(fd, data, offset):
    calls.append(offset)
    if len(calls) == 2: raise OSError(errno.EIO, "Input/output error")
    return real_pwrite(fd, data, offset)
  monkeypatch.setattr(disk_device.os, "pwrite", failing_pwrite)
  with pytest.raises(OSError, match=f"cannot save {path} \\(it is unchanged\\).*Input/output error") as info:
    safe_save({"w": Tensor(np.ones(10, np.float32)), "v": Tensor(np.ones(3, np.int32))}, path)
  assert info.value.errno == errno.EIO and info.value.filename == str(path)
  monkeypatch.undo()
  assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]
  assert safe_load(path)["w"].numpy().tolist() == list(range(10))


def test_os_errors_keep_their_kind_and_name_the_file(tmp_path):
  from tinycore import Tensor
  missing = tmp_path / "no" / "x.bin"
  with pytest.raises(FileNotFoundError, match=str(missing.parent)) as info:
    Tensor([1.0]).to(f"DISK:{missing}").realize()
  assert info.value.filename == str(missing)


SAVE_FOREVER = """
import sys
import numpy as np
from tinycore import Tensor
from tinycore.nn.state import safe_save
path = sys.argv[1]
values = [np.full(1 << 20, fill, np.float32) for fill in (1.0, 2.0)]
print("ready", flush=True)
step = 0
while True:
  safe_save({"w": Tensor(values[step % 2]), "step": Tensor(np.array([step], np.int64))}, path)
  step += 1
"""


@pytest.mark.parametrize("delay", [0.3, 0.7, 1.1])
def test_safe_save_killed_midway_leaves_a_whole_file(tmp_path, delay):
  """SIGKILL while saving over and over: the target is always one whole save (the old or the new file), never a mix;
  at most the killed save's temporary is left beside it."""
  import time
  from tinycore.nn.state import safe_load
  path = tmp_path / "m.safetensors"
  child = subprocess.Popen([sys.executable, "-c", SAVE_FOREVER, str(path)], stdout=subprocess.PIPE, text=True)
  try:
    assert child.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline: time.sleep(0.05)
    time.sleep(delay)
  finally:
    child.kill()
    child.wait()
  loaded = safe_load(path)
  w, step = loaded["w"].numpy(), int(loaded["step"].numpy()[0])
  assert w.shape == (1 << 20,) and (w == (1.0 if step % 2 == 0 else 2.0)).all()
  assert all(p.name == "m.safetensors" or p.name.startswith("m.safetensors.") and p.name.endswith(".tmp")
             for p in tmp_path.iterdir())
