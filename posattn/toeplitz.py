"""The Toeplitz matrix of a relative bias, built from its table of one value per offset j - i:
shared by the encodings (`posattn.encodings.relative`) and the CPU kernel that reads tables
(`posattn.kernels.fused_bias`), which must build the same matrix, bit for bit; and TUPE's
[CLS] untie on such a matrix (`ClsUntie`) and the tails where such a table is known without
reading it (`TableTails`), as the encodings describe them to the kernels."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import invalid
from .tracing import is_symbolic


def toeplitz(by_offset: Tensor, n_k: int | None = None) -> Tensor:
    """[..., n_q + n_k - 1] values of the offsets j - i -> [..., n_q, n_k] with
    T[..., i, j] = by_offset[..., j - i + n_q - 1] (n_k None: square, [..., 2n-1] -> [..., n, n]).

    Overlapping windows (a view) and one flip, so the backward sums gradients along diagonals
    (unfold's backward) instead of scattering n^2 indices into a small table (on a GPU that
    scatter took 2 s at n=4096).
    """
    n_k = (by_offset.shape[-1] + 1) // 2 if n_k is None else n_k
    # A table read as weight[buckets].T has its heads innermost, and flip keeps that layout:
    # the [H, n, n] bias would step over H values per key, which attention kernels read
    # several times slower (T5 forward at n=1024 on the 2-core CPU). The table is small.
    if is_symbolic(n_k):
        # A length traced as symbolic (torch.export's Dim, compile's dynamic shapes): unfold
        # takes an int size, which would fix the length. A gather by offset instead; under
        # inductor on the CPU its backward (fwd+bwd 82 ms at H=8, n=1024) beat a strided
        # view's (370 ms), against 7 ms for unfold at a fixed length.
        n_q = by_offset.shape[-1] - n_k + 1
        device = by_offset.device
        key, query = torch.arange(n_k, device=device), torch.arange(n_q, device=device)
        return by_offset[..., key[None, :] - query[:, None] + (n_q - 1)]
    return by_offset.contiguous().unfold(-1, n_k, 1).flip(-2)


def untied(value: Tensor, query, key, row: int, column: int, column_value: Tensor) -> Tensor:
    """`value` at (query, key) indices with TUPE's [CLS] untie: 0 on query row `row`, else
    `column_value` on key `column`. Broadcast over whole matrices (`ClsUntie.applied`) or read
    score by score (FlexAttention's score_mod)."""
    return torch.where(query == row, 0.0, torch.where(key == column, column_value, value))


@dataclass(frozen=True)
class ClsUntie:
    """TUPE's [CLS] untie (Eq. 9) on a Toeplitz matrix, told to the kernels that read the
    matrix from its table: query row `row` becomes 0 and key column `column`, on every other
    row, becomes column_value[h] ([H]). The row's 0 stands for the [CLS] row's own value, a
    constant per row, which no softmax sees. `row` counts the matrix's query rows: a slice of
    decoding rows shifts it (`from_row`), and it may fall outside them."""

    row: int
    column: int
    column_value: Tensor

    def applied(self, matrix: Tensor) -> Tensor:
        """[..., H, n_q, n_k] -> the same with the untie written in."""
        n_q, n_k = matrix.shape[-2:]
        query = torch.arange(n_q, device=matrix.device)[:, None]
        key = torch.arange(n_k, device=matrix.device)
        value = self.column_value.to(matrix.dtype)[:, None, None]
        return untied(matrix, query, key, self.row, self.column, value)

    def folded_into(self, factors: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """Low-rank factors [1, H, n, r] with one more column that carries this untie on a
        matrix of zeros (no table): 1 on every query but `row` (whose 0 keeps it constant),
        column_value[h] on key `column`."""
        f_q, f_k = factors
        n_q, n_k = f_q.shape[-2], f_k.shape[-2]
        query = (torch.arange(n_q, device=f_q.device) != self.row).to(f_q.dtype)
        key = (torch.arange(n_k, device=f_k.device) == self.column).to(f_k.dtype)
        value = self.column_value.to(f_k.dtype)[:, None] * key  # [H, n_k]
        f_q = torch.cat([f_q, query[:, None].expand(*f_q.shape[:-1], 1)], -1)
        f_k = torch.cat([f_k, value[..., None].expand(*f_k.shape[:-1], 1)], -1)
        return f_q, f_k

    def from_row(self, start: int) -> ClsUntie:
        """The untie of the query rows [start, n_q) of the matrix."""
        return ClsUntie(self.row - start, self.column, self.column_value)


@dataclass(frozen=True)
class TableTails:
    """Where a Toeplitz bias's table is known by construction, past two position offsets
    d = j - i, low <= high: flat (`slopes` None: every offset past a bound reads the bound's
    parameter entry, so a whole tail's gradient may go to that entry; T5's last buckets past
    max_distance, DIET-REL's clipped rows) or a line through the bound's value (`slopes`:
    per-head [H] slopes of the low and the high tail, bias(d) = bias(bound) + slope (d -
    bound); for a table that takes no gradient: ALiBi, -m |d|, whose tails meet at 0).
    Kernels that read tables (kernel="triton") handle the tiles inside a tail without reading
    the table; the others read the table, which holds the same values."""

    low: int
    high: int
    slopes: tuple[Tensor, Tensor] | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.low, int) and isinstance(self.high, int) and self.low <= self.high):
            raise invalid("TableTails", (self.low, self.high), "integer offsets low <= high")


def lines_served(table: Tensor | None, untie) -> bool:
    """Whether a table's linear tails (`TableTails.slopes`) may stand in for reading it: only
    where it takes no gradient now and no [CLS] untie sits on it - a line's gradient is not
    one entry's, and a kernel takes the untie off one value per head, not off a line."""
    learned = table is not None and table.requires_grad and torch.is_grad_enabled()
    return not learned and untie is None


def require_table_shape(parameter: str, table: Tensor, q: Tensor, k: Tensor) -> None:
    """An offset table holds one value per head and offset j - i: [H, n_q + n_k - 1]. One of
    another length would be read shifted (the Triton kernel's reversed copies run from its last
    entry)."""
    expected = (q.shape[1], q.shape[-2] + k.shape[-2] - 1)
    if tuple(table.shape) != expected:
        raise invalid(parameter, tuple(table.shape), f"{expected} ([H, n_q + n_k - 1])")
