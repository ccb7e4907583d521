"""tinycore.nn: model state (``tinycore.nn.state``: safetensors through the DISK device, state dicts)."""
