"""What the VIZ page reads: the recorder's schedules, kernels and graphs as JSON-ready dicts.

Every UOp drawn gets a number that stays the same across graphs (`VizData.node_id`), so the page can mark the nodes
a step created. Kernels are numbered in the order the schedules list them.
"""
from __future__ import annotations
import threading
from typing import Any
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.scalars import call_buffers
from tinycore.codegen import kernel_name
from tinycore.viz.recorder import VizRecorder

MAX_GRAPH_NODES = 400  # a bigger graph is drawn as its MAX_GRAPH_NODES nodes nearest the root
MAX_ARG_CHARS = 48


class VizData:
  """The JSON views of one recorder."""

  def __init__(self, recorder: VizRecorder):
    self.recorder = recorder
    self.lock = threading.Lock()
    self.node_ids: dict[UOp, int] = {}
    self.kernel_ids: dict[UOp, int] = {}
    self.kernels: list[UOp] = []

  def node_id(self, node: UOp) -> int:
    with self.lock: return self.node_ids.setdefault(node, len(self.node_ids))

  def kernel_id(self, kernel: UOp) -> int:
    with self.lock:
      if kernel not in self.kernel_ids:
        self.kernel_ids[kernel] = len(self.kernels)
        self.kernels.append(kernel)
      return self.kernel_ids[kernel]

  def realizes(self) -> dict[str, Any]:
    """Every captured schedule: its calls (kernels and copies) in order, and how often it ran."""
    runs = self.recorder.schedule_runs()
    return {"realizes": [{"id": i, "count": run.count, **self.schedule(run.linear)} for i, run in enumerate(runs)],
            "dropped_realizes": self.recorder.dropped_realizes, "dropped_steps": self.recorder.dropped_steps,
            "dropped_kernels": self.recorder.dropped_kernels}

  def schedule(self, linear: UOp) -> dict[str, Any]:
    """The calls of a LINEAR, each with the buffers it writes and reads (numbered within the schedule)."""
    buffers: dict[UOp, int] = {}
    labels: list[str] = []

    def buffer_number(uop: UOp) -> int:
      root = uop.src[0] if uop.op is Ops.BUFFER_VIEW else uop
      if root not in buffers:
        buffers[root] = len(labels)
        labels.append(buffer_label(root))
      return buffers[root]

    items = []
    for index, call in enumerate(linear.src):
      args = call_buffers(call)
      item = {"index": index, "writes": buffer_number(args[0]), "reads": [buffer_number(a) for a in args[1:]]}
      items.append(item | self.call_summary(call.src[0], args))
    return {"items": items, "buffers": labels}

  def call_summary(self, callee: UOp, args: tuple[UOp, ...]) -> dict[str, Any]:
    if callee.op is Ops.COPY:
      dst, src = args[0], args[1]
      return {"kind": "copy", "name": f"copy {src.device} -> {dst.device}", "device": str(dst.device),
              "bytes": call_bytes(dst)}
    if callee.op is Ops.COLLECTIVE:
      dst, src = args[0], args[1]
      return {"kind": "collective", "name": f"{callee.arg.describe()} on {src.device}", "device": str(dst.device),
              "bytes": call_bytes(src)}
    rendered = self.recorder.rendered_kernel(callee)
    name = rendered.name if rendered is not None else kernel_name(callee)
    return {"kind": "kernel", "name": name, "device": str(args[0].device), "kernel": self.kernel_id(callee)}

  def kernel(self, kernel_number: int) -> dict[str, Any]:
    """A kernel's graph at every step (the first graph, then each pass's result), its rendered source."""
    with self.lock:
      if not 0 <= kernel_number < len(self.kernels): raise KeyError(f"no kernel {kernel_number}")
      kernel = self.kernels[kernel_number]
    history = self.recorder.history(kernel)
    first = history[0].before if history else kernel
    steps = [{"name": "start" if history else "kernel", "rules": [], "graph": self.graph(first)}]
    steps += [{"name": step.name, "rules": step.rules, "graph": self.graph(step.after)} for step in history]
    rendered = self.recorder.rendered_kernel(kernel)
    return {"id": kernel_number, "name": rendered.name if rendered else kernel_name(kernel),
            "device": rendered.device if rendered else None, "source": rendered.source if rendered else None,
            "steps": steps}

  def graph(self, root: UOp) -> dict[str, Any]:
    """Nodes and edges (source -> user) of the graph under `root`, at most MAX_GRAPH_NODES nearest the root."""
    order = list(root.toposort())
    kept = order[-MAX_GRAPH_NODES:]
    ids = {node: self.node_id(node) for node in kept}
    nodes = [{"id": ids[n], "op": n.op.name, "dtype": n.dtype.name if n.dtype is not None else "",
              "arg": arg_text(n.arg)} for n in kept]
    edges = [[ids[s], ids[n]] for n in kept for s in n.src if s in ids]
    return {"nodes": nodes, "edges": edges, "truncated": len(order) - len(kept)}


def call_bytes(buffer: UOp) -> int | None:
  """The bytes a call's buffer argument (a BUFFER or a BUFFER_VIEW) spans, when its size is a number."""
  size = buffer.arg[0] if buffer.op is Ops.BUFFER_VIEW else buffer.arg
  return int(size) * buffer.dtype.itemsize if isinstance(size, int) else None


def arg_text(arg: Any) -> str:
  """A node's arg in one short line ("" for none)."""
  if arg is None: return ""
  text = repr(arg) if not isinstance(arg, UOp) else f"<{arg.op.name}>"
  return text if len(text) <= MAX_ARG_CHARS else text[:MAX_ARG_CHARS - 3] + "..."


def buffer_label(buffer: UOp) -> str:
  """A buffer as the schedule view names it: device, dtype and size."""
  size = buffer.arg if isinstance(buffer.arg, int) else arg_text(buffer.arg)
  dtype = buffer.dtype.name if buffer.dtype is not None else "?"
  return f"{buffer.device} {dtype}[{size}]"
