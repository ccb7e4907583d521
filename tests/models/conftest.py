"""The model tests' checkpoints, made once per session (`model_helpers`)."""
from __future__ import annotations
import pathlib
import pytest
from model_helpers import VOCAB, save, torch, transformers


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory) -> pathlib.Path:
  torch.manual_seed(0)
  config = transformers.GPT2Config(vocab_size=VOCAB + 2, n_embd=48, n_layer=2, n_head=4, n_positions=96,
                                   bos_token_id=VOCAB, eos_token_id=VOCAB)
  return save(transformers.GPT2LMHeadModel(config), tmp_path_factory.mktemp("gpt2"))


def llama_config(**overrides):
  settings = dict(vocab_size=VOCAB + 2, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=96, bos_token_id=1,
                  eos_token_id=0, rms_norm_eps=1e-5)
  settings.update(overrides)
  return transformers.LlamaConfig(**settings)


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory) -> pathlib.Path:
  torch.manual_seed(1)
  return save(transformers.LlamaForCausalLM(llama_config()), tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="session")
def llama3_dir(tmp_path_factory) -> pathlib.Path:
  torch.manual_seed(2)
  config = llama_config(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                        rope_theta=500000.0, tie_word_embeddings=True)
  return save(transformers.LlamaForCausalLM(config), tmp_path_factory.mktemp("llama3"))


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory) -> pathlib.Path:
  torch.manual_seed(3)
  config = transformers.Qwen2Config(vocab_size=VOCAB + 2, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                    num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=96,
                                    eos_token_id=0)
  return save(transformers.Qwen2ForCausalLM(config), tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory) -> pathlib.Path:
  torch.manual_seed(4)
  config = transformers.BertConfig(vocab_size=VOCAB + 2, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=96, max_position_embeddings=64)
  return save(transformers.BertModel(config), tmp_path_factory.mktemp("bert"))
