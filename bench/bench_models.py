"""Language models at real sizes, beside transformers (torch, eager, use_cache=True) in the same run: prefill
tokens/s, decode tokens/s at batch 1, time to the first token and peak memory. Random weights in the real shapes
(made here by transformers and saved with save_pretrained: nothing is downloaded).

    python bench/bench_models.py [--models gpt2,llama1b] [--prefill 128] [--decode 32]
"""
from __future__ import annotations
import argparse
import gc
import subprocess
import sys
import tempfile

SHAPES = {
  "gpt2": ("GPT2LMHeadModel", "GPT2Config", {}),  # 124M: 12 layers, 768 wide, 12 heads
  "llama1b": ("LlamaForCausalLM", "LlamaConfig", dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                                      num_hidden_layers=22, num_attention_heads=32,
                                                      num_key_value_heads=4, max_position_embeddings=2048)),
}

CELL = r"""
import sys, time, numpy as np
which, path, prefill, decode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
prompt = [int(i) for i in np.random.default_rng(0).integers(0, 1000, prefill)]
def peak():  # VmHWM: ru_maxrss would carry the parent's peak across exec
  return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
if which == "tinycore":
  from tinycore.models import from_pretrained
  from tinycore.models.generate import Generator
  from tinycore.device.registry import Device
  model = from_pretrained(path, context=prefill + decode + 8)
  gen = Generator(model)
  for _ in range(2):
    for _ in gen.generate([prompt], 4): pass
  start = time.perf_counter(); first = None; count = 0
  for step in gen.generate([prompt], decode):
    if first is None: first = time.perf_counter()
    count += 1
  for d in Device.opened().values(): d.synchronize()
  end = time.perf_counter()
else:
  import torch, transformers
  torch.set_grad_enabled(False)
  model = getattr(transformers, "AutoModelForCausalLM").from_pretrained(path).eval()
  ids = torch.tensor([prompt])
  for _ in range(2): model.generate(ids, max_new_tokens=4, do_sample=False, min_new_tokens=4, pad_token_id=0)
  start = time.perf_counter()
  out = model(ids, use_cache=True)
  first = time.perf_counter()
  past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
  count = 1
  for _ in range(decode - 1):
    out = model(token, past_key_values=past, use_cache=True)
    past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    count += 1
  end = time.perf_counter()
print(f"{prefill / (first - start):.1f} {(count - 1) / (end - first):.2f} {1000 * (first - start):.1f} {peak():.0f}")
"""


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--models", default="gpt2")
  parser.add_argument("--prefill", type=int, default=128)
  parser.add_argument("--decode", type=int, default=32)
  args = parser.parse_args()
  import torch
  import transformers
  print(f"| model | framework | prefill tokens/s ({args.prefill}) | decode tokens/s | first token ms | peak MiB |")
  print("| --- | --- | --- | --- | --- | --- |")
  for name in args.models.split(","):
    cls, config_cls, settings = SHAPES[name]
    with tempfile.TemporaryDirectory() as directory:
      torch.manual_seed(0)
      getattr(transformers, cls)(getattr(transformers, config_cls)(**settings)).save_pretrained(directory)
      gc.collect()
      for framework in ("tinycore", "torch"):  # a fresh process per cell: its own peak memory
        result = subprocess.run([sys.executable, "-c", CELL, framework, directory, str(args.prefill),
                                 str(args.decode)], capture_output=True, text=True)
        if result.returncode != 0:
          print(f"| {name} | {framework} | failed: {result.stderr.strip().splitlines()[-1][:200]} | | | |")
          continue
        prefill, decode, first, peak = result.stdout.split()[-4:]
        print(f"| {name} | {framework} | {prefill} | {decode} | {first} | {peak} |", flush=True)


if __name__ == "__main__":
  main()
