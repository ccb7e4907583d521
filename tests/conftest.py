import os
os.environ.setdefault("TINYCORE_SPEC", "1")
