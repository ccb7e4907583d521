"""The tinycore plugin API: the hooks a device plugin implements.

A plugin is a module registered under the entry-point group ``tinycore`` (in its pyproject:
``[project.entry-points.tinycore] mydev = "my_package.plugin"``). The module defines functions named after the
hooks below, decorated with ``tinycore.plugin.hookimpl``. Importing it must be cheap: load drivers inside
``tinycore_open_device``, not at import time. Everything a plugin needs is exported by ``tinycore.plugin``
(DeviceSpec, hookimpl, API_VERSION) and ``tinycore.device`` (Compiled, Allocator, LRUAllocator, BufferSpec,
Compiler, Buffer) and ``tinycore.codegen`` (the renderers).
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any, Callable
import pluggy

if TYPE_CHECKING:
  from tinycore.device.compiled import Compiled
  from tinycore.plugin.spec import DeviceSpec

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
  but cannot be opened (no driver, no such index)."""


@hookspec(firstresult=True)
def tinycore_transfer(src: Compiled, dst: Compiled) -> Callable[[Any, Any, int], None] | None:
  """Return a function ``copy(dst_handle, src_handle, nbytes)`` that moves bytes directly from ``src`` to ``dst``
  (for example a peer-to-peer DMA between two GPUs), or None when this plugin has no direct path for that pair.
  The first non-None result wins. Without one, the core copies through host memory."""
