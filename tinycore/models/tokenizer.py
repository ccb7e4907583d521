"""A checkpoint's tokenizer (`tokenizer.json`, through the `tokenizers` package) and its chat template (the
`chat_template` of `tokenizer_config.json`, rendered with Jinja2 as transformers does)."""
from __future__ import annotations
import json
import os
from typing import Any, Sequence
from tinycore.models.checkpoint import CheckpointError


class Tokenizer:
  """Text <-> token ids (a `tokenizers.Tokenizer`), the special tokens and the chat template. `Tokenizer.load(path)`
  reads a checkpoint directory's tokenizer.json or a GGUF file's tokenizer.ggml.* metadata."""

  def __init__(self, backend: Any, config: dict[str, Any], chat_template: str | None):
    self.backend, self.config, self.chat_template = backend, config, chat_template

  @staticmethod
  def load(path: str | os.PathLike, metadata: dict[str, Any] | None = None) -> Tokenizer:
    if os.fspath(path).endswith(".gguf"):
      if metadata is None:
        from tinycore.nn.gguf import gguf_load
        metadata = gguf_load(path)[0]
      return Tokenizer.from_gguf(metadata, os.fspath(path))
    return Tokenizer.from_directory(path)

  @staticmethod
  def from_directory(directory: str | os.PathLike) -> Tokenizer:
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.isfile(path): raise CheckpointError(f"the checkpoint {os.fspath(directory)!r} has no tokenizer.json")
    backend = _tokenizers().Tokenizer.from_file(path)
    config_path = os.path.join(directory, "tokenizer_config.json")
    config: dict[str, Any] = {}
    if os.path.isfile(config_path):
      with open(config_path) as f: config = json.load(f)
    template = config.get("chat_template")
    template_file = os.path.join(directory, "chat_template.jinja")
    if template is None and os.path.isfile(template_file):
      with open(template_file) as f: template = f.read()
    return Tokenizer(backend, config, template)

  @staticmethod
  def from_gguf(metadata: dict[str, Any], where: str = "the GGUF file") -> Tokenizer:
    """The file's tokenizer, as transformers builds it from a GGUF: a byte-level BPE (GPT-2's kind,
    `tokenizer.ggml.model` "gpt2") from the vocabulary and merges, or a SentencePiece BPE ("llama": LLaMA 1/2,
    Mistral) from the vocabulary, its scores and token types."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in ("gpt2", "llama"):
      raise CheckpointError(f"{where}: tokenizer model {kind!r} is not supported (a byte-level BPE, 'gpt2', and a "
                            "SentencePiece BPE, 'llama', are)")
    if "tokenizer.ggml.tokens" not in metadata: raise CheckpointError(f"{where} has no tokenizer.ggml.tokens")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    types: list[int] = metadata.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    backend = _byte_level_bpe(tokens, metadata) if kind == "gpt2" else _sentencepiece_bpe(tokens, types, metadata)
    special = [t for t, kind_ in zip(tokens, types) if kind_ == CONTROL]
    if special: backend.add_special_tokens(special)
    config: dict[str, Any] = {key: tokens[metadata[f"tokenizer.ggml.{name}_id"]]
                              for key, name in (("bos_token", "bos_token"), ("eos_token", "eos_token"),
                                                ("unk_token", "unknown_token"))
                              if isinstance(metadata.get(f"tokenizer.ggml.{name}_id"), int)}
    if isinstance(metadata.get("tokenizer.ggml.add_bos_token"), bool):
      config["add_bos_token"] = metadata["tokenizer.ggml.add_bos_token"]
    return Tokenizer(backend, config, metadata.get("tokenizer.chat_template"))

  def special(self, key: str) -> str | None:
    value = self.config.get(key)
    return value.get("content") if isinstance(value, dict) else value

  def encode(self, text: str) -> list[int]: return self.backend.encode(text, add_special_tokens=False).ids

  def decode(self, ids: Sequence[int]) -> str: return self.backend.decode(list(ids), skip_special_tokens=True)

  def token_id(self, token: str | None) -> int | None: return None if token is None else self.backend.token_to_id(token)

  def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
    """The prompt text of a conversation, ending where the assistant's answer starts."""
    if self.chat_template is None:  # no template: the turns as plain lines
      return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
    try: import jinja2
    except ImportError as error:
      raise CheckpointError("a chat template needs the jinja2 package (pip install jinja2)") from error
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise_template_error
    return environment.from_string(self.chat_template).render(
      messages=messages, add_generation_prompt=True, bos_token=self.special("bos_token") or "",
      eos_token=self.special("eos_token") or "")


# tokenizer.ggml.token_type values (llama.cpp's)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # SentencePiece's space marker


def _byte_level_bpe(tokens: list[str], metadata: dict[str, Any]) -> Any:
  tk = _tokenizers()
  merges = [tuple(m.split(" ", 1)) for m in metadata.get("tokenizer.ggml.merges", [])]
  backend = tk.Tokenizer(tk.models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
  backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
  backend.decoder = tk.decoders.ByteLevel()
  return backend


def sentencepiece_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
  """The merges of a SentencePiece BPE vocabulary: SentencePiece joins the adjacent pair whose joined piece scores
  highest, so every split of a normal piece into two pieces of the vocabulary is a merge, ranked by the piece's
  score (ties by the pieces' ids, as transformers orders them)."""
  ids = {t: i for i, t in enumerate(tokens)}
  ranked = []
  for piece, score, kind in zip(tokens, scores, types):
    if kind != NORMAL: continue
    for cut in range(1, len(piece)):
      left, right = piece[:cut], piece[cut:]
      if left in ids and right in ids: ranked.append((-score, ids[left], ids[right], left, right))
  ranked.sort()
  return [(left, right) for _, _, _, left, right in ranked]


def _sentencepiece_bpe(tokens: list[str], types: list[int], metadata: dict[str, Any]) -> Any:
  """A SentencePiece BPE as a `tokenizers` BPE: "▁" for each space and one in front (add_space_prefix, true unless
  the file says not), characters outside the vocabulary as their UTF-8 bytes (<0xNN> pieces), and back."""
  tk = _tokenizers()
  scores = metadata.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
  unk = metadata.get("tokenizer.ggml.unknown_token_id")
  unk = unk if isinstance(unk, int) else next((i for i, kind in enumerate(types) if kind == UNKNOWN), None)
  model = tk.models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=sentencepiece_merges(tokens, scores, types),
                        unk_token=None if unk is None else tokens[unk], fuse_unk=True, byte_fallback=True)
  backend = tk.Tokenizer(model)
  steps = [tk.normalizers.Replace(" ", SPACE)]
  decoders = [tk.decoders.Replace(SPACE, " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
  if metadata.get("tokenizer.ggml.add_space_prefix", True):
    steps.insert(0, tk.normalizers.Prepend(SPACE))
    decoders.append(tk.decoders.Strip(" ", 1, 0))
  backend.normalizer = tk.normalizers.Sequence(steps)
  backend.decoder = tk.decoders.Sequence(decoders)
  user_defined = [t for t, kind in zip(tokens, types) if kind == USER_DEFINED]
  if user_defined: backend.add_tokens(user_defined)
  return backend


def _raise_template_error(message: str) -> None: raise CheckpointError(f"the chat template refused: {message}")


def _tokenizers() -> Any:
  try: import tokenizers
  except ImportError as error:
    raise CheckpointError("a tokenizer needs the tokenizers package (pip install tokenizers)") from error
  return tokenizers
