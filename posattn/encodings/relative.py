"""The relative-position toolkit: offsets j - i of an n x n attention matrix, and the views
that spread per-offset values into [n, n] without index scatters (`toeplitz`, `skew`)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..execution import use_skew
from ..toeplitz import toeplitz

__all__ = [
    "lookup_by_head",
    "offsets",
    "position_differences",
    "relative_positions",
    "rows_widened",
    "skew",
    "toeplitz",
    "use_skew",
]


def relative_positions(seq_len: int, device) -> Tensor:
    """[n, n] with entry (i, j) = j - i."""
    positions = torch.arange(seq_len, device=device)
    return positions[None, :] - positions[:, None]


def position_differences(positions: Tensor, start: int = 0) -> Tensor:
    """[B, n] positions of the tokens -> [B, n - start, n] with entry (b, i, j) =
    p_bj - p_b(start + i): the relative position j - i of `relative_positions` at given
    positions, for the query rows [start, n) (all of them by default)."""
    return positions[..., None, :] - positions[..., start:, None]


def lookup_by_head(table: Tensor, index: Tensor) -> Tensor:
    """A per-head table [K, H] read at indices [..., n, n] -> [..., H, n, n] with entry
    (..., h, i, j) = table[index[..., i, j], h], each head's [n, n] block contiguous.

    table[index] would put the heads innermost, and attention kernels read a bias that steps
    over H values per key several times slower (the same layout `toeplitz` avoids)."""
    return table.T.contiguous()[:, index].movedim(0, -3)


def offsets(seq_len: int, device) -> Tensor:
    """Every relative position j - i of an n x n attention matrix once: -(n-1) .. n-1."""
    return torch.arange(-(seq_len - 1), seq_len, device=device)


def skew(per_offset: Tensor) -> Tensor:
    """[..., m, m + n - 1] values of each query row i at the offsets j - i (`offsets` order,
    `toeplitz`'s for m query rows and n keys; square: [..., n, 2n-1]) -> [..., m, n] with
    S[..., i, j] = per_offset[..., i, j - i + m - 1].

    Row i of the result is a window of row i starting at m-1-i: a strided view with row
    stride m + n - 2, whose backward copies (no index scatter and no atomics on a GPU).
    """
    per_offset = per_offset.contiguous()
    *lead, m, width = per_offset.shape
    lead_strides = per_offset.stride()[:-2]
    return per_offset.as_strided(
        (*lead, m, width - m + 1),
        (*lead_strides, width - 1, 1),
        per_offset.storage_offset() + m - 1,
    )


def rows_widened(first: int, last: int, rows: int) -> slice:
    """The rows [first, last] of a table of `rows`, widened to a multiple of 16 within it:
    what a product against the rows some offset reads takes (Shaw's, DeBERTa's). Odd widths
    cost: q [8, 8, 256, 64] against 255 rows and a gather took 9.3 ms against 8.6 for 256 on
    the 2-core development CPU, one thread."""
    width = min(rows, -(-(last + 1 - first) // 16) * 16)
    first = min(first, rows - width)
    return slice(first, first + width)
