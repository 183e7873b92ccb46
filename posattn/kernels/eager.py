"""The reference kernel: every term written out, probabilities materialised."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F


def attention_logits(q: Tensor, k: Tensor, scale: float, bias: Tensor | None) -> Tensor:
    """q k^T * scale + bias, [B, H, n_q, n_k] before masking."""
    logits = (q @ k.transpose(-1, -2)) * scale
    return logits if bias is None else logits + bias.to(logits.dtype)


def attention_probabilities(
    q: Tensor,
    k: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
) -> Tensor:
    """softmax(q k^T * scale + bias, masked) [B, H, n_q, n_k], dropout applied: what the
    eager kernel multiplies v by, and what a value-side term (Shaw values) reads."""
    logits = attention_logits(q, k, scale, bias)
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return F.dropout(probs, p=dropout_p) if dropout_p > 0 else probs


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
) -> Tensor:
    return attention_probabilities(q, k, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p) @ v
