"""What the model tests share: checkpoints made here by `transformers` (random weights, small configs, saved with
`save_pretrained`), each with a BPE tokenizer trained here by `tokenizers`: nothing is downloaded. (A module of its
own beside conftest.py: pytest puts this directory on sys.path, so the tests import it by name.)"""
from __future__ import annotations
import io
import json
import pathlib
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

TEXT = ["the quick brown fox jumps over the lazy dog", "a tensor compiler fuses kernels and runs them on devices",
        "once upon a time there was a small model that generated text one token at a time"] * 20
VOCAB = 128
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def train_tokenizer(directory: pathlib.Path) -> None:
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<eos>"],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(TEXT, trainer)
  tok.save(str(directory / "tokenizer.json"))
  (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>", "chat_template": CHAT_TEMPLATE}))


def train_sentencepiece() -> bytes:
  """A SentencePiece BPE model (LLaMA 2's kind: byte fallback, the text as it is, no whitespace folding, ids 0-2
  for <unk>, <s>, </s>) trained on TEXT, as its serialized proto."""
  spm = pytest.importorskip("sentencepiece")
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT), model_writer=model, vocab_size=320, model_type="bpe",
                                 byte_fallback=True, normalization_rule_name="identity",
                                 remove_extra_whitespaces=False, unk_id=0, bos_id=1, eos_id=2, minloglevel=2)
  return model.getvalue()


def save(model, directory: pathlib.Path) -> pathlib.Path:
  torch.manual_seed(0)
  model.eval().save_pretrained(directory)
  train_tokenizer(directory)
  return directory
