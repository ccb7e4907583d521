"""At the end of a run: onnx's backend suite counted as passed, excluded (tests/onnx/exclusions.py) and failed, per
suite. Only the CPU cases count: the suite also makes a CUDA twin of each case, which the backend skips."""
import collections

COUNTS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def pytest_runtest_logreport(report):
  if "test_onnx_backend.py" not in report.nodeid or not report.nodeid.endswith("_cpu"): return
  suite = report.nodeid.split("::")[1] if "::" in report.nodeid else "?"
  if report.skipped:
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    COUNTS[suite]["excluded" if "matched exclude pattern" in reason else "skipped"] += 1
  elif report.when == "call": COUNTS[suite]["passed" if report.passed else "failed"] += 1
  elif report.failed: COUNTS[suite]["failed"] += 1


def summary_line(name: str, counts: collections.Counter) -> str:
  line = f"{name:40s} {counts['passed']:5d} passed {counts['excluded']:5d} excluded {counts['failed']:5d} failed"
  return line + (f" {counts['skipped']:5d} skipped" if counts["skipped"] else "")


def pytest_terminal_summary(terminalreporter):
  if not COUNTS: return
  terminalreporter.section("onnx backend suite (CPU cases): passed / excluded / failed")
  total = collections.Counter()
  for suite, counts in sorted(COUNTS.items()):
    total.update(counts)
    terminalreporter.write_line(summary_line(suite, counts))
  run = total["passed"] + total["failed"]
  terminalreporter.write_line(summary_line("all", total) + f" ({100 * total['passed'] / max(run, 1):.1f}% of the "
                              "cases run pass)")
