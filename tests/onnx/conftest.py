"""At the end of a run: onnx's backend suite counted as passed, excluded (tests/onnx/exclusions.py) and failed, per
suite; the cases for other devices (CUDA) are not counted."""
import collections

COUNTS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def pytest_runtest_logreport(report):
  if "test_onnx_backend.py" not in report.nodeid: return
  suite = report.nodeid.split("::")[1] if "::" in report.nodeid else "?"
  if report.skipped:
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if "matched exclude pattern" in reason: COUNTS[suite]["excluded"] += 1
  elif report.when == "call": COUNTS[suite]["passed" if report.passed else "failed"] += 1
  elif report.failed: COUNTS[suite]["failed"] += 1


def pytest_terminal_summary(terminalreporter):
  if not COUNTS: return
  terminalreporter.section("onnx backend suite: passed / excluded / failed")
  total = collections.Counter()
  for suite, counts in sorted(COUNTS.items()):
    total.update(counts)
    terminalreporter.write_line(f"{suite:40s} {counts['passed']:5d} passed {counts['excluded']:5d} excluded "
                                f"{counts['failed']:5d} failed")
  run = total["passed"] + total["failed"]
  terminalreporter.write_line(f"{'all':40s} {total['passed']:5d} passed {total['excluded']:5d} excluded "
                              f"{total['failed']:5d} failed ({100 * total['passed'] / max(run, 1):.1f}% of the cases run pass)")
