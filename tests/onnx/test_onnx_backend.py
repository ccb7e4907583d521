"""onnx's own backend test suite (node, simple, pytorch-converted, pytorch-operator and light model cases) run on
tinycore; what is excluded, and why, is in exclusions.py alone. The counts are printed at the end of the run."""
import onnx.backend.test
from onnx_backend import TinycoreBackend
from exclusions import EXCLUDED

backend_test = onnx.backend.test.BackendTest(TinycoreBackend, __name__)
for pattern, _reason in EXCLUDED: backend_test.exclude(pattern)
globals().update(backend_test.test_cases)
