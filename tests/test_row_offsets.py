"""`row_offsets`: per-row values spread over the keys by clipped offset and their sums back,
against loops written from the definition (out[i, j] = per_row[i, r(j - i)] and its adjoint),
for whole matrices and for the last query rows, clipped at one end, both or neither; the
runs read from `seen`, and what is not a clipped ramp summed by scatter; the rows a product
reads, widened to a multiple of 16 (`rows_widened`)."""

from __future__ import annotations

import pytest
import torch

from posattn.encodings import row_offsets
from posattn.encodings.relative import offsets, rows_widened
from posattn.encodings.row_offsets import (
    OffsetRuns,
    spread,
    spread_by_offset,
    sums_by_offset_row,
    sums_by_row,
)

# (n, t, start): clipped at both ends, at neither (t >= n), query rows from `start` on
# (decoding), a single row, a single key.
CASES = [(7, 2, 0), (9, 3, 4), (9, 3, 8), (6, 10, 0), (11, 4, 0), (33, 40, 5), (1, 3, 0)]


def clipped_rows(n: int, t: int, start: int) -> torch.Tensor:
    """Shaw's table row of each offset the rows [start, n) see (`ShawRelative.layer_rows`)."""
    return (offsets(n, "cpu").clamp(-t, t) + t)[: 2 * n - 1 - start]


def table_row(seen: torch.Tensor, m: int, i: int, j: int) -> int:
    return int(seen[j - i + m - 1])


def spread_loop(per_row, seen, n):
    m = per_row.shape[-2]
    out = torch.empty(*per_row.shape[:-1], n, dtype=per_row.dtype)
    for i in range(m):
        for j in range(n):
            out[..., i, j] = per_row[..., i, table_row(seen, m, i, j)]
    return out


def sums_loop(values, seen, rows):
    m, n = values.shape[-2:]
    out = torch.zeros(*values.shape[:-1], rows, dtype=values.dtype)
    for i in range(m):
        for j in range(n):
            out[..., i, table_row(seen, m, i, j)] += values[..., i, j]
    return out


@pytest.mark.parametrize("n, t, start", CASES)
def test_spread_and_sums_equal_their_definition(n, t, start):
    torch.manual_seed(n + t + start)
    seen, m, rows = clipped_rows(n, t, start), n - start, 2 * t + 1
    per_row = torch.randn(2, 3, m, rows, dtype=torch.float64)
    values = torch.randn(2, 3, m, n, dtype=torch.float64)
    assert torch.equal(spread(per_row, seen, n), spread_loop(per_row, seen, n))
    torch.testing.assert_close(sums_by_row(values, seen, rows), sums_loop(values, seen, rows))
    assert OffsetRuns.of(seen) is not None  # the runs' path, not the scatter


def test_sums_take_several_buffers_of_blocks(monkeypatch):
    """More blocks than one buffer holds: every block's sums, none left from the one before."""
    monkeypatch.setattr(row_offsets, "BUFFER_ELEMENTS", 3 * 9 * 17)  # 3 blocks a buffer
    n, t = 9, 3
    seen = clipped_rows(n, t, 0)
    values = torch.randn(2, 4, n, n, dtype=torch.float64)
    torch.testing.assert_close(sums_by_row(values, seen, 2 * t + 1), sums_loop(values, seen, 7))


def test_gradients_are_each_others_adjoint():
    torch.manual_seed(3)
    n, t, start = 9, 3, 2
    seen, m = clipped_rows(n, t, start), n - start
    per_row = torch.randn(2, 2, m, 2 * t + 1, dtype=torch.float64, requires_grad=True)
    values = torch.randn(2, 2, m, n, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: spread_by_offset(x, seen, n), (per_row,))
    assert torch.autograd.gradcheck(lambda x: sums_by_offset_row(x, seen, 2 * t + 1), (values,))
    weight = torch.randn(2, 2, m, n, dtype=torch.float64)
    (spread_by_offset(per_row, seen, n) * weight).sum().backward()
    torch.testing.assert_close(per_row.grad, sums_loop(weight, seen, 2 * t + 1))


@pytest.mark.parametrize(
    "seen, runs",
    [
        ([0, 0, 0, 1, 2, 3, 4, 4], (8, 3, 6, 0, 4)),
        ([5, 6, 7], (3, 1, 2, 5, 7)),
        ([2, 2, 2], (3, 3, 3, 2, 2)),
        ([0, 0, 3, 3], (4, 2, 2, 0, 3)),  # two runs, nothing between
        ([0, 1, 2, 5, 5], (5, 1, 3, 0, 5)),  # rows 3 and 4 read by no offset
        ([4, 4, 0, 0], (4, 2, 2, 4, 0)),  # falling
    ],
)
def test_runs_read_from_seen(seen, runs):
    width, first, last, low, high = runs
    seen = torch.tensor(seen)
    assert OffsetRuns.of(seen) == OffsetRuns(width, first, last, low, high)
    values = torch.randn(3, width - 1, 2, dtype=torch.float64)  # m + n - 1 offsets, n = 2
    torch.testing.assert_close(sums_by_row(values, seen, 9), sums_loop(values, seen, 9))


@pytest.mark.parametrize("seen", [[0, 1, 0], [0, 1, 2, 1, 1], [0, 2, 3, 4], [0, 1, 3, 4, 4]])
def test_what_is_not_a_clipped_ramp_is_summed_by_scatter(seen):
    seen = torch.tensor(seen)
    assert OffsetRuns.of(seen) is None
    n = 2
    values = torch.randn(2, len(seen) - n + 1, n, dtype=torch.float64)
    torch.testing.assert_close(sums_by_row(values, seen, 6), sums_loop(values, seen, 6))


@pytest.mark.parametrize(
    "first, last, rows, expected",
    [
        (24, 40, 64, slice(24, 56)),  # 17 rows -> 32, from the first
        (60, 63, 64, slice(48, 64)),  # at the table's end: widened downwards
        (129, 383, 512, slice(129, 385)),  # 255 -> 256
        (1, 511, 512, slice(0, 512)),  # 511 -> the whole table
        (1, 11, 12, slice(0, 12)),  # a table narrower than 16: all of it
        (5, 5, 257, slice(5, 21)),
    ],
)
def test_rows_widened_cover_the_rows_read_in_a_multiple_of_16(first, last, rows, expected):
    widened = rows_widened(first, last, rows)
    assert widened == expected
    assert widened.start <= first and last < widened.stop <= rows
