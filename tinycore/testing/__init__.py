"""The device-generic conformance suite: every device plugin runs it against its own device.

The suite compares tinycore against numpy (the reference) on fresh random data, odd shapes, zero-size tensors and
scalars, for creation, elementwise ops, every dtype, reductions, movement, matmul, realize/assign and error reporting.
It is a pytest plugin, registered through the ``pytest11`` entry point of the ``tinycore`` distribution, so it is
available in every pytest run once tinycore is installed.

How a plugin author runs it::

    pip install -e path/to/tiny-foo          # the plugin under test, next to tinycore
    pytest --pyargs tinycore.testing --tinycore-device=FOO
    TINYCORE_TEST_DEVICE=FOO pytest --pyargs tinycore.testing     # the same, from the environment
    pytest --pyargs tinycore.testing          # no device given: runs on the default device (Device.DEFAULT)

Options (see ``pytest --help``, group "tinycore"):

- ``--tinycore-device=NAME`` (default: $TINYCORE_TEST_DEVICE, else the default device). The plugin exports it as
  $TINYCORE_DEVICE before any test is collected, so every Tensor made without ``device=`` lands on that device.
- ``--tinycore-seed=N`` (default: $TINYCORE_TEST_SEED, else a fresh seed each run). Every test gets its own numpy
  generator derived from this seed and its test id; the header of the run and the report of a failing test print
  the seed, so ``--tinycore-seed=N`` reproduces a failure with the same data.

Tests marked ``@pytest.mark.slow`` (too big for an interpreter) are skipped, with the reason, on a device whose
DeviceSpec declares ``slow=True`` (the core's PYTHON device); ``--tinycore-run-slow`` runs them anyway.

Dtypes the device's renderer does not list in ``supported_dtypes`` are skipped with the reason, and so is the whole
suite when the device cannot be opened or cannot compute (the reason names the device and the error). A device
name that no installed plugin provides (a typo, or the plugin is not installed) stops the run with exit code 4.

Public helpers for tests built on the suite live in ``tinycore.testing.helpers`` (``supports_dtype``,
``skip_unless_dtype``, ``assert_close``, ``random_array``, ...); the fixtures ``device`` (the canonical device name)
and ``rng`` (a fresh ``numpy.random.Generator`` per test) come from ``tinycore.testing.pytest_plugin``.

This package imports nothing at import time: pytest loads its plugin module in every run.
"""
