"""The ``tinycore`` command line (also ``python -m tinycore``).

``tinycore devices`` lists every device the installed plugins provide (one row per instance) and every plugin that
failed to load, with its distribution and the reason, then the collective backends (``tinycore.distributed``: MPI
through tiny-mpi) with their status. ``--json`` prints the same rows as JSON (a backend's row has ``kind``
"collective"); ``--check`` also runs a small kernel on each usable compute device and exits with 1 if any of them
computes a wrong result or fails.
"""
from __future__ import annotations
import argparse
import json
import sys
from typing import Any, Sequence
import attrs
from tinycore.plugin.spec import DeviceSpec

CHECK_INPUT = [1.0, 2.0, 3.0]
CHECK_EXPECTED = [3.0, 5.0, 7.0]  # CHECK_INPUT * 2 + 1


@attrs.define
class DeviceRow:
  """One line of ``tinycore devices``: a device instance, or a plugin that failed (then ``name`` is None)."""
  name: str | None
  distribution: str
  version: str
  status: str
  description: str = ""
  default: bool = False
  compute: bool = False
  capabilities: dict[str, Any] = attrs.field(factory=dict)
  entry_point: str | None = None
  check: str | None = None
  kind: str = "device"  # or "collective": a collective backend (tinycore.distributed)

  @property
  def ok(self) -> bool: return self.status == "ok" or self.status.startswith("ok (")


def collect_rows() -> list[DeviceRow]:
  """Open every device instance the plugins list and describe it; then the failed plugins."""
  from tinycore.device.registry import Device, probe_device_kind
  from tinycore.errors import DeviceUnavailable
  default = _default_device()
  rows: list[DeviceRow] = []
  for spec in Device.specs():
    try:
      names = spec.instances() if spec.instances is not None else [spec.prefix]
    except Exception as error:
      rows.append(_spec_row(spec, spec.prefix, f"failed: listing instances raised {type(error).__name__}: {error}"))
      continue
    unavailable = probe_device_kind(spec)
    for name in names:
      canonical = str(Device.canonicalize(name))
      if unavailable:
        rows.append(_spec_row(spec, canonical, f"unavailable: {unavailable}"))
        continue
      try:
        device = Device[canonical]
        capabilities = device.capabilities()
      except Exception as error:
        cause = error.__cause__ or error  # the registry wraps the plugin's exception; show the plugin's own words
        status = f"unavailable: {cause}" if isinstance(cause, DeviceUnavailable) else \
          f"failed: {type(cause).__name__}: {cause}"
        rows.append(_spec_row(spec, canonical, status))
        continue
      note = getattr(device, "status_note", None)
      row = _spec_row(spec, canonical, f"ok ({note})" if note else "ok", default=canonical == default)
      row.capabilities = capabilities
      rows.append(row)
  for failure in Device.failures():
    rows.append(DeviceRow(None, failure.distribution, failure.version, f"failed: {failure.reason}",
                          entry_point=failure.entry_point))
  return rows


def collect_collective_rows() -> list[DeviceRow]:
  """One row per collective backend the plugins provide: its status (usable, launched here, started) and library."""
  from tinycore.distributed import backend_status
  from tinycore.plugin.manager import collective_specs
  rows = []
  for spec in collective_specs():
    status = backend_status(spec)
    row = DeviceRow(spec.name, spec.distribution, spec.version, status, spec.description, kind="collective")
    if not status.startswith(("unavailable", "failed")) and spec.library is not None:
      try: row.capabilities = {"library": spec.library()}
      except Exception as error: row.capabilities = {"library": f"unknown ({type(error).__name__}: {error})"}
    rows.append(row)
  return rows


def _spec_row(spec: DeviceSpec, name: str, status: str, default: bool = False) -> DeviceRow:
  return DeviceRow(name, spec.distribution, spec.version, status, spec.description, default, spec.compute)


def _default_device() -> str | None:
  from tinycore.device.registry import Device
  try: return Device.DEFAULT
  except Exception: return None  # shown as no "*" marker; each row says why its device is not usable


def check_device(name: str) -> str | None:
  """Run ``(Tensor([1, 2, 3]) * 2 + 1)`` on the device; None if it computed [3, 5, 7], else what went wrong."""
  try:
    from tinycore import Tensor
    result = (Tensor(CHECK_INPUT, device=name) * 2 + 1).numpy()
    values = [float(value) for value in result.reshape(-1)]
  except Exception as error:
    return f"{type(error).__name__}: {error}"
  return None if values == CHECK_EXPECTED else f"computed {values}, expected {CHECK_EXPECTED}"


def format_capabilities(capabilities: dict[str, Any]) -> str:
  """Capabilities in one line: "compute dtypes=float32,int32 compiler=gcc"."""
  parts = []
  for key, value in capabilities.items():
    if value is True: parts.append(key)
    elif value is False or value is None: parts.append(f"no-{key}")
    elif isinstance(value, (list, tuple)): parts.append(f"{key}={','.join(str(item) for item in value)}")
    else: parts.append(f"{key}={value}")
  return " ".join(parts)


def format_table(rows: Sequence[DeviceRow], title: str = "DEVICE") -> str:
  """The rows as an aligned text table; "*" marks the default device."""
  header = ("", title, "DISTRIBUTION", "STATUS", "CAPABILITIES")
  lines = [header]
  for row in rows:
    distribution = f"{row.distribution} {row.version}".strip()
    lines.append(("*" if row.default else "", row.name or "-", distribution, row.status,
                  format_capabilities(row.capabilities)))
  # a cell counts toward its column's width only if something follows it on its line, so that one long failure
  # message (failed rows have no capabilities) does not push every other row's capabilities off to the right
  widths = [max(len(line[column]) for line in lines if any(line[column + 1:])) for column in range(len(header) - 1)]
  return "\n".join("  ".join([*(cell.ljust(width) for cell, width in zip(line, widths)), line[-1]]).rstrip()
                   for line in lines)


def devices_command(arguments: argparse.Namespace) -> int:
  rows = collect_rows()
  backends = collect_collective_rows()
  any_failed = False
  if arguments.check:
    for row in rows:
      if not (row.ok and row.compute and row.name): continue
      error = check_device(row.name)
      row.check = "PASS" if error is None else f"FAIL: {error}"
      any_failed |= error is not None
  if arguments.json:
    print(json.dumps([attrs.asdict(row) for row in rows + backends], indent=2, default=str))
  else:
    print(format_table(rows))
    if backends: print("\n" + format_table(backends, "COLLECTIVE BACKEND"))
    for row in rows:
      if row.check is not None: print(f"{row.name}: {row.check}")
  return 1 if any_failed else 0


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="tinycore", description="tinycore: a small tensor compiler with device plugins")
  commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
  devices = commands.add_parser("devices", help="list the devices the installed plugins provide")
  devices.add_argument("--json", action="store_true", help="print the devices as a JSON list")
  devices.add_argument("--check", action="store_true", help="run a small kernel on every usable compute device")
  devices.set_defaults(handler=devices_command)
  viz = commands.add_parser("viz", help="run a Python script with VIZ on, then serve its page (Ctrl-C stops it)")
  viz.add_argument("script", help="the Python script to run")
  viz.add_argument("arguments", nargs=argparse.REMAINDER, help="arguments passed to the script")
  viz.add_argument("--port", type=int, default=None, help="port to serve on (default: TINYCORE_VIZ_PORT or a free one)")
  viz.set_defaults(handler=viz_command)
  return parser


def viz_command(arguments: argparse.Namespace) -> int:
  """Run the script as __main__ with VIZ capturing, then serve the page until Ctrl-C. The page is served even when
  the script fails (what ran until then is there); the exit code is the script's."""
  import os
  import runpy
  import traceback
  from tinycore import viz
  if not os.path.isfile(arguments.script):
    print(f"tinycore viz: no such script: {arguments.script}", file=sys.stderr)
    return 2
  viz.enable()
  saved_argv, code = sys.argv, 0
  sys.argv = [arguments.script, *arguments.arguments]
  try: runpy.run_path(arguments.script, run_name="__main__")
  except SystemExit as exit_request:
    code = exit_request.code if isinstance(exit_request.code, int) else (0 if exit_request.code is None else 1)
  except Exception:
    traceback.print_exc()
    code = 1
  finally: sys.argv = saved_argv
  viz.serve_captured(arguments.port)
  return code


def main(argv: Sequence[str] | None = None) -> int:
  """Entry point of the ``tinycore`` command; returns the exit code."""
  arguments = build_parser().parse_args(argv)
  return arguments.handler(arguments)


if __name__ == "__main__":
  sys.exit(main())
