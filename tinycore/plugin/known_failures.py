"""Known failures: conformance tests a plugin declares as failing on its device, reported as xfail with a reason.

A plugin implements the hook ``tinycore_known_failures(device)`` and returns ``KnownFailure`` rows for the devices it
provides; the conformance suite's pytest plugin (``tinycore.testing.pytest_plugin``) marks the matching tests.
"""
from __future__ import annotations
import fnmatch
import attrs
from tinycore.plugin.manager import get_plugin_manager


@attrs.frozen
class KnownFailure:
  """A conformance test that fails on a device, and why.

  test: "test_file.py::test_name[params]" (a class, if any, between them), shell-style wildcards allowed.
  reason: shown in the report ("float16 rounding differs in the vendor compiler, issue #12").
  strict: a declared test that passes fails the run (XPASS strict), so a fixed bug's entry is removed.
  """
  test: str
  reason: str
  strict: bool = True

  def matches(self, test_id: str) -> bool: return fnmatch.fnmatchcase(test_id, self.test)


def known_failures(device: str) -> list[KnownFailure]:
  """Every KnownFailure the loaded plugins declare for `device` (a canonical name). A row that is not a
  KnownFailure is a TypeError naming it."""
  rows: list[KnownFailure] = []
  for answer in get_plugin_manager().hook.tinycore_known_failures(device=device):
    for row in answer or ():
      if not isinstance(row, KnownFailure):
        raise TypeError(f"tinycore_known_failures({device!r}) returned {row!r}, expected KnownFailure rows")
      rows.append(row)
  return rows
