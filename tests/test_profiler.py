"""The profiler (tinycore.profiler): Chrome traces that Perfetto's JSON importer accepts, with a track per device
queue, device-timed kernels and copies on queue devices (SIM's copies on its copy queue), host-timed ones elsewhere,
and the host's schedule, compile and submit spans."""
import collections
import json
import os
import pathlib
import subprocess
import sys
import numpy as np
import pytest
import tinycore
from tinycore import Tensor, TinyJit, profiler
from tinycore.codegen.estimates import estimated_ops
from tinycore.device.kernels import compile_kernel
from tinycore.uop.ops import Ops

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
# the Chrome Trace Event Format's phases (B/E duration, X complete, i instant, C counter, b/n/e async, s/t/f flow,
# P sample, N/O/D object, M metadata, V/v memory dump, R mark, c clock sync, (/) context)
PHASES = set("BEXiICbnestfPNODMVvRc()")
METADATA_NAMES = {"process_name": "name", "thread_name": "name", "process_labels": "labels",
                  "process_sort_index": "sort_index", "thread_sort_index": "sort_index"}


def is_number(value) -> bool: return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_event(event: dict) -> list[str]:
  """What is wrong with one event, by the Chrome Trace Event Format's rules for its phase."""
  where = f"event {event!r}"
  if not isinstance(event, dict): return [f"{where} is not an object"]
  problems = []
  phase = event.get("ph")
  if phase not in PHASES: problems.append(f"{where}: unknown phase {phase!r}")
  if not isinstance(event.get("name"), str) and phase != "E": problems.append(f"{where}: no string name")
  if "args" in event and not isinstance(event["args"], dict): problems.append(f"{where}: args is not an object")
  if phase == "M":
    field = METADATA_NAMES.get(event.get("name"))
    if field is None: problems.append(f"{where}: unknown metadata event")
    elif field not in event.get("args", {}): problems.append(f"{where}: metadata without args.{field}")
    elif field == "sort_index" and not isinstance(event["args"][field], int): problems.append(f"{where}: sort_index")
    return problems
  if not is_number(event.get("ts")): problems.append(f"{where}: ts is not a number")
  elif event["ts"] < 0: problems.append(f"{where}: negative ts")
  if phase == "X":
    if not is_number(event.get("dur")): problems.append(f"{where}: a complete event needs a numeric dur")
    elif event["dur"] < 0: problems.append(f"{where}: negative dur")
  if "cat" in event and not isinstance(event["cat"], str): problems.append(f"{where}: cat is not a string")
  return problems


def check_nesting(events: list[dict]) -> list[str]:
  """Slices on one (pid, tid) must nest: one that starts inside another ends inside it (Perfetto drops the rest).
  Times compared in integer nanoseconds, as Perfetto stores them."""
  problems, open_slices = [], collections.defaultdict(list)
  complete = [e for e in events if e.get("ph") == "X"]
  for e in sorted(complete, key=lambda e: (round(e["ts"] * 1000), -round(e["dur"] * 1000))):
    start, end = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
    stack = open_slices[(e["pid"], e["tid"])]
    while stack and stack[-1][1] <= start: stack.pop()
    if stack and end > stack[-1][1]: problems.append(f"{e['name']} overlaps {stack[-1][0]} on {e['pid']}/{e['tid']}")
    stack.append((e["name"], end))
  return problems


def validate_chrome_trace(data: dict) -> list[str]:
  """Every problem Perfetto's JSON importer (and chrome://tracing) would have with the trace: the top-level object,
  each event by its phase, pid/tid types used consistently, a name for every process and track in use, matched B/E
  pairs, and properly nested slices."""
  if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list): return ["no traceEvents list"]
  problems = []
  if data.get("displayTimeUnit", "ms") not in ("ms", "ns"): problems.append("displayTimeUnit is not ms or ns")
  if not isinstance(data.get("otherData", {}), dict): problems.append("otherData is not an object")
  events = data["traceEvents"]
  for event in events: problems += check_event(event)
  if problems: return problems
  id_types = {type(e[key]) for e in events for key in ("pid", "tid") if key in e}
  if not (id_types <= {int} or id_types <= {str}): problems.append(f"pid/tid mix types {id_types}")
  named_processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
  named_threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
  for e in events:
    if e["ph"] == "M": continue
    if e.get("pid") not in named_processes: problems.append(f"{e['name']}: process {e.get('pid')} has no name")
    if (e.get("pid"), e.get("tid")) not in named_threads: problems.append(f"{e['name']}: its track has no name")
  depth = collections.Counter()
  for e in sorted((e for e in events if e["ph"] in "BE"), key=lambda e: e["ts"]):
    depth[(e["pid"], e["tid"])] += 1 if e["ph"] == "B" else -1
    if depth[(e["pid"], e["tid"])] < 0: problems.append(f"an E event without its B on {e['pid']}/{e['tid']}")
  return problems + check_nesting(events)


def track_names(data: dict) -> dict[tuple, str]:
  """{(process name, track name): (pid, tid)} of the trace's metadata."""
  processes = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
  return {(processes[e["pid"]], e["args"]["name"]): (e["pid"], e["tid"])
          for e in data["traceEvents"] if e["name"] == "thread_name"}


def slices(data: dict, category: str, process: str | None = None, track: str | None = None) -> list[dict]:
  tracks = track_names(data)
  where = {pid_tid for (p, t), pid_tid in tracks.items() if (process in (None, p)) and (track in (None, t))}
  return [e for e in data["traceEvents"] if e["ph"] == "X" and e["cat"] == category and (e["pid"], e["tid"]) in where]


@pytest.fixture
def recording():
  """Profiling off and nothing recorded, before and after the test."""
  profiler.disable()
  profiler.clear()
  yield
  profiler.disable()
  profiler.clear()


def kernel_names(tensor: Tensor, device: str) -> list[str]:
  """The names of the kernels the tensor's schedule runs, in order."""
  calls = tensor.schedule_linear().src
  return [compile_kernel(device, call.src[0]).name for call in calls if call.src[0].op is Ops.SINK]


# --- the validator itself rejects what Perfetto would reject
GOOD = {"traceEvents": [
  {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "SIM"}},
  {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "compute"}},
  {"name": "k", "cat": "kernel", "ph": "X", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2.0, "args": {}},
  {"name": "inner", "cat": "kernel", "ph": "X", "pid": 1, "tid": 1, "ts": 2.0, "dur": 1.5, "args": {}}],
  "displayTimeUnit": "ms"}


@pytest.mark.parametrize("change, problem", [
  (lambda t: t["traceEvents"][2].pop("dur"), "numeric dur"),
  (lambda t: t["traceEvents"][2].update(ts="1.5"), "ts is not a number"),
  (lambda t: t["traceEvents"][2].update(dur=-1), "negative dur"),
  (lambda t: t["traceEvents"][3].update(dur=5.0), "overlaps"),
  (lambda t: t["traceEvents"][3].update(pid="1"), "mix types"),
  (lambda t: t["traceEvents"][3].update(tid=2), "track has no name"),
  (lambda t: t["traceEvents"][0].update(args={}), "metadata without"),
  (lambda t: t["traceEvents"][2].update(ph="Q"), "unknown phase"),
  (lambda t: t.update(displayTimeUnit="s"), "displayTimeUnit"),
])
def test_the_validator_catches(change, problem):
  assert validate_chrome_trace(GOOD) == []
  broken = json.loads(json.dumps(GOOD))
  change(broken)
  assert any(problem in p for p in validate_chrome_trace(broken)), validate_chrome_trace(broken)


def test_partial_overlaps_on_one_track_are_cut_to_nest():
  """Two clocks on one track (a host-timed copyout beside device-timed copies) may overlap by the clock offset's
  uncertainty: the earlier slice is cut where the later starts."""
  events = [{"name": n, "cat": "copy", "ph": "X", "pid": 2, "tid": 2, "ts": ts, "dur": dur, "args": {}}
            for n, ts, dur in (("a", 100, 50), ("b", 120, 10), ("c", 140, 30), ("d", 200, 5))]
  nested = profiler.nest_slices(events)
  assert [(e["name"], e["ts"], e["dur"]) for e in nested] == [("a", 100, 40), ("b", 120, 10), ("c", 140, 30),
                                                               ("d", 200, 5)]
  assert nested[0]["args"]["trimmed_us"] == 0.01


# --- recording
def test_off_records_nothing(recording):
  x = Tensor(np.arange(12, dtype=np.float32), device="SIM")
  assert not profiler.is_enabled()
  assert (x * 2).sum().item() == 132.0
  assert [e for e in profiler.trace()["traceEvents"] if e["ph"] != "M"] == []


def test_sim_kernels_and_copies_on_their_queue_tracks(recording, tmp_path):
  """On SIM (compute and copy queues): the upload is a device-timed copy on its copy track, the kernels are
  device-timed on its compute track in schedule order and named as the schedule's kernels, and the host tracks hold
  the schedule, compile and submit spans."""
  data = np.random.default_rng(0).standard_normal((48, 40)).astype(np.float32)
  path = tmp_path / "trace.json"
  with tinycore.profile(str(path)):
    x = Tensor(data, device="SIM")
    y = (x @ x.T).relu().sum(1)
    expected = kernel_names(y, "SIM")
    result = y.numpy()
  np.testing.assert_allclose(result, np.maximum(data @ data.T, 0).sum(1), rtol=1e-4)
  trace = json.loads(path.read_text())
  assert validate_chrome_trace(trace) == []
  assert {("SIM", "compute"), ("SIM", "copy"), ("host", "schedule"), ("host", "compile"),
          ("host", "submit")} <= set(track_names(trace))
  kernels = slices(trace, "kernel", "SIM", "compute")
  assert [k["name"] for k in kernels] == expected and len(expected) == 2
  assert all(k["args"]["clock"] == "device" and k["args"]["device"] == "SIM" for k in kernels)
  assert kernels[0]["args"]["estimated_ops"] == 48 * 48 * 40 * 2  # multiply and accumulate per term
  uploads = [c for c in slices(trace, "copy", "SIM", "copy") if c["args"]["clock"] == "device"]
  assert [c["args"]["bytes"] for c in uploads] == [data.nbytes]
  assert uploads[0]["ts"] + uploads[0]["dur"] <= kernels[0]["ts"] + 1  # the kernel waited for the upload (1 us slack)
  assert slices(trace, "copy", "SIM", "copy")[-1]["name"] == "copyout"  # .numpy(): through SIM's copy queue
  submits = slices(trace, "submit", "host", "submit")
  assert submits and all(s["args"]["timed"] for s in submits)
  assert submits[0]["ts"] <= kernels[0]["ts"]  # submitted before it ran, on one timebase
  assert {c["name"] for c in slices(trace, "compile", "host")} >= set(expected)
  assert [s["args"]["cache"] for s in slices(trace, "schedule", "host")][:1] == ["miss"]


def test_cpu_kernels_are_device_timed_and_python_kernels_host_timed(recording):
  data = np.arange(64, dtype=np.float32)
  with tinycore.profile():
    on_cpu = (Tensor(data, device="CPU") + 1).exp2().sum()
    cpu_names = kernel_names(on_cpu, "CPU")
    on_python = (Tensor(data, device="PYTHON") * 3).sum()
    python_names = kernel_names(on_python, "PYTHON")
    assert on_cpu.item() == pytest.approx(float(np.exp2(data + 1).sum()), rel=1e-5)
    assert on_python.item() == 3 * data.sum()
  trace = profiler.trace()
  assert validate_chrome_trace(trace) == []
  cpu, python = slices(trace, "kernel", "CPU", "compute"), slices(trace, "kernel", "PYTHON", "compute")
  assert [k["name"] for k in cpu] == cpu_names and {k["args"]["clock"] for k in cpu} == {"device"}
  assert [k["name"] for k in python] == python_names and {k["args"]["clock"] for k in python} == {"host"}
  assert "CPU" in trace["otherData"]["device_clocks"]


def test_profile_blocks_nest_and_write_their_own_events(recording, tmp_path):
  outer_path, inner_path = tmp_path / "outer.json", tmp_path / "inner.json"
  a = Tensor(np.ones(8, np.float32), device="SIM").realize()
  with tinycore.profile(str(outer_path)):
    (a + 1).realize()
    with tinycore.profile(str(inner_path)):
      (a * 5).sum().realize()
    assert profiler.is_enabled()  # the outer block still records
  assert not profiler.is_enabled()
  outer, inner = json.loads(outer_path.read_text()), json.loads(inner_path.read_text())
  assert validate_chrome_trace(outer) == [] and validate_chrome_trace(inner) == []
  outer_kernels = [k["name"] for k in slices(outer, "kernel")]
  inner_kernels = [k["name"] for k in slices(inner, "kernel")]
  assert inner_kernels == kernel_names((a * 5).sum(), "SIM")
  assert outer_kernels == kernel_names(a + 1, "SIM") + inner_kernels
  profiler.enable()
  (a - 1).realize()
  profiler.disable()
  assert len(slices(profiler.trace(), "kernel")) == len(outer_kernels) + 1  # trace() has everything so far
  profiler.clear()
  assert slices(profiler.trace(), "kernel") == []


def test_jitted_steps_are_timed_on_the_device(recording):
  @TinyJit
  def step(x: Tensor) -> Tensor: return ((x * 2).relu() + 1).sum().realize()
  data = np.arange(-16, 16, dtype=np.float32)
  with tinycore.profile():
    results = [step(Tensor(data + i, device="SIM")).item() for i in range(4)]
  assert results == [float((np.maximum((data + i) * 2, 0) + 1).sum()) for i in range(4)]
  trace = profiler.trace()
  assert validate_chrome_trace(trace) == []
  kernels = slices(trace, "kernel", "SIM", "compute")
  per_step = len(kernels) // 4
  assert per_step >= 1 and len(kernels) == 4 * per_step  # eager, capture, then two replays: every step is timed
  assert {k["args"]["clock"] for k in kernels} == {"device"}
  assert [k["name"] for k in kernels[-per_step:]] == [k["name"] for k in kernels[:per_step]]


def test_estimated_ops_count_loop_iterations():
  a = Tensor(np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32), device="CPU")
  b = Tensor(np.random.default_rng(2).standard_normal((8, 3)).astype(np.float32), device="CPU")
  kernels = [c.src[0] for c in (a @ b).schedule_linear().src if c.src[0].op is Ops.SINK]
  assert [estimated_ops(k) for k in kernels] == [4 * 3 * 8 * 2]
  elementwise = [c.src[0] for c in (a * 2 + 1).schedule_linear().src if c.src[0].op is Ops.SINK]
  assert [estimated_ops(k) for k in elementwise] == [4 * 8 * 2]


def test_train_digits_with_TINYCORE_PROFILE_on_SIM(tmp_path):
  """A training run (examples/train_digits.py, one epoch in big batches, jitted) with TINYCORE_PROFILE: the trace is
  written at exit, Perfetto would load it, and it has SIM's compute and copy tracks with device-timed events."""
  pytest.importorskip("sklearn", reason="examples need scikit-learn: pip install -e '.[examples]'")
  path = tmp_path / "digits.json"
  env = {**os.environ, "TINYCORE_PROFILE": str(path)}
  run = subprocess.run([sys.executable, str(EXAMPLES / "train_digits.py"), "--device", "SIM", "--epochs", "1",
                        "--batch-size", "256", "--out", str(tmp_path / "w.safetensors")],
                       capture_output=True, text=True, env=env, timeout=300)
  assert run.returncode == 0, run.stderr
  assert f"profile written to {path}" in run.stderr
  trace = json.loads(path.read_text())
  assert validate_chrome_trace(trace) == []
  kernels = slices(trace, "kernel", "SIM", "compute")
  copies = slices(trace, "copy", "SIM", "copy")
  steps = 1438 // 256
  assert len(kernels) >= 10 * steps and {k["args"]["clock"] for k in kernels} == {"device"}
  assert any(c["args"]["clock"] == "device" and c["args"]["bytes"] == 256 * 64 * 4 for c in copies)  # a batch's x
  compiled = {c["name"] for c in slices(trace, "compile", "host", "compile")}
  assert {k["name"] for k in kernels} <= compiled  # every kernel that ran was compiled under that name
  assert all(k["args"]["estimated_ops"] > 0 for k in kernels if k["name"].startswith("r_"))
  assert len(slices(trace, "submit", "host", "submit")) >= steps


def test_batches_carry_timestamps_only_while_profiling(recording):
  """Off, a compiled batch has no Timestamp command (nothing runs for the profiler); on, each kernel and copy is
  bracketed by two, and the compiled steps of each form are kept apart."""
  from tinycore.engine.plan import BatchStep, plan_for
  from tinycore.hcq.commands import Exec, Timestamp
  x = Tensor(np.arange(32, dtype=np.float32), device="SIM").realize()
  plan, _ = plan_for([((x + 1) * x).sum().uop])

  def commands(profile: bool) -> list:
    profiler.enable() if profile else profiler.disable()
    steps = plan.run_plan.steps()
    profiler.disable()
    batches = [step.batch for step in steps if type(step) is BatchStep]
    return [type(c) for batch in batches for cmds in batch.plan.values() for c in cmds]
  off, on = commands(False), commands(True)
  assert Timestamp not in off and off.count(Exec) == 1
  assert on.count(Exec) == 1 and on.count(Timestamp) == 2
  assert commands(False) == off  # the plain form is still the one kept
