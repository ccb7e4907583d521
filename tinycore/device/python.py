"""The built-in PYTHON device: the core's own host memory and an interpreter of the linearized kernel.

PYTHON needs nothing but Python: its buffers are the core's host memory (`tinycore.device.host`: page-aligned
anonymous mmaps with zero-copy views), its "source" is the kernel's listing (`tinycore.codegen.listing`) and its
runtime interprets that listing over memoryviews (`tinycore.device.interpreter`). So tinycore computes on a
machine without a C compiler, slowly (about a million kernel instructions a second), and any device's results
can be checked against the same linearized kernel run with no compiler in between.

It is a plugin like any other, registered by the plugin manager through the same hooks, with a low priority: it
is the default device only when no other compute device is installed. Its memory kind is the core's host kind
(`HOST_DEVICE`): the HCQ2 staging ring lives there and queue devices address it in place.
"""
from __future__ import annotations
from tinycore.device.compiled import Compiled, Compiler
from tinycore.device.host import HostAllocator
from tinycore.plugin.hookspecs import API_VERSION, hookimpl
from tinycore.plugin.spec import DeviceSpec

PREFIX = "PYTHON"
HOST_DEVICE = PREFIX  # the device whose memory is the core's host memory


class ListingCompiler(Compiler):
  """The listing is what the interpreter loads: "compiling" only encodes it (nothing is cached on disk)."""
  cachekey = None

  def compile(self, src: str) -> bytes: return src.encode()


class PythonDevice(Compiled):
  """The PYTHON device: host memory, the listing renderer, and the interpreter as its runtime."""

  def __init__(self, name: str = PREFIX):
    from tinycore.codegen.listing import ListingRenderer
    from tinycore.device.interpreter import PythonProgram
    super().__init__(name, HostAllocator(), ListingRenderer(), ListingCompiler(), PythonProgram)

  def capabilities(self) -> dict:
    caps = super().capabilities()
    caps["runtime"] = "interpreter (slow)"
    return caps


@hookimpl
def tinycore_api_version() -> str:
  return API_VERSION


@hookimpl
def tinycore_devices() -> list[DeviceSpec]:
  return [DeviceSpec(prefix=PREFIX, description="the core's host memory; kernels interpreted in pure Python (slow)",
                     priority=-50, compute=True, host_memory=True, slow=True)]


@hookimpl
def tinycore_open_device(name: str) -> Compiled | None:
  prefix, _, index = name.partition(":")
  if prefix != PREFIX: return None
  if index not in ("", "0"): raise ValueError(f"{PREFIX} has a single instance, named {PREFIX!r}; got {name!r}")
  return PythonDevice(PREFIX)
