"""A pytest plugin for CI without a GPU: report the cubin checks of tiny_nv.cubin_check and fail the run on any error.

    TINYCORE_NV_EMULATE=1 pytest -p tiny_nv.pytest_cubins --nv-check-cubins=sm_90 \\
        --pyargs tinycore.testing --tinycore-device=NV

runs the conformance suite on the mock driver while every distinct kernel it compiles is also compiled to an sm_90
cubin; at the end the plugin waits for the last cubins, prints how many kernels compiled (and the NVRTC errors, if
any) and makes the run fail when one did not compile or when no kernel was checked at all. `--nv-check-cubins` sets
TINYCORE_NV_CHECK_CUBINS for the run (without the option, that variable must name the archs).
"""
from __future__ import annotations
import os
from typing import Any
from tiny_nv.cubin_check import CHECK_CUBINS_ENV, CubinReport, active_checks, archs_from_env

_reports: list[CubinReport] = []


def pytest_addoption(parser: Any) -> None:
  parser.addoption("--nv-check-cubins", default=None, metavar="ARCHS",
                   help="also compile every NV kernel to cubins for these archs, e.g. sm_90 or sm_80,sm_90")


def pytest_configure(config: Any) -> None:
  if (archs := config.getoption("--nv-check-cubins")) is not None: os.environ[CHECK_CUBINS_ENV] = archs
  if not archs_from_env():
    raise ValueError(f"-p tiny_nv.pytest_cubins needs --nv-check-cubins=sm_90 or {CHECK_CUBINS_ENV}=sm_90")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
  _reports[:] = [check.finish() for check in active_checks()]
  if not _reports or any(report.failures or report.kernels == 0 for report in _reports):
    session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
  if not _reports:
    terminalreporter.write_line(f"tiny-nv: {CHECK_CUBINS_ENV} is set but no NV kernel was compiled", red=True)
  for report in _reports:
    terminalreporter.write_line(report.summary(), red=bool(report.failures), green=not report.failures)
    for failure in report.failures:
      terminalreporter.write_line(f"--- {failure.kernel} ({failure.arch}) ---\n{failure.error}")
