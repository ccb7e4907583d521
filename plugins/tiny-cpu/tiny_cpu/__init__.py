"""tiny-cpu: the tinycore CPU device. Kernels are rendered to C, compiled with clang or gcc and run in-process.

The plugin module (tiny_cpu.plugin) is cheap to import; the device (tiny_cpu.device) loads when "CPU" is opened.
"""
