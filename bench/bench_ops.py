"""Common neural-network ops at realistic sizes: tinycore's time and torch's (CPU) when torch is importable, and
their ratio. Asserts nothing. Written to find performance cliffs (an op 10x-1000x slower than it should be), not
to tune kernels: each time is the best of a few runs of realize + read back, after one warm-up run.

    python bench/bench_ops.py [substring ...]     # only the rows whose name contains one of the substrings

Measured on the 2-core CI VM (session 11, clang, torch 2.13 with 2 threads; noisy): before the fixes of that
session an embedding lookup took 1.3 s (1000x torch), sdpa 264 ms (34x), conv_transpose2d 15 s; after: 2.3 ms,
4.5-7.5 ms (0.7x), 46 ms. Session 12 (torch 2.14): cumsum 9.6 -> 1.5 ms (3.8x: the block carry was a scan
recomputed per element; scan blocks are strips of outputs), sort 21 -> 10.5 ms (2x), cat 3.5 -> 2.0 ms and reflect
pad 3.0 -> 1.1 ms (each element read every piece's gated load; now one loop per piece), topk 50 of 50000 108 -> 3 ms
(chunks, then candidates). Still slow: topk of k <= 16 (~16x: k selection passes of a few kernels each),
depthwise conv (~10x), cross entropy (~6x), interpolate (~3x); the times include reading the result back.
"""
from __future__ import annotations
import sys
import time
from typing import Any, Callable
import numpy as np


def best_seconds(fn: Callable[[], Any], runs: int = 3) -> float:
  fn()
  best = float("inf")
  for _ in range(runs):
    start = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - start)
  return best


def cases(rng: np.random.Generator) -> list[tuple[str, Callable, Callable, list[np.ndarray]]]:
  def normal(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)
  x56, x112 = normal(8, 64, 56, 56), normal(8, 64, 112, 112)
  q = normal(8, 8, 256, 64)
  table, ids = normal(50000, 512), rng.integers(0, 50000, (64, 128)).astype(np.int32)
  labels = rng.integers(0, 1000, 512).astype(np.int32)
  return [
    ("conv2d 3x3 (8,64,56,56)", lambda a, w: a.conv2d(w, padding=1), "conv2d", [x56, normal(64, 64, 3, 3)]),
    ("depthwise conv 3x3 (8,64,56,56)", lambda a, w: a.conv2d(w, groups=64, padding=1), "depthwise",
     [x56, normal(64, 1, 3, 3)]),
    ("conv_transpose2d 7x7 s2 (4,16,56,56)", lambda a, w: a.conv_transpose2d(w, stride=2, padding=1), "convt",
     [normal(4, 16, 56, 56), normal(16, 64, 7, 7)]),
    ("max_pool2d 3x3 s2 (8,64,112,112)", lambda a: a.max_pool2d(kernel_size=3, stride=2, padding=1), "maxpool",
     [x112]),
    ("interpolate x2 bilinear (8,64,56,56)", lambda a: a.interpolate((112, 112), mode="linear"), "bilinear", [x56]),
    ("pad reflect (8,64,56,56)", lambda a: a.pad((2, 2, 2, 2), mode="reflect"), "reflect", [x56]),
    ("scaled_dot_product_attention (8,8,256,64)", lambda a, b, c: a.scaled_dot_product_attention(b, c), "sdpa",
     [q, q, q]),
    ("layernorm (4096,1024)", lambda a: a.layernorm(), "layernorm", [normal(4096, 1024)]),
    ("embedding lookup (64,128) in 50000x512", lambda w, i: w[i], "embedding", [table, ids]),
    ("cross entropy (512,1000)", lambda a, lab: a.sparse_categorical_crossentropy(lab), "xent",
     [normal(512, 1000), labels]),
    ("cumsum (1024,1024) axis 1", lambda a: a.cumsum(1), "cumsum", [normal(1024, 1024)]),
    ("sort (256,1024)", lambda a: a.sort(1)[0], "sort", [normal(256, 1024)]),
    ("topk 10 (256,1024)", lambda a: a.topk(10)[0], "topk", [normal(256, 1024)]),
    ("topk 50 (4,50000): sampling logits", lambda a: a.topk(50)[0], "topk50", [normal(4, 50000)]),
    ("cat 4x(1024,1024) dim 1", lambda a, b, c, d: a.cat(b, c, d, dim=1), "cat", [normal(1024, 1024)] * 4),
  ]


def torch_op(torch: Any, name: str) -> Callable:
  functional = torch.nn.functional
  return {"conv2d": lambda a, w: functional.conv2d(a, w, padding=1),
          "depthwise": lambda a, w: functional.conv2d(a, w, groups=64, padding=1),
          "convt": lambda a, w: functional.conv_transpose2d(a, w, stride=2, padding=1),
          "maxpool": lambda a: functional.max_pool2d(a, 3, 2, 1),
          "bilinear": lambda a: functional.interpolate(a, size=(112, 112), mode="bilinear"),
          "reflect": lambda a: functional.pad(a, (2, 2, 2, 2), mode="reflect"),
          "sdpa": lambda a, b, c: functional.scaled_dot_product_attention(a, b, c),
          "layernorm": lambda a: functional.layer_norm(a, (a.shape[-1],)),
          "embedding": lambda w, i: functional.embedding(i.long(), w),
          "xent": lambda a, lab: functional.cross_entropy(a, lab.long()),
          "cumsum": lambda a: a.cumsum(1), "sort": lambda a: a.sort(1)[0], "topk": lambda a: a.topk(10)[0],
          "topk50": lambda a: a.topk(50)[0],
          "cat": lambda a, b, c, d: torch.cat([a, b, c, d], 1)}[name]


def main() -> None:
  from tinycore import Tensor
  try:
    import torch
    torch.set_num_threads(2)
  except ImportError: torch = None
  wanted = sys.argv[1:]
  print(f"{'op':44s} {'tinycore ms':>12s} {'torch ms':>10s} {'ratio':>8s}")
  for name, ours, torch_name, inputs in cases(np.random.default_rng(0)):
    if wanted and not any(w in name for w in wanted): continue
    tensors = [Tensor(a).realize() for a in inputs]
    ours_s = best_seconds(lambda: ours(*tensors).realize().numpy())
    line = f"{name:44s} {ours_s * 1e3:12.2f}"
    if torch is not None:
      theirs = [torch.tensor(a) for a in inputs]
      fn = torch_op(torch, torch_name)
      torch_s = best_seconds(lambda: fn(*theirs).numpy())
      line += f" {torch_s * 1e3:10.2f} {ours_s / torch_s:7.1f}x"
    print(line, flush=True)


if __name__ == "__main__":
  main()
