"""Language models at real sizes, beside transformers (torch, eager, use_cache=True) in the same run: prefill
tokens/s, decode tokens/s at batch 1, time to the first token, the weights' memory and the peak memory. Random
weights in the real shapes (made here by transformers and saved with save_pretrained: nothing is downloaded).
`llama1b-q4_0` and `llama1b-q4_k` are the same LLaMA written as a GGUF file by the gguf package (its Q4_0 quantizer;
it has none for Q4_K, so those matrices are random Q4_K blocks with small scales), run by tinycore alone: torch's
row is the float32 one of `llama1b`. Weights: tinycore's device memory after loading (GlobalCounters.mem_used),
torch's parameter bytes.

    python bench/bench_models.py [--models gpt2,llama1b,llama1b-q4_0,llama1b-q4_k] [--prefill 128] [--decode 32]
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
  from tinycore import GlobalCounters
  model = from_pretrained(path, context=prefill + decode + 8)
  weights = GlobalCounters.mem_used
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
  weights = sum(p.numel() * p.element_size() for p in model.parameters())
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
print(f"{prefill / (first - start):.1f} {(count - 1) / (end - first):.2f} {1000 * (first - start):.1f} "
      f"{weights / 2**20:.0f} {peak():.0f}")
"""


GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
K_QUANT_BLOCK = 144  # Q4_K: bytes per 256 values; the f16 scale and minimum first


def gguf_name(name: str) -> str:
  if name.startswith("model.layers."):
    layer, rest = name.split(".", 3)[2:]
    return f"blk.{layer}.{GGUF_NAMES[rest.rsplit('.', 1)[0]]}.weight"
  return {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "lm_head.weight": "output.weight"}[name]


def quantize(w, qtype, rng):
  import gguf
  import numpy as np
  if qtype != gguf.GGMLQuantizationType.Q4_K: return gguf.quants.quantize(w, qtype)
  rows, cols = w.shape
  raw = rng.integers(0, 256, (rows, cols // 256, K_QUANT_BLOCK), dtype=np.uint8)
  scale = (rng.random(raw.shape[:2]) * 2e-4 + 1e-5).astype(np.float16).view(np.uint8).reshape(*raw.shape[:2], 2)
  raw[:, :, 0:2], raw[:, :, 2:4] = scale, scale
  return raw.reshape(rows, -1)


def write_gguf(model, config, path: str, qtype) -> None:
  """The model as llama.cpp's converter writes it: q and k rows permuted for its rotary convention, norms in F32,
  every matrix in qtype."""
  import gguf
  import numpy as np
  rng = np.random.default_rng(0)
  heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
  writer = gguf.GGUFWriter(path, "llama")
  writer.add_block_count(config.num_hidden_layers), writer.add_context_length(config.max_position_embeddings)
  writer.add_embedding_length(config.hidden_size), writer.add_feed_forward_length(config.intermediate_size)
  writer.add_head_count(heads), writer.add_head_count_kv(kv_heads), writer.add_layer_norm_rms_eps(config.rms_norm_eps)
  writer.add_rope_freq_base(10000.0)
  for name, tensor in model.state_dict().items():
    w = tensor.detach().numpy()
    if ".q_proj." in name or ".k_proj." in name:
      n = heads if ".q_proj." in name else kv_heads
      w = w.reshape(n, 2, w.shape[0] // n // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)
    kind = qtype if w.ndim == 2 else gguf.GGMLQuantizationType.F32
    writer.add_tensor(gguf_name(name), quantize(w, kind, rng) if w.ndim == 2 else w, raw_dtype=kind)
  writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()


def run_cell(name: str, framework: str, path: str, args: argparse.Namespace) -> None:
  """One row, in a fresh process: its own peak memory."""
  result = subprocess.run([sys.executable, "-c", CELL, framework, path, str(args.prefill), str(args.decode)],
                          capture_output=True, text=True)
  if result.returncode != 0:
    print(f"| {name} | {framework} | failed: {result.stderr.strip().splitlines()[-1][:200]} | | | | |")
    return
  prefill, decode, first, weights, peak = result.stdout.split()[-5:]
  print(f"| {name} | {framework} | {prefill} | {decode} | {first} | {weights} | {peak} |", flush=True)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--models", default="gpt2")
  parser.add_argument("--prefill", type=int, default=128)
  parser.add_argument("--decode", type=int, default=32)
  args = parser.parse_args()
  import torch
  import transformers
  print(f"| model | framework | prefill tokens/s ({args.prefill}) | decode tokens/s | first token ms | weights MiB "
        "| peak MiB |")
  print("| --- | --- | --- | --- | --- | --- | --- |")
  for name in args.models.split(","):
    base, _, quant = name.partition("-")
    cls, config_cls, settings = SHAPES[base]
    with tempfile.TemporaryDirectory() as directory:
      torch.manual_seed(0)
      config = getattr(transformers, config_cls)(**settings)
      model = getattr(transformers, cls)(config)
      if quant:
        import gguf
        path = f"{directory}/model.gguf"
        write_gguf(model, config, path, gguf.GGMLQuantizationType[quant.upper()])
        del model
        gc.collect()
        run_cell(name, "tinycore", path, args)
        continue
      model.save_pretrained(directory)
      del model
      gc.collect()
      for framework in ("tinycore", "torch"):
        run_cell(name, framework, directory, args)


if __name__ == "__main__":
  main()
