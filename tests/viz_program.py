"""A small program for the VIZ tests: an elementwise chain, a matmul with a reduce, and a copy to a second device.

    python tests/viz_program.py [DEVICE]      # DEVICE: where the copy goes (default SIM, else PYTHON)
It prints its arguments and its result, so a test can check what ran.
"""
import sys
import numpy as np
from tinycore import Device, Tensor

EXPECTED_COPY_BYTES = 4 * 4  # four float32 row sums cross devices


def copy_target() -> str:
  """SIM (the simulated queue device, with a copy queue) when installed, else the built-in PYTHON device."""
  return "SIM" if "SIM" in {spec.prefix for spec in Device.specs()} else "PYTHON"


def run(target: str) -> np.ndarray:
  a = Tensor.arange(16).reshape(4, 4).float()
  b = (a * 2 + 1).relu()
  rows = (b @ a).sum(axis=1)
  return (rows.to(target) + 1).numpy()


def expected() -> np.ndarray:
  a = np.arange(16, dtype=np.float32).reshape(4, 4)
  return (np.maximum(a * 2 + 1, 0) @ a).sum(axis=1) + 1


if __name__ == "__main__":
  print("argv", sys.argv[1:], flush=True)
  print("result", run(sys.argv[1] if len(sys.argv) > 1 else copy_target()).tolist(), flush=True)
