"""tiny-disk: the tinycore DISK device. A tensor on "DISK:/abs/path" lives in that file (read and written with
preadv/pwrite, never mapped); DISK stores and moves bytes and never runs kernels.

The plugin module (tiny_disk.plugin) is cheap to import; the device (tiny_disk.device) loads when a DISK name is opened.
"""
