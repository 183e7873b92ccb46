"""Padding and causal masks in the one form every kernel takes: bool, True = may attend."""

from __future__ import annotations

import torch
from torch import Tensor


def build_attention_mask(
    padding_mask: Tensor | None,
    seq_len: int,
    causal: bool,
    device: torch.device,
    query_start: int = 0,
    documents: Tensor | None = None,
) -> Tensor | None:
    """Bool mask broadcastable to [B, H, n - query_start, n], or None when every key is visible.

    padding_mask: [B, n] over the keys, True (or 1) for real tokens. query_start: the queries
    are the rows [query_start, n) (incremental decoding: earlier tokens are cached keys only).
    documents: [B, n] document id of every token (packed rows): a query sees the keys of its
    own document only.
    A query row with no visible key (a fully padded sequence, or a left-padded causal row) is
    opened to all keys: its output is finite and meaningless instead of NaN, and real rows
    never see padded keys.
    """
    mask = None
    if padding_mask is not None:
        mask = padding_mask.bool()[:, None, None, :]  # [B, 1, 1, n]
    if documents is not None:
        same = documents[:, None, query_start:, None] == documents[:, None, None, :]
        mask = same if mask is None else mask & same
    if causal:
        lower = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()[query_start:]
        mask = lower[None, None] if mask is None else mask & lower
    if mask is None:
        return None
    return mask | ~mask.any(-1, keepdim=True)
