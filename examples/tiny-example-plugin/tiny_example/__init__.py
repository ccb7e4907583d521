"""tiny-example: a complete, minimal third-party tinycore device ("EXAMPLE"), written against tinycore.plugin only.

The plugin module (tiny_example.plugin) is cheap to import; the device (tiny_example.device) loads when it is opened.
"""
