"""Run a language model from a Hugging Face checkpoint directory or a GGUF file.

    python -m tinycore.llm --model DIR --prompt "Once upon a time" [--max-new-tokens 64] [--device CPU]
    python -m tinycore.llm --model DIR --chat                  # a conversation on stdin, the chat template applied
    python -m tinycore.llm --model DIR --benchmark 64          # prefill and decode tokens/s, first token, peak memory
    python -m tinycore.llm --model DIR --serve [PORT]          # an OpenAI-compatible API on 127.0.0.1 (default 8000)

Tokens stream to stdout as they come. Sampling: --temperature (0: greedy, the default), --top-k, --top-p, --seed.
A conversation (--chat, /v1/chat/completions) is rendered by the checkpoint's chat template (tokenizer_config.json's
`chat_template`, chat_template.jinja, or a GGUF's `tokenizer.chat_template`); with none, each turn is a line
"role: content" and the prompt ends with "assistant:". The server generates for one request at a time (the model
and its key/value caches are one; each connection has a thread, so a second client waits for the lock, not for the
first one's connection to close). A bad request gets a 4xx JSON error naming the problem before any token is made,
so a streamed answer never turns into an error.
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
    The last item has token None and the finish reason as text. A prompt too long for the context, a count of new
    tokens below 1 and bad sampling settings raise ValueError here, before any token is made."""
    if len(ids) >= self.model.context:
      raise ValueError(f"the prompt has {len(ids)} tokens; the context holds {self.model.context}")
    if max_new_tokens < 1: raise ValueError(f"max new tokens must be at least 1, got {max_new_tokens}")
    check_sampling(**sampling)
    return self._pieces(ids, min(max_new_tokens, self.model.context - len(ids)), sampling)

  def _pieces(self, ids: Sequence[int], max_new_tokens: int,
              sampling: dict[str, Any]) -> Iterator[tuple[str, int | None]]:
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


def check_sampling(temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None) -> None:
  """Raise ValueError naming a sampling setting out of its range."""
  if not temperature >= 0: raise ValueError(f"temperature must be at least 0, got {temperature}")
  if not 0 < top_p <= 1: raise ValueError(f"top_p must be in (0, 1], got {top_p}")
  if top_k < 0: raise ValueError(f"top_k must be at least 0, got {top_k}")
  if seed is not None and not isinstance(seed, int): raise ValueError(f"seed must be an integer, got {seed!r}")


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
  """A request the server refuses: its HTTP status and the message of the JSON error it answers with."""

  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status


def _number(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
  value = body.get(key)
  if value is None: return default
  if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
    raise ApiError(400, f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
  return kind(value)


def request_settings(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
  """(max new tokens, sampling settings) of a request body, each checked: a 400 names the first bad one."""
  if body.get("n") not in (None, 1): raise ApiError(400, f"n must be 1 (one choice per request), got {body['n']!r}")
  if body.get("stop") not in (None, [], ""):
    raise ApiError(400, "stop sequences are not supported (the checkpoint's own stop tokens end a completion)")
  max_tokens = _number(body, "max_tokens", int, None)
  if max_tokens is None: max_tokens = _number(body, "max_completion_tokens", int, 16)
  sampling = {"temperature": _number(body, "temperature", float, 0.0), "top_p": _number(body, "top_p", float, 1.0),
              "top_k": _number(body, "top_k", int, 0), "seed": _number(body, "seed", int, None)}
  try: check_sampling(**sampling)
  except ValueError as error: raise ApiError(400, str(error)) from error
  if max_tokens < 1: raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}")
  return max_tokens, sampling


CHAT_ROLES = ("system", "user", "assistant", "tool", "developer")


def chat_messages(body: dict[str, Any]) -> list[dict[str, str]]:
  """The request's messages as {"role", "content"} with text content (a list of text parts is joined)."""
  messages = body.get("messages")
  if not isinstance(messages, list) or not messages: raise ApiError(400, "messages must be a non-empty list")
  out = []
  for i, message in enumerate(messages):
    if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
      raise ApiError(400, f"messages[{i}] must be an object with a role ({', '.join(CHAT_ROLES)})")
    content = message.get("content")
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
      content = "".join(str(p.get("text", "")) for p in content)
    if not isinstance(content, str):
      raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts")
    out.append({"role": message["role"], "content": content})
  return out


class ApiHandler(BaseHTTPRequestHandler):
  """The OpenAI-compatible routes over one LanguageModel (`lm`, set by `serve` on a subclass). Each connection has
  its own thread (an idle keep-alive client blocks no other), but generations run one at a time, under the model's
  lock (the model and its key/value caches are one): a second request waits for the first to finish."""
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
    kind = "invalid_request_error" if status < 500 else "server_error"
    self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": status}})

  def do_GET(self) -> None:  # noqa: N802
    if self.path.rstrip("/") == "/v1/models":
      self._json(200, {"object": "list", "data": [{"id": self.lm.name, "object": "model", "created": 0,
                                                    "owned_by": "tinycore"}]})
    else: self._error(404, f"no route GET {self.path} (GET /v1/models; POST /v1/completions, /v1/chat/completions)")

  def do_POST(self) -> None:  # noqa: N802
    try:
      try: length = int(self.headers.get("Content-Length") or 0)
      except ValueError as error:
        self.close_connection = True  # the body's end is unknown: the connection cannot carry another request
        raise ApiError(400, "Content-Length is not a number") from error
      data = self.rfile.read(length)  # read whole first, so a refused request leaves the connection clean
      route = self.path.rstrip("/")
      if route not in ("/v1/completions", "/v1/chat/completions"):
        raise ApiError(404, f"no route POST {self.path} (POST /v1/completions, /v1/chat/completions)")
      try: body = json.loads(data or b"{}")
      except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, f"the body is not JSON: {error}") from error
      if not isinstance(body, dict): raise ApiError(400, f"the body must be a JSON object, got {type(body).__name__}")
      self._complete(body, chat=route == "/v1/chat/completions")
    except ApiError as error: self._error(error.status, str(error))
    except (ValueError, CheckpointError) as error: self._error(400, str(error))
    except Exception as error:  # noqa: BLE001 - the client gets a JSON answer, not a dropped connection
      self._error(500, f"{type(error).__name__}: {error}")

  def _complete(self, body: dict[str, Any], chat: bool) -> None:
    """Everything is checked before the answer starts: a streamed answer cannot turn into an error."""
    if chat: prompt = self.lm.tokenizer.apply_chat_template(chat_messages(body))
    else:
      prompt = body.get("prompt")
      if isinstance(prompt, list) and len(prompt) == 1: prompt = prompt[0]
      if not isinstance(prompt, str): raise ApiError(400, "prompt must be a string (or a list of one string)")
    max_tokens, sampling = request_settings(body)
    ids = self.lm.prompt_ids(prompt)
    ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    with self.lm.lock:
      pieces = self.lm.stream(ids, max_tokens, **sampling)
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
  server = ThreadingHTTPServer(("127.0.0.1", port), type("Handler", (ApiHandler,), {"lm": lm}))
  server.daemon_threads = True
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
