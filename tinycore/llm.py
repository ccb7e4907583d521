"""Run a language model from a Hugging Face checkpoint directory or a GGUF file.

    python -m tinycore.llm --model DIR --prompt "Once upon a time" [--max-new-tokens 64] [--device CPU]
    python -m tinycore.llm --model DIR --chat                  # a conversation on stdin, the chat template applied
    python -m tinycore.llm --model DIR --benchmark 64          # prefill and decode tokens/s, first token, peak memory
    python -m tinycore.llm --model DIR --serve [PORT]          # an OpenAI-compatible API on 127.0.0.1 (default 8000)

Tokens stream to stdout as they come. Sampling: --temperature (0: greedy, the default), --top-k, --top-p, --seed.
"""
from __future__ import annotations
import argparse
import json
import os
import resource
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Iterator, Sequence
from tinycore.device.registry import Device
from tinycore.models import from_pretrained
from tinycore.models.checkpoint import CheckpointError, read_config
from tinycore.models.generate import Generator
from tinycore.models.tokenizer import Tokenizer


class LanguageModel:
  """A checkpoint's model, tokenizer and stop tokens, generating text."""

  def __init__(self, path: str, device: str | None = None, context: int | None = None):
    self.name = os.path.basename(os.path.normpath(path))
    if not path.endswith(".gguf"): read_config(path)  # a missing directory or config.json is named first
    elif not os.path.isfile(path): raise CheckpointError(f"no GGUF file at {path!r}")
    self.tokenizer = Tokenizer.load(path)
    self.model = from_pretrained(path, device=device, context=context)
    self.generator = Generator(self.model)
    eos = self.model.config.get("eos_token_id")
    self.stop_tokens = {t for t in (eos if isinstance(eos, list) else [eos]) if isinstance(t, int)}
    if (named := self.tokenizer.token_id(self.tokenizer.special("eos_token"))) is not None: self.stop_tokens.add(named)
    self.lock = threading.Lock()  # one generation at a time: the caches are the model's

  def prompt_ids(self, text: str) -> list[int]:
    """The prompt's tokens, the bos token first for the LLaMA family (unless the tokenizer says add_bos_token
    false)."""
    ids = self.tokenizer.encode(text)
    bos = self.model.config.get("bos_token_id")
    adds_bos = self.tokenizer.config.get("add_bos_token", self.model.config.get("model_type") != "gpt2")
    if adds_bos and isinstance(bos, int) and (not ids or ids[0] != bos):
      ids = [bos] + ids
    if not ids: raise ValueError("the prompt encodes to no tokens")
    return ids

  def stream(self, ids: Sequence[int], max_new_tokens: int, **sampling: Any) -> Iterator[tuple[str, int | None]]:
    """(text piece, token) as each token comes; the text is decoded from every new token so far, so a character
    made of several tokens appears when it is whole, after the prompt's last token (so a SentencePiece tokenizer,
    which drops the space in front of the first token it decodes, keeps the one in front of the first new token).
    The last item has token None and the finish reason as text."""
    if len(ids) >= self.model.context:
      raise ValueError(f"the prompt has {len(ids)} tokens; the context holds {self.model.context}")
    max_new_tokens = min(max_new_tokens, self.model.context - len(ids))
    new: list[int] = []
    anchor = list(ids[-1:])
    if (lead := self.tokenizer.decode(anchor)).endswith("\ufffd"): anchor, lead = [], ""  # half a character
    shown = ""
    reason = "length"
    for step in self.generator.generate([list(ids)], max_new_tokens, stop_tokens=tuple(self.stop_tokens), **sampling):
      token = step[0]
      if token is None: continue
      if token in self.stop_tokens:
        reason = "stop"
        break
      new.append(token)
      text = self.tokenizer.decode(anchor + new)[len(lead):]
      if text.endswith("\ufffd"): continue  # an incomplete character: wait for its next token
      yield text[len(shown):], token
      shown = text
    yield reason, None


def peak_memory_mib() -> float:
  """The process's peak resident memory: Linux's VmHWM (ru_maxrss would carry a forking parent's peak across exec),
  else ru_maxrss (macOS reports bytes)."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"): return int(line.split()[1]) / 1024
  except OSError: pass
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def synchronize() -> None:
  for device in Device.opened().values(): device.synchronize()


def benchmark(lm: LanguageModel, tokens: int, prompt: str, sampling: dict[str, Any]) -> str:
  ids = lm.prompt_ids(prompt)
  for _ in range(2):  # the first run compiles the prefill and the decode step, the second captures the step
    for _ in lm.stream(ids, min(tokens, 4), **sampling): pass
  start = time.perf_counter()
  first = None
  count = 0
  for _, token in lm.stream(ids, tokens, **sampling):
    if token is None: break
    if first is None: first = time.perf_counter()
    count += 1
  synchronize()
  end = time.perf_counter()
  assert first is not None
  decode = (count - 1) / (end - first) if count > 1 and end > first else float("nan")
  return (f"prefill {len(ids) / (first - start):.1f} tokens/s ({len(ids)} tokens), decode {decode:.1f} tokens/s "
          f"({count} tokens), first token {1000 * (first - start):.1f} ms, peak memory {peak_memory_mib():.0f} MiB")


# ---------------------------------------------------------------------------- the OpenAI-compatible server
class ApiError(Exception):
  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
  try:
    return {"temperature": float(body.get("temperature", 0.0) or 0.0), "top_p": float(body.get("top_p", 1.0) or 1.0),
            "top_k": int(body.get("top_k", 0) or 0), "seed": body.get("seed")}
  except (TypeError, ValueError) as error: raise ApiError(400, f"bad sampling parameter: {error}") from error


class ApiHandler(BaseHTTPRequestHandler):
  """The OpenAI-compatible routes over one LanguageModel (`lm`, set by `serve` on a subclass)."""
  lm: LanguageModel
  protocol_version = "HTTP/1.1"

  def log_message(self, *args: Any) -> None: pass  # quiet

  def _json(self, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    self.send_response(status)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def _error(self, status: int, message: str) -> None:
    self._json(status, {"error": {"message": message, "type": "invalid_request_error", "code": status}})

  def do_GET(self) -> None:  # noqa: N802
    if self.path.rstrip("/") == "/v1/models":
      self._json(200, {"object": "list", "data": [{"id": self.lm.name, "object": "model", "created": 0,
                                                    "owned_by": "tinycore"}]})
    else: self._error(404, f"no route {self.path}")

  def do_POST(self) -> None:  # noqa: N802
    try:
      length = int(self.headers.get("Content-Length") or 0)
      try: body = json.loads(self.rfile.read(length) or b"{}")
      except json.JSONDecodeError as error: raise ApiError(400, f"the body is not JSON: {error}") from error
      route = self.path.rstrip("/")
      if route == "/v1/completions": self._complete(body, chat=False)
      elif route == "/v1/chat/completions": self._complete(body, chat=True)
      else: raise ApiError(404, f"no route {self.path}")
    except ApiError as error: self._error(error.status, str(error))
    except ValueError as error: self._error(400, str(error))

  def _complete(self, body: dict[str, Any], chat: bool) -> None:
    if chat:
      messages = body.get("messages")
      if not isinstance(messages, list) or not messages: raise ApiError(400, "messages must be a non-empty list")
      prompt = self.lm.tokenizer.apply_chat_template(messages)
    else:
      prompt = body.get("prompt")
      if isinstance(prompt, list) and len(prompt) == 1: prompt = prompt[0]
      if not isinstance(prompt, str): raise ApiError(400, "prompt must be a string")
    max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
    ids = self.lm.prompt_ids(prompt)
    ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    with self.lm.lock:
      pieces = self.lm.stream(ids, max_tokens, **_sampling(body))
      if body.get("stream"): self._stream(pieces, ident, created, chat)
      else: self._whole(pieces, ident, created, chat, len(ids))

  def _whole(self, pieces: Iterator[tuple[str, int | None]], ident: str, created: int, chat: bool,
             prompt_tokens: int) -> None:
    text, count, reason = "", 0, "length"
    for piece, token in pieces:
      if token is None: reason = piece
      else: text, count = text + piece, count + 1
    choice = {"index": 0, "finish_reason": reason}
    choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text, "logprobs": None})
    self._json(200, {"id": ident, "object": "chat.completion" if chat else "text_completion", "created": created,
                     "model": self.lm.name, "choices": [choice],
                     "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": count,
                               "total_tokens": prompt_tokens + count}})

  def _stream(self, pieces: Iterator[tuple[str, int | None]], ident: str, created: int, chat: bool) -> None:
    self.send_response(200)
    self.send_header("Content-Type", "text/event-stream")
    self.send_header("Cache-Control", "no-cache")
    self.send_header("Connection", "close")
    self.end_headers()
    kind = "chat.completion.chunk" if chat else "text_completion"

    def send(choice: dict[str, Any]) -> None:
      event = {"id": ident, "object": kind, "created": created, "model": self.lm.name, "choices": [choice]}
      self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
      self.wfile.flush()
    if chat: send({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
    for piece, token in pieces:
      if token is None:
        send({"index": 0, "delta": {}, "finish_reason": piece} if chat else
             {"index": 0, "text": "", "logprobs": None, "finish_reason": piece})
        break
      send({"index": 0, "delta": {"content": piece}, "finish_reason": None} if chat else
           {"index": 0, "text": piece, "logprobs": None, "finish_reason": None})
    self.wfile.write(b"data: [DONE]\n\n")
    self.wfile.flush()
    self.close_connection = True


def serve(lm: LanguageModel, port: int) -> None:
  server = HTTPServer(("127.0.0.1", port), type("Handler", (ApiHandler,), {"lm": lm}))
  print(f"serving {lm.name} on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
  try: server.serve_forever()
  except KeyboardInterrupt: pass
  finally: server.server_close()


# ---------------------------------------------------------------------------- the command line
def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m tinycore.llm", description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", required=True, help="a Hugging Face checkpoint directory or a .gguf file")
  what = parser.add_mutually_exclusive_group()
  what.add_argument("--prompt", help="the text to continue")
  what.add_argument("--chat", action="store_true", help="a conversation: one user turn per line of stdin")
  parser.add_argument("--benchmark", type=int, metavar="N", help="time N new tokens (after --prompt, or 'The')")
  what.add_argument("--serve", type=int, nargs="?", const=8000, metavar="PORT", help="serve an OpenAI-compatible API")
  parser.add_argument("--max-new-tokens", type=int, default=64)
  parser.add_argument("--device", default=None)
  parser.add_argument("--context", type=int, default=None, help="the most tokens a conversation holds")
  parser.add_argument("--temperature", type=float, default=0.0)
  parser.add_argument("--top-k", type=int, default=0)
  parser.add_argument("--top-p", type=float, default=1.0)
  parser.add_argument("--seed", type=int, default=None)
  args = parser.parse_args(argv)
  sampling = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed}
  try:
    lm = LanguageModel(args.model, args.device, args.context)
    if args.serve is not None: serve(lm, args.serve)
    elif args.benchmark is not None: print(benchmark(lm, args.benchmark, args.prompt or "The", sampling))
    elif args.chat:
      messages: list[dict[str, str]] = []
      for line in sys.stdin:
        messages.append({"role": "user", "content": line.rstrip("\n")})
        reply = ""
        for piece, token in lm.stream(lm.prompt_ids(lm.tokenizer.apply_chat_template(messages)), args.max_new_tokens,
                                      **sampling):
          if token is None: break
          reply += piece
          print(piece, end="", flush=True)
        print(flush=True)
        messages.append({"role": "assistant", "content": reply})
    else:
      if args.prompt is None: parser.error("give --prompt TEXT, --chat, --benchmark N or --serve")
      print(args.prompt, end="", flush=True)
      for piece, token in lm.stream(lm.prompt_ids(args.prompt), args.max_new_tokens, **sampling):
        if token is None: break
        print(piece, end="", flush=True)
      print(flush=True)
  except (CheckpointError, ValueError, OSError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
