"""Sorting and selection of tinygrad's Tensor API, mixed into Tensor: sort, argsort and topk, composed of lazy ops.

Every element first becomes an order key: integer words whose ascending order is the requested order with ties
broken by position, so no two keys of a row are equal and no comparison needs a tie rule. A dtype of up to 32 bits
packs its value's key and its position into one int64 word (value above, position below); a 64-bit dtype keeps two
words, compared in turn. NaN is the largest value (torch's order) and -0.0 equals 0.0. The sorted values are read from
the input at the sorted positions (a gather), so they are exact and gradients flow to the input.

- sort: rows of at most RANK_SORT_MAX elements count each key's rank (n**2 compares, one kernel) and place by rank;
  longer rows run a bitonic network over the keys (padded to a power of two with keys that sort last): log2(n) merges
  of log2(n)(log2(n)+1)/2 compare-exchange stages in all, one kernel each, each element paired with a partner found by
  movement ops (a flip), so no stage gathers. A device that reads t[index] as one load (`KernelTarget.gathers`) then
  reads the values at the sorted positions; others carry the values through the network beside the keys.
- topk: k of at most TOPK_SELECT_MAX takes k passes over the row, each for the smallest key after the last one (the
  passes are chained reductions of one kernel). A larger k counts ranks in a row of at most RANK_SELECT_MAX; in a
  longer row, on a device that gathers, it picks through levels of chunk minima (select_by_chunks); else it sorts.
"""
from __future__ import annotations
from typing import TYPE_CHECKING
from tinycore.device.registry import Device
from tinycore.dtype import dtypes
from tinycore.uop.ops import UOp

if TYPE_CHECKING:
  from tinycore.tensor import Tensor

# the key of a padding element (or of no candidate): after every real key
LAST_KEY = dtypes.max(dtypes.int64)
POSITION_BITS = 32
# rows up to this long sort by counting ranks (n**2 compares in one kernel); longer ones by the network
RANK_SORT_MAX = 64
TOPK_SELECT_MAX = 16  # topk of at most this many takes k passes over the row (one kernel) instead of a sort
# a larger k selects by ranks (m**2 compares) among at most this many keys; a longer row is cut into chunks first
RANK_SELECT_MAX = 1024


def reads_computed_addresses(device: str | tuple[str, ...]) -> bool:
  """Whether the device's kernels read t[index] as one load at a computed address (its renderer's
  KernelTarget.gathers), so a gather costs a read instead of a compare per element of the row."""
  name = device[0] if isinstance(device, tuple) else device
  target = getattr(Device[name].renderer, "kernel_target", None)
  return bool(getattr(target, "gathers", False))


def value_keys(x: Tensor, descending: bool) -> Tensor:
  """x's elements as signed integers in the requested order (NaN above +inf, -0.0 equal to 0.0; descending: the
  largest first): int64 for a 64-bit dtype, int32 for the others."""
  if dtypes.is_float(x.dtype):
    width = 8 * x.dtype.itemsize
    bits_dtype = {16: dtypes.int16, 32: dtypes.int32, 64: dtypes.int64}[width]
    bits = (x == 0).where(0.0, x).bitcast(bits_dtype)
    # a negative float's bits grow with its magnitude: flipping all but the sign bit reverses them. NaN gets the
    # largest key, above +inf's (its own bits vary: a renderer's NaN constant may have the sign bit set)
    key = (x != x).where(dtypes.max(bits_dtype), bits ^ ((bits >> (width - 1)) & dtypes.max(bits_dtype)))
    if width != 64: key = key.cast(dtypes.int32)
  elif x.dtype is dtypes.uint64: key = (x ^ (1 << 63)).bitcast(dtypes.int64)
  elif x.dtype is dtypes.int64: key = x
  elif x.dtype is dtypes.uint32: key = (x.cast(dtypes.int64) - (1 << 31)).cast(dtypes.int32)
  else: key = x.cast(dtypes.int32)
  return ~key if descending else key


def keyed(key: Tensor, positions: Tensor) -> list[Tensor]:
  """Order keys from value keys and their (int) positions: [value key * 2**32 + position] (one int64 word) for an
  int32 value key, [value key, position] for an int64 one."""
  if key.dtype is dtypes.int64: return [key, positions.cast(dtypes.int64).expand(key.shape)]
  return [key.cast(dtypes.int64) * (1 << POSITION_BITS) + positions.cast(dtypes.int64)]


def order_keys(rows: Tensor, descending: bool) -> list[Tensor]:
  """The order keys of the last axis: ascending keys are the sort order (descending=True: largest first), equal
  values by position."""
  from tinycore.tensor import Tensor
  return keyed(value_keys(rows, descending), Tensor.arange(rows.shape[-1], device=rows.device, dtype=dtypes.int64))


def key_positions(keys: list[Tensor]) -> Tensor:
  """The int32 positions order_keys put in its keys."""
  position = keys[-1] if len(keys) > 1 else keys[0] & ((1 << POSITION_BITS) - 1)
  return position.cast(dtypes.int32)


def _precedes(a: list[Tensor], b: list[Tensor]) -> Tensor:
  """Key a before key b: the first word that differs decides."""
  before = a[-1] < b[-1]
  for wa, wb in zip(reversed(a[:-1]), reversed(b[:-1])): before = (wa < wb) | ((wa == wb) & before)
  return before


def _partner(t: Tensor, half: int, mirrored: bool) -> Tensor:
  """Each element's partner along the last axis (a power of two long): i ^ half, or (mirrored) the element at the
  mirror place of i in its block of 2 half."""
  lead, n = t.shape[:-1], t.shape[-1]
  if mirrored: return t.reshape(lead + (n // (2 * half), 2 * half)).flip(-1).reshape(lead + (n,))
  return t.reshape(lead + (n // (2 * half), 2, half)).flip(-2).reshape(lead + (n,))


def _exchange(keys: list[Tensor], payloads: list[Tensor], half: int, mirrored: bool,
              lower: Tensor) -> tuple[list[Tensor], list[Tensor]]:
  """One compare-exchange stage: each pair of partners is put in ascending key order (the `lower` place, bit `half`
  of i clear, keeps the smaller key); payloads follow their keys. Every output realized: fused, a chain of stages
  re-reads its input 2**stages times."""
  partners = [_partner(k, half, mirrored) for k in keys]
  keep = lower == _precedes(keys, partners)
  new_keys = [keep.where(k, p).contiguous() for k, p in zip(keys, partners)]
  return new_keys, [keep.where(t, _partner(t, half, mirrored)).contiguous() for t in payloads]


def bitonic_sort(keys: list[Tensor], payloads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
  """keys (and payloads alike) sorted ascending along the last axis, padded to a power of two with keys that sort
  last: merges of sorted runs of 1, 2, 4, ... elements, each a mirrored stage and then stages of halving distance."""
  from tinycore.tensor import Tensor
  n = keys[0].shape[-1]
  size = 1 << (n - 1).bit_length()
  pad = ((0, 0),) * (keys[0].ndim - 1) + ((0, size - n),)
  keys, payloads = [k.pad(pad, value=LAST_KEY) for k in keys], [t.pad(pad) for t in payloads]
  places = Tensor.arange(size, device=keys[0].device, dtype=dtypes.int32)
  lower = {half: (places & half) == 0 for half in (1 << b for b in range(size.bit_length() - 1))}
  merge = 2
  while merge <= size:
    keys, payloads = _exchange(keys, payloads, merge // 2, True, lower[merge // 2])
    half = merge // 4
    while half >= 1:
      keys, payloads = _exchange(keys, payloads, half, False, lower[half])
      half //= 2
    merge *= 2
  return [k[..., :n] for k in keys], [t[..., :n] for t in payloads]


def rank_sort_positions(keys: list[Tensor]) -> Tensor:
  """The positions of the sorted keys along the last axis by counting: each key's rank is the number of keys before
  it (n**2 compares, one kernel), then the position of rank r is picked by a compare with r per element."""
  from tinycore.tensor import Tensor
  n = keys[0].shape[-1]
  rank = _precedes([k.unsqueeze(-2) for k in keys], [k.unsqueeze(-1) for k in keys]).sum(-1, dtype=dtypes.int32)
  ranks = Tensor.arange(n, device=keys[0].device, dtype=dtypes.int32).reshape(n, 1)
  places = Tensor.arange(n, device=keys[0].device, dtype=dtypes.int32)
  return (rank.unsqueeze(-2) == ranks).where(places, 0).sum(-1, dtype=dtypes.int32)


def _smallest(keys: list[Tensor], among: Tensor | None = None) -> list[Tensor]:
  """The smallest key of the last axis (of those where `among` is set), kept as a dim of 1: the smallest first word,
  then the smallest next word among the keys equal so far."""
  found: list[Tensor] = []
  for word in keys:
    found.append((word if among is None else among.where(word, LAST_KEY)).min(-1, keepdim=True))
    if word is not keys[-1]: among = (word == found[-1]) if among is None else among & (word == found[-1])
  return found


def select_by_passes(keys: list[Tensor], k: int) -> list[Tensor]:
  """The k smallest keys of the last axis in ascending order by k passes, each the smallest key after the one before
  (one kernel once the keys are stored: the passes read the row in turn, then each output slot picks its pass's
  key)."""
  from tinycore.tensor import Tensor
  slot = Tensor.arange(k, device=keys[0].device, dtype=dtypes.int32)
  if len(keys) == 1:  # the largest of the inverted keys, a max per pass (a min of ints is three ops)
    inverted = (~keys[0]).contiguous()
    found = inverted.max(-1, keepdim=True)
    picked = found.expand(found.shape[:-1] + (k,))
    for j in range(1, k):
      found = (inverted < found).where(inverted, ~LAST_KEY).max(-1, keepdim=True)
      picked = (slot == j).where(found, picked)
    return [~picked]
  words = _smallest(keys)
  choices = [w.expand(w.shape[:-1] + (k,)) for w in words]
  for j in range(1, k):
    words = _smallest(keys, _precedes(words, keys))
    choices = [(slot == j).where(w, c) for w, c in zip(words, choices)]
  return choices


def select_by_rank(keys: list[Tensor], k: int) -> list[Tensor]:
  """The k smallest keys of the last axis in ascending order by counting: each key's rank is the number of keys
  before it (m**2 compares), then slot s picks the key of rank s."""
  from tinycore.tensor import Tensor
  rank = _precedes([w.unsqueeze(-2) for w in keys], [w.unsqueeze(-1) for w in keys]).sum(-1, dtype=dtypes.int32)
  hit = rank.unsqueeze(-2) == Tensor.arange(k, device=keys[0].device, dtype=dtypes.int32).reshape(k, 1)
  return [hit.where(w.unsqueeze(-2), 0).sum(-1, dtype=dtypes.int64) for w in keys]


def smallest_keys(keys: list[Tensor], k: int) -> list[Tensor]:
  """The k smallest of at most RANK_SELECT_MAX keys along the last axis, in ascending order."""
  return select_by_passes(keys, k) if k <= TOPK_SELECT_MAX else select_by_rank(keys, k)


def _padded(t: Tensor, multiple: int, value: int) -> Tensor:
  """t's last axis filled up with `value` to a multiple of `multiple`."""
  extra = -t.shape[-1] % multiple
  return t.pad(((0, 0),) * (t.ndim - 1) + ((0, extra),), value=value) if extra else t


def _gather_last(t: Tensor, index: Tensor) -> Tensor:
  """t[..., index] along the last axis (0 where the index is out of range): a sum of selects over the axis, which a
  device that gathers reads as one load."""
  from tinycore.tensor import Tensor
  n = t.shape[-1]
  hit = index.unsqueeze(-1) == Tensor.arange(n, device=t.device, dtype=index.dtype)
  return hit.where(t.unsqueeze(-2), 0).sum(-1).cast(t.dtype)


def select_by_chunks(rows: Tensor, k: int, descending: bool, chunk: int) -> list[Tensor]:
  """The k smallest order keys of the last axis, through levels of chunk minima: level 1 holds the smallest value
  key of each chunk of `chunk` elements (keyed by the chunk's start, which orders equal minima as their positions
  would), level l + 1 the smallest key of each chunk of level l, up to a level of at most RANK_SELECT_MAX keys. The k
  smallest minima of a level lie in the chunks that hold the k smallest keys of the level below (a key outside them
  has k smaller minima before it), so from the top down each level's k smallest are picked among the k chunks under
  the last picks (gathers of k * chunk keys, a position naming its chunk on every level: position // chunk**level)."""
  from tinycore.tensor import Tensor
  values = value_keys(rows, descending)
  count = -(-rows.shape[-1] // chunk)
  # (realized: read in place by the level above, its kernel would index the row through both levels' pads)
  minima = _padded(values, chunk, dtypes.max(values.dtype)).reshape(values.shape[:-1] + (count, chunk)).min(-1)
  minima = minima.contiguous()
  levels = [keyed(minima, Tensor.arange(count, device=rows.device, dtype=dtypes.int64) * chunk)]
  while levels[-1][0].shape[-1] > RANK_SELECT_MAX:
    words = [_padded(w, chunk, LAST_KEY) for w in levels[-1]]
    shape = words[0].shape[:-1] + (words[0].shape[-1] // chunk, chunk)
    levels.append([m.squeeze(-1) for m in _smallest([w.reshape(shape) for w in words])])
  picked = smallest_keys(levels[-1], k)
  offsets = Tensor.arange(chunk, device=rows.device, dtype=dtypes.int32)
  for depth in range(len(levels) - 1, -1, -1):
    chunks = key_positions(picked) // chunk ** (depth + 1)  # (.., k): the picks' chunks on level `depth + 1`
    reads = (chunks.unsqueeze(-1) * chunk + offsets).reshape(chunks.shape[:-1] + (k * chunk,))
    if depth:
      candidates = [_gather_last(_padded(w, chunk, LAST_KEY), reads) for w in levels[depth - 1]]
    else:  # the row itself: keys of the elements read (past its end: none)
      inside = reads < rows.shape[-1]
      candidates = [inside.where(w, LAST_KEY) for w in keyed(value_keys(_gather_last(rows, reads), descending), reads)]
    picked = smallest_keys(candidates, k)
  return picked


def sorted_rows(rows: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
  """(values, int32 positions) of the last axis sorted (stable)."""
  n, keys = rows.shape[-1], order_keys(rows, descending)
  if isinstance(n, UOp) or n <= RANK_SORT_MAX:
    positions = rank_sort_positions(keys)
    return _gather_last(rows, positions), positions
  if reads_computed_addresses(rows.device):
    positions = key_positions(bitonic_sort(keys, [])[0])
    return _gather_last(rows, positions), positions
  keys, (values,) = bitonic_sort(keys, [rows])
  return values, key_positions(keys)


def selected_rows(rows: Tensor, k: int, largest: bool) -> tuple[Tensor, Tensor] | None:
  """(values, int32 positions) of the k largest (smallest) of the last axis in order, when selecting them beats a
  sort: k passes for a small k, a count of ranks in a short row, chunk minima on a device that gathers; None
  otherwise (and for a row of a symbolic length)."""
  n = rows.shape[-1]
  if isinstance(n, UOp) or not 0 < k < n: return None
  # k * chunk candidates per level, at most RANK_SELECT_MAX (so every level holds at least k keys)
  chunk = 1 << max(1, (RANK_SELECT_MAX // k).bit_length() - 1)
  if (reads_computed_addresses(rows.device) and TOPK_SELECT_MAX < k and k * chunk <= RANK_SELECT_MAX < n and
      k * chunk < n):
    picked = select_by_chunks(rows, k, largest, chunk)
  elif k <= TOPK_SELECT_MAX or RANK_SORT_MAX < n <= RANK_SELECT_MAX:
    picked = smallest_keys(order_keys(rows, largest), k)
  else: return None
  positions = key_positions(picked)
  return _gather_last(rows, positions), positions
