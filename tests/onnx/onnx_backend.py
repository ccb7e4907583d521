"""tinycore as an `onnx.backend` (the interface onnx's own backend test suite drives)."""
from __future__ import annotations
from typing import Any
import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep
from tinycore import Device, Tensor, dtypes
from tinycore.dtype import ML_DTYPES_NAMES
from tinycore.nn.onnx import OnnxRunner


def to_numpy(value: Any) -> Any:
  """A runner output as the suite compares it: a sequence as a list of arrays, bfloat16 and the 8-bit floats as
  ml_dtypes' types (the 8-bit floats byte for byte)."""
  if isinstance(value, list): return [to_numpy(v) for v in value]
  if not isinstance(value, Tensor): return value if value is None else np.asarray(value)
  if value.dtype is dtypes.bfloat16:
    import ml_dtypes
    return value.numpy().astype(ml_dtypes.bfloat16)
  if value.dtype in dtypes.fp8s:
    import ml_dtypes
    name = next(theirs for theirs, ours in ML_DTYPES_NAMES.items() if ours == value.dtype.name)
    return value.bitcast(dtypes.uint8).numpy().view(getattr(ml_dtypes, name))
  return value.numpy()


class TinycoreRep(BackendRep):
  def __init__(self, runner: OnnxRunner):
    super().__init__()
    self.runner = runner

  def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
    if isinstance(inputs, dict): feeds = dict(inputs)
    else: feeds = dict(zip(self.runner.graph_inputs, inputs if isinstance(inputs, (list, tuple)) else [inputs]))
    outputs = self.runner(feeds)
    return tuple(to_numpy(o) for o in outputs.values())


class TinycoreBackend(Backend):
  @classmethod
  def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> TinycoreRep:
    return TinycoreRep(OnnxRunner(model.SerializeToString()))

  @classmethod
  def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
    return cls.prepare(model, device).run(inputs)

  @classmethod
  def supports_device(cls, device: str) -> bool: return device == "CPU" and Device.DEFAULT is not None
