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
- topk: k of at most TOPK_SELECT_MAX take k passes for the next smallest key, all in one kernel; larger k sort.
"""
from __future__ import annotations
import math
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


def _value_key(x: Tensor) -> Tensor:
  """x's elements as signed integers in the same order (NaN above +inf, -0.0 equal to 0.0): int64 for a 64-bit dtype,
  int32 for the others."""
  if dtypes.is_float(x.dtype):
    width = 8 * x.dtype.itemsize
    bits_dtype = {16: dtypes.int16, 32: dtypes.int32, 64: dtypes.int64}[width]
    canonical = (x != x).where(math.nan, (x == 0).where(0.0, x))
    bits = canonical.bitcast(bits_dtype)
    # a negative float's bits grow with its magnitude: flipping all but the sign bit reverses them
    key = bits ^ ((bits >> (width - 1)) & dtypes.max(bits_dtype))
    return key if width == 64 else key.cast(dtypes.int32)
  if x.dtype is dtypes.uint64: return (x ^ (1 << 63)).bitcast(dtypes.int64)
  if x.dtype is dtypes.int64: return x
  if x.dtype is dtypes.uint32: return (x.cast(dtypes.int64) - (1 << 31)).cast(dtypes.int32)
  return x.cast(dtypes.int32)


def order_keys(rows: Tensor, descending: bool) -> list[Tensor]:
  """The order keys of the last axis: [value key * 2**32 + position] (one int64 word) for a dtype of up to 32 bits,
  [value key, position] for a 64-bit one; ascending keys are the sort order (descending=True: largest first), equal
  values by position."""
  from tinycore.tensor import Tensor
  key = _value_key(rows)
  if descending: key = ~key
  position = Tensor.arange(rows.shape[-1], device=rows.device, dtype=dtypes.int64)
  if key.dtype is dtypes.int64: return [key, position.expand(rows.shape)]
  return [key.cast(dtypes.int64) * (1 << POSITION_BITS) + position]


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


def _exchange(keys: list[Tensor], payloads: list[Tensor], half: int,
              mirrored: bool) -> tuple[list[Tensor], list[Tensor]]:
  """One compare-exchange stage: each pair of partners is put in ascending key order (the lower place, bit `half`
  of i clear, keeps the smaller key); payloads follow their keys. Every output realized: fused, a chain of stages
  re-reads its input 2**stages times."""
  from tinycore.tensor import Tensor
  n = keys[0].shape[-1]
  partners = [_partner(k, half, mirrored) for k in keys]
  lower = (Tensor.arange(n, device=keys[0].device, dtype=dtypes.int32) & half) == 0
  keep = lower == _precedes(keys, partners)
  new_keys = [keep.where(k, p).contiguous() for k, p in zip(keys, partners)]
  return new_keys, [keep.where(t, _partner(t, half, mirrored)).contiguous() for t in payloads]


def bitonic_sort(keys: list[Tensor], payloads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
  """keys (and payloads alike) sorted ascending along the last axis, padded to a power of two with keys that sort
  last: merges of sorted runs of 1, 2, 4, ... elements, each a mirrored stage and then stages of halving distance."""
  n = keys[0].shape[-1]
  size = 1 << (n - 1).bit_length()
  pad = ((0, 0),) * (keys[0].ndim - 1) + ((0, size - n),)
  keys, payloads = [k.pad(pad, value=LAST_KEY) for k in keys], [t.pad(pad) for t in payloads]
  merge = 2
  while merge <= size:
    keys, payloads = _exchange(keys, payloads, merge // 2, True)
    half = merge // 4
    while half >= 1:
      keys, payloads = _exchange(keys, payloads, half, False)
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
  (one kernel: the passes read the row in turn, then each output slot picks its pass's key)."""
  from tinycore.tensor import Tensor
  slot = Tensor.arange(k, device=keys[0].device, dtype=dtypes.int32)
  found = _smallest(keys)
  picked = [f.expand(f.shape[:-1] + (k,)) for f in found]
  for j in range(1, k):
    found = _smallest(keys, _precedes(found, keys))
    picked = [(slot == j).where(f, p) for f, p in zip(found, picked)]
  return picked


def select_by_rank(keys: list[Tensor], k: int) -> list[Tensor]:
  """The k smallest keys of the last axis in ascending order by counting: each key's rank is the number of keys
  before it (m**2 compares), then slot s picks the key of rank s."""
  from tinycore.tensor import Tensor
  rank = _precedes([w.unsqueeze(-2) for w in keys], [w.unsqueeze(-1) for w in keys]).sum(-1, dtype=dtypes.int32)
  hit = rank.unsqueeze(-2) == Tensor.arange(k, device=keys[0].device, dtype=dtypes.int32).reshape(k, 1)
  return [hit.where(w.unsqueeze(-2), 0).sum(-1, dtype=dtypes.int64) for w in keys]


def _chunk_minima(keys: list[Tensor], chunk: int) -> list[Tensor]:
  """The smallest key of each chunk of `chunk` keys along the last axis (the last chunk filled up with LAST_KEY)."""
  n, lead = keys[0].shape[-1], keys[0].shape[:-1]
  count = -(-n // chunk)
  padded = [w.pad(((0, 0),) * len(lead) + ((0, count * chunk - n),), value=LAST_KEY) for w in keys]
  return [m.squeeze(-1) for m in _smallest([w.reshape(lead + (count, chunk)) for w in padded])]


def select_by_chunks(keys: list[Tensor], k: int, chunk: int) -> list[Tensor]:
  """The k smallest keys of the last axis in ascending order, through levels of chunk minima: level l + 1 holds the
  smallest key of each chunk of `chunk` keys of level l, down to a level of at most RANK_SELECT_MAX keys. The k
  smallest minima of a level lie in the chunks that hold the k smallest keys of the level below (a key outside them
  has k smaller minima before it), so from the top, each level's k smallest are picked among the k chunks below the
  last level's picks (gathers of k * chunk keys). A key's position names its chunk on every level."""
  from tinycore.tensor import Tensor
  levels = [keys]
  while levels[-1][0].shape[-1] > RANK_SELECT_MAX: levels.append(_chunk_minima(levels[-1], chunk))
  picked = smallest_keys(levels[-1], k)
  offsets = Tensor.arange(chunk, device=keys[0].device, dtype=dtypes.int32)
  for depth in range(len(levels) - 2, -1, -1):
    chunks = key_positions(picked) // chunk ** (depth + 1)  # (.., k): on level `depth + 1`
    reads = (chunks.unsqueeze(-1) * chunk + offsets).reshape(chunks.shape[:-1] + (k * chunk,))
    row = levels[depth]
    count = -(-row[0].shape[-1] // chunk) * chunk
    padded = [w.pad(((0, 0),) * (w.ndim - 1) + ((0, count - w.shape[-1]),), value=LAST_KEY) for w in row]
    picked = smallest_keys([w.gather(-1, reads) for w in padded], k)
  return picked


def smallest_keys(keys: list[Tensor], k: int) -> list[Tensor]:
  """The k smallest keys of the last axis in ascending order: by passes for a small k, by rank among few keys, in
  chunks on a device that gathers, else by a sort."""
  n = keys[0].shape[-1]
  if k <= TOPK_SELECT_MAX: return select_by_passes(keys, k)
  if n <= RANK_SELECT_MAX: return select_by_rank(keys, k)
  chunk = 1 << max(1, (RANK_SELECT_MAX // k).bit_length() - 1)  # k * chunk candidates: at most RANK_SELECT_MAX
  if reads_computed_addresses(keys[0].device) and k * chunk < n: return select_by_chunks(keys, k, chunk)
  return [w[..., :k] for w in bitonic_sort(keys, [])[0]]


def sorted_rows(rows: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
  """(values, int32 positions) of the last axis sorted (stable)."""
  n, keys = rows.shape[-1], order_keys(rows, descending)
  if isinstance(n, UOp) or n <= RANK_SORT_MAX:
    positions = rank_sort_positions(keys)
    return rows.gather(-1, positions), positions
  if reads_computed_addresses(rows.device):
    positions = key_positions(bitonic_sort(keys, [])[0])
    return rows.gather(-1, positions), positions
  keys, (values,) = bitonic_sort(keys, [rows])
  return values, key_positions(keys)


def selected_rows(rows: Tensor, k: int, largest: bool) -> tuple[Tensor, Tensor] | None:
  """(values, int32 positions) of the k largest (smallest) of the last axis in order, when selecting them beats a
  sort (a row longer than k, of a known length); None otherwise."""
  n = rows.shape[-1]
  if isinstance(n, UOp) or not 0 < k < n or (k > TOPK_SELECT_MAX and n <= RANK_SORT_MAX): return None
  positions = key_positions(smallest_keys(order_keys(rows, largest), k))
  return rows.gather(-1, positions), positions
