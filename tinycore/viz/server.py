"""The VIZ web server: the standard library's HTTP server on 127.0.0.1 only, serving the page and its JSON.

    /                       the page (static/index.html; its script and style from /static/)
    /api/realizes           every captured schedule (`VizData.realizes`)
    /api/kernel/<n>         kernel n's graphs at each step, the rules that fired, its source (`VizData.kernel`)
    /api/timeline           the profiler's Chrome trace (`tinycore.profiler.trace`)
"""
from __future__ import annotations
import http.server
import json
import pathlib
import threading
from typing import Any, Callable
from tinycore import profiler
from tinycore.viz.export import VizData

STATIC_DIR = pathlib.Path(__file__).parent / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
HOST = "127.0.0.1"  # never another interface: the page shows the program's code and data


def static_files() -> dict[str, pathlib.Path]:
  """The files the server hands out, by URL path (nothing else under the package is reachable)."""
  return {f"/static/{p.name}": p for p in STATIC_DIR.iterdir() if p.suffix in CONTENT_TYPES}


def page_bytes() -> int:
  """The size of the page as served: the HTML with its scripts and style, in bytes."""
  return sum(p.stat().st_size for p in static_files().values())


class VizServer:
  """A running VIZ server: `url`, `serve_forever()` (until Ctrl-C or `stop()`), `stop()`."""

  def __init__(self, data: VizData, port: int = 0):
    routes = self.routes(data)
    files = static_files()

    class Handler(http.server.BaseHTTPRequestHandler):
      def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        path = self.path.split("?", 1)[0]
        if path == "/": path = "/static/index.html"
        if path in files: return self.reply(files[path].read_bytes(), CONTENT_TYPES[files[path].suffix])
        for prefix, route in routes.items():
          if path == prefix or path.startswith(prefix + "/"):
            try: body = route(path[len(prefix) + 1:])
            except (KeyError, ValueError) as error: return self.send_error(404, str(error))
            return self.reply(json.dumps(body).encode(), "application/json")
        self.send_error(404, f"no such page: {path}")

      def reply(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

      def log_message(self, format: str, *args: Any) -> None: pass  # a quiet server: the URL is all it prints

    self.httpd = http.server.ThreadingHTTPServer((HOST, port), Handler)
    self.httpd.daemon_threads = True
    self.url = f"http://{HOST}:{self.httpd.server_address[1]}/"
    self.thread: threading.Thread | None = None

  @staticmethod
  def routes(data: VizData) -> dict[str, Callable[[str], Any]]:
    return {"/api/realizes": lambda rest: data.realizes(),
            "/api/kernel": lambda rest: data.kernel(int(rest)),
            "/api/timeline": lambda rest: profiler.trace()}

  def serve_forever(self) -> None:
    """Serve until Ctrl-C (or `stop()` from another thread)."""
    try: self.httpd.serve_forever()
    except KeyboardInterrupt: pass
    finally: self.httpd.server_close()

  def start(self) -> VizServer:
    """Serve from a background thread and return at once (tests; `stop()` ends it)."""
    self.thread = threading.Thread(target=self.httpd.serve_forever, name="tinycore-viz", daemon=True)
    self.thread.start()
    return self

  def stop(self) -> None:
    self.httpd.shutdown()
    self.httpd.server_close()
    if self.thread is not None: self.thread.join()
