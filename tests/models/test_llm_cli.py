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


@pytest.fixture
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
  with pytest.raises(openai.BadRequestError, match="messages"):
    client.chat.completions.create(model=name, messages=[], max_tokens=4)


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
