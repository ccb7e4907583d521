"""HCQ2: hardware command queues, shared by every device that runs work from queues (CPU workers, GPUs).

A device is fast when the host writes command buffers into its queues and the device runs them with the host out
of the loop: kernels on a compute queue, copies on a copy (DMA) queue, ordered by 64-bit signals. This package is
that runtime; a device plugs in by subclassing `HCQDevice` and giving each queue one method per command.

The device side of the contract (what a plugin implements), see `tinycore.hcq.device`:
  - `queues`: {"compute": HWQueue, "copy": HWQueue (only when `has_copy_queue`)};
  - one `HWQueue` method per abstract command (`tinycore.hcq.commands`): `exec`, `copy`, `signal`, `wait`,
    `timestamp`, `barrier`, each writing the command in the device's own format to a `CommandWriter` (a run-time
    value becomes a patch); `HWQueue.encode` (generic) dispatches to them;
  - `HWQueue.submit(encoded, values)`: patch those values in, write the commands into the ring, ring the doorbell;
  - an allocator `_map(buffer)` for memory its queues address in place: `host_devs` and the core's host kind
    ("PYTHON", where the staging ring lives, always), and other queue devices; `device_address(buffer)` (generic)
    reads the address from that cached mapping;
  - signal memory: `tinycore.hcq.signal.Signal`, 64-bit words the host and the device both see.

The generic side (this package): `compile_linear` turns a LINEAR of calls into per-device, per-queue command
batches with signal waits for every read-after-write, write-after-read and write-after-write between queues
(`tinycore.hcq.runtime`), stages copies between a device and host memory it cannot address through a pinned ring
(`tinycore.hcq.staging`), and replays a compiled batch by patching only input addresses and variables.
"""
from tinycore.hcq.commands import Barrier, Copy, Exec, SignalStore, SignalWait, Timestamp
from tinycore.hcq.device import CommandWriter, Encoded, HCQDevice, HCQTimeoutError, HWQueue, is_hcq_device
from tinycore.hcq.signal import Signal

__all__ = ["Barrier", "CommandWriter", "Copy", "Encoded", "Exec", "HCQDevice", "HCQTimeoutError", "HWQueue", "Signal",
           "SignalStore", "SignalWait", "Timestamp", "is_hcq_device"]
