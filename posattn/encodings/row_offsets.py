"""Values per query row and table row, spread over the keys by clipped offset, and back.

Shaw's content x position terms read, for each query row i and key j, the table row
r(j - i) = clip(j - i, -t, t) + t of a per-row vector: the key term spreads q a^K_r
([..., m, 2t+1]) over the keys (a gather), the value term sums the probabilities of each
row's keys by table row (a scatter), and each is the other's backward. `seen` (`toeplitz`
order: entry c is offset c - (m-1) from the first of m query rows, as `ShawRelative.rows`
gives it) holds the table row of every offset: a run of clipped offsets, consecutive rows,
another run.

The sums are taken without index scatters: each [m, n] block is copied into a zeroed
[m, m + n - 1] buffer through `skew`'s window (row i at columns m-1-i on, so column c holds
offset c - (m-1)), the consecutive rows are then a column slice and each clipped run a row sum.
The buffer is reused block after block (the copy writes the same window each time, the rest
stays zero). On the 2-core development CPU, one thread, [8, 8, n, n] with t = 128: 6.6 ms
against scatter_add's 30 at n=512, 22 against 155 at n=1024 (one script, medians of 7).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..toeplitz import toeplitz
from ..tracing import traced

# Elements of one sums buffer: a few [m, m + n - 1] blocks at small n, one at n >= 512.
BUFFER_ELEMENTS = 2**20


@dataclass(frozen=True)
class OffsetRuns:
    """`seen` as three column ranges of the offsets: [0, first) all read table row `low`,
    [first, last) the consecutive rows from `low + 1`, [last, width) all row `high` (none
    when last == width)."""

    width: int
    first: int
    last: int
    low: int
    high: int

    @classmethod
    def of(cls, seen: Tensor) -> OffsetRuns | None:
        """The runs of `seen`, or None where it is not a clipped ramp (then the sums scatter)."""
        values = seen.tolist()
        width = len(values)
        first = next((c for c, r in enumerate(values) if r != values[0]), width)
        last = next((width - c for c, r in enumerate(reversed(values)) if r != values[-1]), 0)
        runs = cls(width, first, max(first, last), values[0], values[-1])
        middle = values[runs.first : runs.last]
        ends = [runs.high] if runs.last < width else []
        read = [runs.low, *middle, *ends]
        consecutive = middle == list(range(runs.low + 1, runs.low + 1 + len(middle)))
        return runs if consecutive and len(set(read)) == len(read) else None


def spread(per_row: Tensor, seen: Tensor, n: int) -> Tensor:
    """[..., m, R] -> [..., m, n] with out[..., i, j] = per_row[..., i, seen[j - i + m - 1]]."""
    index = toeplitz(seen, n).expand(*per_row.shape[:-1], n)
    return torch.gather(per_row, -1, index)


def sums_by_row(values: Tensor, seen: Tensor, rows: int) -> Tensor:
    """[..., m, n] -> [..., m, rows] with out[..., i, r] = sum of values[..., i, j] over the
    keys j whose offset reads table row r (`spread`'s adjoint)."""
    runs = OffsetRuns.of(seen) if values.device.type == "cpu" else None
    return scattered_sums(values, seen, rows) if runs is None else _sums_by_runs(values, runs, rows)


def scattered_sums(values: Tensor, seen: Tensor, rows: int) -> Tensor:
    """`sums_by_row` by torch's scatter_add (differentiable: its backward is a gather)."""
    index = toeplitz(seen, values.shape[-1]).expand_as(values)
    return values.new_zeros(*values.shape[:-1], rows).scatter_add_(-1, index, values)


def _sums_by_runs(values: Tensor, runs: OffsetRuns, rows: int) -> Tensor:
    *lead, m, n = values.shape
    flat = values.reshape(-1, m, n)
    # Rows [low, middle's end) are written below, the rest zeroed first (the last run's row
    # is written after): a zero fill of a whole [8, 8, 128, 256] result took 2.8 ms in a
    # profile, as long as the sums.
    out = values.new_empty(flat.shape[0], m, rows)
    out[..., : runs.low].zero_()
    out[..., runs.low + 1 + runs.last - runs.first :].zero_()
    per_block = max(1, BUFFER_ELEMENTS // (m * runs.width))
    buffer = values.new_zeros(min(per_block, flat.shape[0]), m, runs.width)
    middle = slice(runs.low + 1, runs.low + 1 + runs.last - runs.first)  # the middle's rows
    for start in range(0, flat.shape[0], per_block):
        block = flat[start : start + per_block]
        held = buffer[: block.shape[0]]
        window = held.as_strided((block.shape[0], m, n), (m * runs.width, runs.width - 1, 1), m - 1)
        window.copy_(block)
        target = out[start : start + block.shape[0]]
        torch.sum(held[..., : runs.first], -1, out=target[..., runs.low])
        target[..., middle].copy_(held[..., runs.first : runs.last])
        if runs.last < runs.width:
            torch.sum(held[..., runs.last :], -1, out=target[..., runs.high])
    return out.reshape(*lead, m, rows)


class ByOffset(torch.autograd.Function):
    """`spread` (spreads=True) or `sums_by_row`, each the other's backward; `size`: the
    result's last dimension (n keys, or the table's rows). The backward goes through the
    Function again, so that it is differentiable in turn (a double backward: gradient
    penalties, Hessian-vector products)."""

    @staticmethod
    def forward(ctx, x, seen, size, spreads):
        ctx.save_for_backward(seen)
        ctx.size, ctx.spreads = x.shape[-1], spreads
        return spread(x, seen, size) if spreads else sums_by_row(x, seen, size)

    @staticmethod
    def backward(ctx, grad):
        (seen,) = ctx.saved_tensors
        adjoint = sums_by_offset_row if ctx.spreads else spread_by_offset
        return adjoint(grad, seen, ctx.size), None, None, None


def spread_by_offset(per_row: Tensor, seen: Tensor, n: int) -> Tensor:
    """`spread` with gradients; a compiled graph and torch.func's transforms take torch's
    gather and its scatter (the runs are read from `seen`'s values, which a graph does not
    have; the transforms do not take `ByOffset`)."""
    if traced():
        return spread(per_row, seen, n)
    return ByOffset.apply(per_row, seen, n, True)


def sums_by_offset_row(values: Tensor, seen: Tensor, rows: int) -> Tensor:
    """`sums_by_row` with gradients (in a compiled graph and under torch.func's transforms,
    torch's scatter_add)."""
    if traced():
        return scattered_sums(values, seen, rows)
    return ByOffset.apply(values, seen, rows, False)
