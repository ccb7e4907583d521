"""Run ONNX models: `OnnxRunner(path or bytes or Tensor or ModelProto)`, then `runner({name: Tensor or numpy})` returns
{output name: Tensor}, lazily (one call is one schedule when realized; a `TinyJit` around the call replays it).

    runner = OnnxRunner("model.onnx")
    out = runner({"input": np.zeros((1, 3, 224, 224), np.float32)})["output"].numpy()

The protobuf is parsed with the `onnx` package (`pip install onnx`): it is the format's reference reader, every user
with an ONNX model has it, and it reads the versions of the format that exporters write; the graph is built from it
once. Initializers kept in external data files are views of those files on DISK (read when a run realizes them);
inline ones are copied to the device once. Operators are in `tinycore.nn.onnx_ops` (the default domain, opsets 7 to
23, and the `com.microsoft` ops exporters emit for transformers); an operator, attribute or dtype that is not
supported raises `OnnxError` naming the operator, the node, the opset and what is missing, when the model is loaded.

Values an operator needs on the host (a Reshape's shape, a Slice's starts) come from constants, initializers and
Shape; small computations on such values run on the PYTHON device (tinycore's interpreter: no compiler run for shape
arithmetic), lazily, read only when an operator asks for the value (building a graph realizes nothing else: a realize
rebinds every live tensor, so one per node would make building quadratic); anything else is realized on the model's
device when it is needed.
"""
from __future__ import annotations
import inspect
import math
import os
import pathlib
from typing import Any, Callable, NamedTuple
from tinycore.device.registry import Device
from tinycore.dtype import DType, dtypes
from tinycore.errors import ShapeError
from tinycore.tensor import Tensor

__all__ = ["OnnxRunner", "OnnxError", "onnx_load"]

# host values: at most this many elements are computed on the PYTHON device when every input is known on the host
HOST_VALUE_LIMIT = 1024
HOST_DEVICE = "PYTHON"


class OnnxError(ValueError):
  """A model that cannot run: its message names the operator, the node, the opset and what is missing."""


def _onnx() -> Any:
  try: import onnx
  except ImportError: raise ImportError("ONNX models need the onnx package: pip install onnx") from None
  return onnx


# TensorProto.DataType -> tinycore dtype (None: a type tinycore has no dtype for, named in the error)
ONNX_DTYPES: dict[int, DType] = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16,
                                 5: dtypes.int16, 6: dtypes.int32, 7: dtypes.int64, 9: dtypes.bool,
                                 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64,
                                 16: dtypes.bfloat16, 17: dtypes.fp8e4m3, 18: dtypes.fp8e4m3fnuz, 19: dtypes.fp8e5m2,
                                 20: dtypes.fp8e5m2fnuz}
ONNX_CODES: dict[DType, int] = {dtype: code for code, dtype in ONNX_DTYPES.items()}
ONNX_TYPE_NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
                   8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64",
                   15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2",
                   20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1"}


def onnx_dtype(code: int, where: str) -> DType:
  if code not in ONNX_DTYPES:
    name = ONNX_TYPE_NAMES.get(code, code)
    raise OnnxError(f"{where}: ONNX type {name} is not supported (tinycore has no such dtype)")
  return ONNX_DTYPES[code]


def _load_proto(model: Any) -> tuple[Any, pathlib.Path | None]:
  """The ModelProto (external data not loaded) and the directory its external data files are relative to."""
  onnx = _onnx()
  if isinstance(model, onnx.ModelProto): return model, None
  if isinstance(model, Tensor):
    if model.dtype is not dtypes.uint8:
      raise OnnxError(f"an ONNX model as a Tensor must be uint8 bytes, got {model.dtype}")
    model = bytes(model.to(Device.DEFAULT).numpy() if model.device.startswith("DISK") else model.numpy())
  if isinstance(model, (bytes, bytearray, memoryview)):
    try: return onnx.load_model_from_string(bytes(model)), None
    except Exception as error: raise OnnxError(f"these bytes are not an ONNX model: {error}") from None
  path = pathlib.Path(os.fspath(model))
  if not path.is_file(): raise FileNotFoundError(f"no ONNX model at {path}")
  try: proto = onnx.load(str(path), load_external_data=False)
  except Exception as error: raise OnnxError(f"{path} is not an ONNX model: {error}") from None
  return proto, path.resolve().parent


def tensor_from_proto(proto: Any, base_dir: pathlib.Path | None, device: str) -> tuple[Tensor, Any]:
  """A TensorProto as a Tensor on `device` (external data: a view of its file on DISK, moved when realized), and its
  values as a nested list when it is small enough to be a host value (else None)."""
  onnx = _onnx()
  from onnx import numpy_helper
  where = f"tensor {proto.name!r}"
  dtype = onnx_dtype(proto.data_type, where)
  shape = tuple(int(d) for d in proto.dims)
  if proto.data_location == onnx.TensorProto.EXTERNAL:
    info = {e.key: e.value for e in proto.external_data}
    if base_dir is None:
      raise OnnxError(f"{where} is in an external file ({info.get('location')}): load the model from "
                                         "its path, so the file can be found beside it")
    file = (base_dir / info["location"]).resolve()
    if not file.is_file(): raise FileNotFoundError(f"{where}: its external data file {file} is missing")
    offset, count = int(info.get("offset", 0)), 1
    for d in shape: count *= d
    length = int(info.get("length", count * dtype.itemsize))
    if length != count * dtype.itemsize:
      raise OnnxError(f"{where}: external data of {length} bytes does not hold {shape} {dtype.name}")
    data = Tensor(pathlib.Path(file))[offset:offset + length]
    t = (data.to(device).bitcast(dtype) if dtype is not dtypes.uint8 else data.to(device)).reshape(shape)
    return t, None
  array = numpy_helper.to_array(proto)
  if dtype is dtypes.bfloat16:  # numpy has no bfloat16: onnx gives the raw 16 bits
    return Tensor(array.view("uint16").reshape(shape), device=device).bitcast(dtypes.bfloat16), None
  if dtype in dtypes.fp8s:  # ml_dtypes' 8-bit floats: their bytes
    return Tensor(array.view("uint8").reshape(shape), device=device).bitcast(dtype), None
  t = Tensor(array.reshape(shape), device=device) if array.size else Tensor.empty(*shape, dtype=dtype, device=device)
  return t, (array.tolist() if array.size <= HOST_VALUE_LIMIT and dtype is not dtypes.float16 else None)


def attribute_value(attr: Any, where: str, device: str) -> Any:
  """An AttributeProto's value: numbers, str (not bytes), lists, a Tensor for a tensor, a GraphProto for a graph."""
  onnx = _onnx()
  A = onnx.AttributeProto
  if attr.type == A.FLOAT: return float(attr.f)
  if attr.type == A.INT: return int(attr.i)
  if attr.type == A.STRING: return attr.s.decode("utf-8", "replace")
  if attr.type == A.TENSOR: return tensor_from_proto(attr.t, None, device)
  if attr.type == A.GRAPH: return attr.g
  if attr.type == A.FLOATS: return [float(v) for v in attr.floats]
  if attr.type == A.INTS: return [int(v) for v in attr.ints]
  if attr.type == A.STRINGS: return [s.decode("utf-8", "replace") for s in attr.strings]
  if attr.type == A.GRAPHS: return list(attr.graphs)
  if attr.type in (A.TYPE_PROTO, A.TYPE_PROTOS): return attr.tp if attr.type == A.TYPE_PROTO else list(attr.type_protos)
  raise OnnxError(f"{where}: attribute {attr.name!r} has a type tinycore does not read ({attr.type})")


class Node:
  """One graph node, ready to run: its handler and attributes."""
  __slots__ = ("op_type", "domain", "name", "inputs", "outputs", "attrs", "handler", "opset", "takes_ctx")

  def __init__(self, proto: Any, opsets: dict[str, int], device: str, index: int):
    from tinycore.nn.onnx_ops import lookup, refusal
    self.op_type, self.domain = proto.op_type, proto.domain or "ai.onnx"
    self.name = proto.name or f"#{index}"
    self.inputs, self.outputs = list(proto.input), list(proto.output)
    self.opset = opsets.get(self.domain, opsets.get("", 1) if self.domain == "ai.onnx" else 1)
    where = self.where
    reason = refusal(self.domain, self.op_type, {attr.name for attr in proto.attribute})
    if reason is not None: raise OnnxError(f"{where}: {reason}")
    self.handler = lookup(self.domain, self.op_type) or FunctionOp.of(proto, self.domain, self.opset, where)
    if self.handler is None:
      raise OnnxError(f"{where}: operator {self.domain}.{self.op_type} is not supported")
    params = self.handler.attributes if isinstance(self.handler, FunctionOp) else \
        inspect.signature(self.handler).parameters
    self.takes_ctx = "ctx" in params or isinstance(self.handler, FunctionOp)
    self.attrs = {}
    for attr in proto.attribute:
      if attr.name not in params or attr.name == "ctx":
        raise OnnxError(f"{where}: attribute {attr.name!r} of {self.op_type} is not supported")
      value = attribute_value(attr, where, device)
      self.attrs[attr.name] = value  # a tensor attribute is (Tensor, host value or None)

  @property
  def where(self) -> str: return f"{self.op_type} node {self.name!r} (opset {self.opset})"


class FunctionOp:
  """An operator tinycore has no handler for but the onnx package defines by a function body (ONNX's own
  decomposition into other operators: SwiGLU, AffineGrid, LinearAttention, ...). The body is built once per input
  signature (a context-dependent body depends on the inputs' types and ranks), the caller's attributes substituted
  where the body refers to them, and run as a subgraph with its own opsets."""

  def __init__(self, proto: Any, schema: Any, opset: int):
    self.proto, self.schema, self.opset = proto, schema, opset
    self.attributes = set(schema.attributes)
    self.bodies: dict[tuple, tuple[Any, dict[str, int]]] = {}

  @staticmethod
  def of(proto: Any, domain: str, opset: int, where: str) -> FunctionOp | None:
    defs = _onnx().defs
    schema_domain = "" if domain == "ai.onnx" else domain
    if not defs.has(proto.op_type, schema_domain): return None
    try: schema = defs.get_schema(proto.op_type, opset, schema_domain)
    except Exception: return None
    if not (schema.has_function or schema.has_context_dependent_function): return None
    return FunctionOp(proto, schema, opset)

  def __call__(self, *args: Any, ctx: Context, **attrs: Any) -> list[Any]:
    signature = tuple(None if a is None else (a.dtype, a.shape) if isinstance(a, Tensor) else type(a) for a in args)
    if signature not in self.bodies: self.bodies[signature] = self._body(args, ctx)
    graph, opsets = self.bodies[signature]
    bindings = {name: a for name, a in zip([i.name for i in graph.input], args) if name}
    return ctx.run_graph(graph, bindings, {}, opsets)

  def _body(self, args: tuple, ctx: Context) -> tuple[Any, dict[str, int]]:
    onnx = _onnx()
    helper = onnx.helper
    if self.schema.has_context_dependent_function:
      types = [onnx.TypeProto().SerializeToString() if not isinstance(a, Tensor) else
               helper.make_tensor_type_proto(ONNX_CODES[a.dtype], a.shape).SerializeToString() for a in args]
      body = self.schema.get_context_dependent_function_with_opset_version(
          self.opset, self.proto.SerializeToString(), types)
    else:
      body = self.schema.get_function_with_opset_version(self.opset)
    if not body: raise ctx.error(f"the onnx package gives no function body for opset {self.opset}")
    function = onnx.FunctionProto.FromString(body) if isinstance(body, bytes) else body
    given = {a.name: a for a in self.proto.attribute}
    defaults = {a.name: a for a in function.attribute_proto}
    nodes = [_substitute_attributes(n, given, defaults) for n in function.node]
    inputs = [helper.make_value_info(name, onnx.TypeProto()) for name in function.input]
    inputs += [helper.make_value_info("", onnx.TypeProto())] * max(0, len(args) - len(inputs))
    outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in function.output]
    graph = helper.make_graph(nodes, f"{self.proto.op_type}_body", inputs, outputs)
    opsets = dict(ctx.runner.opsets)
    opsets.update({(o.domain or "ai.onnx"): int(o.version) for o in function.opset_import})
    ctx.runner.prepare_graph(graph, opsets)
    return graph, opsets


def _substitute_attributes(node: Any, given: dict[str, Any], defaults: dict[str, Any]) -> Any:
  """A copy of a function body's node whose attributes that refer to the caller's (ref_attr_name) hold the caller's
  value (or the function's default; absent when neither), subgraphs included."""
  onnx = _onnx()
  out = onnx.NodeProto()
  out.CopyFrom(node)
  del out.attribute[:]
  for attr in node.attribute:
    if attr.ref_attr_name:
      source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
      if source is None: continue
      name = attr.name
      attr = onnx.AttributeProto.FromString(source.SerializeToString())
      attr.name = name
    elif attr.type == onnx.AttributeProto.GRAPH:
      copy = onnx.AttributeProto()
      copy.CopyFrom(attr)
      nodes = [_substitute_attributes(n, given, defaults) for n in attr.g.node]
      del copy.g.node[:]
      copy.g.node.extend(nodes)
      attr = copy
    out.attribute.append(attr)
  return out


class Context:
  """What a running operator may ask: its node, the opset, host values of tensors, subgraphs."""

  def __init__(self, runner: OnnxRunner, host: dict[int, tuple[Tensor, Any]]):
    self.runner, self.host, self.node = runner, host, None
    self.scope: dict[str, Tensor] = {}  # the values of the graph running now (a subgraph sees them)
    self.device = runner.device

  @property
  def opset(self) -> int: return self.node.opset if self.node is not None else 1

  def error(self, message: str) -> OnnxError: return OnnxError(f"{self.node.where}: {message}")

  def value(self, t: Tensor | None) -> Any:
    """t's values as (nested) Python numbers: its host value when known (a twin on the PYTHON device is read the
    first time it is asked for), else t realized and read."""
    if t is None: return None
    known = self.host.get(id(t))
    if known is not None and known[0] is t:
      if not isinstance(known[1], Tensor): return known[1]
      value = known[1].tolist()
    else: value = t.tolist()
    self.host[id(t)] = (t, value)
    return value

  def host_twin(self, t: Tensor) -> Tensor:
    """t's known value as a tensor on the PYTHON device (where shape arithmetic runs)."""
    value = self.host[id(t)][1]
    if isinstance(value, Tensor): return value if value.device == HOST_DEVICE else value.to(HOST_DEVICE)
    return self.remember(_device_tensor(value, t.dtype, t.shape, HOST_DEVICE), value)

  def known(self, t: Tensor) -> Any:
    """What is known of t on the host: its Python value, or the tensor itself (a twin to read later)."""
    entry = self.host.get(id(t))
    return entry[1] if entry is not None and entry[0] is t and not isinstance(entry[1], Tensor) else t

  def ints(self, t: Tensor | None) -> list[int] | None:
    if t is None: return None
    value = self.value(t)
    return [int(v) for v in _flatten(value)]

  def remember(self, t: Tensor, value: Any) -> Tensor:
    self.host[id(t)] = (t, value)
    return t

  def run_graph(self, graph: Any, bindings: dict[str, Tensor], outer: dict[str, Tensor],
                opsets: dict[str, int] | None = None) -> list[Tensor]:
    """A subgraph (If, Loop, Scan, a function body) with its inputs bound, seeing the outer scope's values."""
    return self.runner.run_graph(graph, {**outer, **bindings}, self.host, opsets=opsets)


def _flatten(value: Any) -> list:
  if isinstance(value, list): return [x for v in value for x in _flatten(v)]
  return [value]


def _known(t: Any, host: dict[int, tuple[Tensor, Any]]) -> bool:
  known = host.get(id(t))
  return known is not None and known[0] is t


class OnnxRunner:
  """An ONNX model ready to run; call it with {input name: Tensor or numpy array or list}."""

  def __init__(self, model: str | os.PathLike | bytes | Tensor | Any, device: str | None = None):
    proto, base_dir = _load_proto(model)
    self.device = Device.canonicalize(device) if device is not None else Device.DEFAULT
    self.opsets = {(imp.domain or "ai.onnx"): int(imp.version) for imp in proto.opset_import}
    self.opsets.setdefault("ai.onnx", 1)
    self.graph = proto.graph
    self.base_dir = base_dir
    self.initializers: dict[str, Tensor] = {}
    self._host: dict[int, tuple[Tensor, Any]] = {}
    self._graphs: dict[int, list[Node]] = {}
    self._load_initializers(self.graph)
    self.graph_inputs = {i.name: _value_info(i) for i in self.graph.input if i.name not in self.initializers}
    self.graph_outputs = [o.name for o in self.graph.output]
    self.prepare_graph(self.graph)  # every operator and attribute checked now, not on the first run
    self._relaid_weights = self._weights_to_relay()

  def _load_initializers(self, graph: Any) -> None:
    for init in graph.initializer:
      t, value = tensor_from_proto(init, self.base_dir, self.device)
      self.initializers[init.name] = t
      if value is not None: self._host[id(t)] = (t, value)

  def prepare_graph(self, graph: Any, opsets: dict[str, int] | None = None) -> list[Node]:
    """The graph's nodes, built once per graph (subgraphs included, through their attributes); a function body's
    nodes read its own opsets."""
    nodes = self._graphs.get(id(graph))
    if nodes is None:
      nodes = [Node(n, opsets or self.opsets, self.device, i) for i, n in enumerate(graph.node)]
      self._graphs[id(graph)] = nodes
      for node in nodes:
        for value in node.attrs.values():
          for sub in (value if isinstance(value, list) else [value]):
            if type(sub).__name__ == "GraphProto":
              self._load_initializers(sub)
              self.prepare_graph(sub, opsets)
    return nodes

  def __call__(self, inputs: dict[str, Any] | None = None, debug: bool | int = False) -> dict[str, Tensor]:
    inputs = dict(inputs or {})
    unknown = [name for name in inputs if name not in self.graph_inputs]
    if unknown: raise OnnxError(f"the model has no input {unknown[0]!r}; its inputs: {list(self.graph_inputs)}")
    if self._relaid_weights: self._relay_weights()
    values: dict[str, Tensor] = dict(self.initializers)
    for name, spec in self.graph_inputs.items():
      if name not in inputs:
        if spec.kind.startswith("optional"):
          values[name] = None
          continue
        raise OnnxError(f"input {name!r} is missing ({spec.kind} of shape {spec.shape}, dtype "
                        f"{spec.dtype.name if spec.dtype else 'any'})")
      values[name] = self._input_value(name, inputs[name], spec)
    host = dict(self._host)
    out = self.run_graph(self.graph, values, host, debug)
    return dict(zip(self.graph_outputs, out))

  # Convolution weights are constants of the model, stored once in the order its kernels read best (as onnxruntime
  # prepacks its weights), read through a view that gives back the ONNX shape (same values, same shapes). On a CPU
  # (a renderer that tiles into registers) a weight with long rows (I*kh*kw >= BLOCKED_WEIGHT_ROW: 256 channels of
  # 3x3) is stored in blocks of a register tile's columns, (O/32, I, kh, kw, 32): each block's panel is contiguous
  # memory the tile reads in place, where an (O, I, kh, kw) weight is copied into a panel on every call (for a 3x3 conv
  # of 512 channels over 7x7 at batch 1: 2.9 ms (O, I, kh, kw), 2.2 output-channels-innermost, 1.7 blocked; shorter
  # rows gain nothing, and keep their layout). Elsewhere the output channels go innermost, (kh, kw, I, O).
  BLOCKED_WEIGHT_ROW = 256 * 9

  def _weights_to_relay(self) -> list[str]:
    """The initializers read only as the weight of an ungrouped Conv of the main graph."""
    readers: dict[str, list[Node]] = {}
    for node in self._graphs[id(self.graph)]:
      for name in node.inputs: readers.setdefault(name, []).append(node)
    chosen = []
    for name, nodes in readers.items():
      weight = self.initializers.get(name)
      if weight is None or weight.ndim < 3 or name in self.graph_outputs: continue
      if all(n.op_type == "Conv" and n.domain == "ai.onnx" and n.inputs[1:2] == [name] and n.inputs.count(name) == 1
             and n.attrs.get("group", 1) == 1 for n in nodes):
        chosen.append(name)
    return chosen

  def _relay_weights(self) -> None:
    """On the first run (before a TinyJit's capture), store the chosen weights in their kernels' order, in one
    realize."""
    names, self._relaid_weights = self._relaid_weights, []
    target = getattr(Device[self.device].renderer, "kernel_target", None)
    block = None if target is None or target.grid else 2 * target.vector_lanes  # a register tile's columns
    stored: dict[str, tuple[Tensor, Callable[[Tensor], Tensor]]] = {}
    for name in names:
      weight = self.initializers[name]
      (o, i, *kernel), n = weight.shape, weight.ndim
      if block is None:
        stored[name] = (weight.permute(*range(2, n), 1, 0), lambda t, n=n: t.permute(n - 1, n - 2, *range(n - 2)))
      elif o % block == 0 and i * math.prod(kernel) >= self.BLOCKED_WEIGHT_ROW:
        stored[name] = (weight.reshape(o // block, block, i, *kernel).permute(0, *range(2, n + 1), 1),
                        lambda t, shape=weight.shape, n=n: t.permute(0, n, *range(1, n)).reshape(shape))
    laid_out = {name: laid.contiguous() for name, (laid, _) in stored.items()}
    if laid_out: Tensor.realize(*laid_out.values())
    for name, laid in laid_out.items(): self.initializers[name] = stored[name][1](laid)

  def _input_value(self, name: str, value: Any, spec: GraphInput) -> Tensor | list[Tensor] | None:
    """A tensor input as a Tensor on the runner's device; a sequence input (a list) as a list of them; an optional
    input may be None."""
    kind = spec.kind.removeprefix("optional ")
    if value is None and spec.kind.startswith("optional"): return None
    if kind == "sequence":
      if not isinstance(value, (list, tuple)): raise OnnxError(f"input {name!r} is a sequence: give a list of tensors")
      return [self._input_tensor(name, v, spec.shape, spec.dtype) for v in value]
    return self._input_tensor(name, value, spec.shape, spec.dtype)

  def _input_tensor(self, name: str, value: Any, shape: tuple | None, dtype: DType | None) -> Tensor:
    if isinstance(value, Tensor): t = value if value.device == self.device else value.to(self.device)
    else:
      import numpy as np
      t = Tensor(np.asarray(value), device=self.device)
    if shape is None: pass
    elif len(shape) != t.ndim or any(isinstance(d, int) and d != s for d, s in zip(shape, t.shape)):
      raise ShapeError(f"input {name!r}: the model takes shape {shape}, got {t.shape}")
    if dtype is not None and t.dtype is not dtype: t = t.cast(dtype)
    return t

  def run_graph(self, graph: Any, values: dict[str, Tensor], host: dict, debug: bool | int = False,
                opsets: dict[str, int] | None = None) -> list[Tensor]:
    """Run `graph`'s nodes on `values` (its inputs, initializers and any outer scope); its outputs in order."""
    ctx = Context(self, host)
    ctx.scope = values
    for node in self.prepare_graph(graph, opsets):
      ctx.node = node
      args = [values[name] if name else None for name in node.inputs]
      missing = [n for n in node.inputs if n and n not in values]
      if missing: raise OnnxError(f"{node.where}: its input {missing[0]!r} is not produced by any earlier node")
      outputs = run_node(node, args, ctx)
      if debug: print(f"{node.where}: {[getattr(a, 'shape', None) for a in args]} -> "
                      f"{[getattr(o, 'shape', None) for o in outputs]}")
      for name, out in zip(node.outputs, outputs):
        if name: values[name] = out
    return [values[o.name] for o in graph.output]


def run_node(node: Node, args: list[Tensor | None], ctx: Context) -> list[Any]:
  """The node's outputs; on the PYTHON device when every input is a small host value (shape arithmetic)."""
  from tinycore.nn.onnx_ops import HOST_UNSAFE
  kwargs = dict(node.attrs)
  if node.takes_ctx: kwargs["ctx"] = ctx
  present = [a for a in args if a is not None]
  on_host = (present and node.op_type not in HOST_UNSAFE and all(isinstance(a, Tensor) for a in present)
             and all(_known(a, ctx.host) for a in present) and all(a.numel() <= HOST_VALUE_LIMIT for a in present))
  if on_host:
    twins = _as_list(_call(node, [None if a is None else ctx.host_twin(a) for a in args], kwargs))
    if all(isinstance(o, Tensor) and o.numel() <= HOST_VALUE_LIMIT for o in twins):
      # the same op on the model's device, lazily: computed only if a device op reads it, never read back
      outs = _as_list(_call(node, args, kwargs))
      return [ctx.remember(out, ctx.known(twin)) for out, twin in zip(outs, twins)]
  return _as_list(_call(node, args, kwargs))


def _call(node: Node, args: list, kwargs: dict) -> Any:
  try: return node.handler(*args, **kwargs)
  except OnnxError: raise
  except (NotImplementedError, TypeError) as error:
    raise OnnxError(f"{node.where}: {error}") from error


def _as_list(out: Any) -> list:
  return list(out) if isinstance(out, (list, tuple)) else [out]


def _device_tensor(value: Any, dtype: DType, shape: tuple, device: str) -> Tensor:
  if not shape or 0 not in shape: return Tensor(value, dtype=dtype, device=device).reshape(shape)
  return Tensor.empty(*shape, dtype=dtype, device=device)


class GraphInput(NamedTuple):
  """A graph input: its shape (ints for fixed dims, names or None for free ones; None if not given), dtype, and
  kind: "tensor", "sequence" (of tensors), "optional tensor" or "optional sequence"."""
  shape: tuple | None
  dtype: DType | None
  kind: str = "tensor"


def _value_info(info: Any) -> GraphInput:
  return _type_info(info.type, info.name)


def _type_info(type_proto: Any, name: str, prefix: str = "") -> GraphInput:
  kind = type_proto.WhichOneof("value")
  if kind == "sequence_type" and not prefix.endswith("sequence "):
    inner = _type_info(type_proto.sequence_type.elem_type, name, prefix + "sequence ")
    return GraphInput(inner.shape, inner.dtype, prefix + "sequence")
  if kind == "optional_type" and not prefix:
    return _type_info(type_proto.optional_type.elem_type, name, "optional ")
  if kind != "tensor_type": raise OnnxError(f"input {name!r} is a {prefix}{kind}: not supported")
  tt = type_proto.tensor_type
  dtype = onnx_dtype(tt.elem_type, f"input {name!r}") if tt.elem_type else None
  if not tt.HasField("shape"): return GraphInput(None, dtype, prefix + "tensor")
  shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
  return GraphInput(shape, dtype, prefix + "tensor")


def onnx_load(model: str | os.PathLike | bytes, device: str | None = None) -> OnnxRunner:
  """`OnnxRunner(model)`: a model file, its bytes, or a ModelProto."""
  return OnnxRunner(model, device)


Handler = Callable[..., Any]
