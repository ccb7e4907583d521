"""Common neural-network ops at realistic sizes, family by family: tinycore's time and torch's (CPU) when torch is
importable, and their ratio. Asserts nothing. Written to find performance cliffs (an op 10x-1000x slower than it
should be), not to tune kernels: each time is the best of 10 runs of the op on inputs already in memory (tinycore:
realize() and a device synchronize, so the kernels ended; torch: the eager call), after one warm-up run (which
compiles). Reading the result back is not timed: torch's .numpy() is a view, tinycore's a copy.

    python bench/bench_ops.py [substring ...]     # only the rows whose name (or family) contains one of them
    BEAM=2 python bench/bench_ops.py matmul      # with the kernel search (its first run searches; timed runs after)

History (2-core CI VM, clang, torch with 2 threads; noisy): session 11 fixed an embedding lookup at 1.3 s (1000x
torch), sdpa 264 ms (34x), conv_transpose2d 15 s; session 12 cumsum 9.6 -> 1.5 ms, sort 21 -> 10.5 ms, cat 3.5 ->
2.0 ms, reflect pad 3.0 -> 1.1 ms, topk 50 of 50000 108 -> 3 ms. Session 16 (issue 27): see the README's table.
"""
from __future__ import annotations
import sys
import time
from typing import Any, Callable
import numpy as np


def best_seconds(fn: Callable[[], Any], runs: int = 10) -> float:
  fn()
  best = float("inf")
  for _ in range(runs):
    start = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - start)
  return best


# (family, name, tinycore fn, (torch module, torch.nn.functional) -> torch fn, inputs)
Case = tuple[str, str, Callable, Callable, list]


def cases(rng: np.random.Generator) -> list[Case]:
  def normal(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)
  def ints(high: int, *shape: int) -> np.ndarray: return rng.integers(0, high, shape).astype(np.int32)
  x56, x112, x28 = normal(8, 64, 56, 56), normal(8, 64, 112, 112), normal(8, 256, 28, 28)
  q, m = normal(8, 8, 256, 64), normal(4096, 1024)
  table, ids = normal(50000, 512), ints(50000, 64, 128)
  bn = [normal(64), normal(64), normal(64), np.abs(normal(64)) + 0.5]
  index64 = ints(1024, 4096, 64)
  return [
    ("matmul", "matmul 256", lambda a, b: a @ b, lambda t, F: lambda a, b: a @ b, [normal(256, 256)] * 2),
    ("matmul", "matmul 1024", lambda a, b: a @ b, lambda t, F: lambda a, b: a @ b, [normal(1024, 1024)] * 2),
    ("matmul", "batched matmul 16x(256x256)", lambda a, b: a @ b, lambda t, F: lambda a, b: a @ b,
     [normal(16, 256, 256)] * 2),
    ("matmul", "x @ w.T (512,1024)x(1024,1024)", lambda a, w: a @ w.T, lambda t, F: lambda a, w: a @ w.T,
     [normal(512, 1024), normal(1024, 1024)]),
    ("matmul", "einsum bij,bjk->bik 16x(128,256,128)", lambda a, b: Tensor_einsum("bij,bjk->bik", a, b),
     lambda t, F: lambda a, b: t.einsum("bij,bjk->bik", a, b), [normal(16, 128, 256), normal(16, 256, 128)]),
    ("conv", "conv2d 3x3 (8,64,56,56)", lambda a, w: a.conv2d(w, padding=1),
     lambda t, F: lambda a, w: F.conv2d(a, w, padding=1), [x56, normal(64, 64, 3, 3)]),
    ("conv", "conv2d 3x3 stride 2 (8,64,56,56)", lambda a, w: a.conv2d(w, padding=1, stride=2),
     lambda t, F: lambda a, w: F.conv2d(a, w, padding=1, stride=2), [x56, normal(128, 64, 3, 3)]),
    ("conv", "conv2d 1x1 (8,256,28,28) -> 256", lambda a, w: a.conv2d(w), lambda t, F: lambda a, w: F.conv2d(a, w),
     [x28, normal(256, 256, 1, 1)]),
    ("conv", "conv2d 3x3 dilation 2 (8,64,56,56)", lambda a, w: a.conv2d(w, padding=2, dilation=2),
     lambda t, F: lambda a, w: F.conv2d(a, w, padding=2, dilation=2), [x56, normal(64, 64, 3, 3)]),
    ("conv", "depthwise conv 3x3 (8,64,56,56)", lambda a, w: a.conv2d(w, groups=64, padding=1),
     lambda t, F: lambda a, w: F.conv2d(a, w, groups=64, padding=1), [x56, normal(64, 1, 3, 3)]),
    ("conv", "conv1d k3 (8,128,1024)", lambda a, w: a.conv2d(w, padding=1),
     lambda t, F: lambda a, w: F.conv1d(a, w, padding=1), [normal(8, 128, 1024), normal(128, 128, 3)]),
    ("conv", "conv_transpose2d 7x7 s2 (4,16,56,56)", lambda a, w: a.conv_transpose2d(w, stride=2, padding=1),
     lambda t, F: lambda a, w: F.conv_transpose2d(a, w, stride=2, padding=1), [normal(4, 16, 56, 56),
                                                                              normal(16, 64, 7, 7)]),
    ("pool", "max_pool2d 3x3 s2 (8,64,112,112)", lambda a: a.max_pool2d(kernel_size=3, stride=2, padding=1),
     lambda t, F: lambda a: F.max_pool2d(a, 3, 2, 1), [x112]),
    ("pool", "avg_pool2d 2x2 (8,64,112,112)", lambda a: a.avg_pool2d(kernel_size=2),
     lambda t, F: lambda a: F.avg_pool2d(a, 2), [x112]),
    ("resize", "interpolate x2 bilinear (8,64,56,56)", lambda a: a.interpolate((112, 112), mode="linear"),
     lambda t, F: lambda a: F.interpolate(a, size=(112, 112), mode="bilinear"), [x56]),
    ("resize", "interpolate x2 nearest (8,64,56,56)", lambda a: a.interpolate((112, 112), mode="nearest"),
     lambda t, F: lambda a: F.interpolate(a, size=(112, 112), mode="nearest"), [x56]),
    ("pad", "pad reflect (8,64,56,56)", lambda a: a.pad((2, 2, 2, 2), mode="reflect"),
     lambda t, F: lambda a: F.pad(a, (2, 2, 2, 2), mode="reflect"), [x56]),
    ("pad", "pad replicate (8,64,56,56)", lambda a: a.pad((2, 2, 2, 2), mode="replicate"),
     lambda t, F: lambda a: F.pad(a, (2, 2, 2, 2), mode="replicate"), [x56]),
    ("attention", "scaled_dot_product_attention (8,8,256,64)", lambda a, b, c: a.scaled_dot_product_attention(b, c),
     lambda t, F: lambda a, b, c: F.scaled_dot_product_attention(a, b, c), [q, q, q]),
    ("attention", "sdpa causal (8,8,256,64)", lambda a, b, c: a.scaled_dot_product_attention(b, c, is_causal=True),
     lambda t, F: lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), [q, q, q]),
    ("norm", "layernorm (4096,1024)", lambda a: a.layernorm(), lambda t, F: lambda a: F.layer_norm(a, (a.shape[-1],)),
     [m]),
    ("norm", "batchnorm eval (8,64,56,56)", lambda a, w, b, mean, var: a.batchnorm(w, b, mean, (var + 1e-5).rsqrt()),
     lambda t, F: lambda a, w, b, mean, var: F.batch_norm(a, mean, var, w, b, eps=1e-5), [x56, *bn]),
    ("norm", "rms norm (4096,1024)", lambda a: a * (a.square().mean(-1, keepdim=True) + 1e-6).rsqrt(),
     lambda t, F: lambda a: F.rms_norm(a, (a.shape[-1],), eps=1e-6), [m]),
    ("softmax", "softmax (4096,1024)", lambda a: a.softmax(-1), lambda t, F: lambda a: a.softmax(-1), [m]),
    ("softmax", "log_softmax (4096,1024)", lambda a: a.log_softmax(-1), lambda t, F: lambda a: a.log_softmax(-1), [m]),
    ("loss", "cross entropy (512,1000)", lambda a, lab: a.sparse_categorical_crossentropy(lab),
     lambda t, F: lambda a, lab: F.cross_entropy(a, lab.long()), [normal(512, 1000), ints(1000, 512)]),
    ("loss", "binary cross entropy logits (4096,1024)", lambda a, y: a.binary_crossentropy_logits(y),
     lambda t, F: lambda a, y: F.binary_cross_entropy_with_logits(a, y),
     [m, (normal(4096, 1024) > 0).astype(np.float32)]),
    ("reduce", "sum axis 0 (4096,1024)", lambda a: a.sum(0), lambda t, F: lambda a: a.sum(0), [m]),
    ("reduce", "argmax axis 1 (4096,1024)", lambda a: a.argmax(1), lambda t, F: lambda a: a.argmax(1), [m]),
    ("reduce", "var axis 1 (4096,1024)", lambda a: a.var(1), lambda t, F: lambda a: a.var(1), [m]),
    ("index", "embedding lookup (64,128) in 50000x512", lambda w, i: w[i],
     lambda t, F: lambda w, i: F.embedding(i.long(), w), [table, ids]),
    ("index", "gather dim 1 (4096,1024) by (4096,64)", lambda a, i: a.gather(1, i),
     lambda t, F: lambda a, i: a.gather(1, i.long()), [m, index64]),
    ("index", "scatter dim 1 (4096,1024) from (4096,64)", lambda a, i, s: a.scatter(1, i, s),
     lambda t, F: lambda a, i, s: a.scatter(1, i.long(), s), [m, index64, normal(4096, 64)]),
    ("index", "scatter_reduce sum (4096,1024)", lambda a, i, s: a.scatter_reduce(1, i, s, "sum"),
     lambda t, F: lambda a, i, s: a.scatter_reduce(1, i.long(), s, "sum"), [m, index64, normal(4096, 64)]),
    ("index", "masked_fill (4096,1024)", lambda a, k: a.masked_fill(k, 0.0),
     lambda t, F: lambda a, k: a.masked_fill(k, 0.0), [m, normal(4096, 1024) > 0]),
    ("scan", "cumsum (1024,1024) axis 1", lambda a: a.cumsum(1), lambda t, F: lambda a: a.cumsum(1),
     [normal(1024, 1024)]),
    ("scan", "cummax (1024,1024) axis 1", lambda a: a.cummax(1)[0], lambda t, F: lambda a: a.cummax(1)[0],
     [normal(1024, 1024)]),
    ("scan", "cummax indices (1024,1024) axis 1", lambda a: a.cummax(1)[1], lambda t, F: lambda a: a.cummax(1)[1],
     [normal(1024, 1024)]),
    ("scan", "logcumsumexp (1024,1024) axis 1", lambda a: a.logcumsumexp(1), lambda t, F: lambda a: a.logcumsumexp(1),
     [normal(1024, 1024)]),
    ("sort", "sort (256,1024)", lambda a: a.sort(1)[0], lambda t, F: lambda a: a.sort(1)[0], [normal(256, 1024)]),
    ("sort", "topk 10 (256,1024)", lambda a: a.topk(10)[0], lambda t, F: lambda a: a.topk(10)[0],
     [normal(256, 1024)]),
    ("sort", "topk 50 (4,50000): sampling logits", lambda a: a.topk(50)[0], lambda t, F: lambda a: a.topk(50)[0],
     [normal(4, 50000)]),
    ("sort", "topk 5 (4,50000)", lambda a: a.topk(5)[0], lambda t, F: lambda a: a.topk(5)[0], [normal(4, 50000)]),
    ("sort", "argsort descending (256,1024)", lambda a: a.argsort(1, descending=True),
     lambda t, F: lambda a: a.argsort(1, descending=True), [normal(256, 1024)]),
    ("sort", "sort (8,16384): long rows", lambda a: a.sort(1)[0], lambda t, F: lambda a: a.sort(1)[0],
     [normal(8, 16384)]),
    ("movement", "cat 4x(1024,1024) dim 1", lambda a, b, c, d: a.cat(b, c, d, dim=1),
     lambda t, F: lambda a, b, c, d: t.cat([a, b, c, d], 1), [normal(1024, 1024)] * 4),
    ("movement", "cat 4x(1024,1024) dim 0", lambda a, b, c, d: a.cat(b, c, d, dim=0),
     lambda t, F: lambda a, b, c, d: t.cat([a, b, c, d], 0), [normal(1024, 1024)] * 4),
    ("movement", "pad rows only (8,64,56,56)", lambda a: a.pad((0, 0, 1, 1)),
     lambda t, F: lambda a: F.pad(a, (0, 0, 1, 1)), [x56]),
    ("movement", "stack 4x(1024,1024)", lambda a, b, c, d: a.stack(b, c, d),
     lambda t, F: lambda a, b, c, d: t.stack([a, b, c, d]), [normal(1024, 1024)] * 4),
    ("movement", "transpose (4096,1024)", lambda a: a.T.contiguous(), lambda t, F: lambda a: a.T.contiguous(), [m]),
    ("movement", "repeat (1024,1024) x(2,2)", lambda a: a.repeat(2, 2), lambda t, F: lambda a: a.repeat(2, 2),
     [normal(1024, 1024)]),
    ("elementwise", "gelu (4096,1024)", lambda a: a.gelu(), lambda t, F: lambda a: F.gelu(a, approximate="tanh"),
     [m]),
    ("elementwise", "sigmoid (4096,1024)", lambda a: a.sigmoid(), lambda t, F: lambda a: a.sigmoid(), [m]),
    ("elementwise", "where (4096,1024)", lambda c, a, b: c.where(a, b), lambda t, F: lambda c, a, b: t.where(c, a, b),
     [normal(4096, 1024) > 0, m, normal(4096, 1024)]),
  ]


def Tensor_einsum(formula: str, *operands: Any) -> Any:
  from tinycore import Tensor
  return Tensor.einsum(formula, *operands)


def main() -> None:
  from tinycore import Device, Tensor
  try:
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(2)
  except ImportError: torch = F = None
  wanted = sys.argv[1:]
  print(f"{'op':46s} {'tinycore ms':>12s} {'torch ms':>10s} {'ratio':>8s}")
  for family, name, ours, theirs, inputs in cases(np.random.default_rng(0)):
    if wanted and not any(w in name or w in family for w in wanted): continue
    tensors = [Tensor(a).realize() for a in inputs]
    device = Device[tensors[0].device]
    def run_ours() -> None:
      ours(*tensors).contiguous().realize()  # (a view of a realized buffer, `x.T`, realizes as the view it is)
      device.synchronize()  # a queue device's realize returns before its kernels end
    ours_s = best_seconds(run_ours)
    line = f"{name:46s} {ours_s * 1e3:12.2f}"
    if torch is not None:
      torch_inputs = [torch.tensor(a) for a in inputs]
      fn = theirs(torch, F)
      torch_s = best_seconds(lambda: fn(*torch_inputs))
      line += f" {torch_s * 1e3:10.2f} {ours_s / torch_s:7.2f}x"
    print(line, flush=True)


if __name__ == "__main__":
  main()
