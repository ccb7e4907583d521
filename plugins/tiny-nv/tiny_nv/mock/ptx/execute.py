"""Run a decoded kernel over a grid: blocks are batched so that many blocks' threads run as one vector of lanes.

Scheduling: while every lane is at the same block the code runs unmasked; a branch that splits the lanes gives each
lane its own block index, and the lowest index runs next with a mask (lanes reconverge when the lagging ones reach
the leading ones; barriers end a block, so every lane reaches `bar.sync` before any runs past it). Memory: global
addresses are host addresses resolved through the driver's allocation table (an address outside every allocation is
an error, not a crash); shared memory is one zeroed array per batch, `shared_bytes` per block; local memory one
slice per lane.
"""
from __future__ import annotations
import time
import numpy as np
from tiny_nv.mock.ptx.parse import PTXError
from tiny_nv.mock.ptx.translate import DTYPES, WINDOWS, DecodedKernel

EXITED = 1 << 30
BATCH_THREADS = 1 << 15    # lanes run together: large enough to amortise Python, small enough for the cache
STEP_LIMIT = 10_000_000    # basic blocks one batch may run before it is declared stuck

class MemoryFault(PTXError):
  """A kernel touched memory outside every allocation, or misaligned memory (a real GPU faults too)."""

class ExecutionContext:
  """What generated code reaches through `X`: memory access for one batch of lanes, and the clock."""
  def __init__(self, memory, params: bytes, lanes: int, shared_bytes: int, block_of_lane, local_bytes: int,
               kernel_name: str):
    self.memory, self.params, self.lanes, self.kernel_name = memory, params, lanes, kernel_name
    self.shared_bytes = shared_bytes
    blocks = int(block_of_lane[-1]) + 1 if lanes else 0
    self.shared = np.zeros(max(blocks * shared_bytes, 16), np.uint8)
    self.shared_base = block_of_lane.astype(np.int64) * shared_bytes
    self.local_bytes = local_bytes
    self.local = np.zeros(max(lanes * local_bytes, 16), np.uint8)
    self.local_base = np.arange(lanes, dtype=np.int64) * local_bytes

  def globaltimer(self):
    return np.uint64(time.monotonic_ns())

  # ----- address resolution: (flat typed array, element index per active lane)
  def _locate(self, space: str, address, dtype, access_bytes: int, mask):
    address = np.asarray(address, dtype=np.int64)
    if space == "generic": space, address = self._generic_space(address, mask)
    if space == "global":
      if mask is not None: address = np.broadcast_to(address, (self.lanes,))[mask]
      if address.size == 0: return None, address
      low, high = int(address.min()), int(address.max()) + access_bytes
      buffer, base = self.memory.region(low, high, self.kernel_name)
      offset = address - base
    else:
      window, base = (self.shared, self.shared_base) if space == "shared" else (self.local, self.local_base)
      limit = self.shared_bytes if space == "shared" else self.local_bytes
      if mask is not None:
        address = np.broadcast_to(address, (self.lanes,))[mask]
        base = base[mask]
      if address.size and (int(address.min()) < 0 or int(address.max()) + access_bytes > limit):
        raise MemoryFault(f"kernel {self.kernel_name}: {space} address {int(address.max()):#x} out of range "
                          f"(0..{limit:#x})")
      buffer, offset = window, address + base
    itemsize = np.dtype(dtype).itemsize
    if np.any(offset & (min(access_bytes, 16) - 1)):
      raise MemoryFault(f"kernel {self.kernel_name}: misaligned {access_bytes}-byte {space} access")
    return buffer.view(dtype), offset // itemsize

  def _generic_space(self, address, mask):
    active = address if mask is None else np.broadcast_to(address, (self.lanes,))[mask]
    if active.size == 0 or int(active.max()) < WINDOWS["shared"]: return "global", address
    if int(active.min()) >= WINDOWS["local"]: return "local", address - WINDOWS["local"]
    if int(active.min()) >= WINDOWS["shared"] and int(active.max()) < WINDOWS["local"]:
      return "shared", address - WINDOWS["shared"]
    raise MemoryFault(f"kernel {self.kernel_name}: one generic access mixes global, shared and local addresses")

  def _expand(self, values, dtype, mask):
    out = np.zeros(self.lanes, dtype)
    out[mask] = values
    return out

  def load(self, space: str, address, dtype, width: int, mask):
    """ld: `width` consecutive elements per lane (a tuple when width > 1); inactive lanes read 0."""
    if space == "param":
      values = np.frombuffer(self.params, dtype, width, address)
      return values[0] if width == 1 else tuple(values)
    if mask is not None and np.ndim(mask) == 0: mask = None if mask else np.zeros(self.lanes, bool)
    typed, index = self._locate(space, address, dtype, np.dtype(dtype).itemsize * width, mask)
    values = [typed[index + k] if typed is not None else np.zeros(0, dtype) for k in range(width)]
    if mask is not None: values = [self._expand(v, dtype, mask) for v in values]
    return values[0] if width == 1 else values

  def store(self, space: str, address, dtype, values: tuple, mask) -> None:
    """st: each lane writes its `values`; a uniform address takes the last active lane's value."""
    if mask is not None and np.ndim(mask) == 0:
      if not mask: return
      mask = None
    typed, index = self._locate(space, address, dtype, np.dtype(dtype).itemsize * len(values), mask)
    if typed is None: return
    for k, value in enumerate(values):
      value = np.asarray(value).astype(dtype, copy=False)
      if mask is not None and value.ndim: value = value[mask]
      if index.ndim == 0 and value.ndim: value = value[-1]
      typed[index + k] = value

  def atomic(self, space: str, address, dtype, op: str, operands: tuple, mask):
    """atom/red: applied lane by lane in lane order; returns each lane's old value."""
    if mask is not None and np.ndim(mask) == 0: mask = None if mask else np.zeros(self.lanes, bool)
    lane_mask = np.ones(self.lanes, bool) if mask is None else mask
    typed, index = self._locate(space, address, dtype, np.dtype(dtype).itemsize, mask)
    index = np.broadcast_to(index, (int(lane_mask.sum()),))
    operands = [np.broadcast_to(np.asarray(o).astype(dtype), (self.lanes,))[lane_mask] for o in operands]
    old = np.zeros(len(index), dtype)
    for i, slot in enumerate(index.tolist()):
      current = typed[slot]
      old[i] = current
      typed[slot] = _atomic_result(op, current, [o[i] for o in operands], dtype)
    return self._expand(old, dtype, lane_mask)

def _atomic_result(op: str, current, operands: list, dtype):
  value = operands[0]
  if op == "add": return current + value
  if op == "min": return min(current, value)
  if op == "max": return max(current, value)
  if op == "exch": return value
  if op == "cas": return operands[1] if current == value else current
  if op in ("and", "or", "xor"): return {"and": current & value, "or": current | value, "xor": current ^ value}[op]
  if op == "inc": return dtype(0) if current >= value else current + dtype(1)
  if op == "dec": return value if current == 0 or current > value else current - dtype(1)
  raise PTXError(f"unsupported atomic operation {op}")

def run_batch(kernel: DecodedKernel, registers: list, context: ExecutionContext) -> int:
  """Run every lane of one batch to its exit; returns the number of instructions issued (per lane group)."""
  blocks, lanes = kernel.blocks, context.lanes
  current, lane_block, issued = 0, None, 0
  for _ in range(STEP_LIMIT):
    if lane_block is None:   # all lanes together
      block = blocks[current]
      block.run(registers, context)
      issued += block.instruction_count
      end = block.terminator
      taken = True
      if end.guard >= 0:
        predicate = registers[end.guard]
        predicate = ~predicate if end.negated else predicate
        if np.ndim(predicate) and predicate.any() and not predicate.all():
          lane_block = np.where(predicate, EXITED if end.kind == "exit" else end.target, end.next).astype(np.int32)
          continue
        taken = bool(np.all(predicate))
      if end.kind == "exit" and taken: return issued
      current = end.target if end.kind == "jump" and taken else end.next
      continue
    current = int(lane_block.min())
    if current == EXITED: return issued
    mask = lane_block == current
    if mask.all():
      lane_block = None
      continue
    block = blocks[current]
    block.run_masked(registers, mask, context)
    issued += block.instruction_count
    end = block.terminator
    destination = EXITED if end.kind == "exit" else end.target
    if end.guard < 0:
      lane_block[mask] = destination if end.kind in ("exit", "jump") else end.next
      continue
    predicate = np.broadcast_to(registers[end.guard], (lanes,))
    predicate = ~predicate if end.negated else predicate
    lane_block[mask & predicate] = destination
    lane_block[mask & ~predicate] = end.next
  raise PTXError(f"kernel {kernel.name}: more than {STEP_LIMIT} blocks run in one batch (an endless loop?)")

def launch(kernel: DecodedKernel, memory, grid: tuple, block: tuple, dynamic_shared_bytes: int, params: bytes) -> int:
  """Run `kernel` over `grid` x `block` threads with the packed `params`; returns the instructions issued."""
  grid, block = tuple(int(g) for g in grid), tuple(int(b) for b in block)
  if len(grid) != 3 or len(block) != 3 or min(grid + block) < 1:
    raise ValueError(f"launch of {kernel.name}: grid {grid} and block {block} must be three positive sizes")
  if block[0] * block[1] * block[2] > 1024:
    raise ValueError(f"launch of {kernel.name}: {block} is more than 1024 threads per block")
  needed = max((p.offset + p.size for p in kernel.params), default=0)
  if len(params) < needed:
    raise ValueError(f"launch of {kernel.name}: parameter buffer has {len(params)} bytes, the kernel reads {needed}")
  threads = block[0] * block[1] * block[2]
  total_blocks = grid[0] * grid[1] * grid[2]
  per_batch = max(1, BATCH_THREADS // threads)
  shared_bytes = -(-(kernel.shared_size + dynamic_shared_bytes) // 16) * 16
  lane_in_block = np.arange(threads * per_batch, dtype=np.int64) % threads
  issued = 0
  with np.errstate(all="ignore"):
    for first in range(0, total_blocks, per_batch):
      count = min(per_batch, total_blocks - first)
      lanes = count * threads
      block_of_lane = np.repeat(np.arange(count, dtype=np.int64), threads)
      context = ExecutionContext(memory, bytes(params), lanes, shared_bytes, block_of_lane, kernel.local_size,
                                 kernel.name)
      registers = [np.zeros((), DTYPES[t])[()] for t in kernel.slot_types]
      _set_special_registers(kernel, registers, grid, block, lane_in_block[:lanes], block_of_lane + first)
      issued += run_batch(kernel, registers, context)
  return issued

def _set_special_registers(kernel: DecodedKernel, registers: list, grid: tuple, block: tuple, lane_in_block,
                           block_id) -> None:
  values = {"%ntid.x": block[0], "%ntid.y": block[1], "%ntid.z": block[2], "%nctaid.x": grid[0],
            "%nctaid.y": grid[1], "%nctaid.z": grid[2], "%warpsize": 32, "%nsmid": 132, "%smid": 0, "%gridid": 0,
            "%nwarpid": 64,
            "%tid.x": lane_in_block % block[0], "%tid.y": lane_in_block // block[0] % block[1],
            "%tid.z": lane_in_block // (block[0] * block[1]), "%ctaid.x": block_id % grid[0],
            "%ctaid.y": block_id // grid[0] % grid[1], "%ctaid.z": block_id // (grid[0] * grid[1]),
            "%laneid": lane_in_block % 32, "%warpid": lane_in_block // 32}
  for name, slot in kernel.special_slots.items():
    value = values[name]
    registers[slot] = value.astype(np.uint32) if isinstance(value, np.ndarray) else np.uint32(value)
