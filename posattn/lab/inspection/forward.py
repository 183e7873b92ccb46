"""One forward pass that keeps what attention saw: every layer's pre-softmax logits."""

from __future__ import annotations

import torch
from torch import Tensor

from ...models.encoder import Encoder


def attention_input(layer, x: Tensor) -> Tensor:
    """What the layer's attention projects: x (post-LN) or its LayerNorm (pre-LN)."""
    return layer.attention_norm(x) if layer.pre_norm else x


@torch.no_grad()
def logits_per_layer(encoder: Encoder, input_ids: Tensor, segment_ids=None) -> list[Tensor]:
    """[B, H, n, n] logits of every layer for unpadded sequences, computed by each layer's
    own `MultiHeadAttention.logits` (scale, positional bias, content x position terms and
    segment bias included) while the hidden states run through the real layers."""
    x, terms, mask, segment_bias = encoder.layer_inputs(input_ids, None, segment_ids)
    found = []
    for layer, layer_terms, segments in zip(encoder.layers, terms, segment_bias, strict=True):
        found.append(layer.attention.logits(attention_input(layer, x), layer_terms, segments))
        x = layer(x, layer_terms, mask, segments)
    return found
