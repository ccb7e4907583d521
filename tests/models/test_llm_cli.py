"""`python -m tinycore.llm` as a user runs it: a prompt streamed to stdout, --benchmark, --chat, bad input, and
--serve as an OpenAI-compatible API driven by the `openai` client package against the real server (a subprocess)."""
from __future__ import annotations
import os
import socket
import subprocess
import sys
import time
import pytest
from tinycore.models import from_pretrained
from tinycore.models.generate import generate
from tinycore.models.tokenizer import Tokenizer


def llm(*args: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "tinycore.llm", *args], capture_output=True, text=True, input=stdin,
                        timeout=timeout)


def expected_text(directory, prompt: str, count: int) -> str:
  tokenizer = Tokenizer.load(directory)
  new = generate(from_pretrained(directory), [tokenizer.encode(prompt)], count)[0]
  return tokenizer.decode(new)


def test_a_prompt_streams_its_greedy_continuation(gpt2_dir):
  result = llm("--model", str(gpt2_dir), "--prompt", "the quick", "--max-new-tokens", "10")
  assert result.returncode == 0, result.stderr
  assert result.stdout == "the quick" + expected_text(gpt2_dir, "the quick", 10) + "\n"


def test_benchmark_prints_prefill_decode_first_token_and_peak_memory(llama_dir):
  result = llm("--model", str(llama_dir), "--benchmark", "16", "--prompt", "once upon a time")
  assert result.returncode == 0, result.stderr
  for part in ("prefill", "tokens/s", "decode", "first token", "peak memory"): assert part in result.stdout


def test_chat_applies_the_template_per_turn(llama_dir):
  result = llm("--model", str(llama_dir), "--chat", "--max-new-tokens", "5", stdin="hello\nand again\n")
  assert result.returncode == 0, result.stderr
  assert len(result.stdout.splitlines()) == 2
  tokenizer = Tokenizer.load(llama_dir)
  assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]) == "<|user|>hi<eos><|assistant|>"


@pytest.mark.parametrize("args, message", [(["--model", "/no/such/dir", "--prompt", "x"], "no checkpoint directory"),
                                           (["--model", "{gpt2}", "--prompt", "the " * 200], "context holds")])
def test_bad_input_is_a_clear_error(gpt2_dir, args, message):
  result = llm(*[a.replace("{gpt2}", str(gpt2_dir)) for a in args])
  assert result.returncode == 2 and message in result.stderr, result.stderr


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(gpt2_dir):
  port = free_port()
  process = subprocess.Popen([sys.executable, "-m", "tinycore.llm", "--model", str(gpt2_dir), "--serve", str(port)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 120
  while time.monotonic() < deadline:
    with socket.socket() as s:
      if s.connect_ex(("127.0.0.1", port)) == 0: break
    if process.poll() is not None: pytest.fail(f"the server exited: {process.stderr.read()}")
    time.sleep(0.2)
  yield f"http://127.0.0.1:{port}/v1"
  process.terminate()
  process.wait(timeout=30)


def test_the_server_answers_the_openai_client(server, gpt2_dir):
  openai = pytest.importorskip("openai")
  client = openai.OpenAI(base_url=server, api_key="unused")
  name = os.path.basename(str(gpt2_dir))
  assert [m.id for m in client.models.list().data] == [name]
  completion = client.completions.create(model=name, prompt="the quick", max_tokens=8, temperature=0)
  assert completion.choices[0].text == expected_text(gpt2_dir, "the quick", 8)
  assert completion.usage.completion_tokens == 8 and completion.choices[0].finish_reason == "length"
  streamed = "".join(chunk.choices[0].text for chunk in
                     client.completions.create(model=name, prompt="the quick", max_tokens=8, stream=True))
  assert streamed == completion.choices[0].text
  chat = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hello"}], max_tokens=6)
  pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
    model=name, messages=[{"role": "user", "content": "hello"}], max_tokens=6, stream=True)]
  assert chat.choices[0].message.role == "assistant" and "".join(pieces) == chat.choices[0].message.content


def test_chat_completions_apply_the_checkpoint_s_chat_template(server, gpt2_dir):
  """The conversation is rendered by the checkpoint's template as transformers renders it (text parts joined)."""
  openai = pytest.importorskip("openai")
  from model_helpers import transformers
  client = openai.OpenAI(base_url=server, api_key="unused")
  messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the quick"},
              {"role": "assistant", "content": "fox"}, {"role": "user", "content": "once upon"}]
  rendered = transformers.AutoTokenizer.from_pretrained(gpt2_dir).apply_chat_template(
    messages, tokenize=False, add_generation_prompt=True)
  assert rendered.endswith("<|user|>once upon<eos><|assistant|>")
  chat = client.chat.completions.create(model="any", messages=messages, max_tokens=7)
  assert chat.choices[0].message.content == expected_text(gpt2_dir, rendered, 7)
  parts = [*messages[:3], {"role": "user", "content": [{"type": "text", "text": "once "}, {"type": "text",
                                                                                          "text": "upon"}]}]
  assert client.chat.completions.create(model="any", messages=parts, max_tokens=7).choices[0].message.content == \
    chat.choices[0].message.content


def test_two_clients_at_once_each_get_their_own_answer(server, gpt2_dir):
  """Generations run one at a time under the model's lock; the second client waits and then gets its answer."""
  openai = pytest.importorskip("openai")
  from concurrent.futures import ThreadPoolExecutor
  prompts = ["the quick", "once upon a time"]
  clients = [openai.OpenAI(base_url=server, api_key="unused") for _ in prompts]
  with ThreadPoolExecutor(2) as pool:
    texts = list(pool.map(lambda pair: pair[0].completions.create(model="any", prompt=pair[1], max_tokens=6)
                          .choices[0].text, zip(clients, prompts)))
  assert texts == [expected_text(gpt2_dir, p, 6) for p in prompts]


def test_without_a_template_a_conversation_is_role_lines():
  tokenizer = Tokenizer(None, {}, None)
  assert tokenizer.apply_chat_template([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]) \
    == "system: be brief\nuser: hi\nassistant:"


@pytest.mark.parametrize("call, message", [
  (dict(messages=[]), "messages must be a non-empty list"),
  (dict(messages=[{"role": "robot", "content": "hi"}]), r"messages\[0\] must be an object with a role"),
  (dict(messages=[{"role": "user", "content": 5}]), r"messages\[0\].content must be a string"),
  (dict(max_tokens=0), "max_tokens must be at least 1"),
  (dict(max_tokens=2.5), "max_tokens must be an integer"),
  (dict(temperature=-1), "temperature must be at least 0"),
  (dict(top_p=0, stream=True), r"top_p must be in \(0, 1\]"),
  (dict(n=2), "n must be 1"),
  (dict(stop=["\n"]), "stop sequences are not supported"),
  (dict(messages=[{"role": "user", "content": "the " * 200}], stream=True), "context holds"),
])
def test_bad_requests_get_a_400_naming_the_problem(server, call, message):
  """Each before any token is made: a streamed request is refused with the same JSON error."""
  openai = pytest.importorskip("openai")
  client = openai.OpenAI(base_url=server, api_key="unused")
  arguments = {"model": "any", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, **call}
  with pytest.raises(openai.BadRequestError, match=message) as error:
    client.chat.completions.create(**arguments)
  assert error.value.status_code == 400 and error.value.body["type"] == "invalid_request_error"
  with pytest.raises(openai.BadRequestError, match="prompt must be a string"):
    client.completions.create(model="any", prompt=[1, 2, 3], max_tokens=4)


@pytest.mark.parametrize("method, path, body, status, message", [
  ("POST", "/v1/chat/completions", b"{not json", 400, "the body is not JSON"),
  ("POST", "/v1/completions", b"[1, 2]", 400, "the body must be a JSON object, got list"),
  ("POST", "/v1/embeddings", b"{}", 404, "no route POST /v1/embeddings"),
  ("GET", "/v2/models", None, 404, "no route GET /v2/models"),
])
def test_malformed_requests_get_a_json_error(server, method, path, body, status, message):
  import json
  import urllib.error
  import urllib.request
  request = urllib.request.Request(server.removesuffix("/v1") + path, data=body, method=method,
                                   headers={"Content-Type": "application/json"})
  with pytest.raises(urllib.error.HTTPError) as error: urllib.request.urlopen(request, timeout=60)
  assert error.value.code == status and message in json.loads(error.value.read())["error"]["message"]


def test_a_sentencepiece_gguf_streams_its_continuation_with_its_spaces(tmp_path):
  """A LLaMA-2-style GGUF (SentencePiece vocabulary, <s> first): the text printed is the prompt and the new tokens
  as sentencepiece decodes them after the prompt, spaces included."""
  spm = pytest.importorskip("sentencepiece")
  from model_helpers import train_sentencepiece
  from test_gguf import Q, write_llama_gguf
  path = tmp_path / "model.gguf"
  write_llama_gguf(path, Q.Q4_0, tokenizer="llama")
  result = llm("--model", str(path), "--prompt", "the quick", "--max-new-tokens", "8")
  assert result.returncode == 0, result.stderr
  sp = spm.SentencePieceProcessor(model_proto=train_sentencepiece())
  ids = sp.encode("the quick")
  new = generate(from_pretrained(path), [[1] + ids], 8, stop_tokens=(2,))[0]
  new = new[:-1] if new and new[-1] == 2 else new
  assert result.stdout == sp.decode(ids + new) + "\n"


def test_a_gguf_file_runs_with_its_own_tokenizer(tmp_path):
  from test_gguf import Q, write_llama_gguf
  path = tmp_path / "model.gguf"
  write_llama_gguf(path, Q.Q8_0)
  result = llm("--model", str(path), "--prompt", "the quick", "--max-new-tokens", "6")
  assert result.returncode == 0, result.stderr
  tokenizer = Tokenizer.load(path)
  model = from_pretrained(path)
  ids = [1] + tokenizer.encode("the quick")  # (the LLaMA family starts with its bos token)
  assert result.stdout == "the quick" + tokenizer.decode(generate(model, [ids], 6)[0]) + "\n"
