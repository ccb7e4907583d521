"""The pytest plugin of the conformance suite (entry point ``pytest11: tinycore``).

pytest loads this module in every run where tinycore is installed, so it imports nothing heavy at module level:
tinycore and numpy are imported inside the fixtures, when a test asks for them.

It adds the options ``--tinycore-device`` and ``--tinycore-seed`` and the fixtures ``device`` (the canonical name of
the device under test) and ``rng`` (a fresh numpy generator per test, reproducible from the run's seed).
"""
from __future__ import annotations
import os
import secrets
import zlib
import pytest

TEST_DEVICE_ENV = "TINYCORE_TEST_DEVICE"  # what a CI job sets to pick the device under test
CORE_DEVICE_ENV = "TINYCORE_DEVICE"       # what the core reads (lazily) when it computes Device.DEFAULT
TEST_SEED_ENV = "TINYCORE_TEST_SEED"

_SEED_KEY = pytest.StashKey[int]()
_DEVICE_KEY = pytest.StashKey["str | None"]()


def pytest_addoption(parser: pytest.Parser) -> None:
  group = parser.getgroup("tinycore", "tinycore conformance suite")
  group.addoption("--tinycore-device", action="store", dest="tinycore_device", metavar="NAME",
                  default=os.environ.get(TEST_DEVICE_ENV) or None,
                  help=f"device the suite runs on, e.g. CPU, CL, NV:1 (default: ${TEST_DEVICE_ENV}, else the default "
                       f"device). Exported as ${CORE_DEVICE_ENV}, so every Tensor made without device= lands on it.")
  group.addoption("--tinycore-seed", action="store", dest="tinycore_seed", metavar="N", type=int,
                  default=int(os.environ[TEST_SEED_ENV]) if os.environ.get(TEST_SEED_ENV) else None,
                  help=f"base seed of the per-test random data (default: ${TEST_SEED_ENV}, else fresh each run); "
                       "a failing test's report prints the seed that reproduces it")
  group.addoption("--tinycore-run-slow", action="store_true", dest="tinycore_run_slow", default=False,
                  help="also run the tests marked slow on a device whose DeviceSpec declares slow=True")


def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "slow: too big for a device that declares itself slow (DeviceSpec.slow, such as "
                          "the PYTHON interpreter); skipped there with the reason unless --tinycore-run-slow is given")
  name = config.getoption("tinycore_device", default=None)
  config.stash[_DEVICE_KEY] = name
  if name: os.environ[CORE_DEVICE_ENV] = name
  seed = config.getoption("tinycore_seed", default=None)
  config.stash[_SEED_KEY] = seed if seed is not None else secrets.randbits(31)


def pytest_report_header(config: pytest.Config) -> list[str]:
  name = config.stash.get(_DEVICE_KEY, None)
  seed = config.stash.get(_SEED_KEY, None)
  return [f"tinycore: device {name or 'default (Device.DEFAULT)'}, random seed {seed} "
          f"(reproduce with --tinycore-seed={seed})"]


def pytest_runtest_setup(item: pytest.Item) -> None:
  """A test marked ``slow`` is skipped, with the reason, on a device whose DeviceSpec declares ``slow=True``."""
  if item.get_closest_marker("slow") is None or item.config.getoption("tinycore_run_slow", default=False): return
  from tinycore import Device
  try: spec = Device.spec_for(Device.DEFAULT)
  except Exception: return  # the session fixture reports an unusable device
  if spec.slow:
    pytest.skip(f"marked slow: too big for {spec.prefix}, which declares itself slow (DeviceSpec.slow); "
                "--tinycore-run-slow runs it anyway")


@pytest.fixture(scope="session")
def device() -> str:
  """The canonical name of the device under test (``Device.DEFAULT`` after --tinycore-device is applied)."""
  from tinycore import Device
  return Device.DEFAULT


def seed_for_test(config: pytest.Config, item: pytest.Item) -> int:
  """The seed of one test: the run's base seed mixed with the test's name (module, class, function and parameters;
  not its path, so that the same seed gives the same data wherever pytest is started from)."""
  module = getattr(getattr(item, "module", None), "__name__", "")
  cls = getattr(getattr(item, "cls", None), "__name__", "")
  key = f"{module}::{cls}::{item.name}"
  return (config.stash[_SEED_KEY] * 1_000_003 + zlib.crc32(key.encode())) % (1 << 63)


@pytest.fixture
def rng(request: pytest.FixtureRequest):
  """A fresh ``numpy.random.Generator`` for this test; its seed is shown in the report if the test fails."""
  import numpy as np
  seed = seed_for_test(request.config, request.node)
  request.node.user_properties.append(("tinycore_seed", seed))
  return np.random.default_rng(seed)


SUITE_PACKAGE = "tinycore.testing."


def suite_test_id(item: pytest.Item) -> str:
  """A conformance test's id as KnownFailure patterns name it: "test_file.py::test_name[params]" (no folders)."""
  # not the node id's path part: it depends on where pytest was started (it is empty under some --pyargs runs)
  return "::".join([item.path.name, *item.nodeid.split("::")[1:]])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  """Mark the conformance tests that a plugin declares as known failures on the device under test as xfail."""
  suite = [item for item in items if getattr(getattr(item, "module", None), "__name__", "").startswith(SUITE_PACKAGE)]
  if not suite: return
  from tinycore import Device
  from tinycore.plugin.known_failures import known_failures
  try: device = Device.DEFAULT
  except Exception: return  # no usable device: the suite's session fixture skips every test with the reason
  declared = known_failures(device)
  for item in suite:
    test_id = suite_test_id(item)
    if (failure := next((f for f in declared if f.matches(test_id)), None)) is not None:
      item.add_marker(pytest.mark.xfail(reason=f"known failure on {device}: {failure.reason}", strict=failure.strict))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
  outcome = yield
  report = outcome.get_result()
  seeds = [value for key, value in item.user_properties if key == "tinycore_seed"]
  if report.failed and seeds:
    base = item.config.stash.get(_SEED_KEY, None)
    report.sections.append(("tinycore", f"random data from numpy seed {seeds[0]} (run seed {base}): "
                                        f"reproduce with --tinycore-seed={base}"))
