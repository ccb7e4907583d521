"""VIZ: a local web page of what tinycore did to a program.

    TINYCORE_VIZ=1 python script.py          # runs the script, then serves the page (Ctrl-C stops it)
    tinycore viz script.py [args]            # the same from the command line

The page lists every realize and its schedule (kernels, and copies coloured as the stores they are), each kernel's
UOp graph after every rewrite pass with the rules that fired, the rendered source, and the profiler's timeline. While
VIZ is on, the compiler reports to a `VizRecorder` (`tinycore.uop.capture`); when it is off, each capture point costs
one check. The server listens on 127.0.0.1 only, on a free port or TINYCORE_VIZ_PORT. Tests start it with
`serve(block=False)` and end it with `.stop()`, or run a script with TINYCORE_VIZ=1 and stop it with SIGINT.
"""
from __future__ import annotations
import atexit
import os
import sys
from tinycore import profiler
from tinycore.uop import capture
from tinycore.viz.export import VizData
from tinycore.viz.recorder import VizRecorder
from tinycore.viz.server import VizServer, page_bytes

__all__ = ["VIZ_ENV", "PORT_ENV", "enable", "disable", "is_enabled", "data", "serve", "serve_captured",
           "page_bytes",
           "VizServer", "VizRecorder", "VizData"]

VIZ_ENV, PORT_ENV = "TINYCORE_VIZ", "TINYCORE_VIZ_PORT"

recorder: VizRecorder | None = None
served = False


def enable() -> VizRecorder:
  """Start capturing (schedules, rewrites, kernels) and profiling; returns the recorder (the same one if already on)."""
  global recorder
  if recorder is None or capture.listener is not recorder:
    recorder = VizRecorder()
    capture.set_listener(recorder)
  profiler.enable()
  return recorder


def disable() -> None:
  """Stop capturing; what was captured stays readable through `data()` until the next `enable()`."""
  if capture.listener is recorder: capture.set_listener(None)


def is_enabled() -> bool:
  return recorder is not None and capture.listener is recorder


def data() -> VizData:
  """The JSON views of what was captured (empty if VIZ never ran)."""
  return VizData(recorder if recorder is not None else VizRecorder())


def serve(port: int | None = None, block: bool = True) -> VizServer:
  """Serve the page on 127.0.0.1 (port: TINYCORE_VIZ_PORT, else a free one) and print its URL. `block`: serve until
  Ctrl-C; else serve from a background thread and return the server (`.url`, `.stop()`)."""
  if port is None: port = int(os.environ.get(PORT_ENV, "0") or 0)
  server = VizServer(data(), port)
  print(f"tinycore VIZ: open {server.url} ({'Ctrl-C to stop' if block else 'in the background'})", flush=True)
  if not block: return server.start()
  server.serve_forever()
  return server


def serve_captured(port: int | None = None) -> None:
  """Stop capturing and serve what was captured until Ctrl-C (once per process: the exit handler of TINYCORE_VIZ=1
  does nothing after `tinycore viz` served)."""
  global served
  if served or recorder is None: return
  served = True
  disable()  # the page reads the capture: nothing more is recorded while serving
  try: serve(port)
  except OSError as error: print(f"tinycore VIZ: cannot serve the page: {error}", file=sys.stderr)


def requested_by_env() -> bool:
  """Whether TINYCORE_VIZ asks for VIZ (set, and not "0")."""
  return os.environ.get(VIZ_ENV, "") not in ("", "0")


def enable_from_env() -> None:
  """TINYCORE_VIZ=1 (at import of tinycore): capture from now on and serve the page when the script ends."""
  if requested_by_env():
    enable()
    atexit.register(serve_captured)
