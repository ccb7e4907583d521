"""`Device`: the registry that turns a device name ("CPU", "cpu:1", "DISK:/tmp/x") into an opened `Compiled`.

Names follow tinygrad: the prefix before the first ":" is case-insensitive and names the device kind, the rest is kept
verbatim, and an instance index ":0" is dropped ("cpu:0" is "CPU"), never part of a path (a kind whose DeviceSpec says
``names_are_paths``, as DISK's does). The kind is resolved through the plugins (tinycore.plugin.manager); each name
is opened once per process and finalized at exit.
"""
from __future__ import annotations
import atexit
import functools
import os
import threading
from typing import TYPE_CHECKING
from tinycore.errors import SettingError
from tinycore.plugin.spec import DeviceSpec
from tinycore.schedule.copies import CopyTraits, install_device_traits
from tinycore.schedule.split_reduce import install_core_count
from tinycore.schedule.realize_points import install_argument_limit

if TYPE_CHECKING:
  from tinycore.device.compiled import Compiled
  from tinycore.plugin.manager import PluginFailure

DEVICE_ENV = "TINYCORE_DEVICE"


@functools.lru_cache(maxsize=4096)
def canonicalize_device(name: str | tuple[str, ...]) -> str | tuple[str, ...]:
  """The canonical form of a device name, or of a tuple of names (element-wise; a 1-tuple collapses to its name):
  "cpu:0" -> "CPU", "CPU:1" -> "CPU:1", "disk:/tmp/X" -> "DISK:/tmp/X", "DISK:/tmp/X:0" -> itself (a path).
  Cached, since every tensor op calls it."""
  if isinstance(name, tuple):
    canonical = tuple(canonicalize_device(element) for element in name)
    return canonical[0] if len(canonical) == 1 else canonical
  if not isinstance(name, str): raise TypeError(f"a device name must be a str or a tuple of str, got {name!r}")
  if not name: raise ValueError("the device name is empty")
  prefix, separator, rest = name.partition(":")
  # instance 0 is the kind itself ("cpu:0" is "CPU"); a path is never reinterpreted ("DISK:/x:0" is the file "/x:0")
  if rest == "0" and not names_are_paths(prefix.upper()): return prefix.upper()
  return prefix.upper() + separator + rest


def names_are_paths(prefix: str) -> bool:
  """Whether the device kind's names carry a path after the ":" (its DeviceSpec says so), not an instance index."""
  from tinycore.plugin.manager import device_specs
  return any(spec.prefix == prefix and spec.names_are_paths for spec in device_specs())


class DeviceRegistry:
  """The device table (use the instance `Device`): ``Device["CPU:1"]`` opens (once) and returns that device,
  ``Device.DEFAULT`` is the default device's canonical name, ``Device.canonicalize(name)`` normalizes a name."""

  def __init__(self) -> None:
    self._opened: dict[str, Compiled] = {}
    self._lock = threading.RLock()
    self._default: str | None = None
    self._host_compute: str | None = None
    self._atexit_registered = False

  # called for every tensor op: the cached function itself, without a wrapper around it
  canonicalize = staticmethod(canonicalize_device)

  # --- the plugin side
  def specs(self) -> list[DeviceSpec]:
    """The device kinds the loaded plugins provide, highest priority first."""
    from tinycore.plugin.manager import device_specs
    return sorted(device_specs(), key=lambda spec: -spec.priority)

  def failures(self) -> list[PluginFailure]:
    """The plugins that failed to load, with their distribution names and reasons."""
    from tinycore.plugin.manager import plugin_failures
    return plugin_failures()

  def spec_for(self, name: str) -> DeviceSpec:
    """The DeviceSpec of the kind that owns this name; ValueError listing the existing kinds if there is none."""
    prefix = str(self.canonicalize(name)).partition(":")[0]
    for spec in self.specs():
      if spec.prefix == prefix: return spec
    raise ValueError(f"unknown device {name!r}: no plugin provides the device kind {prefix!r}. {self._kinds_summary()}")

  def _kinds_summary(self) -> str:
    kinds = ", ".join(f"{spec.prefix} ({_origin(spec)})" for spec in self.specs())
    summary = f"Device kinds available: {kinds or 'none'}."
    if failures := self.failures():
      summary += " Plugins that failed to load: " + "; ".join(f"{failure.distribution} {failure.version}: "
                                                             f"{failure.reason}" for failure in failures) + "."
    return summary

  # --- opening
  def __getitem__(self, name: str) -> Compiled:
    # an open device by its canonical name (the common case, many times per op) needs no canonicalizing
    if type(name) is str and (device := self._opened.get(name)) is not None: return device
    if isinstance(name, tuple):
      raise TypeError(f"Device[...] opens one device; open each of {name!r} separately")
    canonical = self.canonicalize(name)
    if (device := self._opened.get(canonical)) is not None: return device
    with self._lock:
      if (device := self._opened.get(canonical)) is None:
        device = self._open(canonical)
        self._opened[canonical] = device
        if not self._atexit_registered:
          atexit.register(self._finalize_all)
          self._atexit_registered = True
      return device

  def _open(self, name: str) -> Compiled:
    from tinycore.device.compiled import Compiled
    from tinycore.plugin.manager import device_plugin, get_plugin_manager, plugin_error_reason
    spec = self.spec_for(name)
    manager = get_plugin_manager()
    owner = device_plugin(spec.prefix)
    # ask only the plugin that declared the prefix, so that a second plugin can never answer for it
    others = [plugin for plugin in manager.get_plugins() if plugin is not owner]
    open_device = manager.subset_hook_caller("tinycore_open_device", remove_plugins=others)
    origin = _origin(spec)
    try:
      device = open_device(name=name)
    except KeyboardInterrupt:
      raise
    except SettingError as error:
      raise SettingError(f"cannot open device {name!r} (plugin {origin}): {error}") from error
    except BaseException as error:  # a plugin calling sys.exit() must not end the process
      raise RuntimeError(f"cannot open device {name!r} (plugin {origin}): {plugin_error_reason(error)}") from error
    if device is None: raise RuntimeError(f"cannot open device {name!r}: plugin {origin} returned no device for it")
    if not isinstance(device, Compiled):
      raise RuntimeError(f"cannot open device {name!r}: plugin {origin} returned {device!r}, not a Compiled")
    check_declared_compute(spec, device, name)
    return device

  def opened(self) -> dict[str, Compiled]:
    """The devices opened so far, by canonical name."""
    return dict(self._opened)

  def _finalize_all(self) -> None:
    for device in reversed(list(self._opened.values())):
      try: device.finalize()
      except Exception: pass  # at exit, one device failing to clean up must not stop the others

  # --- capabilities
  def host_compute_device(self) -> str:
    """Where the core runs host-side work that no device was named for (reading back a view of a storage device):
    the highest-priority kind that computes in host memory (DeviceSpec.host_memory), whose probe passes and that
    opens. The core's own PYTHON interpreter qualifies, so there always is one."""
    if self._host_compute is None:
      with self._lock:
        reasons: list[str] = []
        for spec in self.specs():
          if not (spec.compute and spec.host_memory) or probe_device_kind(spec) is not None: continue
          try:
            self[spec.prefix]
          except Exception as error:
            reasons.append(f"{spec.prefix}: {error}")
            continue
          self._host_compute = str(self.canonicalize(spec.prefix))
          break
        else: raise RuntimeError("no device computes in host memory: " + ("; ".join(reasons) or "none is declared"))
    return self._host_compute

  # --- the default device
  @property
  def DEFAULT(self) -> str:  # noqa: N802 (tinygrad's name)
    """The default device's canonical name: the first of $TINYCORE_DEVICE (a comma-separated list) that opens, else
    the compute device of highest priority whose probe passes and that opens. Exported to child processes."""
    if self._default is None:
      with self._lock:
        if self._default is None:
          self._default = self._choose_default()
          os.environ[DEVICE_ENV] = self._default
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, value: str) -> None:  # noqa: N802
    """`Device.DEFAULT = "CL"`, as in tinygrad: tensors made from now on without a device go there (tensors made
    before keep theirs). The device must run kernels and open; the choice is exported to child processes too."""
    if not isinstance(value, str): raise TypeError(f"Device.DEFAULT takes a device name, got {type(value).__name__}")
    canonical = str(self.canonicalize(value))
    if not self.spec_for(canonical).compute:
      raise ValueError(f"{canonical} does not run kernels, so it cannot be the default device")
    self[canonical]  # opens it: a device that cannot open raises here, not at the next tensor
    with self._lock:
      self._default = canonical
      os.environ[DEVICE_ENV] = canonical

  def _choose_default(self) -> str:
    requested = os.environ.get(DEVICE_ENV, "").strip()
    if requested: return self._first_requested_device(requested)
    reasons: list[str] = []
    for spec in self.specs():
      if not spec.compute: continue
      if reason := probe_device_kind(spec):
        reasons.append(f"{spec.prefix}: unavailable: {reason}")
        continue
      try:
        self[spec.prefix]
        return str(self.canonicalize(spec.prefix))
      except SettingError: raise  # a setting the user got wrong, not a device to fall back past
      except Exception as error:
        reasons.append(f"{spec.prefix}: {error}")
    raise RuntimeError("no compute device is usable: " + ("; ".join(reasons) or "no device plugin is installed "
                       "(pip install tiny-cpu)") + (f". {self._kinds_summary()}" if not reasons else ""))

  def _first_requested_device(self, requested: str) -> str:
    reasons: list[str] = []
    for name in (part.strip() for part in requested.split(",")):
      if not name: continue
      try:
        canonical = str(self.canonicalize(name))
        if not self.spec_for(canonical).compute:
          raise ValueError(f"{canonical} does not run kernels, so it cannot be the default device")
        self[canonical]
        return canonical
      except SettingError: raise
      except Exception as error:
        reasons.append(f"{name}: {error}")
    raise RuntimeError(f"none of the devices in {DEVICE_ENV}={requested!r} could be opened: " +
                       ("; ".join(reasons) or "the list is empty"))


def check_declared_compute(spec: DeviceSpec, device: Compiled, name: str) -> None:
  """The opened device is what its DeviceSpec declares: a compute kind has a renderer, a compiler and a runtime, a
  storage kind none of them. A mismatch is an error naming the missing (or unexpected) pieces."""
  pieces = {"renderer": device.renderer, "compiler": device.compiler, "runtime": device.runtime}
  if spec.compute and (missing := [piece for piece, value in pieces.items() if value is None]):
    raise RuntimeError(f"cannot open device {name!r}: plugin {_origin(spec)} declares {spec.prefix} a compute device "
                       f"(DeviceSpec.compute=True), but the opened device has no {' and no '.join(missing)}")
  if not spec.compute and (present := [piece for piece, value in pieces.items() if value is not None]):
    raise RuntimeError(f"cannot open device {name!r}: plugin {_origin(spec)} declares {spec.prefix} a storage device "
                       f"(DeviceSpec.compute=False), but the opened device has a {' and a '.join(present)}")


def _origin(spec: DeviceSpec) -> str:
  return f"{spec.distribution} {spec.version}".strip() or "<unknown distribution>"


def probe_device_kind(spec: DeviceSpec) -> str | None:
  """The spec's probe result; a probe that raises counts as unavailable, with the exception as the reason."""
  from tinycore.plugin.manager import plugin_error_reason
  if spec.probe is None: return None
  try: return spec.probe()
  except KeyboardInterrupt: raise
  except BaseException as error: return f"probe raised {plugin_error_reason(error)}"


Device = DeviceRegistry()


@functools.lru_cache(maxsize=4096)
def copy_traits(name: str) -> CopyTraits:
  """The scheduler's view of a device (whether it computes, the storage-only copy rule), from its DeviceSpec."""
  spec = Device.spec_for(name)
  return CopyTraits(computes=spec.compute, copies_below_movement=spec.copies_below_movement)


install_device_traits(copy_traits)


@functools.lru_cache(maxsize=4096)
def core_count(name: str) -> int:
  """The cores one kernel of a device runs on (its `cores` capability; 0 without one), for split reductions."""
  if not Device.spec_for(name).compute: return 0
  return int(Device[name].capabilities().get("cores") or 0)


install_core_count(core_count)


@functools.lru_cache(maxsize=4096)
def kernel_argument_limit(name: str) -> int | None:
  """The most arguments one kernel of a device takes (`Compiled.max_kernel_args`; None: any number)."""
  if not Device.spec_for(name).compute: return None
  return Device[name].max_kernel_args


install_argument_limit(kernel_argument_limit)
