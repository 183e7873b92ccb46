"""The relative-position toolkit: offsets j - i of an n x n attention matrix, and the views
that spread per-offset values into [n, n] without index scatters (`toeplitz`, `skew`)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..execution import use_skew

__all__ = [
    "offsets",
    "position_differences",
    "relative_positions",
    "skew",
    "toeplitz",
    "use_skew",
]


def relative_positions(seq_len: int, device) -> Tensor:
    """[n, n] with entry (i, j) = j - i."""
    positions = torch.arange(seq_len, device=device)
    return positions[None, :] - positions[:, None]


def position_differences(positions: Tensor) -> Tensor:
    """[B, n] positions of the tokens -> [B, n, n] with entry (b, i, j) = p_bj - p_bi: the
    relative position j - i of `relative_positions` at given positions."""
    return positions[..., None, :] - positions[..., :, None]


def offsets(seq_len: int, device) -> Tensor:
    """Every relative position j - i of an n x n attention matrix once: -(n-1) .. n-1."""
    return torch.arange(-(seq_len - 1), seq_len, device=device)


def toeplitz(by_offset: Tensor) -> Tensor:
    """[..., 2n-1] values of the offsets j - i (from `offsets`) -> [..., n, n] with
    T[..., i, j] = by_offset[..., j - i + n - 1].

    A relative bias built from its 2n-1 distinct values: overlapping windows (a view) and one
    flip, so the backward sums gradients along diagonals (unfold's backward) instead of
    scattering n^2 indices into a small table (on a GPU that scatter took 2 s at n=4096).
    """
    n = (by_offset.shape[-1] + 1) // 2
    # A table read as weight[buckets].T has its heads innermost, and flip keeps that layout:
    # the [H, n, n] bias would step over H values per key, which attention kernels read
    # several times slower (T5 forward at n=1024 on the 2-core CPU). The table is small.
    return by_offset.contiguous().unfold(-1, n, 1).flip(-2)


def skew(per_offset: Tensor) -> Tensor:
    """[..., n, 2n-1] values of each query row i at the offsets j - i (`offsets` order) ->
    [..., n, n] with S[..., i, j] = per_offset[..., i, j - i + n - 1].

    Row i of the result is a window of row i starting at n-1-i: a strided view with row
    stride 2n-2, whose backward copies (no index scatter and no atomics on a GPU).
    """
    per_offset = per_offset.contiguous()
    *lead, n, width = per_offset.shape
    lead_strides = per_offset.stride()[:-2]
    return per_offset.as_strided(
        (*lead, n, n), (*lead_strides, width - 1, 1), per_offset.storage_offset() + n - 1
    )
