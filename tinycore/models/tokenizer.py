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
    """A byte-level BPE tokenizer (GPT-2's kind, `tokenizer.ggml.model` "gpt2") from the file's vocabulary and
    merges, as transformers builds it from a GGUF."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
      raise CheckpointError(f"{where}: tokenizer model {kind!r} is not supported (a byte-level BPE, 'gpt2', is)")
    tk = _tokenizers()
    tokens = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in metadata.get("tokenizer.ggml.merges", [])]
    backend = tk.Tokenizer(tk.models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tk.decoders.ByteLevel()
    types = metadata.get("tokenizer.ggml.token_type", [])
    special = [t for t, kind_ in zip(tokens, types) if kind_ == 3]  # CONTROL tokens
    if special: backend.add_special_tokens(special)
    config = {key: tokens[metadata[f"tokenizer.ggml.{key}_id"]] for key in ("bos_token", "eos_token")
              if isinstance(metadata.get(f"tokenizer.ggml.{key}_id"), int)}
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


def _raise_template_error(message: str) -> None: raise CheckpointError(f"the chat template refused: {message}")


def _tokenizers() -> Any:
  try: import tokenizers
  except ImportError as error:
    raise CheckpointError("a tokenizer needs the tokenizers package (pip install tokenizers)") from error
  return tokenizers
