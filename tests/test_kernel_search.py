"""Kernel search (BEAM, tinycore/engine/search.py): candidates are checked against the rules' kernel and timed on the
device, the choice is kept on disk for the next process, JITBEAM searches only what TinyJit captures, and a device
that cannot time kernels is skipped with a note."""
import json
import os
import subprocess
import sys
import numpy as np
import pytest
from tinycore import Context, Device, Tensor, TinyJit
from tinycore.codegen.optimize import Block, KernelOpts, Tile
from tinycore.uop.ops import Ops
from tinycore.engine import search


@pytest.fixture(autouse=True)
def fresh_search(monkeypatch, tmp_path):
  """Each test searches anew: no in-memory choices, an empty disk cache, and every kernel worth searching."""
  monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.setattr(search, "MIN_SEARCHED_SECONDS", 0.0)
  search.searched.clear()
  search.reports.clear()


@pytest.mark.parametrize("device", ["CPU", "SIM", "PYTHON"])
def test_searched_kernels_compute_what_the_rules_kernels_do(device):
  rng = np.random.default_rng(0)
  a, w = rng.standard_normal((12, 20)).astype(np.float32), rng.standard_normal((20, 8)).astype(np.float32)
  x, y = Tensor(a, device=device).realize(), Tensor(w, device=device).realize()
  with Context(BEAM=1): product, column_sums = (x @ y).numpy(), x.sum(0).numpy()
  np.testing.assert_allclose(product, a @ w, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(column_sums, a.sum(0), rtol=1e-5, atol=1e-5)
  assert len(search.reports) == 2 and all(r.tried > 1 for r in search.reports)
  for report in search.reports: assert report.best_s <= report.default_s


def test_a_search_replaces_a_tile_that_spills_with_one_that_fits(monkeypatch):
  # the case built to need a search: rules that pick a 64 x 32 register tile (2048 accumulators: they spill to the
  # stack), over ten times slower than a tile that fits the registers
  real_rules = search.decide_opts

  def spilling_rules(prepared, target):
    loops = sorted(r.arg[0] for r in prepared.toposort() if r.op is Ops.RANGE and r.arg[1] == "loop")
    return KernelOpts(Tile(loops[1], 64, loops[0], 32), real_rules(prepared, target).strip_rows)
  monkeypatch.setattr(search, "decide_opts", spilling_rules)
  a = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
  x = Tensor(a).realize()
  with Context(BEAM=1): out = (x @ x).numpy()
  np.testing.assert_allclose(out, a @ a, rtol=1e-4, atol=1e-4)
  (report,) = search.reports
  assert report.opts.tile != Tile(1, 64, 0, 32) and report.best_s < report.default_s, report


def test_the_cpu_offers_threads_and_reduction_lanes_to_a_search():
  from tiny_cpu.renderer import CPURenderer
  from tinycore.codegen.optimize import optimize_kernel
  x = Tensor(np.ones((512, 512), np.float32)).realize()
  sink = optimize_kernel(x.sum(1).schedule_linear().src[-1].src[0])
  renderer = CPURenderer(threads=2)
  assert renderer.search_space(sink) == {"threads": (True, False), "lanes": (1, 2, 4, 8)}
  def source(**settings) -> str:
    opts = KernelOpts(renderer=tuple(sorted(settings.items())))
    return renderer.render("k", sink.replace(arg=opts)).source
  assert "core_count" in source(threads=True) and "tc_share" not in source(threads=False)
  lanes = renderer.kernel_target.vector_lanes
  assert f"_lanes[{2 * lanes}];" in source(lanes=2) and f"_lanes[{8 * lanes}];" in source(lanes=8)


def test_a_candidate_whose_outputs_differ_is_dropped(monkeypatch):
  real_runner = search.KernelSearch.time

  def corrupting_time(self, opts, reference):  # every candidate but the rules' writes a wrong first element
    original_run = self.runner
    def runner(call):
      run = original_run(call)
      def corrupted(binding):
        seconds = run(binding)
        if not reference:
          self.buffers[self.written[0]].copyin(memoryview(np.full(self.buffers[self.written[0]].size, 7,
                                                                  np.float32).tobytes()))
        return seconds
      return corrupted
    self.runner = runner
    try: return real_runner(self, opts, reference)
    finally: self.runner = original_run
  monkeypatch.setattr(search.KernelSearch, "time", corrupting_time)
  a = np.random.default_rng(2).standard_normal((32, 48)).astype(np.float32)
  with Context(BEAM=2): sums = Tensor(a).sum(0).numpy()
  np.testing.assert_allclose(sums, a.sum(0), rtol=1e-5, atol=1e-5)
  (report,) = search.reports
  assert report.tried > 1 and report.best_s == report.default_s
  assert report.opts == search.decode_opts(search.encode_opts(report.opts))


SEARCH_SCRIPT = """
import json, sys
import numpy as np
from tinycore import Context, Tensor
from tinycore.engine import search
search.MIN_SEARCHED_SECONDS = 0.0
x = Tensor(np.linspace(-1, 1, 3000, dtype=np.float32).reshape(60, 50)).realize()
with Context(BEAM=1): value = (x.exp() * 2).sum(0).numpy()
chosen = [search.encode_opts(opts).decode() for opts in search.searched.values()]
print(json.dumps({"reports": len(search.reports), "chosen": chosen, "first": float(value[0])}))
"""


def test_a_search_is_kept_on_disk_and_the_next_process_searches_nothing(tmp_path):
  env = {**os.environ, "TINYCORE_CACHE_DIR": str(tmp_path / "shared-cache")}
  def run() -> tuple[dict, str]:
    out = subprocess.run([sys.executable, "-c", SEARCH_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr
  first, first_log = run()
  second, second_log = run()
  assert first["reports"] == 1 and "BEAM r_" in first_log
  assert second["reports"] == 0 and "BEAM r_" not in second_log and second["chosen"] == first["chosen"]
  expected = 2 * np.exp(np.linspace(-1, 1, 3000, dtype=np.float32).reshape(60, 50)[:, 0]).sum()
  assert first["first"] == second["first"] == pytest.approx(expected, rel=1e-5)


def test_jitbeam_searches_only_the_kernels_tinyjit_captures():
  rng = np.random.default_rng(3)
  with Context(JITBEAM=1):
    eager = Tensor(rng.standard_normal((40, 40)).astype(np.float32))
    (eager @ eager).realize()
    assert search.reports == []
    step = TinyJit(lambda a: (a @ a + 1).realize())
    inputs = [rng.standard_normal((40, 40)).astype(np.float32) for _ in range(3)]
    outs = [step(Tensor(a)).numpy() for a in inputs]
  assert len(search.reports) >= 1
  for a, out in zip(inputs, outs): np.testing.assert_allclose(out, a @ a + 1, rtol=1e-4, atol=1e-5)


def test_a_device_that_cannot_time_kernels_is_skipped_with_a_note(monkeypatch, capsys):
  monkeypatch.setattr(type(Device["SIM"]), "times_kernels", False)
  search._skipped_devices.discard("SIM")
  a = np.random.default_rng(4).standard_normal((16, 16)).astype(np.float32)
  with Context(BEAM=2): out = (Tensor(a, device="SIM") @ Tensor(a, device="SIM")).numpy()
  np.testing.assert_allclose(out, a @ a, rtol=1e-4, atol=1e-5)
  assert search.reports == []
  assert "BEAM: SIM is skipped" in capsys.readouterr().err


def test_opts_round_trip_through_their_disk_form():
  opts = KernelOpts(Tile(2, 16, 0, 4), 8, (("local", (32, 4)), ("threads", True)), Block(0, 1, 32))
  assert search.decode_opts(search.encode_opts(opts)) == opts
  assert search.decode_opts(b"{not json") is None
  assert search.decode_opts(json.dumps({"tile": None}).encode()) is None
