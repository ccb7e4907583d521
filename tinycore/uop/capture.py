"""Capture points for tools that watch the compiler work (VIZ, `tinycore.viz`).

The layers report what they did here: every `graph_rewrite` (the graph before and after, the rules that fired), the
other passes that turn one graph into another (rangeify, parameter binding, kernel optimization), each rendered
kernel and each realized schedule. A tool above registers a `CaptureListener` with `set_listener`; with none
registered (the default), each capture point costs one check of `listener`.
"""
from __future__ import annotations
from typing import Any, Callable, Protocol
from tinycore.uop.ops import UOp


class CaptureListener(Protocol):
  """What a capturing tool receives. Calls come from the thread doing the work, in the order it happens."""

  def rewrite(self, matcher: Any, before: UOp, after: UOp, fired: list[Callable]) -> None:
    """A `graph_rewrite` of `before` with `matcher` gave `after`; `fired` lists the function of every rule that
    returned a replacement, in order (a rule may fire many times)."""

  def graph_pass(self, name: str, before: UOp, after: UOp) -> None:
    """A pass that is not a rewrite (rangeify, optimize, ...) turned `before` into `after`."""

  def kernel_rendered(self, device: str, kernel: UOp, optimized: UOp, name: str, source: str) -> None:
    """The kernel SINK `kernel` (as a CALL holds it), optimized into `optimized`, was rendered for `device` as
    `source`, named `name`."""

  def schedule_run(self, linear: UOp) -> None:
    """A realize runs this LINEAR of CALLs (kernels and copies)."""


listener: CaptureListener | None = None


def set_listener(new: CaptureListener | None) -> CaptureListener | None:
  """Register the tool that receives every capture (None: capture nothing); returns the one it replaces."""
  global listener
  previous, listener = listener, new
  return previous


def report_pass(name: str, before: UOp, after: UOp) -> None:
  """Tell the listener, if any, that the pass `name` turned `before` into `after`."""
  if listener is not None and after is not before: listener.graph_pass(name, before, after)
