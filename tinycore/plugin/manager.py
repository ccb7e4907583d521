"""The plugin manager: finds device plugins through the ``tinycore`` entry-point group and registers them with pluggy.

Every plugin that cannot be loaded (its import raises, even SystemExit from a sys.exit() call, it lacks
``tinycore_api_version``, it was built for another major API version, its hooks do not match the hookspecs) is
recorded as a `PluginFailure` with its distribution name and the reason, and loading goes on with the next one, so one
broken package never breaks ``import tinycore`` nor ends the process. Only KeyboardInterrupt goes through.
Set ``TINYCORE_STRICT_PLUGINS=1`` (or true/yes/on) to make such a failure raise instead; 0/false/no/off or unset
mean off, and any other value is a ValueError.
"""
from __future__ import annotations
import importlib
import importlib.metadata
import os
import threading
from types import ModuleType
from typing import Any, NamedTuple
import attrs
import pluggy
import tinycore.plugin.hookspecs as hookspecs
from tinycore.plugin.hookspecs import API_VERSION
from tinycore.plugin.spec import CollectiveSpec, DeviceSpec

CORE_DISTRIBUTION = "tinycore"
BUILTIN_PLUGIN_MODULES = ("tinycore.device.npy", "tinycore.device.python")


@attrs.frozen
class PluginFailure:
  """A plugin that did not load: its distribution, that distribution's version, the entry point
  ("name = module") and why it failed."""
  distribution: str
  version: str
  entry_point: str
  reason: str


class PluginInfo(NamedTuple):
  """A loaded plugin: the distribution that provides it, its version, and the plugin module's name."""
  distribution: str
  version: str
  module: str


class _PluginState:
  """Everything the manager learned while loading, kept together so that it is built (and published) at once."""

  def __init__(self, manager: pluggy.PluginManager):
    self.manager = manager
    self.loaded: list[PluginInfo] = []
    self.failures: list[PluginFailure] = []
    self.origin: dict[int, PluginInfo] = {}  # id(plugin module) -> where it came from
    self.entry_points: dict[int, str] = {}  # id(plugin module) -> "name = module" (empty for built-ins)
    self.specs: list[DeviceSpec] | None = None
    self.spec_owner: dict[str, Any] = {}  # device prefix -> the plugin module that declared it
    self.collective_specs: list[CollectiveSpec] | None = None


_state: _PluginState | None = None
_state_lock = threading.RLock()


STRICT_PLUGINS_ENV = "TINYCORE_STRICT_PLUGINS"
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def strict_plugins() -> bool:
  """Whether a plugin failure raises (TINYCORE_STRICT_PLUGINS=1/true/yes/on, any case) instead of being recorded
  (0/false/no/off or unset). Any other value is a ValueError naming the variable."""
  value = os.environ.get(STRICT_PLUGINS_ENV, "")
  word = value.strip().lower()
  if word in TRUE_WORDS: return True
  if word in FALSE_WORDS: return False
  raise ValueError(f"{STRICT_PLUGINS_ENV}={value!r} is not a yes/no value: use one of {', '.join(TRUE_WORDS)} "
                   f"(strict) or {', '.join(w for w in FALSE_WORDS if w)} (off)")


def plugin_error_reason(error: BaseException) -> str:
  """How a plugin's exception reads in a failure record: "ImportError: ...", or what a sys.exit() call passed."""
  if isinstance(error, SystemExit): return f"SystemExit: the plugin called sys.exit({error.code!r})"
  return f"{type(error).__name__}: {error}"


def core_version() -> str:
  """The installed version of tinycore itself ("unknown" when it runs from a source tree that is not installed)."""
  try: return importlib.metadata.version(CORE_DISTRIBUTION)
  except importlib.metadata.PackageNotFoundError: return "unknown"


def get_plugin_manager() -> pluggy.PluginManager:
  """The process-wide plugin manager, built on first use: the hookspecs, the built-in host plugins, then every
  entry point of the group ``tinycore``. Raises RuntimeError only under TINYCORE_STRICT_PLUGINS=1."""
  return _get_state().manager


def plugin_info() -> list[PluginInfo]:
  """The plugins that loaded, built-ins first: (distribution, version, module)."""
  return list(_get_state().loaded)


def plugin_failures() -> list[PluginFailure]:
  """The plugins that did not load, and the device lists that could not be read, in the order they failed."""
  state = _get_state()
  device_specs()  # reading the device lists can record failures too
  return list(state.failures)


def device_specs() -> list[DeviceSpec]:
  """Every DeviceSpec that the loaded plugins declare, with ``distribution`` and ``version`` filled in from the
  plugin's distribution. Read once per process. When two plugins declare the same prefix, the one loaded first (the
  built-ins, then entry points in discovery order) keeps it and the other is recorded as a failure."""
  state = _get_state()
  with _state_lock:
    if state.specs is None: state.specs = _collect_device_specs(state)
    return list(state.specs)


def collective_specs() -> list[CollectiveSpec]:
  """Every CollectiveSpec that the loaded plugins declare (``tinycore_collective_backends``), with ``distribution``
  and ``version`` filled in. Read once per process; a second backend of the same name is recorded as a failure."""
  state = _get_state()
  with _state_lock:
    if state.collective_specs is None:
      state.collective_specs = _collect_rows(state, "tinycore_collective_backends", CollectiveSpec, "name", {})
    return list(state.collective_specs)


def device_plugin(prefix: str) -> Any | None:
  """The plugin module that declared the device prefix (as given in its DeviceSpec), or None."""
  device_specs()
  return _get_state().spec_owner.get(prefix)


def _get_state() -> _PluginState:
  global _state
  if _state is not None: return _state
  with _state_lock:
    if _state is None: _state = _load_plugins()
    return _state


def _load_plugins() -> _PluginState:
  manager = pluggy.PluginManager("tinycore")
  manager.add_hookspecs(hookspecs)
  state = _PluginState(manager)
  for module_name in BUILTIN_PLUGIN_MODULES:
    module = importlib.import_module(module_name)
    manager.register(module, name=module_name)
    _remember_loaded(state, module, PluginInfo(CORE_DISTRIBUTION, core_version(), module_name), entry_point="")
  manager.check_pending()  # a broken built-in is a bug in tinycore: let it raise
  seen: set[tuple[str, str, str]] = set()
  for entry_point in importlib.metadata.entry_points(group="tinycore"):
    distribution, version = _distribution_of(entry_point)
    # a package visible twice on sys.path (an editable install plus its source tree) lists its entry points twice
    key = (distribution, entry_point.name, entry_point.value)
    if key in seen: continue
    seen.add(key)
    _load_entry_point(state, entry_point, distribution, version)
  return state


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> tuple[str, str]:
  dist = getattr(entry_point, "dist", None)
  if dist is None: return "<unknown distribution>", ""
  return dist.metadata["Name"] or "<unnamed distribution>", dist.version or ""


def _load_entry_point(state: _PluginState, entry_point: importlib.metadata.EntryPoint, distribution: str,
                      version: str) -> None:
  """Import one entry point, check its API version, register it; on failure record (or, if strict, raise)."""
  entry_point_text = f"{entry_point.name} = {entry_point.value}"
  module: Any = None
  registered = False
  try:
    module = entry_point.load()
    _check_api_version(module)
    if state.manager.is_registered(module): return  # the same module under a second entry point
    state.manager.register(module, name=_registration_name(state.manager, entry_point.name, distribution))
    registered = True
    state.manager.check_pending()
  except KeyboardInterrupt:
    raise
  except BaseException as error:  # SystemExit and the like too: a plugin never ends the host process
    if registered: state.manager.unregister(module)
    reason = str(error) if isinstance(error, _PluginRefused) else plugin_error_reason(error)
    _record_failure(state, PluginFailure(distribution, version, entry_point_text, reason), error)
    return
  _remember_loaded(state, module, PluginInfo(distribution, version, getattr(module, "__name__", repr(module))),
                   entry_point=entry_point_text)


class _PluginRefused(Exception):
  """A plugin that imported but does not meet the plugin contract (its message is the whole reason)."""


def _check_api_version(module: Any) -> None:
  api_version_hook = getattr(module, "tinycore_api_version", None)
  if api_version_hook is None: raise _PluginRefused("does not implement tinycore_api_version")
  plugin_version = str(api_version_hook())
  plugin_major, core_major = plugin_version.split(".")[0], API_VERSION.split(".")[0]
  if not plugin_major.isdigit():
    raise _PluginRefused(f"tinycore_api_version returned {plugin_version!r}, expected \"MAJOR.MINOR\" "
                         f"(this tinycore implements plugin API {API_VERSION})")
  if plugin_major != core_major:
    raise _PluginRefused(f"built for tinycore plugin API {plugin_version}, but this tinycore implements plugin API "
                         f"{API_VERSION} (the major versions differ)")


def _registration_name(manager: pluggy.PluginManager, entry_point_name: str, distribution: str) -> str:
  if manager.get_plugin(entry_point_name) is None: return entry_point_name
  return f"{distribution}:{entry_point_name}"


def _remember_loaded(state: _PluginState, module: ModuleType | Any, info: PluginInfo, entry_point: str) -> None:
  state.loaded.append(info)
  state.origin[id(module)] = info
  state.entry_points[id(module)] = entry_point


def _record_failure(state: _PluginState, failure: PluginFailure, error: BaseException | None) -> None:
  if strict_plugins():
    raise RuntimeError(f"tinycore plugin from distribution {failure.distribution!r} {failure.version} "
                       f"(entry point {failure.entry_point!r}) failed: {failure.reason} "
                       "[TINYCORE_STRICT_PLUGINS=1 turns plugin failures into errors]") from error
  state.failures.append(failure)


def _collect_device_specs(state: _PluginState) -> list[DeviceSpec]:
  return _collect_rows(state, "tinycore_devices", DeviceSpec, "prefix", state.spec_owner)


def _collect_rows(state: _PluginState, hook_name: str, row_type: type, key: str, owner: dict[str, Any]) -> list:
  """Call each plugin's `hook_name` separately, so that every row is attributed to its plugin; `owner` maps each
  row's `key` (a device prefix, a backend name) to the plugin that declared it first."""
  rows_out: list = []
  owner_info: dict[str, PluginInfo] = {}
  # pluggy calls hooks newest-registration first; read them oldest first so built-ins come first
  for hook_impl in reversed(getattr(state.manager.hook, hook_name).get_hookimpls()):
    plugin = hook_impl.plugin
    info = state.origin.get(id(plugin)) or PluginInfo("<unknown distribution>", "", repr(plugin))
    entry_point = state.entry_points.get(id(plugin), "")
    try:
      rows = list(hook_impl.function() or [])
      for row in rows: _check_spec_row(row, row_type, key)
    except KeyboardInterrupt:
      raise
    except BaseException as error:
      _record_failure(state, PluginFailure(info.distribution, info.version, entry_point,
                                           f"{hook_name} raised {plugin_error_reason(error)}"), error)
      continue
    for row in rows:
      name = getattr(row, key)
      if name in owner:
        first = owner_info[name]
        what = "device prefix" if key == "prefix" else "collective backend"
        _record_failure(state, PluginFailure(info.distribution, info.version, entry_point,
                                             f"{what} {name!r} is already provided by "
                                             f"{first.distribution} {first.version}"), None)
        continue
      owner[name] = plugin
      owner_info[name] = info
      rows_out.append(attrs.evolve(row, distribution=info.distribution, version=info.version))
  return rows_out


def _check_spec_row(row: Any, row_type: type = DeviceSpec, key: str = "prefix") -> None:
  if not isinstance(row, row_type):
    raise TypeError(f"returned {row!r}, expected {row_type.__name__} rows")
  name = getattr(row, key)
  if not name or ":" in name or name != name.upper():
    what = "device prefix" if key == "prefix" else "collective backend name"
    raise ValueError(f"{what} {name!r} must be non-empty, upper-case and without ':'")


def register_plugin(module: Any, distribution: str, version: str = "") -> None:
  """Register a plugin module in this process, as if an installed distribution's entry point named it (tests, and
  applications that bring their own device). Its API version is checked; its device kinds are listed from now on.
  Raises RuntimeError when the module does not meet the plugin contract."""
  state = _get_state()
  with _state_lock:
    try:
      _check_api_version(module)
      state.manager.register(module, name=f"{distribution}:{getattr(module, '__name__', id(module))}")
      state.manager.check_pending()
    except Exception as error:
      if state.manager.is_registered(module): state.manager.unregister(module)
      raise RuntimeError(f"cannot register plugin {module!r} of {distribution!r}: {error}") from error
    _remember_loaded(state, module, PluginInfo(distribution, version, getattr(module, "__name__", repr(module))),
                     entry_point="")
    _forget_device_specs(state)


def unregister_plugin(module: Any) -> None:
  """Undo `register_plugin`: the module's hooks are no longer called and its device kinds are no longer listed
  (devices already opened stay open)."""
  state = _get_state()
  with _state_lock:
    if state.manager.is_registered(module): state.manager.unregister(module)
    info = state.origin.pop(id(module), None)
    state.entry_points.pop(id(module), None)
    if info is not None and info in state.loaded: state.loaded.remove(info)
    _forget_device_specs(state)


def _forget_device_specs(state: _PluginState) -> None:
  """The device and collective backend lists are read again on next use (the set of plugins changed)."""
  state.specs = None
  state.spec_owner = {}
  state.collective_specs = None
