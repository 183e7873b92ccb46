"""TUPE Eq. 6: the layer-1 logits of an input-additive model split into four terms, and
the same four terms of BERT-Ad (TUPE Sec. 4.2), which keeps them with positions projected apart.

With x_i = w_i + p_i at the input (w_i: word and, in BERT, segment embedding; p_i: position),

    alpha_ij = (w_i W^Q)(w_j W^K)^T + (w_i W^Q)(p_j W^K)^T + (p_i W^Q)(w_j W^K)^T
               + (p_i W^Q)(p_j W^K)^T                    (each times the layer's scale),

word-word, word-position, position-word, position-position (TUPE Figure 2). BERT normalises
the sum before layer 1, x_i = LN(w_i + p_i), and LN is linear in its input once the token's
standard deviation sigma_i is fixed, so the split stays exact:

    LN(w_i + p_i) = [gamma (w_i - mean(w_i)) / sigma_i + beta] + [gamma (p_i - mean(p_i)) / sigma_i]

(the same split is repeated through a pre-LN layer's attention LayerNorm). The projection
biases go with the word part. A content-free bias of the layer (BERT-R's relative bias, DIET
segment scalars) is returned as a fifth term, "bias", so that the terms always sum to the
logits the model computes.

BERT-Ad adds p_i U^Q and p_j U^K to the layer's q_i and k_j, so its logits are the same four
products with the positions' own projections, (q_i + p_i U^Q)(k_j + p_j U^K)^T / sqrt(4 d_h)
(`scale_multiple` for the 4); no position enters its input, so layer 1's q and k are the words'
alone and the split is exact.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...encodings import Place
from ...encodings.tupe import BertAd
from ...errors import invalid
from ...models.encoder import Encoder

TERMS = ("word-word", "word-position", "position-word", "position-position")


def is_input_additive(encoder: Encoder) -> bool:
    """Positions enter only as a vector added to the input (BERT-A, sinusoidal, BERT-R's
    absolute part): layer 1 then has TUPE Eq. 6's four terms."""
    encoding = encoder.encoding
    inside = {Place.QK_TRANSFORM, Place.CONTENT_POSITION, Place.SEQUENCE_PROJECTION}
    return Place.INPUT in encoding.places and not inside & set(encoding.places)


def projects_positions_apart(encoder: Encoder) -> bool:
    """BERT-Ad: the four terms, each a product of the layer's q or k and the positions' own."""
    return isinstance(encoder.encoding, BertAd)


def has_four_terms(encoder: Encoder) -> bool:
    """Layer 1's logits split exactly into TUPE's four terms (`four_terms`)."""
    return is_input_additive(encoder) or projects_positions_apart(encoder)


def split_layer_norm(norm: torch.nn.LayerNorm, word: Tensor, position: Tensor):
    """LN(word + position) as (word part, position part), exact (see the module docstring)."""
    total = word + position
    sigma = torch.sqrt(total.var(-1, unbiased=False, keepdim=True) + norm.eps)
    word_part = (word - word.mean(-1, keepdim=True)) / sigma * norm.weight + norm.bias
    position_part = (position - position.mean(-1, keepdim=True)) / sigma * norm.weight
    return word_part, position_part


@torch.no_grad()
def four_terms(encoder: Encoder, input_ids: Tensor, segment_ids=None) -> dict[str, Tensor]:
    """TUPE Eq. 6 for layer 1: name -> [B, H, n, n]; their sum is the layer's logits."""
    if not has_four_terms(encoder):
        raise invalid(
            "encoding",
            encoder.config.encoding,
            "an input-additive encoding (positions added to the input) or bert-ad: TUPE Eq. 6 "
            "splits layer 1 of such models only",
        )
    if segment_ids is None:
        segment_ids = torch.zeros_like(input_ids)
    if projects_positions_apart(encoder):
        return _projected_apart_terms(encoder, input_ids, segment_ids)
    n = input_ids.shape[1]
    _, terms, _, segment_bias = encoder.layer_inputs(input_ids, None, segment_ids)
    embeddings = encoder.embeddings
    dtype = embeddings.word.weight.dtype
    word = embeddings.word(input_ids)
    if embeddings.segment is not None:
        word = word + embeddings.segment(segment_ids)
    position = encoder.encoding.input_embedding(n, input_ids.device, dtype).expand_as(word)
    word, position = split_layer_norm(embeddings.norm, word, position)
    layer = encoder.layers[0]
    if layer.pre_norm:
        word, position = split_layer_norm(layer.attention_norm, word, position)
    attention, layer_terms = layer.attention, terms[0]
    q_word, k_word = attention.project_queries_keys(word)
    q_pos, k_pos = attention.project_queries_keys(position, bias=False)
    return _products(attention, layer_terms, segment_bias[0], q_word, k_word, q_pos, k_pos)


def _projected_apart_terms(encoder: Encoder, input_ids: Tensor, segment_ids: Tensor):
    x, terms, _, segment_bias = encoder.layer_inputs(input_ids, None, segment_ids)
    layer = encoder.layers[0]
    if layer.pre_norm:
        x = layer.attention_norm(x)
    q_word, k_word = layer.attention.project_queries_keys(x)
    # The encoding's own q/k transform adds p U to q and k; given zeros it returns p U alone.
    q_pos, k_pos = terms[0].transform_qk(torch.zeros_like(q_word), torch.zeros_like(k_word))
    return _products(layer.attention, terms[0], segment_bias[0], q_word, k_word, q_pos, k_pos)


def _products(attention, layer_terms, segment_bias, q_word, k_word, q_pos, k_pos) -> dict:
    scale = layer_terms.scale
    found = {
        "word-word": q_word @ k_word.transpose(-1, -2) * scale,
        "word-position": q_word @ k_pos.transpose(-1, -2) * scale,
        "position-word": q_pos @ k_word.transpose(-1, -2) * scale,
        "position-position": q_pos @ k_pos.transpose(-1, -2) * scale,
    }
    bias = attention.positional_bias(q_word, k_word, layer_terms, segment_bias)
    if bias is not None:
        found["bias"] = bias.expand_as(found["word-word"])
    return found
