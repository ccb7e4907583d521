"""Kernel optimizations that keep semantics: merging loops that address memory contiguously.

A (4096, 4096) elementwise kernel over contiguous buffers is one loop of 16M, not two nested loops: adjacent loops
are merged whenever every address in the kernel stays affine in the merged loop (no new `//` or `%`).
"""
from __future__ import annotations
import math
from math import prod
from typing import Any
import attrs
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp, conjuncts
from tinycore.uop.pattern import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.scalars import kernel_scalars
from tinycore.uop.symbolic import affine_terms, symbolic


def _divmod_count(sink: UOp) -> int:
  return sum(1 for u in sink.toposort() if u.op in (Ops.IDIV, Ops.MOD) and u.dtype is dtypes.index)


def _range_size(r: UOp) -> int: return r.src[0].arg


def _try_merge(sink: UOp, outer: UOp, inner: UOp) -> UOp | None:
  """Replace (outer, inner) with one range R: outer = R // n_inner, inner = R % n_inner;
  keep it if nothing got worse."""
  n_inner = _range_size(inner)
  merged = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, _range_size(outer) * n_inner),), outer.arg)
  n = UOp.const(dtypes.index, n_inner)
  done: dict[UOp, UOp] = {}
  for node in sink.toposort():
    if node is outer: done[node] = UOp(Ops.IDIV, dtypes.index, (merged, n))
    elif node is inner: done[node] = UOp(Ops.MOD, dtypes.index, (merged, n))
    elif node.op is Ops.REDUCE and outer in node.src[1:]:
      # the reduce now loops over the merged range instead of the pair
      ranges = tuple(merged if r is outer else done[r] for r in node.src[1:] if r is not inner)
      done[node] = node.replace(src=(done[node.src[0]],) + ranges)
    else:
      new_src = tuple(done[s] for s in node.src)
      done[node] = node if all(a is b for a, b in zip(new_src, node.src)) else node.replace(src=new_src)
  candidate = graph_rewrite(done[sink], symbolic)
  return candidate if _divmod_count(candidate) <= _divmod_count(sink) else None


def _reduce_groups(sink: UOp) -> list[list[UOp]]:
  """Output loop ranges in order, then each REDUCE's ranges: the groups within which merging is allowed."""
  nodes = sink.toposort()
  outputs = sorted((u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "loop"), key=lambda r: r.arg[0])
  groups = [outputs]
  for u in nodes:
    if u.op is Ops.REDUCE: groups.append(sorted(u.src[1:], key=lambda r: r.arg[0]))
  return groups


def merge_ranges(sink: UOp) -> UOp:
  changed = True
  while changed:
    changed = False
    for group in _reduce_groups(sink):
      for outer, inner in zip(group, group[1:]):
        merged = _try_merge(sink, outer, inner)
        if merged is not None:
          sink, changed = merged, True
          break
      if changed: break
  return sink


def _split_range(sink: UOp, r: UOp, width: int, new_id: int) -> UOp:
  """r -> outer * width + inner, with `inner` an upcast range (unrolled into registers by the renderer). A width that
  does not divide r's size leaves the last block ragged: every load and store whose address reads r is gated to
  r's size then (a load past it reads 0, a store past it is skipped)."""
  size = _range_size(r)
  outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, -(-size // width)),), r.arg)
  inner = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, width),), (new_id, "upcast"))
  index = outer * width + inner
  split = sink.substitute({r: index})
  if size % width:
    inside = index < UOp.const(dtypes.index, size)
    split = split.substitute({n: n.replace(src=(n.src[0], n.src[1], inside if len(n.src) < 3 else n.src[2] & inside))
                              for n in split.toposort() if n.op is Ops.INDEX and inner in n.src[1].toposort()})
  return graph_rewrite(split, symbolic)


@attrs.frozen
class KernelTarget:
  """What the optimizer knows of the machine a kernel runs on: `vector_lanes` float32 lanes in a vector register,
  `vector_registers` of them, `cores` that run one kernel's shares, and `strip_vectors`, how many vectors of
  accumulators a column-sum strip may hold (in L1 on a CPU), `panel_bytes`, how much a kernel may copy its operand
  panels into local buffers (codegen.packing; 0: never), `strip_rows`, how many rows a column-sum strip adds up
  per pass before it updates its accumulators (1: one), `gathers`, whether an index tensor's pick is read as
  one load at a computed address (`gathered_reduce`; proven on the CPU so far: the emulated AMD device hung on a
  scatter's gathered loads), and `broadcast_strips`, whether an output dim that the reduce's loads do not read is
  computed a strip at a time (`_unread_output`: a scan's blocks, sort's ranks; for a core that runs one thread per
  kernel share, not a GPU's thread per output), and `split_gates`, whether an elementwise kernel's innermost loop is
  cut into one loop per piece where comparisons of its index with constants change (`split_at_gates`: cat, pad;
  the pieces are sibling loops, which a GPU's grid of one thread per output does not have), and `blocks`, whether an
  elementwise kernel that reads along one dim and writes along another (a transpose) runs in square blocks of both
  (`decide_block`: inner loops, which a grid of one thread per output does not have), and `grid`, whether the kernel
  runs as a grid of one thread per output (a GPU, OpenCL): there a strip of outputs in one thread would take the
  grid's parallelism away, so only register tiles with rows are made. A renderer carries one as `kernel_target`."""
  vector_lanes: int = 4
  vector_registers: int = 16
  cores: int = 1
  strip_vectors: int = 8
  panel_bytes: int = 0
  strip_rows: int = 4
  gathers: bool = False
  broadcast_strips: bool = False
  split_gates: bool = False
  blocks: bool = False
  grid: bool = False


# 8 lanes (AVX2-sized): the tiles every device got before targets existed
DEFAULT_TARGET = KernelTarget(vector_lanes=8)
# a renderer that launches a grid of threads (one per output) and says nothing more of its machine
GRID_TARGET = KernelTarget(vector_lanes=8, grid=True)


def register_tile(target: KernelTarget) -> tuple[int, int]:
  """(columns, rows) of a matmul-style register tile: two vectors of columns per row, and as many rows as leave
  room in the register file for the loaded columns and one broadcast row value (8 rows with 32 registers)."""
  columns = 2 * target.vector_lanes
  rows = 8 if target.vector_registers >= 32 else 4
  return columns, rows


# a row that is no whole number of vectors (4095 floats) is a strip of its own from this many vectors up: the compiler's
# remainder loop then handles under one vector in eight
MIN_ROW_STRIP_VECTORS = 8


def strip_widths(size: int, target: KernelTarget, cores_fed: bool = False) -> tuple[int, ...]:
  """Widths to try for a strip of a reduction over rows with nothing to tile beside it (column sums): up to
  `strip_vectors` vectors of accumulators, so each row is read in long contiguous runs, but one strip per core
  unless an outer loop already gives every core its share (`cores_fed`: the parts of a split column sum). A whole
  row that no halving divides comes first when it fits (`is_row_strip`)."""
  widest = ((size,) if is_row_strip(size, target) else ()) + _halvings(target.strip_vectors * target.vector_lanes)
  if cores_fed: return widest
  return tuple(w for w in widest if size // w >= target.cores) or widest


def is_row_strip(size: int, target: KernelTarget) -> bool:
  """Whether a row of `size` elements is a strip by itself though no vector-sized halving divides it: it fits the
  strip, and is wide enough that its remainder loop is a small part (MIN_ROW_STRIP_VECTORS)."""
  halvings = _halvings(target.strip_vectors * target.vector_lanes)
  return (MIN_ROW_STRIP_VECTORS * target.vector_lanes <= size <= halvings[0] and
          _width_for(size, halvings) is None)


def _width_for(size: int, widths: tuple[int, ...]) -> int | None:
  return next((w for w in widths if size % w == 0), None)


def _halvings(width: int) -> tuple[int, ...]:
  """width, width/2, ... down to 4: the tile widths to try, widest first."""
  return tuple(w for w in (width >> i for i in range(width.bit_length())) if w >= 4)


@attrs.frozen
class Tile:
  """A register tile, by range ids of the kernel it is decided for: output range `columns` computed `width` at a time
  (the innermost upcast range, unrolled into registers), and optionally output range `rows` computed `row_width` at
  a time beside it, each loaded column value reused by every row. `fold` and `stack`, for an image row of no whole
  vectors: `stack` rows of output range `fold` side by side with the whole row `columns` as the tile's columns.
  `panel_outermost`: the column-block loop becomes the outermost output loop (a packed panel whose load reads no
  output loop outside it: a batch reuses each panel instead of packing it once per image)."""
  columns: int
  width: int
  rows: int | None = None
  row_width: int = 1
  fold: int | None = None
  stack: int = 1
  panel_outermost: bool = False  # the columns are a packed panel's: their block loop goes outside the others


def decide_tile(sink: UOp, target: KernelTarget = DEFAULT_TARGET) -> Tile | None:
  """The register tile the rules pick for a reduction over a strided axis (matmul, column sums): the output dim that
  some load inside the reduce reads contiguously is computed two vectors at a time, and a second output dim those
  loads don't use 4 or 8 at a time (`register_tile`), so each loaded value is reused from registers and the compiler
  vectorizes the unrolled nest. The tile's column loop is the outer output loop, so one panel of the contiguous
  operand stays in the core's cache while every row block streams past it. With no contiguous output dim (x @ w.T) a
  target that packs panels tiles a dim whose panel the renderer copies into contiguous memory (`_packed_columns`).
  None: no tile (no reduce, an upcast range already, or nothing worth it)."""
  nodes = sink.toposort()
  reduce_ranges = {r for n in nodes if n.op is Ops.REDUCE for r in n.src[1:]}
  if not reduce_ranges or any(n.op is Ops.RANGE and n.arg[1] == "upcast" for n in nodes): return None
  outputs = _output_ranges(nodes)
  coefficients = _reduce_load_coefficients(nodes, reduce_ranges)
  columns, rows = register_tile(target)
  contiguous = [r for r in reversed(outputs) if _width_for(_range_size(r), _column_widths(r, columns)) and
                any(c.get(r) == 1 for c in coefficients)]
  row_strips = [r for r in reversed(outputs) if is_row_strip(_range_size(r), target) and
                any(c.get(r) == 1 for c in coefficients)]
  # needs_rows: whether the dim is only worth it with (True) or without (False) a tile's rows; None: either way
  broadcast, packed_width = False, None
  # a contiguous row of no whole vectors (28: 16 + 8 + 4 lanes) tiles well only stacked (_stacked_rows), which needs
  # every load to read its rows contiguously; in a kernel of several reductions (a conv beside its strided shortcut)
  # the packed panel's whole vectors come first
  several = sum(n.op is Ops.REDUCE for n in nodes) > 1
  if contiguous and several and _range_size(contiguous[0]) % target.vector_lanes and \
      (packed := _packed_columns(outputs, coefficients, columns, target, reduce_ranges)) is not None:
    (u_dim, packed_width), needs_rows = packed, True
  elif contiguous: u_dim, needs_rows = contiguous[0], None
  elif (packed := _packed_columns(outputs, coefficients, columns, target, reduce_ranges)) is not None:
    (u_dim, packed_width), needs_rows = packed, True  # a packed panel pays off only when a tile's rows reuse it
  elif row_strips: u_dim, needs_rows = row_strips[0], False  # a row of no whole vectors: a strip, never a tile
  elif target.broadcast_strips and (unread := _unread_output(nodes, outputs, coefficients)) is not None:
    u_dim, needs_rows, broadcast = unread, None, True
  else: return None
  # a tile's rows are worth it only where loaded values are reused from registers: some load reads the rows dim
  # without the columns (a weight), and some reads the columns without the rows (a depthwise conv's input reads its
  # channel: tiling channels as rows there only multiplies the accumulators)
  reused = [] if broadcast else [r for r in reversed(outputs) if r is not u_dim and
                                 _row_width(_range_size(r), rows) and
                                 any(c.get(r) and not c.get(u_dim) for c in coefficients) and
                                 any(c.get(u_dim) and not c.get(r) for c in coefficients)]
  if needs_rows is not None and needs_rows != bool(reused): return None
  # the outermost output loop is the one the cores share: if it is not the strip's, it feeds them already
  cores_fed = outputs[0] is not u_dim and _range_size(outputs[0]) >= target.cores
  widths = _column_widths(u_dim, columns) if reused else strip_widths(_range_size(u_dim), target, cores_fed)
  # a whole narrow row (17 of 32) tiles a matmul, but a strip of column sums is whole vectors or nothing
  if (width := packed_width or _width_for(_range_size(u_dim), widths)) is None: return None
  if not reused: return None if target.grid else Tile(u_dim.arg[0], width)  # (a strip: a loop target's)
  if (stacked := _stacked_rows(nodes, coefficients, u_dim, reused[0], target, reduce_ranges)) is not None:
    fold, stack, tile_rows = stacked  # several whole image rows side by side are the tile's columns
    return Tile(u_dim.arg[0], _range_size(u_dim), reused[0].arg[0], tile_rows, fold.arg[0], stack)
  # a packed panel whose load reads no output loop outside its column loop: that loop goes outermost
  panel_reads = {r for c in coefficients if c.get(u_dim) for r in c if r in outputs}
  outermost = bool(packed_width) and not any(r in panel_reads for r in outputs[:outputs.index(u_dim)])
  return Tile(u_dim.arg[0], width, reused[0].arg[0], _row_width(_range_size(reused[0]), rows) or 1,
              panel_outermost=outermost)


def _output_ranges(nodes: list[UOp]) -> list[UOp]:
  return sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "loop"), key=lambda r: r.arg[0])


def _reduce_load_coefficients(nodes: list[UOp], reduce_ranges: set[UOp]) -> list[dict[UOp, int]]:
  """The affine coefficients of the addresses of the loads inside a reduce."""
  return [affine_terms(n.src[0].src[1])[0] for n in nodes if n.op is Ops.LOAD and
          any(r in reduce_ranges for r in n.src[0].src[1].toposort())]


def apply_tile(sink: UOp, tile: Tile) -> UOp:
  """The kernel with `tile`'s ranges split into upcast ranges: the columns innermost (the highest id, so each unrolled
  row is whole vectors), and the column-block loop outside the row-block loop."""
  nodes = sink.toposort()
  by_id = {n.arg[0]: n for n in nodes if n.op is Ops.RANGE}
  next_id = 1 + max(by_id)
  columns = by_id[tile.columns]
  if tile.fold is not None:
    fold, rows = by_id[tile.fold], by_id[tile.rows]
    sink = _split_range(sink, columns, _range_size(columns), next_id + 2)
    sink = _split_range(sink, fold, tile.stack, next_id + 1)
    sink = _split_range(sink, rows, tile.row_width, next_id)
    # the stacked rows' block loop outside the tile-row loop (it feeds the cores: the row loop has one iteration)
    return _columns_outside(sink, fold.arg, rows.arg)
  sink = _split_range(sink, columns, tile.width, next_id + 1)
  if tile.rows is None: return sink
  rows = by_id[tile.rows]
  sink = _split_range(sink, rows, tile.row_width, next_id)
  sink = _columns_outside(sink, columns.arg, rows.arg)
  # the column-block loop now holds the lower of the two ids (_columns_outside swaps them when it had the higher)
  column_blocks = min(columns.arg, rows.arg, key=lambda arg: arg[0])
  return _loop_outermost(sink, column_blocks) if tile.panel_outermost else sink


def _loop_outermost(sink: UOp, moved: tuple) -> UOp:
  """The output loop `moved` outside every other output loop (they keep their order): output loops nest in the
  order of their ids, so the ids are handed out again."""
  loops = _output_ranges(sink.toposort())
  position = next((i for i, r in enumerate(loops) if r.arg == moved), 0)
  if position == 0: return sink
  order = [loops[position]] + loops[:position] + loops[position + 1:]
  return sink.substitute({r: r.replace(arg=(loops[i].arg[0], *r.arg[1:])) for i, r in enumerate(order)})


def tile_options(sink: UOp, target: KernelTarget = DEFAULT_TARGET) -> list[Tile]:
  """Every plain register tile of a reduction kernel a search may try: any output range of known size as the columns,
  `width` a halving of four vectors (or the whole range when narrower) that divides it, with no rows or any other
  output range as the rows, 2, 4 or 8 at a time, within the register file (columns x rows <= 2 x registers x lanes)."""
  nodes = sink.toposort()
  if not any(n.op is Ops.REDUCE for n in nodes) or any(n.op is Ops.RANGE and n.arg[1] == "upcast" for n in nodes):
    return []
  outputs = [r for r in _output_ranges(nodes) if len(r.src) == 1 and isinstance(_range_size(r), int)]
  budget = 2 * target.vector_registers * target.vector_lanes
  options: list[Tile] = []
  for columns in outputs:
    size = _range_size(columns)
    widths = tuple(w for w in _halvings(4 * target.vector_lanes) if size % w == 0)
    if size < 4 * target.vector_lanes and size not in widths: widths = (size,) + widths
    for width in widths:
      if width < 2: continue
      options.append(Tile(columns.arg[0], width))
      for rows in outputs:
        if rows is columns: continue
        options.extend(Tile(columns.arg[0], width, rows.arg[0], k) for k in (2, 4, 8)
                       if _range_size(rows) % k == 0 and width * k <= budget)
  return options


def _unread_output(nodes: list[UOp], outputs: list[UOp], coefficients: list[dict[UOp, int]]) -> UOp | None:
  """An output dim that the loads inside the reduce (there are some) do not read but the reduced value depends on,
  written contiguously by the stores: a scan's block, out[i] = sum over j of where(j <= i, x[j], 0). A strip of it
  computes `width` outputs per pass over the reduce, each loaded value broadcast to all of them, instead of one
  output (and a horizontal sum of a vector) per pass."""
  stores = [affine_terms(n.src[0].src[1])[0] for n in nodes if n.op is Ops.STORE]
  # only a dim the reduced value depends on (the scan's condition): a reduce that does not read it (softmax's sum
  # beside its output loop) is computed once for all of its values already
  in_reduces = {u for n in nodes if n.op is Ops.REDUCE for u in n.src[0].toposort()}
  for r in reversed(outputs):
    if (stores and coefficients and all(c.get(r) == 1 for c in stores) and not any(c.get(r) for c in coefficients)
        and r in in_reduces):
      return r
  return None


# the most vectors a tile row of stacked image rows may span: the tile's rows x these accumulators, plus the loaded
# vector and the broadcast factors, fit 32 registers at 7 (4 x 7 + 4)
MAX_STACKED_VECTORS = 8


def _stacked_rows(nodes: list[UOp], coefficients: list[dict[UOp, int]], row: UOp, reused: UOp, target: KernelTarget,
                  reduce_ranges: set[UOp]) -> tuple[UOp, int, int] | None:
  """A register tile for an image row of no whole vectors (28 floats: 16 + 8 + 4 lanes, a third of the multiply-adds
  on part-empty vectors): `stack` rows of the output dim `fold` just outside `row`, contiguous with it in every load
  and store that reads either (its coefficient is the row's length), so stack x row floats are whole vectors; and
  the tile's row count that fits the registers beside them. Only where the operand panel is packed (contiguous then,
  whatever the input's padding) and fits the panel budget; None otherwise."""
  size, lanes = _range_size(row), target.vector_lanes
  if target.panel_bytes <= 0 or size % lanes == 0 or size > MAX_STACKED_VECTORS * lanes: return None
  if any(len(r.src) > 1 for r in reduce_ranges): return None  # a symbolic reduction: the panel's size is unknown
  addresses = [affine_terms(n.src[0].src[1])[0] for n in nodes if n.op is Ops.STORE] + coefficients
  outputs = [n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "loop" and n is not row and n is not reused]
  for fold in outputs:
    if len(fold.src) > 1: continue
    if not all(c.get(fold) == size and c.get(row) == 1 for c in addresses if c.get(fold) or c.get(row)): continue
    stack = next((k for k in range(2, _range_size(fold) + 1) if _range_size(fold) % k == 0 and
                  k * size % lanes == 0 and k * size <= MAX_STACKED_VECTORS * lanes), None)
    if stack is None: continue
    vectors = stack * size // lanes
    tile_rows = next((r for r in (8, 4, 2) if r * vectors + 4 <= target.vector_registers and
                      _range_size(reused) % r == 0), None)
    panel = stack * size * 4 * prod(_range_size(r) for r in reduce_ranges)
    if tile_rows is None or panel > target.panel_bytes: continue
    return fold, stack, tile_rows
  return None


def _row_width(size: int, rows: int) -> int | None:
  """The tile's row count for an output dim of `size`: the largest halving of `rows` that divides it, else its
  largest divisor from 2 to `rows` (7 rows of a 14- or 7-wide image: a ResNet's late 3x3 convs at batch 1)."""
  return _width_for(size, _halvings(rows)) or next((d for d in range(rows, 1, -1) if size % d == 0), None)


def _column_widths(r: UOp, columns: int) -> tuple[int, ...]:
  """Tile widths for the contiguous dim r: a whole row narrower than the tile but over half of it (28 of 32: an
  image row) first, then the halvings of `columns`."""
  size = _range_size(r)
  return ((size,) if columns // 2 < size < columns else ()) + _halvings(columns)


# a dim at least this long that no tile width divides (a vocabulary of 50257) is still tiled over a packed panel, its
# last block ragged (_split_range gates it): untiled, a model's head x @ w.T read all of w once per row of x
RAGGED_TILE_MIN = 512


def _packed_columns(outputs: list[UOp], coefficients: list[dict[UOp, int]], columns: int, target: KernelTarget,
                    reduce_ranges: set[UOp]) -> tuple[UOp, int] | None:
  """When no load reads an output dim contiguously (x @ w.T: both operands run along k) but the target packs operand
  panels (codegen.packing): (an output dim, a width) whose load packs into a contiguous panel of that many columns
  along the reduced dims it reads, the widest of `columns`, `columns / 2`, ... down to one vector that fits the
  budget (as float32: a 3x3 conv over 512 channels packs 16), provided another output dim is read by some load
  without it and the packed load does not read that dim (the tile's rows: each packed column is reused by them)."""
  if target.panel_bytes <= 0: return None
  for r in reversed(outputs):
    if not any(c.get(r) for c in coefficients): continue
    # the panel of each load reading r spans the reduced dims that load reads (a kernel of two reductions, the
    # gate and up projections of a SwiGLU, has two panels of one reduction each)
    elements = max(prod(_range_size(q) for q in reduce_ranges if c.get(q)) for c in coefficients if c.get(r))
    fitting = [w for w in _halvings(columns) if w >= target.vector_lanes and w * 4 * elements <= target.panel_bytes]
    width = next((w for w in fitting if _range_size(r) % w == 0), None)
    if width is None and fitting and _range_size(r) >= RAGGED_TILE_MIN: width = fitting[0]  # (a ragged last block)
    if width is None: continue
    # a tile reuses each load across the other dim: some load reads the rows dim without r, and some reads r without
    # the rows (x @ w.T: x's rows, w's columns); a softmax's rows read both and only a mask beside them: no tile
    if any(any(c.get(q) and not c.get(r) for c in coefficients) and any(c.get(r) and not c.get(q) for c in coefficients)
           for q in outputs if q is not r): return r, width
  return None


def _columns_outside(sink: UOp, columns: tuple, rows: tuple) -> UOp:
  """The column-block loop outside the row-block loop (output loops nest in the order of their ids): one column
  panel of the contiguous operand is reused by every row block from cache, and the threads split the panels."""
  if columns[0] < rows[0]: return sink
  by_arg = {n.arg: n for n in sink.toposort() if n.op is Ops.RANGE and n.arg in (columns, rows)}
  return sink.substitute({by_arg[columns]: by_arg[columns].replace(arg=rows),
                          by_arg[rows]: by_arg[rows].replace(arg=columns)})


def combined_pairwise(values: list[UOp], op: Ops) -> UOp:
  """values combined by `op` as a balanced tree, neighbours first: (v0 op v1) op (v2 op v3)."""
  while len(values) > 1:
    values = [values[i].alu(op, values[i + 1]) if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
  return values[0]


def rows_per_pass(x: UOp, rows_at_once: int) -> UOp | None:
  """REDUCE x adding `rows_at_once` rows per pass: its innermost range r becomes an outer range over r // rows_at_once
  passes, each pass's rows combined pairwise (in registers) before the one accumulator update; the rows left over
  (r % rows_at_once) are combined after the loop. None when x does not qualify: a symbolic row count, fewer rows
  than one pass, a value that does not read the rows or holds a reduce of its own, or left-over rows of a reduce
  over several ranges (which could not be added outside the others)."""
  value, ranges = x.src[0], x.src[1:]
  rows = max(ranges, key=lambda r: r.arg[0])
  if len(rows.src) > 1 or _range_size(rows) < rows_at_once: return None
  inside = value.toposort()
  if rows not in inside or any(u.op is Ops.REDUCE for u in inside): return None
  passes, left_over = divmod(_range_size(rows), rows_at_once)
  if left_over and len(ranges) > 1: return None
  outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, passes),), rows.arg)
  one_pass = combined_pairwise([value.substitute({rows: outer * rows_at_once + i}) for i in range(rows_at_once)], x.arg)
  reduced = UOp(Ops.REDUCE, x.dtype, (one_pass,) + tuple(outer if r is rows else r for r in ranges), x.arg)
  if not left_over: return reduced
  last = [value.substitute({rows: UOp.const(dtypes.index, passes * rows_at_once + i)}) for i in range(left_over)]
  return reduced.alu(x.arg, combined_pairwise(last, x.arg))


def strip_rows_per_pass(sink: UOp, strip_rows: int) -> UOp:
  """Column-sum strips (a kernel with one upcast range: a strip of accumulators, no register tile) add
  `strip_rows` rows per pass: `acc[i] += (r0[i] + r1[i]) + (r2[i] + r3[i])` reads and writes the strip a
  quarter as often as `acc[i] += r0[i]` row by row, and keeps several row streams in flight. A sum is reassociated
  (numpy's pairwise sum is too); a max or min is exact in any order and NaN still wins. Plain ops in the kernel
  graph, so every renderer writes the same loop."""
  nodes = sink.toposort()
  upcast = [u for u in nodes if u.op is Ops.RANGE and u.arg[1] == "upcast"]
  if strip_rows < 2 or len(upcast) != 1: return sink
  replaced: dict[UOp, UOp] = {}
  for x in nodes:
    if x.op is not Ops.REDUCE or upcast[0] not in x.src[0].toposort(): continue
    new = rows_per_pass(x, strip_rows)
    if new is not None: replaced[x] = new
  return graph_rewrite(sink.substitute(replaced), symbolic) if replaced else sink


def _is_positive_zero(zero: UOp) -> bool: return zero.arg == 0 and math.copysign(1.0, zero.arg) > 0


gated_loads = PatternMatcher([
  # where(g, load gated by g, 0) is the load itself: a gated load already reads 0 where its gate is false (a padded
  # conv's mask once, not twice, and none at all when the load is packed)
  (UPat(Ops.WHERE, src=(UPat.var("g"), UPat(Ops.LOAD, name="load", src=(UPat(Ops.INDEX, src=(UPat.var(), UPat.var(),
                                                                                           UPat.var("g"))),)),
                        UPat.cvar("zero"))),
   lambda g, load, zero: load if _is_positive_zero(zero) and zero.dtype is load.dtype else None),
])


def _negated(x: UOp) -> UOp:
  """-x, without a double negation: -(-y) is y and -c a constant (both exact for floats, signed zeros included)."""
  if x.op is Ops.NEG: return x.src[0]
  if x.op is Ops.CONST: return x.const_like(-x.arg)
  return UOp(Ops.NEG, x.dtype, (x,))


def float_minimum(a: UOp, b: UOp, m: UOp) -> UOp:
  """-max(a, b) as the minimum of x = -a and y = -b: x if x is NaN or x < y, else y (max picks a where a is NaN or
  a > b, i.e. where x is NaN or x < y), which is exact, ties of 0.0 and -0.0 included. Tensor.minimum is -max(-x, -y);
  kept as negations around a select, LLVM 14 (clang, PoCL) folds -(max(-0.0, -y)) to +0.0 for y = -0.0."""
  x, y = _negated(a), _negated(b)
  picks_x = UOp(Ops.OR, dtypes.bool, (UOp(Ops.CMPNE, dtypes.bool, (x, x)), UOp(Ops.CMPLT, dtypes.bool, (x, y))))
  return UOp(Ops.WHERE, m.dtype, (picks_x, x, y))


float_minimums = PatternMatcher([
  (UPat(Ops.NEG, src=(UPat(Ops.MAX, name="m", src=(UPat.var("a"), UPat.var("b"))),)),
   lambda a, b, m: float_minimum(a, b, m) if dtypes.is_float(m.dtype) else None),
])


# a kernel is cut into at most this many pieces (a cat of 16 tensors; a pad has 3 per padded dim)
MAX_PIECES = 16


def _cut_point(compare: UOp, r: UOp) -> int | None:
  """Where `a < b` changes its value along range r, when a - b is k * r + c (nothing else varies): the first r of
  the second run. None for any other comparison."""
  (terms_a, const_a), (terms_b, const_b) = affine_terms(compare.src[0]), affine_terms(compare.src[1])
  terms = dict(terms_a)
  for t, c in terms_b.items(): terms[t] = terms.get(t, 0) - c
  terms = {t: c for t, c in terms.items() if c != 0}
  if list(terms) != [r]: return None
  k, c = terms[r], const_a - const_b  # k * r + c < 0
  return -(c // k) if k > 0 else c // -k + 1  # k > 0: r < ceil(-c / k); k < 0: r > c / |k|


def split_at_gates(sink: UOp, target: KernelTarget = DEFAULT_TARGET) -> UOp:
  """An elementwise kernel whose output loops are cut by comparisons of their index with constants (a cat:
  where(r < 1024, a[r], -0) + where(1024 <= r < 2048, b[r - 1024], -0) + ...; a stack; a pad's borders, along the
  rows and the columns) becomes one loop per piece between the cut points (ranges of kind "part"), each piece's
  comparisons decided: an element reads only its own piece, in a loop the compiler vectorizes (a copy, for a cat),
  instead of evaluating every piece's gated load. A vectorized gated load reads with a mask, and a masked-off lane
  at an address outside its buffer costs the CPU a microcode assist: a cat along rows took 80 ms for 16 MB.

  Loops are cut outer first; a piece of a cut loop holds its own copy of every loop inside it (fresh part ranges, in
  the original order: pieces nest in the order of their ids), so the rows stay outside the columns, and those copies
  are cut in turn. A loop cut in one piece is cut (into one segment where it has no cut point) in every piece, so no
  piece keeps an output loop the others' pieces would nest in. At most MAX_PIECES stores in all; only loops of known
  size. (A threaded renderer splits each piece's first loop across the cores when no output loop is left whole.)"""
  if not target.split_gates: return sink
  nodes = sink.toposort()
  if any(n.op is Ops.REDUCE for n in nodes) or any(n.op is Ops.RANGE and n.arg[1] != "loop" for n in nodes):
    return sink
  outputs = sorted((n for n in nodes if n.op is Ops.RANGE), key=lambda r: r.arg[0])
  next_id = outputs[-1].arg[0] + 1 if outputs else 0
  stores = [u for u in sink.src if u.op is Ops.STORE]
  # each piece and its loops (outermost first): the kernel's own loops until a cut replaces them with parts
  work: list[tuple[UOp, list[UOp]]] = [(store, outputs) for store in stores]
  for level, r in enumerate(outputs):
    if not all(len(q.src) == 1 and isinstance(_range_size(q), int) for q in outputs[level:]): continue
    size = _range_size(r)
    bounds = [[0, *sorted(_cut_points(piece, loops[level], size)), size] for piece, loops in work]
    if all(len(b) == 2 for b in bounds) or sum(len(b) - 1 for b in bounds) > MAX_PIECES: continue
    cut_work: list[tuple[UOp, list[UOp]]] = []
    for (piece, loops), piece_bounds in zip(work, bounds):
      for lo, hi in zip(piece_bounds, piece_bounds[1:]):
        fresh = [UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, hi - lo if q is loops[level] else
                                                                         _range_size(q)),), (next_id + i, "part"))
                 for i, q in enumerate(loops[level:])]
        next_id += len(fresh)
        replaced = {q: f for q, f in zip(loops[level + 1:], fresh[1:])}
        replaced[loops[level]] = fresh[0] + UOp.const(dtypes.index, lo) if lo else fresh[0]
        cut_work.append((piece.substitute(replaced), loops[:level] + fresh))
    work = cut_work
  if len(work) == len(stores) and all(loops is outputs for _, loops in work): return sink
  split = sink.replace(src=tuple(piece for piece, _ in work) + tuple(u for u in sink.src if u.op is not Ops.STORE))
  split = keeping_parameters(graph_rewrite(graph_rewrite(split, symbolic), decided_gates), nodes)
  # (a Variable used only in a decided gate would vanish from the call's arguments: then the loop stays whole)
  return split if kernel_scalars(split) == kernel_scalars(sink) else sink


def keeping_parameters(rewritten: UOp, nodes: list[UOp]) -> UOp:
  """`rewritten` with every buffer parameter of the kernel it came from (`nodes`) that it no longer reads appended
  to its SINK: the kernel's call passes every buffer by position."""
  kept = {u for u in rewritten.toposort() if u.op is Ops.PARAM}
  unread = tuple(sorted((u for u in nodes if u.op is Ops.PARAM and u not in kept), key=lambda u: u.arg))
  return rewritten.replace(src=rewritten.src + unread) if unread else rewritten


def _cut_points(piece: UOp, r: UOp, size: int) -> set[int]:
  """Where comparisons in `piece` of the index with constants change their value along r, strictly inside it."""
  return {cut for n in piece.toposort() if n.op is Ops.CMPLT and n.src[0].dtype is dtypes.index
          and (cut := _cut_point(n, r)) is not None and 0 < cut < size}


decided_gates = PatternMatcher([
  # a load whose gate is decided: always read (an ungated load) or never (its value where the gate is off, 0)
  (UPat(Ops.LOAD, name="load", src=(UPat(Ops.INDEX, name="index", src=(UPat.var("buf"), UPat.var("addr"),
                                                                        UPat.cvar("gate"))),)),
   lambda load, index, buf, addr, gate: load.replace(src=(index.replace(src=(buf, addr)),)) if gate.arg
   else UOp.const(load.dtype, 0)),
])


def _range_under_casts(u: UOp) -> UOp:
  while u.op is Ops.CAST: u = u.src[0]
  return u


def gathered_reduce(x: UOp) -> UOp | None:
  """A sum over a range r of `where(e == r, v(r), 0)` (how an index tensor picks elements: t[idx], a gather) is
  v(e): the element e names, read directly (a load at a computed address, gated to 0 <= e < size as the sum of
  none is 0), instead of size(r) compares per element (an embedding lookup into a 50000-row table read every row).
  e must not depend on r. Exact: the sum adds zeros to one element (NaNs and infs in other rows stay out)."""
  value, ranges = x.src[0], x.src[1:]
  if x.arg is not Ops.ADD or value.op is not Ops.WHERE or value.src[2].op is not Ops.CONST or value.src[2].arg != 0:
    return None
  picked_at: dict[UOp, UOp] = {}
  kept: list[UOp] = []
  for term in conjuncts(value.src[0]):
    found = None
    if term.op is Ops.CMPEQ:
      for a, b in (term.src, term.src[::-1]):
        rng = _range_under_casts(b)
        if (rng in ranges and rng not in picked_at and dtypes.is_int(a.dtype) and len(rng.src) == 1 and
            rng.src[0].op is Ops.CONST and rng not in a.toposort()):
          found = (rng, a)
          break
    if found is None: kept.append(term)
    else: picked_at[found[0]] = found[1]
  if not picked_at: return None
  inside = None
  substitute: dict[UOp, UOp] = {}
  for rng, e in picked_at.items():
    at = e.cast(dtypes.index) if e.dtype is not dtypes.index else e
    bound = UOp(Ops.AND, dtypes.bool, (UOp(Ops.CMPLT, dtypes.bool, (UOp.const(dtypes.index, -1), at)),
                                       UOp(Ops.CMPLT, dtypes.bool, (at, rng.src[0]))))
    inside = bound if inside is None else UOp(Ops.AND, dtypes.bool, (inside, bound))
    substitute[rng] = at
  assert inside is not None
  # every load whose address used a picked range reads only inside the bounds (an index out of range reads 0), in
  # the picked value and in the other conditions alike (a scatter's condition reads the index tensor at the pick:
  # ungated, an unmatched row's -1 read before the buffer)
  loads = {u: u for root in (value.src[1], *kept) for u in root.toposort()
           if u.op is Ops.INDEX and any(r in u.toposort() for r in picked_at)}
  for index in loads:
    gate = inside if len(index.src) < 3 else UOp(Ops.AND, dtypes.bool, (index.src[2], inside))
    loads[index] = UOp(Ops.INDEX, index.dtype, (index.src[0], index.src[1], gate), index.arg)
  picked = value.src[1].substitute(loads).substitute(substitute)
  cond = inside
  for term in kept: cond = UOp(Ops.AND, dtypes.bool, (cond, term.substitute(loads).substitute(substitute)))
  out = UOp(Ops.WHERE, value.dtype, (cond, picked, value.src[2]))
  rest = tuple(r for r in ranges if r not in picked_at)
  return UOp(Ops.REDUCE, x.dtype, (out, *rest), x.arg) if rest else out


gathers = PatternMatcher([
  # a sum over r of where(e == r, v(r), 0) is v(e) (a gather: t[idx] reads one element, not every row)
  (UPat(Ops.REDUCE, name="x"), gathered_reduce),
])


@attrs.frozen
class Block:
  """Loop blocking of an elementwise kernel, by range ids: output ranges `outer` and `inner` (the outer one first)
  each cut into blocks of `size`, the two in-block loops innermost."""
  outer: int
  inner: int
  size: int


# a transpose's block: 32 x 32 floats, 4 KiB read and written per block, 32 cache lines each way (L1 holds them)
TRANSPOSE_BLOCK = 32
# a dim is read "across" when a step along it moves at least this many elements (a cache line of floats and more)
ACROSS_STRIDE = 16


def _transposed_dims(nodes: list[UOp]) -> tuple[UOp, UOp] | None:
  """(the output range every store writes contiguously, a range some load reads contiguously) when that load steps
  across cache lines along the first and the stores across cache lines along the second: a transpose's two dims."""
  if any(n.op is Ops.REDUCE for n in nodes) or any(n.op is Ops.RANGE and n.arg[1] != "loop" for n in nodes):
    return None
  ranges = [n for n in nodes if n.op is Ops.RANGE]
  if any(len(r.src) != 1 or not isinstance(_range_size(r), int) for r in ranges): return None
  stores = [affine_terms(n.src[0].src[1])[0] for n in nodes if n.op is Ops.STORE]
  written = [r for r in ranges if stores and all(c.get(r) == 1 for c in stores)]
  if len(written) != 1: return None
  across = written[0]
  for load in (n for n in nodes if n.op is Ops.LOAD):
    terms = affine_terms(load.src[0].src[1])[0]
    if abs(terms.get(across, 0)) < ACROSS_STRIDE: continue
    for r in ranges:
      if r is not across and terms.get(r) == 1 and all(abs(c.get(r, 0)) >= ACROSS_STRIDE for c in stores):
        return across, r
  return None


def block_options(sink: UOp) -> list[Block]:
  """The blockings a search may try: the transposed dims (`_transposed_dims`) in blocks of 8 to 64."""
  dims = _transposed_dims(sink.toposort())
  if dims is None: return []
  outer, inner = sorted(dims, key=lambda r: r.arg[0])
  return [Block(outer.arg[0], inner.arg[0], size) for size in (8, 16, 32, 64)
          if _range_size(outer) % size == 0 and _range_size(inner) % size == 0 and _range_size(outer) > size]


def decide_block(sink: UOp, target: KernelTarget = DEFAULT_TARGET) -> Block | None:
  """The rules' blocking: a transpose (`_transposed_dims`) on a target with `blocks` runs in blocks of
  TRANSPOSE_BLOCK (or the largest smaller option), so each block reads and writes whole cache lines."""
  if not target.blocks: return None
  options = [b for b in block_options(sink) if b.size <= TRANSPOSE_BLOCK]
  return options[-1] if options else None


def apply_block(sink: UOp, block: Block) -> UOp:
  """`block`'s two ranges as block loops (their own ids) and in-block loops (new ids after every other range, so
  they nest innermost, the outer one's first)."""
  by_id = {n.arg[0]: n for n in sink.toposort() if n.op is Ops.RANGE}
  next_id = 1 + max(by_id)
  substitutions = {}
  for i, r in enumerate((by_id[block.outer], by_id[block.inner])):
    blocks = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, _range_size(r) // block.size),), r.arg)
    within = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, block.size),), (next_id + i, "loop"))
    substitutions[r] = blocks * block.size + within
  return graph_rewrite(sink.substitute(substitutions), symbolic)


@attrs.frozen
class KernelOpts:
  """The choices that shape one kernel, the space a kernel search (BEAM) explores: its register `tile` (None: none),
  how many rows a column-sum strip adds per pass (`strip_rows`), an elementwise kernel's loop `block` (None: none),
  and settings of the renderer's own (`renderer`:
  sorted (name, value) pairs a renderer declares in its `search_space`, e.g. a GPU's work-group size; a name not
  given is the renderer's rule). `decide_opts` gives the rules' choices; the optimized kernel carries its opts as its
  SINK's arg, for the renderer."""
  tile: Tile | None = None
  strip_rows: int = 1
  renderer: tuple[tuple[str, Any], ...] = ()
  block: Block | None = None

  def setting(self, name: str, default: Any = None) -> Any:
    """The renderer setting `name`, or `default` (the renderer's rule) when the opts do not set it."""
    return next((value for key, value in self.renderer if key == name), default)

  def with_setting(self, name: str, value: Any) -> KernelOpts:
    settings = dict(self.renderer)
    settings[name] = value
    return attrs.evolve(self, renderer=tuple(sorted(settings.items())))


NO_OPTS = KernelOpts()


def opts_of(sink: UOp) -> KernelOpts:
  """The opts an optimized kernel carries (its SINK's arg), or the empty opts (every renderer rule) when none."""
  return sink.arg if isinstance(sink.arg, KernelOpts) else NO_OPTS


def split_wrapped_loop(sink: UOp) -> UOp:
  """The innermost output loop, when an address wraps it around a constant that divides its size (a repeat's or a
  tile's `r % 1024` in a loop of 2048), as two loops: `r // c` outside and `r % c` inside, so the inner loop's
  addresses are affine (a plain copy the compiler vectorizes) instead of a remainder per element. The largest such
  constant is taken, and the new inner loop is split again while it wraps (a sort stage's pairs 8 apart: 1024 ->
  64 x 16 -> 64 x 2 x 8)."""
  for _ in range(MAX_WRAP_SPLITS):
    split = _split_wrapped_once(sink)
    if split is sink: break
    sink = split
  return sink


MAX_WRAP_SPLITS = 4
UNROLLED_WRAP_MOST = 4  # a loop of at most this many iterations inside a remainder is written out (unroll_wrapping)


def unroll_wrapping(sink: UOp) -> UOp:
  """An elementwise kernel's short output loop (at most UNROLLED_WRAP_MOST iterations) that some address wraps around
  a constant (a sort stage's partner, `(i + 1016 * half_bit + 8) % 1024`, or a flip's) is written out: each store
  once per iteration, with the loop's value a constant in it, so the remainders resolve against the other loops'
  bounds and the addresses become affine (the inner loop vectorizes instead of computing a remainder per element).
  Kept only when it leaves fewer remainders and quotients than there were."""
  nodes = sink.toposort()
  if any(n.op is Ops.REDUCE for n in nodes) or any(n.op is Ops.RANGE and n.arg[1] != "loop" for n in nodes):
    return sink
  wrapped = {r for n in nodes if n.op in (Ops.IDIV, Ops.MOD) and n.dtype is dtypes.index
             for r in n.src[0].toposort() if r.op is Ops.RANGE}
  stores = [u for u in sink.src if u.op is Ops.STORE]
  for r in sorted(wrapped, key=lambda r: r.arg[0]):
    if len(r.src) != 1 or not isinstance(size := _range_size(r), int) or size > UNROLLED_WRAP_MOST: continue
    if len(stores) * size > MAX_PIECES: break
    written: list[UOp] = []
    for store in stores:
      if r in store.toposort(): written.extend(store.substitute({r: UOp.const(dtypes.index, i)}) for i in range(size))
      else: written.append(store)
    stores = written
  if len(stores) == sum(u.op is Ops.STORE for u in sink.src): return sink
  unrolled = graph_rewrite(sink.replace(src=tuple(stores) + tuple(u for u in sink.src if u.op is not Ops.STORE)),
                           symbolic)
  if _divmod_count(unrolled) >= _divmod_count(sink) or kernel_scalars(unrolled) != kernel_scalars(sink): return sink
  return keeping_parameters(unrolled, nodes)  # (a load multiplied by a zero that became a constant is gone)


def _split_wrapped_once(sink: UOp) -> UOp:
  nodes = sink.toposort()
  outputs = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "loop"), key=lambda r: r.arg[0])
  if not outputs or len((r := outputs[-1]).src) != 1 or not isinstance(size := _range_size(r), int): return sink
  if any(n.op is Ops.RANGE and n.arg[1] != "loop" for n in nodes): return sink
  wraps = [n.src[1].arg for n in nodes if n.op in (Ops.MOD, Ops.IDIV) and n.dtype is dtypes.index and
           n.src[0] is r and n.src[1].op is Ops.CONST and 1 < n.src[1].arg < size and size % n.src[1].arg == 0]
  if not wraps: return sink
  c = max(wraps)
  outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // c),), r.arg)
  inner = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, c),), (1 + max(n.arg[0] for n in nodes
                                                                              if n.op is Ops.RANGE), "loop"))
  return graph_rewrite(sink.substitute({r: outer * c + inner}), symbolic)


def split_blocked_loops(sink: UOp) -> tuple[UOp, set[int]]:
  """Each output loop of a reduction kernel whose addresses read it as blocks, `r // c` and `r % c` for a constant c
  that divides its size (a weight stored as (O/32, I, kh, kw, 32) and read as (O, I, kh, kw)), as two loops: the
  blocks `r // c`, then at once inside it the offsets `r % c`. Every address becomes affine in the two, so a
  register tile can take the offsets as its columns and read each block's panel as the contiguous memory it is.
  The largest such c of each loop is taken; the other loops keep their order. Returns the kernel and the ids of
  the offsets' loops."""
  nodes = sink.toposort()
  if not any(n.op is Ops.REDUCE for n in nodes): return sink, set()
  by_divisor: dict[UOp, dict[int, set[Ops]]] = {}
  for n in nodes:
    if n.op in (Ops.IDIV, Ops.MOD) and n.dtype is dtypes.index and n.src[0].op is Ops.RANGE and \
        n.src[0].arg[1] == "loop" and n.src[1].op is Ops.CONST:
      by_divisor.setdefault(n.src[0], {}).setdefault(n.src[1].arg, set()).add(n.op)
  offsets: set[int] = set()
  # the highest id first: a split renumbers only the loops after it, so the loops still to split keep their nodes
  for r, divisors in sorted(by_divisor.items(), key=lambda item: -item[0].arg[0]):
    if len(r.src) != 1 or not isinstance(size := _range_size(r), int): continue
    blocks = [c for c, ops in divisors.items() if len(ops) == 2 and 1 < c < size and size % c == 0]
    if not blocks: continue
    c = max(blocks)
    # the offsets' loop takes the id after r's: every later range moves up one, so the nesting order is kept
    later = {n: n.replace(arg=(n.arg[0] + 1, *n.arg[1:])) for n in sink.toposort()
             if n.op is Ops.RANGE and n.arg[0] > r.arg[0]}
    outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // c),), r.arg)
    inner = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, c),), (r.arg[0] + 1, "loop"))
    sink = graph_rewrite(sink.substitute({**later, r: outer * c + inner}), symbolic)
    offsets = {i + 1 for i in offsets} | {r.arg[0] + 1}
  return sink, offsets


def blocked_columns(sink: UOp, target: KernelTarget = DEFAULT_TARGET) -> UOp:
  """The kernel with its blocked loops split (`split_blocked_loops`) when the register tile the rules pick then
  takes a block's offsets as its columns (one contiguous panel per block, read in place), or when only the split
  kernel gets a tile with rows; as it was otherwise (a tile over other dims would loop over the blocks once more)."""
  split, offsets = split_blocked_loops(sink)
  if not offsets or (tile := decide_tile(split, target)) is None: return sink
  if tile.columns in offsets: return split
  unsplit = decide_tile(sink, target)
  return split if tile.rows is not None and (unsplit is None or unsplit.rows is None) else sink


def prepared_kernel(sink: UOp, target: KernelTarget = DEFAULT_TARGET) -> UOp:
  """The rewrites every kernel gets before its choices (they keep semantics and are never worse): gathers read
  directly, gated loads and float minimums simplified, contiguous loops merged, a wrapped inner loop split in two
  and a short wrapped loop written out, a blocked output loop split into its blocks and offsets for a tile,
  elementwise loops split at gates."""
  if target.gathers: sink = graph_rewrite(sink, gathers)
  sink = graph_rewrite(graph_rewrite(sink, gated_loads), float_minimums)
  sink = unroll_wrapping(split_wrapped_loop(merge_ranges(sink)))
  return split_at_gates(blocked_columns(sink, target), target)


def decide_opts(prepared: UOp, target: KernelTarget = DEFAULT_TARGET) -> KernelOpts:
  """The rules' choices for a prepared kernel (`prepared_kernel`)."""
  return KernelOpts(decide_tile(prepared, target), target.strip_rows, block=decide_block(prepared, target))


def apply_opts(prepared: UOp, opts: KernelOpts) -> UOp:
  """The prepared kernel shaped by `opts` (which it carries as its SINK's arg)."""
  sink = apply_tile(prepared, opts.tile) if opts.tile is not None else prepared
  if opts.block is not None: sink = apply_block(sink, opts.block)
  sink = strip_rows_per_pass(sink, opts.strip_rows)
  return sink.replace(arg=opts)


def optimize_kernel(sink: UOp, target: KernelTarget = DEFAULT_TARGET, opts: KernelOpts | None = None) -> UOp:
  """The kernel with gathers read directly, contiguous loops merged, and shaped by `opts` (default: the rules'
  choices for `target`: register tiles for strided reductions, several rows per pass for column-sum strips)."""
  prepared = prepared_kernel(sink, target)
  return apply_opts(prepared, decide_opts(prepared, target) if opts is None else opts)
