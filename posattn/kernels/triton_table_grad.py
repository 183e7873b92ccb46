"""The offset table's gradient of kernel="triton", in Triton: a dS tile's sums along its
diagonals, added to the table with one atomic per diagonal per block ("circular": rotated in
place, sums carried across key blocks; "wide": skewed into a zero-padded tile)."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_tile_ops import _add, _column_sums_of_three


@triton.jit
def _add_to_table(row, index, values, table_len):
    """row[index] += values where index falls inside the table (one atomic per value)."""
    tl.atomic_add(row + index, values, mask=(index >= 0) & (index < table_len), sem="relaxed")


@triton.jit
def _skewed_sums(
    ds, first_row, start_n, h, DTABLE, stride_dth, table_shift, table_len,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, DIAGONALS: tl.constexpr,
):  # fmt: skip
    """DTABLE[h, j - i + shift] += the sums of ds [ROWS, BLOCK_N] (rows from first_row) along
    its diagonals, one atomic per diagonal: each row i shifted right by ROWS - 1 - i into a
    zero-padded tile DIAGONALS wide (a power of two >= ROWS + BLOCK_N - 1), so that diagonal
    j - i is column j - i + ROWS - 1, and summed over rows ("wide")."""
    rows = tl.arange(0, ROWS)[:, None]
    diagonal = tl.arange(0, DIAGONALS)[None, :]
    column = diagonal - (ROWS - 1) + rows
    inside = (column >= 0) & (column < BLOCK_N)
    skewed = tl.gather(ds, tl.where(inside, column, 0), axis=1)
    sums = tl.reduce(tl.where(inside, skewed, 0.0), 0, _add)
    index = start_n - first_row - (ROWS - 1) + table_shift + tl.arange(0, DIAGONALS)
    _add_to_table(DTABLE + h * stride_dth, index, sums, table_len)


@triton.jit
def _row_halves(tile, HALF: tl.constexpr, COLUMNS: tl.constexpr):
    """A [2 HALF, COLUMNS] tile's first HALF rows and its last."""
    return tl.split(tl.permute(tl.reshape(tile, (2, HALF, COLUMNS)), (1, 2, 0)))


@triton.jit
def _add_diagonal_sums(
    ds, start_m, start_n, h, DTABLE, stride_dth, table_shift, table_len,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DIAGONALS: tl.constexpr,
):  # fmt: skip
    """DTABLE[h, j - i + shift] += sum of ds over the tile's diagonal j - i, in two halves of
    rows (each skewed in registers a quarter of the whole tile's size: the whole-tile skew
    spilled registers on sm_90). DIAGONALS: the skewed width (`_skewed_sums`)."""
    top, bottom = _row_halves(ds, BLOCK_M // 2, BLOCK_N)
    _skewed_sums(
        top, start_m, start_n, h, DTABLE, stride_dth, table_shift, table_len,
        BLOCK_M // 2, BLOCK_N, DIAGONALS,
    )  # fmt: skip
    _skewed_sums(
        bottom, start_m + BLOCK_M // 2, start_n, h, DTABLE, stride_dth, table_shift, table_len,
        BLOCK_M // 2, BLOCK_N, DIAGONALS,
    )  # fmt: skip


@triton.jit
def _carried_diagonal_sums(
    ds, near, far, start_m, start_n, h, DTABLE, stride_dth, table_shift, table_len,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """The circular skew of a [2 BLOCK_N, BLOCK_N] dS tile, its sums carried from one key
    block to the next. Row i is rotated left by i % BLOCK_N, so that column c holds, on the top
    half's rows, diagonal c (unwrapped) or c - BLOCK_N (wrapped), and on the bottom half's,
    c - BLOCK_N or c - 2 BLOCK_N: the tile's diagonals fall in three runs of BLOCK_N table
    entries from base = start_n - start_m + shift down. The next key block's runs sit
    BLOCK_N higher, so each run is complete after three blocks: `near` carries the run at
    base, `far` the one below, and each block adds one run to the table - one atomic per
    diagonal per block. The whole tile is rotated at once (one gather, one three-way
    reduction), not in two halves: 390 loop instructions per warp and step against 409 on
    sm_90. Triton still moves the tile from its MMA layout to a blocked one through shared
    memory for the gather. Returns (near, far) for the next block."""
    rows = tl.arange(0, BLOCK_M)[:, None]
    column = tl.arange(0, BLOCK_N)[None, :]
    skewed = tl.gather(ds, (column + rows) % BLOCK_N, axis=1)
    bottom = rows >= BLOCK_N
    wrapped = column + rows % BLOCK_N >= BLOCK_N
    total, top_upper, bottom_lower = _column_sums_of_three(
        skewed, tl.where(bottom | wrapped, 0.0, skewed), tl.where(bottom & wrapped, skewed, 0.0)
    )
    index = start_n - start_m + table_shift - 2 * BLOCK_N + tl.arange(0, BLOCK_N)
    _add_to_table(DTABLE + h * stride_dth, index, far + bottom_lower, table_len)
    return top_upper, near + total - top_upper - bottom_lower


@triton.jit
def _square_sums(square, BLOCK: tl.constexpr):
    """A [BLOCK, BLOCK] square's rows each rotated left by their index: the column sums of
    the entries that did not wrap around and of those that did."""
    rows = tl.arange(0, BLOCK)[:, None]
    column = tl.arange(0, BLOCK)[None, :]
    skewed = tl.gather(square, (column + rows) % BLOCK, axis=1)
    unwrapped = tl.reduce(tl.where(column + rows >= BLOCK, 0.0, skewed), 0, _add)
    return unwrapped, tl.reduce(skewed, 0, _add) - unwrapped


@triton.jit
def _carried_sums_in_halves(
    ds, near, far, start_m, start_n, h, DTABLE, stride_dth, table_shift, table_len,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """`_carried_diagonal_sums` one square at a time: the top half's unwrapped sums are the
    run at base, its wrapped ones and the bottom half's unwrapped the run below, the bottom
    half's wrapped the lowest. The fused backward's dK/dV (its [128, 64] tiles beside dK and
    dV) spilled 64 bytes per thread rotating the whole tile at once, none this way, and
    issued 868 loop instructions per 1000 scores against 911 (sm_90)."""
    top, bottom = _row_halves(ds, BLOCK_N, BLOCK_N)
    top_unwrapped, top_wrapped = _square_sums(top, BLOCK_N)
    bottom_unwrapped, bottom_wrapped = _square_sums(bottom, BLOCK_N)
    index = start_n - start_m + table_shift - 2 * BLOCK_N + tl.arange(0, BLOCK_N)
    _add_to_table(DTABLE + h * stride_dth, index, far + bottom_wrapped, table_len)
    return top_unwrapped, near + top_wrapped + bottom_unwrapped
