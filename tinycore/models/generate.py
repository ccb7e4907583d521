"""Generation with a model's key/value cache: the prompt in one prefill, then one token per step through a TinyJit
capture whose position is a bound Variable, so every step replays the same kernels (no scheduling, no compiling).

    for tokens in generate(model, [prompt_ids], max_new_tokens=50, temperature=0.8, top_k=40, seed=1): ...

Prompts of different lengths in one batch: the common prefix is prefilled together, and a row still inside its
prompt takes its next prompt token instead of a sampled one, so each row generates exactly as it would alone.
Sampling (greedy, temperature, top-k, top-p) runs on the device; `seed` makes it repeatable."""
from __future__ import annotations
from typing import Any, Iterator, Sequence
from tinycore.dtype import dtypes
from tinycore.jit import TinyJit
from tinycore.tensor import Tensor
from tinycore.uop.ops import Variable


def sample(logits: Tensor, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
  """The next token of each row of logits (batch, vocab) as int32 (batch,): the argmax when temperature is 0, else
  a draw from softmax(logits / temperature) over the top_k most likely (0: all) within the smallest set whose
  probability reaches top_p."""
  if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
    raise ValueError(f"sampling needs temperature >= 0, 0 < top_p <= 1, top_k >= 0; got temperature {temperature}, "
                     f"top_p {top_p}, top_k {top_k}")
  if temperature == 0: return logits.argmax(-1).cast(dtypes.int32)
  scores = logits.float() / temperature
  k = min(top_k, scores.shape[-1]) if top_k else scores.shape[-1]
  if top_p < 1 or k < scores.shape[-1]: scores, order = scores.topk(k, dim=-1)
  else: order = None
  if top_p < 1:  # keep the most likely tokens until their probability reaches top_p (the first always)
    probs = scores.softmax(-1)
    before = probs.cumsum(-1) - probs
    scores = (before < top_p).where(scores, -float("inf"))
  choice = scores.softmax(-1).multinomial(1)  # (batch, 1)
  return (choice if order is None else order.gather(-1, choice)).reshape(-1).cast(dtypes.int32)


class Generator:
  """A model's decode step under TinyJit (`step(tokens (batch, 1), position)`), kept across generate calls."""

  def __init__(self, model: Any):
    self.model = model
    self.steps: dict[int, TinyJit] = {}  # one capture per batch size

  def step(self, tokens: Tensor, start_pos: Any) -> Tensor:
    if (jitted := self.steps.get(tokens.shape[0])) is None: jitted = self.steps[tokens.shape[0]] = TinyJit(self._step)
    return jitted(tokens, start_pos)

  def _step(self, tokens: Tensor, start_pos: Any) -> Tensor:
    return self.model(tokens, start_pos, logits_to_keep=1)[:, -1, :].realize()

  def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
               top_p: float = 1.0, seed: int | None = None,
               stop_tokens: Sequence[int] = ()) -> Iterator[list[int | None]]:
    """Yield, per step, each row's new token (None for a row that is still reading its prompt or has stopped)."""
    if not prompts or any(len(p) == 0 for p in prompts): raise ValueError("every prompt needs at least one token")
    context = self.model.context
    longest = max(len(p) for p in prompts)
    if longest + max_new_tokens > context:
      raise ValueError(f"a prompt of {longest} tokens plus {max_new_tokens} new ones is longer than the context "
                       f"({context} tokens)")
    if seed is not None: Tensor.manual_seed(seed)
    rows, common = len(prompts), min(len(p) for p in prompts)
    device = self.model.device
    prefill = Tensor([list(p[:common]) for p in prompts], dtype=dtypes.int32, device=device)
    logits = self.model(prefill, 0, logits_to_keep=1)[:, -1, :]  # (the head scores only the last position)
    produced = [0] * rows
    stopped = [False] * rows
    position = common
    while True:
      sampled = sample(logits, temperature, top_k, top_p).tolist()
      step_tokens: list[int] = []
      out: list[int | None] = []
      for r, prompt in enumerate(prompts):
        if position < len(prompt):  # still reading its prompt
          step_tokens.append(prompt[position])
          out.append(None)
          continue
        if stopped[r] or produced[r] >= max_new_tokens:
          step_tokens.append(0)
          out.append(None)
          continue
        token = int(sampled[r])
        produced[r] += 1
        if token in stop_tokens: stopped[r] = True
        step_tokens.append(token)
        out.append(token)
      if any(t is not None for t in out): yield out
      done = all(stopped[r] or produced[r] >= max_new_tokens for r in range(rows))
      if done: return
      bound = Variable("start_pos", 1, context - 1).bind(position)
      logits = self.step(Tensor([[t] for t in step_tokens], dtype=dtypes.int32, device=device), bound)
      position += 1


def generate(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int, **kwargs: Any) -> list[list[int]]:
  """Each prompt's new tokens (a stop token, when one is met, is the last)."""
  generator = getattr(model, "generator", None)
  if generator is None: generator = model.generator = Generator(model)
  new: list[list[int]] = [[] for _ in prompts]
  for step in generator.generate(prompts, max_new_tokens, **kwargs):
    for row, token in enumerate(step):
      if token is not None: new[row].append(token)
  return new
