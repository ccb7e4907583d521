"""Timeouts are bounded and documented settings: a hanging compiler (TINYCORE_COMPILE_TIMEOUT) and a queue device that
makes no progress (TINYCORE_QUEUE_TIMEOUT); each error names what hung, the limit and the setting that raises it."""
from __future__ import annotations
import time
import pytest

pytest.importorskip("tiny_cpu", reason="tiny-cpu is not installed")
from tiny_cpu.compiler import CPUCompiler  # noqa: E402
from tinycore.device.registry import Device  # noqa: E402
from tinycore.hcq import HCQTimeoutError  # noqa: E402
from stalled_queue import stall_compute_queue  # noqa: E402


@pytest.fixture
def hanging_compiler(tmp_path):
  """A C compiler that answers --version and then never finishes a compile (and starts a child that hangs too)."""
  script = tmp_path / "hanging-cc"
  script.write_text('#!/bin/sh\ncase "$1" in --version) echo "hanging-cc 1.0"; exit 0;; esac\nsleep 300 &\nsleep 300\n')
  script.chmod(0o755)
  return script


def test_a_hanging_compiler_is_killed_after_the_compile_timeout(hanging_compiler, monkeypatch):
  monkeypatch.setenv("TINYCORE_COMPILE_TIMEOUT", "0.5")
  start = time.perf_counter()
  with pytest.raises(RuntimeError) as error:
    CPUCompiler([str(hanging_compiler)]).compile("int x;")
  assert time.perf_counter() - start < 20
  message = str(error.value)
  assert str(hanging_compiler) in message and "0.5 s" in message and "TINYCORE_COMPILE_TIMEOUT" in message


def test_a_hanging_compiler_does_not_hang_a_program(hanging_compiler, tmp_path, run_scenario):
  start = time.perf_counter()
  result = run_scenario("from tinycore import Tensor; print(Tensor([1, 2], device='CPU').add(1).numpy())", timeout=120,
                        env={"CC": str(hanging_compiler), "TINYCORE_COMPILE_TIMEOUT": "1",
                             "TINYCORE_CACHE_DIR": str(tmp_path / "cache")})
  assert time.perf_counter() - start < 60
  assert result.returncode == 1, result.stderr  # an exception, not a signal
  assert "TINYCORE_COMPILE_TIMEOUT" in result.stderr and str(hanging_compiler) in result.stderr


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_bad_timeout_setting_names_the_variable(monkeypatch, value):
  from tinycore.device.compiled import compile_timeout_s
  from tinycore.hcq.device import queue_timeout_s
  monkeypatch.setenv("TINYCORE_COMPILE_TIMEOUT", value)
  monkeypatch.setenv("TINYCORE_QUEUE_TIMEOUT", value)
  with pytest.raises(ValueError, match="TINYCORE_COMPILE_TIMEOUT"): compile_timeout_s()
  with pytest.raises(ValueError, match="TINYCORE_QUEUE_TIMEOUT"): queue_timeout_s()


def test_the_queue_timeout_is_a_setting_and_the_error_says_how_to_raise_it(monkeypatch):
  dev = Device["CPU"]
  monkeypatch.setenv("TINYCORE_QUEUE_TIMEOUT", "0.3")
  assert dev.wait_timeout_ms == 300
  signal = stall_compute_queue(dev)
  start = time.perf_counter()
  with pytest.raises(HCQTimeoutError, match=r"no progress for 300 ms.*TINYCORE_QUEUE_TIMEOUT=<seconds> \(now 0.3\)"):
    dev.synchronize()
  assert time.perf_counter() - start < 5
  signal.value = 1  # release the queue
  dev.synchronize()


def test_cpu_host_wait_returns_when_the_worker_stores_the_signal_and_gives_up_at_its_timeout():
  # CPUDevice.host_wait_signal (tc_host_wait in C, the GIL released) is what synchronize() blocks in
  from tinycore.hcq.device import HCQDevice
  dev = Device["CPU"]
  signal = stall_compute_queue(dev)
  start = time.perf_counter()
  assert dev.host_wait_signal(dev.timeline, dev.epoch, 0.1) is False  # the queue waits on `signal`: no progress
  assert 0.09 < time.perf_counter() - start < 2
  assert HCQDevice.host_wait_signal(dev, dev.timeline, dev.epoch, 0.05) is False  # the polling default agrees
  signal.value = 1  # release the queue: the worker stores the timeline
  assert dev.host_wait_signal(dev.timeline, dev.epoch, 5.0) is True
  assert dev.timeline.value >= dev.epoch
  assert dev.host_wait_signal(dev.timeline, dev.epoch, 0.0) is True  # already there: no wait at all
  dev.synchronize()


def test_cpu_host_wait_sees_a_signal_that_no_queue_stores():
  # tc_host_wait sleeps on a futex that the worker's signal stores wake; a signal set another
  # way (here by a Python thread) wakes nobody, and must still be seen (the sleep is sliced), not waited out
  import threading
  from tinycore.hcq.signal import signal_pool
  dev = Device["CPU"]
  signal = signal_pool.new("set from a Python thread")
  setter = threading.Timer(0.05, lambda: setattr(signal, "value", 3))
  setter.start()
  start = time.perf_counter()
  assert dev.host_wait_signal(signal, 3, 30.0) is True
  assert time.perf_counter() - start < 20  # seen within a slice, not at the 30 s timeout
  setter.join()
