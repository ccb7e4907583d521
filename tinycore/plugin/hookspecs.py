"""The tinycore plugin API: the hooks a device plugin implements.

A plugin is a module registered under the entry-point group ``tinycore`` (in its pyproject:
``[project.entry-points.tinycore] mydev = "my_package.plugin"``). The module defines functions named after the
hooks below, decorated with ``tinycore.plugin.hookimpl``. Importing it must be cheap: load drivers inside
``tinycore_open_device``, not at import time. Everything a plugin needs is exported by ``tinycore.plugin``
(these hooks' markers, DeviceSpec, API_VERSION, the allocator, compiler, device, renderer and queue base classes).
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any, Callable
import pluggy

if TYPE_CHECKING:
  from tinycore.device.compiled import Compiled
  from tinycore.plugin.known_failures import KnownFailure
  from tinycore.plugin.spec import CollectiveSpec, DeviceSpec

# MAJOR.MINOR of the plugin API (the hooks below and every name tinycore.plugin exports). A plugin built for another
# MAJOR is refused; a MINOR bump only adds. 1.1: the names of tinycore.plugin, HWQueue's per-command methods,
# Allocator.map/_map/_unmap and Buffer.get_storage/get_buf, RenderedKernel, tinycore_known_failures. 1.2: Panel,
# find_panels, KernelTarget.panel_bytes and CStyleRenderer.packed_load (packed operand panels). 1.3: start_bounded
# and finish_bounded (a compiler started ahead of need, fed later), KernelTarget.broadcast_strips and split_gates.
# 1.4: Compiled.max_kernel_args (a device's limit on one kernel's arguments; None: any number). 1.5: count_setting
# and SettingError (a setting with a bad value, which the default device does not fall back past), DeviceUnavailable
# (a device present but unusable here, listed "unavailable"). 1.6: KernelOpts and linearize (a kernel's searchable
# choices, carried as its SINK's arg: CStyleRenderer.opts, search_space, grid_sizes), Compiled.times_kernels. 1.7:
# tinycore_collective_backends, CollectiveSpec and CollectiveBackend (collectives across processes: tiny-mpi's MPI).
API_VERSION = "1.7"

hookspec = pluggy.HookspecMarker("tinycore")
hookimpl = pluggy.HookimplMarker("tinycore")


@hookspec
def tinycore_api_version() -> str:
  """Return the plugin API version this plugin was built against, as "MAJOR.MINOR" (use
  ``tinycore.plugin.API_VERSION``). Called once when the plugin is loaded; a plugin whose MAJOR differs from the
  core's is refused and shown as failed in ``tinycore devices``, with both versions in the reason. Required."""


@hookspec
def tinycore_devices() -> list[DeviceSpec]:
  """Return the device kinds this plugin provides, one ``DeviceSpec`` per name prefix ("CPU", "CL", "DISK").
  Called once per process, when the registry is first used. Must not open any driver: availability checks go
  into ``DeviceSpec.probe``, which ``tinycore devices`` and default-device selection call."""


@hookspec(firstresult=True)
def tinycore_open_device(name: str) -> Compiled | None:
  """Open the device called ``name`` (canonical: "CPU", "CPU:1", "DISK:/tmp/x") and return its ``Compiled``, or
  None if this plugin does not provide that prefix. The first non-None result wins. Called at most once per name
  per process; the registry caches the result. Raise an exception with a clear message if the device exists
  but cannot be opened (no driver, no such index): ``tinycore.plugin.DeviceUnavailable`` when it is present but
  cannot work here (the cause and the remedy in the message), ``tinycore.plugin.SettingError`` for a setting
  with a value the device cannot take (the default device then stops with it rather than trying the next)."""


@hookspec(firstresult=True)
def tinycore_transfer(src: Compiled, dst: Compiled) -> Callable[[Any, Any, int], None] | None:
  """Return a function ``copy(dst_handle, src_handle, nbytes)`` that moves bytes directly from ``src`` to ``dst``
  (for example a peer-to-peer DMA between two GPUs), or None when this plugin has no direct path for that pair.
  The first non-None result wins. Without one, the core copies through host memory."""


@hookspec
def tinycore_known_failures(device: str) -> list[KnownFailure]:
  """Return the conformance tests (``tinycore.testing``) that are known to fail on ``device`` (canonical name), each
  a ``KnownFailure(test, reason)``; return an empty list (or nothing) for devices this plugin does not provide.
  ``test`` is "test_file.py::test_name[params]", with shell-style wildcards (``test_dtypes.py::*float16*``). Called
  once per test run, at collection; every plugin's answers are used. A declared test is reported as xfail with the
  reason; with ``strict=True`` (the default) a declared test that passes fails the run, so stale entries are seen."""


@hookspec
def tinycore_collective_backends() -> list[CollectiveSpec]:
  """Return the collective backends this plugin provides, one ``CollectiveSpec`` per backend ("MPI"): ways for the
  processes of a job (on one machine or many) to combine memory. Called once per process, when
  ``tinycore.distributed.init()`` picks a backend or ``tinycore devices`` lists them. Must not start anything:
  ``CollectiveSpec.launched`` reads the environment, ``probe`` checks the library, ``open`` starts the backend.

  The backend ``open`` returns is a ``tinycore.plugin.CollectiveBackend``: its ``rank`` and ``world_size``, and
  ``all_reduce`` / ``all_gather`` / ``broadcast`` over host memory (memoryviews of the core's buffers, zero-copy;
  ``takes_device_memory(device)`` True makes the core pass that device's ``Buffer``s instead of staging them
  through host memory) and ``abort`` (end every process of the job). The core calls them in the same order on every
  process, each after a header exchange (an ``all_gather`` of a fixed-size uint8 record per rank naming the
  collective, its dtype and shape, which also serves as the barrier and carries small payloads), so a backend never
  sees mismatched calls. Every plugin's answers are used; two backends of one name are an error (the second is
  listed as failed)."""
