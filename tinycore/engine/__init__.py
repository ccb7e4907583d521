"""The engine: realize tensors (schedule, compile, run) and rebind them to their buffers."""
