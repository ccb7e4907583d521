"""HCQ2: hardware command queues, shared by every device that runs work from queues (CPU workers, GPUs).

A device is fast when the host writes command buffers into its queues and the device runs them with the host out
of the loop: kernels on a compute queue, copies on a copy (DMA) queue, ordered by 64-bit signals. This package is
that runtime; a device plugs in by subclassing `HCQDevice` and giving each queue an `encode`/`submit`.

The device side of the contract (what a plugin implements), see `tinycore.hcq.device`:
  - `queues`: {"compute": HWQueue, "copy": HWQueue (only when `has_copy_queue`)};
  - `HWQueue.encode(commands) -> Encoded`: the abstract commands (`tinycore.hcq.commands`: Exec, Copy, SignalStore,
    SignalWait, Timestamp, Barrier) in the device's own command format, plus where each run-time value goes;
  - `HWQueue.submit(encoded, values)`: patch those values in, write the commands into the ring, ring the doorbell;
  - `device_address(buffer)`: the address the queues use for a Buffer of this device or of a host kind it can
    address in place (`host_devs`; the core's host kind, "PYTHON", where the staging ring lives, always);
  - signal memory: `tinycore.hcq.signal.Signal`, 64-bit words the host and the device both see.

The generic side (this package): `compile_linear` turns a LINEAR of calls into per-device, per-queue command
batches with signal waits for every read-after-write, write-after-read and write-after-write between queues
(`tinycore.hcq.runtime`), stages copies between a device and host memory it cannot address through a pinned ring
(`tinycore.hcq.staging`), and replays a compiled batch by patching only input addresses and variables.
"""
from tinycore.hcq.commands import Barrier, Copy, Exec, SignalStore, SignalWait, Timestamp
from tinycore.hcq.device import Encoded, HCQDevice, HCQTimeoutError, HWQueue, is_hcq_device
from tinycore.hcq.signal import Signal

__all__ = ["Barrier", "Copy", "Encoded", "Exec", "HCQDevice", "HCQTimeoutError", "HWQueue", "Signal", "SignalStore",
           "SignalWait", "Timestamp", "is_hcq_device"]
