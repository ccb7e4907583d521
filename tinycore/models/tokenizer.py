"""A checkpoint's tokenizer (`tokenizer.json`, through the `tokenizers` package) and its chat template (the
`chat_template` of `tokenizer_config.json`, rendered with Jinja2 as transformers does)."""
from __future__ import annotations
import json
import os
from typing import Any, Sequence
from tinycore.models.checkpoint import CheckpointError


class Tokenizer:
  def __init__(self, directory: str | os.PathLike):
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.isfile(path): raise CheckpointError(f"the checkpoint {os.fspath(directory)!r} has no tokenizer.json")
    try: from tokenizers import Tokenizer as HFTokenizer
    except ImportError as error:
      raise CheckpointError("reading tokenizer.json needs the tokenizers package (pip install tokenizers)") from error
    self.backend = HFTokenizer.from_file(path)
    config_path = os.path.join(directory, "tokenizer_config.json")
    self.config: dict[str, Any] = {}
    if os.path.isfile(config_path):
      with open(config_path) as f: self.config = json.load(f)
    self.chat_template: str | None = self.config.get("chat_template")
    template_file = os.path.join(directory, "chat_template.jinja")
    if self.chat_template is None and os.path.isfile(template_file):
      with open(template_file) as f: self.chat_template = f.read()

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
