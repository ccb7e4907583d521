"""BERT encoders against transformers' BertModel on the same checkpoint: hidden states and the pooled output, with
padding masked by an attention mask and token types."""
from __future__ import annotations
import numpy as np
from tinycore import Tensor
from tinycore.models import from_pretrained
from model_helpers import torch, transformers


def test_hidden_states_and_pooled_output_match_transformers_with_padding(bert_dir):
  ref = transformers.BertModel.from_pretrained(bert_dir).eval()
  ids = np.array([[2, 17, 42, 3, 99, 8, 61, 5], [7, 9, 11, 13, 0, 0, 0, 0]], np.int64)
  mask = np.array([[1] * 8, [1] * 4 + [0] * 4], np.int64)
  types = np.array([[0] * 4 + [1] * 4, [0] * 8], np.int64)
  with torch.no_grad():
    out = ref(torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(types))
  hidden, pooled = from_pretrained(bert_dir)(Tensor(ids.astype(np.int32)), Tensor(mask.astype(np.int32)),
                                             Tensor(types.astype(np.int32)))
  want = out.last_hidden_state.numpy()
  np.testing.assert_allclose(hidden.numpy()[0], want[0], atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(hidden.numpy()[1, :4], want[1, :4], atol=1e-4, rtol=1e-4)  # the padded rows: any value
  np.testing.assert_allclose(pooled.numpy(), out.pooler_output.numpy(), atol=1e-4, rtol=1e-4)
