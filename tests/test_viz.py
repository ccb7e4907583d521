"""VIZ: what is captured (schedules, each kernel's graphs after every pass, the rules that fired, sources), the JSON
the page reads, the server, and the TINYCORE_VIZ=1 / `tinycore viz` entry points."""
import inspect
import json
import os
import pathlib
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import pytest
from tinycore import Tensor, profiler, viz
from tinycore.caches import clear_caches
from tinycore.uop import capture
from tinycore.uop.symbolic import fold_constants, symbolic
from tinycore.viz.naming import matcher_name, rule_name
from tinycore.viz.recorder import VizRecorder

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import viz_program  # noqa: E402

PROGRAM = pathlib.Path(viz_program.__file__)


@pytest.fixture
def capturing():
  """VIZ on (and the profiler) around a test, from empty caches so every kernel is scheduled and compiled anew."""
  was_profiling = profiler.is_enabled()
  clear_caches()
  viz.enable()
  yield
  viz.disable()
  if not was_profiling: profiler.disable()


@pytest.fixture
def captured(capturing):
  """The VIZ data of one run of tests/viz_program.py, whose copy goes to SIM."""
  result = viz_program.run("SIM")
  assert result.tolist() == viz_program.expected().tolist()
  return viz.data()


def test_the_schedule_lists_kernels_and_the_copy(captured):
  realizes = captured.realizes()
  assert realizes["dropped_realizes"] == realizes["dropped_steps"] == realizes["dropped_kernels"] == 0
  [realize] = realizes["realizes"]
  items = realize["items"]
  assert [item["kind"] for item in items] == ["kernel", "kernel", "copy", "kernel"]
  assert [item["device"] for item in items] == ["CPU", "CPU", "SIM", "SIM"]
  copy = items[2]
  assert copy["name"] == "copy CPU -> SIM" and copy["bytes"] == viz_program.EXPECTED_COPY_BYTES
  # each call writes its own buffer and reads the one before: the buffers chain through the schedule
  assert [item["writes"] for item in items] == [0, 1, 2, 3]
  assert [item["reads"] for item in items] == [[], [0], [1], [2]]
  assert realize["buffers"] == ["CPU float32[16]", "CPU float32[4]", "SIM float32[4]", "SIM float32[4]"]
  assert [item["kernel"] for item in items if item["kind"] == "kernel"] == [0, 1, 2]


def test_a_kernel_has_its_graph_after_every_pass_and_its_source(captured):
  captured.realizes()  # numbers the kernels
  kernel = captured.kernel(2)  # the elementwise + 1 on SIM
  assert kernel["name"] == "E_4" and kernel["device"] == "SIM"
  assert "E_4" in kernel["source"]
  names = [step["name"] for step in kernel["steps"]]
  assert names[:2] == ["start", "rangeify"]
  first_ops = {node["op"] for node in kernel["steps"][0]["graph"]["nodes"]}
  last_ops = {node["op"] for node in kernel["steps"][-1]["graph"]["nodes"]}
  assert "ADD" in first_ops and "RANGE" not in first_ops  # the tensor graph: no loops yet
  assert {"RANGE", "STORE", "LOAD", "SINK"} <= last_ops  # the kernel: a loop storing what it loads plus one
  for step in kernel["steps"]:
    graph = step["graph"]
    ids = {node["id"] for node in graph["nodes"]}
    assert len(ids) == len(graph["nodes"]) and all(a in ids and b in ids for a, b in graph["edges"])


def test_rewrite_steps_name_the_pass_and_the_rules_that_fired(captured):
  captured.realizes()
  steps = [step for k in range(3) for step in captured.kernel(k)["steps"]]
  rewrites = [step for step in steps if step["name"].startswith("symbolic (")]
  assert rewrites, [step["name"] for step in steps]
  assert all(step["rules"] and all(count >= 1 for _, count in step["rules"]) for step in rewrites)
  fired = {name for step in rewrites for name, _ in step["rules"]}
  # the index math of the kernels folds: sums in affine form, or an identity rule named by its comment
  assert fired & {"simplify_sum", "simplify_div", "simplify_mod", "fold_constants"} or \
      any("zero" in name or "one" in name for name in fired), fired


def test_unchanged_nodes_keep_their_number_across_steps(captured):
  captured.realizes()
  steps = captured.kernel(0)["steps"]
  before, after = ({node["id"] for node in s["graph"]["nodes"]} for s in steps[1:3])
  assert before & after and before != after  # a rewrite keeps some nodes and makes others


def test_rules_are_named_by_function_or_by_their_comment():
  assert rule_name(fold_constants) == "fold_constants"
  cast_rule = next(fn for _, fn in symbolic.rules
                   if fn.__name__ == "<lambda>" and "c.dtype is x.dtype" in inspect.getsource(fn))
  assert rule_name(cast_rule) == "a cast to the same dtype is nothing"
  assert matcher_name(symbolic) == "symbolic"
  assert matcher_name(object()) == "rewrite"


def test_capture_is_off_unless_enabled():
  assert capture.listener is None
  assert not viz.is_enabled()
  calls = []

  class Counting(VizRecorder):
    def rewrite(self, matcher, before, after, fired): calls.append(after)

  clear_caches()
  previous = capture.set_listener(Counting())
  try: (Tensor([1.0, 2.0]) * 3 + 0).numpy()
  finally: capture.set_listener(previous)
  assert calls
  calls.clear()
  clear_caches()
  (Tensor([1.0, 2.0]) * 3 + 0).numpy()
  assert calls == []


def test_memory_is_bounded_by_the_caps(capturing):
  small = VizRecorder(max_steps=3, max_realizes=1, max_kernels=2)
  capture.set_listener(small)
  viz_program.run("SIM")
  (Tensor([1.0, 2.0]) + 5).numpy()
  assert len(small.steps_by_after) == 3 and small.dropped_steps > 0
  assert len(small.schedules) == 1 and small.dropped_realizes >= 1
  assert len(small.rendered) == 2 and small.dropped_kernels >= 2


def test_a_repeated_schedule_is_one_entry_with_a_count(capturing):
  for value in (1.5, 2.5, 3.5):
    assert (Tensor([1.0, 2.0, 3.0]) * value).tolist() == [value, 2 * value, 3 * value]
  runs = viz.data().realizes()["realizes"]
  assert [run["count"] for run in runs] == [3]


def get(url: str) -> tuple[int, str, bytes]:
  try:
    with urllib.request.urlopen(url, timeout=30) as response:
      return response.status, response.headers["Content-Type"], response.read()
  except urllib.error.HTTPError as error:
    return error.code, "", b""


def test_the_server_serves_the_page_and_its_json(captured):
  server = viz.serve(port=0, block=False)
  try:
    assert server.url.startswith("http://127.0.0.1:")
    status, kind, page = get(server.url)
    assert status == 200 and kind.startswith("text/html") and b"/static/dagre.min.js" in page
    status, kind, script = get(server.url + "static/dagre.min.js")
    assert status == 200 and kind.startswith("text/javascript") and b"dagre" in script
    realizes = json.loads(get(server.url + "api/realizes")[2])
    assert [item["kind"] for item in realizes["realizes"][0]["items"]] == ["kernel", "kernel", "copy", "kernel"]
    kernel = json.loads(get(server.url + "api/kernel/2")[2])
    assert kernel["name"] == "E_4" and kernel["steps"][0]["graph"]["nodes"]
    timeline = json.loads(get(server.url + "api/timeline")[2])
    assert isinstance(timeline["traceEvents"], list)
    assert get(server.url + "api/kernel/99")[0] == 404
    assert get(server.url + "api/kernel/x")[0] == 404
    assert get(server.url + "static/../recorder.py")[0] == 404
    assert get(server.url + "nothing")[0] == 404
  finally: server.stop()


def test_the_page_is_small():
  assert 50_000 < viz.page_bytes() < 120_000  # dagre is about 49 KB; the page's own files a few more


def read_url(process: subprocess.Popen) -> tuple[str, str]:
  """The URL a VIZ process prints, and what it printed before."""
  seen = []
  for line in process.stdout:
    if line.startswith("tinycore VIZ: open "): return line.split()[3], "".join(seen)
    seen.append(line)
  raise AssertionError(f"no URL printed; output: {''.join(seen)}; errors: {process.stderr.read()}")


def stop_with_ctrl_c(process: subprocess.Popen) -> int:
  process.send_signal(signal.SIGINT)
  return process.wait(timeout=60)


@pytest.mark.parametrize("entry", ["env", "cli"])
def test_a_script_is_served_after_it_ends_until_ctrl_c(entry):
  env = {**os.environ, "TINYCORE_VIZ_PORT": "0"}
  if entry == "env":
    command = [sys.executable, str(PROGRAM), "PYTHON"]
    env["TINYCORE_VIZ"] = "1"
  else:
    command = [sys.executable, "-m", "tinycore", "viz", str(PROGRAM), "PYTHON"]
    env.pop("TINYCORE_VIZ", None)
  process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
  try:
    url, printed = read_url(process)
    assert "argv ['PYTHON']" in printed  # the script got its arguments
    realizes = json.loads(get(url + "api/realizes")[2])["realizes"]
    items = [item["name"] for realize in realizes for item in realize["items"]]
    assert "copy CPU -> PYTHON" in items
    assert stop_with_ctrl_c(process) == 0
  finally:
    if process.poll() is None: process.kill()


def test_tinycore_viz_names_a_missing_script(tmp_path, capsys):
  from tinycore.cli import main
  assert main(["viz", str(tmp_path / "missing.py")]) == 2
  assert "no such script" in capsys.readouterr().err
  assert not viz.is_enabled()
