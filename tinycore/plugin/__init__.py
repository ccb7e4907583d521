"""The plugin API: hookspecs (tinycore.plugin.hookspecs), DeviceSpec, and the marker plugins decorate hooks with."""
from tinycore.plugin.hookspecs import hookimpl, hookspec
from tinycore.plugin.spec import DeviceSpec

API_VERSION = "1.0"

__all__ = ["API_VERSION", "DeviceSpec", "hookimpl", "hookspec"]
