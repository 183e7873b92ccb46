"""The reference kernel: every term written out, probabilities materialised."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn import functional as F


def attention_logits(q: Tensor, k: Tensor, scale: float, bias: Tensor | None) -> Tensor:
    """q k^T * scale + bias, [B, H, n_q, n_k] before masking."""
    logits = (q @ k.transpose(-1, -2)) * scale
    return logits if bias is None else logits + bias.to(logits.dtype)


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    value_term: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    logits = attention_logits(q, k, scale, bias)
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    probs = F.dropout(probs, p=dropout_p) if dropout_p > 0 else probs
    out = probs @ v
    return out if value_term is None else out + value_term(probs)
