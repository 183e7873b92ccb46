"""Padding and causal masks in the one form every kernel takes: bool, True = may attend."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class MaskLayout:
    """What `build_attention_mask` built a mask from, for kernels that compute the mask in
    registers and skip fully masked blocks instead of reading [n_q, n_k] booleans.

    Query row i (position i + query_start) sees key j iff keys[b, j] (None: every key) and,
    when causal, j <= i + query_start; a row that sees no key that way sees every key.
    """

    keys: Tensor | None
    causal: bool
    query_start: int


def mask_layout(mask: Tensor | None) -> MaskLayout | None:
    """The layout `build_attention_mask` recorded on `mask`, or None (another mask, or a
    tensor derived from one)."""
    return getattr(mask, "posattn_layout", None)


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
    never see padded keys. Without documents the mask carries its `MaskLayout` (`mask_layout`).
    """
    mask = None
    keys = None if padding_mask is None else padding_mask.bool()
    if keys is not None:
        mask = keys[:, None, None, :]  # [B, 1, 1, n]
    if documents is not None:
        same = documents[:, None, query_start:, None] == documents[:, None, None, :]
        mask = same if mask is None else mask & same
    if causal:
        # Only the query rows: row r is position query_start + r (a decoding step's one row,
        # not [n, n] cut down to it).
        rows = seq_len - query_start
        lower = torch.ones(rows, seq_len, dtype=torch.bool, device=device).tril(query_start)
        mask = lower[None, None] if mask is None else mask & lower
    if mask is None:
        return None
    mask = mask | ~mask.any(-1, keepdim=True)
    if documents is None:  # a layout describes padding and causality only
        mask.posattn_layout = MaskLayout(keys, causal, query_start)
    return mask


def derived_once(owner: Tensor, key: tuple | None, make):
    """make(), kept on `owner` under `key` and handed out again while the key is the same: a
    mask serves every layer of a forward, and what a kernel derives from it (a handful of
    small device ops, which a GPU call at n <= 1024 waits on) is then made once per forward,
    not once per layer. Nothing is kept with key None, nor while torch.compile traces (the
    ops go into its graph)."""
    if key is None or torch.compiler.is_compiling():
        return make()
    kept = getattr(owner, "posattn_derived", None)
    if kept is not None and kept[0] == key:
        return kept[1]
    value = make()
    owner.posattn_derived = (key, value)
    return value


def key_spans(
    keys: Tensor | None, first: Tensor | None, causal: bool, batch: int, n_k: int, device
) -> Tensor | None:
    """int32 [B, 4] per batch element for kernel="triton" (it skips the blocks of keys that no
    row sees, and masks none of the blocks inside a run of visible keys), or None where it
    reads none (no keys, not causal): the first real key, where a causal row before it is
    opened to every key (`first`; None: the first visible key, n_k where none is); the first
    and one past the last visible key (nonzero in keys [B, n_k]; [0, n_k) without keys,
    [0, 0) where none is); and 1 where every key between those two is visible (padding on
    either side), 0 where one is hidden (a hole)."""
    if keys is None:
        if not causal:
            return None
        # [0, 0, n_k, 1] a row, filled on the device (a tensor copied from host memory
        # waits for the GPU's queued work).
        spans = torch.zeros(batch, 4, dtype=torch.int32, device=device)
        spans[:, 2] = n_k
        spans[:, 3] = 1
        if first is not None:
            spans[:, 0] = first
        return spans
    visible = keys != 0
    seen = visible.any(-1)
    low = torch.where(seen, visible.int().argmax(-1), 0)
    high = torch.where(seen, n_k - visible.flip(-1).int().argmax(-1), 0)
    whole = visible.sum(-1) == high - low
    if first is None:
        first = torch.where(seen, low, n_k)
    return torch.stack([first.to(low.dtype), low, high, whole.to(low.dtype)], 1).int().contiguous()
