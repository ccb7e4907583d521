"""GPT-2 and the LLaMA family against transformers on the same checkpoint: logits to 1e-4, greedy generation token
for token, one TinyJit capture for every decode position, batches of prompts of different lengths, sampling with a
seed, the tokenizer, and clear errors for bad checkpoints and prompts."""
from __future__ import annotations
import json
import shutil
import numpy as np
import pytest
from tinycore import Tensor
from tinycore.codegen import CodegenStats
from tinycore.models import CheckpointError, from_pretrained
from tinycore.models.generate import generate, sample
from model_helpers import torch, transformers

CLASSES = {"gpt2_dir": "GPT2LMHeadModel", "llama_dir": "LlamaForCausalLM", "llama3_dir": "LlamaForCausalLM",
           "qwen2_dir": "Qwen2ForCausalLM"}
PROMPT = [5, 17, 42, 3, 99, 8, 61]


def reference(request, fixture):
  directory = request.getfixturevalue(fixture)
  return directory, getattr(transformers, CLASSES[fixture]).from_pretrained(directory).eval()


def reference_generate(model, prompt, count):
  with torch.no_grad():
    out = model.generate(torch.tensor([prompt]), max_new_tokens=count, do_sample=False, eos_token_id=None,
                         pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
  return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("fixture", list(CLASSES))
def test_logits_match_transformers(request, fixture):
  directory, ref = reference(request, fixture)
  tokens = np.array([PROMPT, PROMPT[::-1]], np.int64)
  with torch.no_grad(): want = ref(torch.tensor(tokens)).logits.numpy()
  model = from_pretrained(directory)
  got = model(Tensor(tokens.astype(np.int32))).numpy()
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
  # as transformers' logits_to_keep: the head scores only the last positions (a prefill needs one)
  last = model(Tensor(tokens.astype(np.int32)), 0, logits_to_keep=2).numpy()
  assert last.shape == (2, 2, want.shape[-1])
  np.testing.assert_allclose(last, want[:, -2:], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fixture", list(CLASSES))
def test_greedy_generation_matches_transformers_with_one_capture_for_every_position(request, fixture):
  directory, ref = reference(request, fixture)
  model = from_pretrained(directory)
  assert generate(model, [PROMPT], 4)[0] == reference_generate(ref, PROMPT, 4)  # compiles and captures the step
  compiled = CodegenStats.compiled
  assert generate(model, [PROMPT], 50)[0] == reference_generate(ref, PROMPT, 50)
  assert CodegenStats.compiled == compiled  # 50 positions, no kernel compiled again


def test_a_batch_of_prompts_of_different_lengths_generates_each_as_alone(request):
  directory, ref = reference(request, "llama_dir")
  prompts = [PROMPT, [9, 4], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
  got = generate(from_pretrained(directory), prompts, 8)
  assert got == [reference_generate(ref, p, 8) for p in prompts]


def test_stop_tokens_end_a_row_and_max_new_tokens_bounds_it(llama_dir):
  model = from_pretrained(llama_dir)
  free = generate(model, [PROMPT], 12)[0]
  stop = free[5]
  stopped = generate(model, [PROMPT], 12, stop_tokens=(stop,))[0]
  assert stopped == free[:free.index(stop) + 1]


def test_sampling_is_repeatable_with_a_seed_and_respects_top_k(gpt2_dir):
  model = from_pretrained(gpt2_dir)
  first = generate(model, [PROMPT], 16, temperature=0.9, top_k=5, top_p=0.9, seed=7)
  assert first == generate(model, [PROMPT], 16, temperature=0.9, top_k=5, top_p=0.9, seed=7)
  logits = Tensor(np.array([[0.0, 5.0, 4.0, -1.0, 3.0, 2.0]], np.float32))
  draws = {sample(logits, temperature=1.0, top_k=2).item() for _ in range(40)}
  assert draws <= {1, 2} and len(draws) == 2
  assert {sample(logits, temperature=1.0, top_p=0.01).item() for _ in range(10)} == {1}  # only the most likely
  assert sample(logits).item() == 1
  with pytest.raises(ValueError, match="top_p"): sample(logits, temperature=1.0, top_p=0)


def test_a_prompt_longer_than_the_context_is_refused(gpt2_dir):
  model = from_pretrained(gpt2_dir, context=16)
  with pytest.raises(ValueError, match="longer than the context"): generate(model, [list(range(12))], 8)


def test_bad_checkpoints_name_the_problem(tmp_path, gpt2_dir):
  with pytest.raises(CheckpointError, match="no checkpoint directory"): from_pretrained(tmp_path / "missing")
  broken = tmp_path / "broken"
  shutil.copytree(gpt2_dir, broken)
  config = json.loads((broken / "config.json").read_text())
  (broken / "config.json").write_text(json.dumps({**config, "model_type": "mamba"}))
  with pytest.raises(CheckpointError, match="unknown architecture 'mamba'"): from_pretrained(broken)
  (broken / "config.json").write_text(json.dumps({**config, "n_embd": 64}))
  with pytest.raises(CheckpointError, match="has shape"): from_pretrained(broken)
  (broken / "model.safetensors").unlink()
  with pytest.raises(CheckpointError, match="neither model.safetensors"): from_pretrained(broken)


def test_sharded_checkpoints_load_through_their_index(request, tmp_path):
  directory, ref = reference(request, "llama_dir")
  sharded = tmp_path / "sharded"
  ref.save_pretrained(sharded, max_shard_size="20KB")
  assert (sharded / "model.safetensors.index.json").exists() and not (sharded / "model.safetensors").exists()
  tokens = np.array([PROMPT], np.int64)
  with torch.no_grad(): want = ref(torch.tensor(tokens)).logits.numpy()
  np.testing.assert_allclose(from_pretrained(sharded)(Tensor(tokens.astype(np.int32))).numpy(), want, atol=1e-4)


def test_weights_stay_on_disk_until_a_kernel_reads_them(gpt2_dir):
  from tinycore.models.checkpoint import load_weights
  weights = load_weights(gpt2_dir)
  assert all(t.device.startswith("DISK") for t in weights.values())
