"""Devices: buffers, allocators, compilers, the device object (`Compiled`) and the `Device` registry."""
from tinycore.device.allocator import Allocator, BufferSpec, LRUAllocator
from tinycore.device.buffer import Buffer
from tinycore.device.compiled import Compiled, Compiler
from tinycore.device.registry import Device

__all__ = ["Allocator", "Buffer", "BufferSpec", "Compiled", "Compiler", "Device", "LRUAllocator"]
