"""GGUF: files written here by the `gguf` package (its writer, its quantizers where it has them, its dequantizer as
the reference) load through tinycore.nn.gguf and run the LLaMA model: every supported tensor type dequantized on the
device exactly as the gguf package does, logits against transformers holding the same dequantized weights, and the
file's tokenizer."""
from __future__ import annotations
import gc
import json
import numpy as np
import pytest
from tinycore import GlobalCounters, Tensor, dtypes
from tinycore.models import from_pretrained
from tinycore.models.generate import generate
from tinycore.models.tokenizer import Tokenizer
from tinycore.nn.gguf import GGUFError, QuantizedTensor, gguf_load
from model_helpers import TEXT, VOCAB, torch, train_sentencepiece, train_tokenizer, transformers

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
QUANTIZED_BY_THE_PACKAGE = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1]
K_QUANTS = {Q.Q4_K: (144, 0), Q.Q6_K: (210, 208)}  # block bytes, where the f16 scale is (the package has no quantizer)


def encode(x: np.ndarray, qtype, rng) -> np.ndarray:
  """x in qtype's bytes: the package's quantizer, or for a K-quant random blocks with small scales."""
  if qtype == Q.F32: return x.astype(np.float32)
  if qtype == Q.F16: return x.astype(np.float16)
  if qtype in K_QUANTS:
    block_bytes, scale_at = K_QUANTS[qtype]
    rows, cols = x.shape
    raw = rng.integers(0, 256, (rows, cols // 256 * block_bytes), dtype=np.uint8).reshape(rows, -1, block_bytes)
    scale = (rng.random(raw.shape[:2]) * 2e-4 + 1e-5).astype(np.float16).view(np.uint8).reshape(*raw.shape[:2], 2)
    raw[:, :, scale_at:scale_at + 2] = scale
    if qtype == Q.Q4_K: raw[:, :, 2:4] = scale  # dmin
    return raw.reshape(rows, -1)
  return gguf.quants.quantize(x, qtype)


def decode(raw: np.ndarray, qtype) -> np.ndarray:
  return raw.astype(np.float32) if qtype in (Q.F32, Q.F16) else gguf.quants.dequantize(raw, qtype)


@pytest.mark.parametrize("qtype", QUANTIZED_BY_THE_PACKAGE + list(K_QUANTS), ids=lambda q: q.name)
def test_each_tensor_type_dequantizes_as_the_gguf_package(tmp_path, qtype):
  rng = np.random.default_rng(int(qtype))
  x = rng.standard_normal((6, 512)).astype(np.float32)
  raw = encode(x, qtype, rng)
  writer = gguf.GGUFWriter(str(tmp_path / "t.gguf"), "llama")
  writer.add_uint32("test.count", 7)
  writer.add_array("test.list", ["a", "b"])
  writer.add_tensor("t", raw, raw_dtype=qtype)
  writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
  metadata, tensors = gguf_load(tmp_path / "t.gguf")
  assert metadata["test.count"] == 7 and metadata["test.list"] == ["a", "b"]
  assert tensors["t"].shape == (6, 512)
  np.testing.assert_array_equal(tensors["t"].float().numpy(), decode(raw, qtype).reshape(6, 512))


def write_tensor(path, name, raw, qtype) -> None:
  writer = gguf.GGUFWriter(str(path), "llama")
  writer.add_tensor(name, raw, raw_dtype=qtype)
  writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1] + list(K_QUANTS), ids=lambda q: q.name)
def test_a_quantized_matrix_multiplies_and_looks_up_rows_from_its_blocks(tmp_path, qtype):
  rng = np.random.default_rng(int(qtype) + 100)
  raw = encode(rng.standard_normal((24, 512)).astype(np.float32), qtype, rng)
  write_tensor(tmp_path / "t.gguf", "t", raw, qtype)
  weight = gguf_load(tmp_path / "t.gguf", quantized=True)[1]["t"].realize()
  assert isinstance(weight, QuantizedTensor) and weight.shape == (24, 512) and weight.blocks.dtype == dtypes.uint8
  assert weight.nbytes == raw.nbytes  # the blocks as the file has them
  want = decode(raw, qtype).reshape(24, 512)
  x = rng.standard_normal((2, 3, 512)).astype(np.float32)
  np.testing.assert_allclose(weight.linear(Tensor(x)).numpy(), x @ want.T, rtol=1e-5, atol=1e-5 * np.abs(want).max())
  ids = np.array([[5, 0], [23, 5]], np.int32)
  np.testing.assert_array_equal(weight.rows(Tensor(ids)).numpy(), want[ids])
  np.testing.assert_array_equal(weight.dequantize().numpy(), want)


def permute(w: np.ndarray, heads: int) -> np.ndarray:  # llama.cpp's converter, for q and k
  return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
              "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
              "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
              "mlp.down_proj.weight": "ffn_down.weight"}


def add_byte_level_bpe(writer, directory) -> int:
  """The BPE tokenizer trained here (tokenizer.json beside the file) as GGUF metadata; its vocabulary size."""
  train_tokenizer(directory)
  vocab = json.loads((directory / "tokenizer.json").read_text())["model"]
  tokens = [t for t, _ in sorted(vocab["vocab"].items(), key=lambda kv: kv[1])]
  writer.add_tokenizer_model("gpt2"), writer.add_token_list(tokens)
  writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in vocab["merges"]])
  writer.add_token_types([3 if t == "<eos>" else 1 for t in tokens])
  writer.add_bos_token_id(1), writer.add_eos_token_id(0)
  return VOCAB + 2


def add_sentencepiece(writer) -> int:
  """A SentencePiece BPE trained here as llama.cpp's converter writes one: pieces, scores, token types."""
  spm = pytest.importorskip("sentencepiece")
  sp = spm.SentencePieceProcessor(model_proto=train_sentencepiece())
  size = sp.get_piece_size()
  types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 5 if sp.is_unused(i) else 1
           for i in range(size)]
  writer.add_tokenizer_model("llama"), writer.add_token_list([sp.id_to_piece(i) for i in range(size)])
  writer.add_token_scores([sp.get_score(i) for i in range(size)]), writer.add_token_types(types)
  writer.add_bos_token_id(1), writer.add_eos_token_id(2), writer.add_unk_token_id(0), writer.add_add_bos_token(True)
  return size


def write_llama_gguf(path, qtype, seed=0, tokenizer="gpt2"):
  """A LLaMA (GQA) in transformers, written as llama.cpp's converter would (q/k rows permuted, norms in F32), its
  matrices in qtype, with the byte-level BPE ("gpt2") or a SentencePiece BPE ("llama") trained here; returns
  transformers' model holding the weights the file decodes to."""
  torch.manual_seed(seed)
  writer = gguf.GGUFWriter(str(path), "llama")
  vocab_size = add_byte_level_bpe(writer, path.parent) if tokenizer == "gpt2" else add_sentencepiece(writer)
  config = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                    rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=0)
  model = transformers.LlamaForCausalLM(config).eval()
  rng = np.random.default_rng(seed)
  writer.add_block_count(2), writer.add_context_length(128), writer.add_embedding_length(256)
  writer.add_feed_forward_length(512), writer.add_head_count(4), writer.add_head_count_kv(2)
  writer.add_layer_norm_rms_eps(1e-5), writer.add_rope_freq_base(10000.0)
  state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
  decoded = {}
  for name, w in state.items():
    if name.startswith("model.layers."):
      _, _, layer, rest = name.split(".", 3)
      target = f"blk.{layer}.{GGUF_NAMES[rest]}"
    else: target = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                    "lm_head.weight": "output.weight"}[name]
    heads = 4 if "q_proj" in name else 2 if "k_proj" in name else None
    stored = permute(w, heads) if heads else w
    kind = qtype if w.ndim == 2 else Q.F32
    raw = encode(stored, kind, rng)
    writer.add_tensor(target, raw, raw_dtype=kind)
    back = decode(raw, kind).reshape(stored.shape)
    decoded[name] = permute(back, heads) if False else (unpermute(back, heads) if heads else back)
  writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
  model.load_state_dict({k: torch.tensor(v) for k, v in decoded.items()})
  return model


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
  return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.Q8_0, Q.Q4_0, Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_a_llama_gguf_gives_transformers_logits_for_the_weights_it_holds(tmp_path, qtype):
  path = tmp_path / "model.gguf"
  ref = write_llama_gguf(path, qtype)
  tokens = np.array([[5, 17, 42, 3, 99, 8]], np.int64)
  with torch.no_grad(): want = ref(torch.tensor(tokens)).logits.numpy()
  model = from_pretrained(path)
  np.testing.assert_allclose(model(Tensor(tokens.astype(np.int32))).numpy(), want, atol=2e-4, rtol=1e-4)
  with torch.no_grad():
    greedy = ref.generate(torch.tensor(tokens), max_new_tokens=12, do_sample=False, eos_token_id=None,
                          pad_token_id=0, attention_mask=torch.ones_like(torch.tensor(tokens)))[0, 6:].tolist()
  assert generate(model, [tokens[0].tolist()], 12)[0] == greedy


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_K], ids=lambda q: q.name)
def test_a_quantized_llama_holds_its_blocks_not_float32_copies(tmp_path, qtype):
  """The loaded model's device memory is the file's tensors (blocks as they are, norms in F32) plus the rotary
  tables; a forward pass adds its key/value cache and activations (kilobytes for 6 tokens) but no dequantized
  weight: the smallest matrix in float32, k_proj's 128 x 256, is 128 KiB, and all of them 3.3 MiB."""
  path = tmp_path / "model.gguf"
  write_llama_gguf(path, qtype)
  tensors = gguf.GGUFReader(str(path)).tensors
  tensor_bytes, float_bytes = sum(int(t.n_bytes) for t in tensors), sum(int(t.n_elements) * 4 for t in tensors)
  gc.collect()
  before = GlobalCounters.mem_used
  model = from_pretrained(path, context=16)
  held = GlobalCounters.mem_used - before
  rotary = 2 * 16 * 64 * 4  # cos and sin: (context, head dim) float32
  assert tensor_bytes + rotary <= held <= tensor_bytes + rotary + 4096 and held < float_bytes / 3
  GlobalCounters.reset()
  logits = model(Tensor([[5, 17, 42, 3, 99, 8]], dtype=dtypes.int32)).numpy()
  assert logits.shape == (1, 6, VOCAB + 2)
  assert GlobalCounters.mem_peak - before - held < 128 * 1024


def test_the_file_s_tokenizer_round_trips_and_matches_tokenizer_json(tmp_path):
  path = tmp_path / "model.gguf"
  write_llama_gguf(path, Q.F16)
  from_file, from_json = Tokenizer.load(path), Tokenizer.load(tmp_path)
  for text in TEXT[:3] + ["fox kernels, once!"]:
    ids = from_file.encode(text)
    assert ids == from_json.encode(text) and from_file.decode(ids) == text
  assert from_file.special("eos_token") == "<eos>"


SENTENCEPIECE_TEXTS = TEXT[:3] + ["fox kernels, once!", " a leading space", "two  spaces and\na newline",
                                   "bytes: \u00fcn\u00efc\u00f6d\u00e9 \u2603 \U0001f600", ""]


def test_a_sentencepiece_vocabulary_tokenizes_as_the_sentencepiece_package(tmp_path):
  """tokenizer.ggml.model "llama": pieces with scores and types, <0xNN> byte pieces for characters the vocabulary
  lacks, the "▁" space marker and one in front; ids as sentencepiece's own encoder gives them, and back."""
  spm = pytest.importorskip("sentencepiece")
  sp = spm.SentencePieceProcessor(model_proto=train_sentencepiece())
  path = tmp_path / "model.gguf"
  write_llama_gguf(path, Q.F16, tokenizer="llama")
  tokenizer = Tokenizer.load(path)
  for text in SENTENCEPIECE_TEXTS:
    ids = tokenizer.encode(text)
    assert ids == sp.encode(text), text
    assert tokenizer.decode(ids) == sp.decode(ids) == text
  assert any(sp.is_byte(i) for i in tokenizer.encode(SENTENCEPIECE_TEXTS[6]))  # the snowman is bytes
  assert tokenizer.decode([1, *sp.encode("the quick"), 2]) == "the quick"  # <s> and </s> are not text
  # a control piece written in the text (a chat template's) is that token, as transformers' LlamaTokenizerFast has it
  assert tokenizer.encode("fox</s>the") == sp.encode("fox") + [2] + sp.encode("the")
  assert (tokenizer.special("bos_token"), tokenizer.special("eos_token"), tokenizer.special("unk_token")) == \
    ("<s>", "</s>", "<unk>")
  assert tokenizer.config["add_bos_token"] is True


def test_bad_gguf_files_name_the_problem(tmp_path):
  (tmp_path / "not.gguf").write_bytes(b"GGML" + bytes(60))
  with pytest.raises(GGUFError, match="not a GGUF file"): gguf_load(tmp_path / "not.gguf")
  with pytest.raises(FileNotFoundError, match="no GGUF file"): gguf_load(tmp_path / "missing.gguf")
  writer = gguf.GGUFWriter(str(tmp_path / "q5.gguf"), "llama")
  writer.add_tensor("w", np.zeros((2, 22), np.uint8), raw_dtype=Q.Q5_0)
  writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
  with pytest.raises(GGUFError, match="'w' has type Q5_0, which tinycore does not dequantize"):
    gguf_load(tmp_path / "q5.gguf")
