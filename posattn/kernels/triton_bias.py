"""Attention with a relative bias read from its table: Triton kernels, forward and backward.

The maths, per batch element b and head h, for query rows i < M and keys j < N:

    s_ij = scale * q_i . k_j + T[h, j - i + M - 1]          (the bias never exists as [M, N])
    s_ij = -inf where key j is hidden from row i             (padding, causality)
    P = softmax_j(s),  O = P V,  LSE_i = log sum_j exp(s_ij)

T [H, M + N - 1] holds the bias by diagonal: one value per offset j - i (`LayerTerms.offset_bias`).
A segment-pair table G [H, S * S] (DIET's segment bias) adds G[h, S s_i + s_j] for segment ids
s, and its gradient sums dS per pair; TUPE's [CLS] untie sets the table's bias (or zeros) to 0
on one query row and to U[h] on one key column, U's gradient the sum of dS down that column;
all three are optional.
FlashAttention-2 (Dao 2023): the forward streams key blocks with an online softmax and keeps
only O and LSE. The backward recomputes P = exp(s - LSE) block by block; with
D_i = sum_d dO_id O_id,

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dQ = scale dS K,   dK = scale dS^T Q,
    dT[h, c] = sum_b sum_{j - i + M - 1 = c} dS_bhij    (the table's gradient: diagonal sums)

Each [BLOCK_M, BLOCK_N] tile of dS covers BLOCK_M + BLOCK_N - 1 diagonals: the dQ kernel skews
the tile in registers (row m rotated by m, one gather), sums it over its rows, and adds the
sums to the table's gradient, carrying them from one key block to the next so that each
diagonal takes one atomic add per block (into one shared table, or one per batch element
summed afterwards: `table_grad_mode`; `skew_choice`); no [B, H, M, N] gradient is ever
written. dK/dV computes its tiles key-major, S^T = K Q^T, reading the table reversed
(`table_copies`), so that its products with the keys as rows are as tall as its key
block.

Masks are computed in registers from a key vector and the causal rule (`MaskLayout`); blocks
that no row of a query block can see are skipped: past the causal diagonal, and before a
batch element's first visible key or after its last (`key_spans`). The scores run in base 2
(exp2) with the scale and the tables multiplied by log2(e), the tables once per call. Each
row of a tile reads a run of the offset table; four shifted copies of it (`table_copies`)
let every run start on a 16-byte boundary, so the runs load four values at a time (compiled
for sm_90: the forward's 96 four-byte copy instructions become 24 of 16 bytes, each backward
kernel's 48 become 12; `posattn.kernels.triton_aot`). Float32 inputs take IEEE float32 dot
products (no TF32), so results match the eager reference to float32 rounding.

A table known past two indices by construction (`tails`, `LayerTerms.offset_tails`): flat,
as T5's last buckets and DIET-REL's clipped offsets, or a line, as ALiBi's fixed table, is not
read in the tiles inside either tail, which every kernel runs in loops of their own
(`_tail_key_blocks`, `_tail_query_blocks`): the rows' part of the bias is taken off their
running maximum or LSE rather than added to each score (a line's keys' part is added), and dQ
sums a flat tail's dS in registers into the tail's bound instead of along diagonals.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..errors import PosAttnConfigError, require
from ..toeplitz import lines_served, require_table_shape
from .masks import key_spans
from .triton_launch import DirectLaunch

LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class Tiles:
    """One launch's tile shape and its Triton schedule (warps per program, pipeline depth)."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2


# Under the CPU interpreter: small and unequal tiles, so that test lengths cross several
# blocks of each kind (warps and stages mean nothing there).
INTERPRETER_TILES = Tiles(32, 16)
# On a GPU, per kernel: "forward"; "dq", dQ and the tables' gradients (a block of queries
# held, key blocks stepped over); "dk_dv" (a block of keys held, query blocks stepped over).
# Each can be overridden with POSATTN_TRITON_FORWARD / _DQ / _DK_DV =
# "block_m,block_n,num_warps,num_stages". Forward and dQ: the fastest of
# scripts/triton_tiles.py's sweeps (bf16, B=8, H=8, n=4096, d_h=64, T5's table; the forward
# 2.30x / 2.31x flash SDPA on an H100 in two runs against 2.57x / 2.61x with 4 warps, a tie on
# the H200). dK/dV ran at dQ's 64 x 32 until those tiles were split: 32 keys held, so its
# products with the keys as rows (dV += P^T dO, dK += dS^T Q) had 32 rows, fewer than Hopper's
# warpgroup MMA takes (64), and compiled to mma.sync, and each program re-read Q and dO for 32
# keys. Its tile holds 128 keys and computes the scores key-major (`_scores`), so every product
# has 128 rows: chosen from sm_90 builds (all warpgroup MMA, no spills: tests/
# test_triton_compile.py), not yet timed on a GPU - the tile sweep times it.
GPU_TILES = {
    "forward": Tiles(128, 32, 8, 3),
    "dq": Tiles(64, 32, 4, 3),
    "dk_dv": Tiles(64, 128, 8, 2),
}


# Sums and maxima reduce with triton.language.standard's own combine functions: the
# interpreter recognises them and reduces in numpy, where a combine function of posattn's own
# runs per element in Python (about 100x slower). tl.sum and tl.max themselves (and tl.zeros)
# are not called: built when triton is imported (torch imports it), they stay compiled-only
# under an interpreter switched on later; the combine functions are only compared there.
_add = tl.standard._sum_combine
_maximum = tl.standard._elementwise_max


@triton.jit
def _add_triples(a, b, c, d, e, f):
    return a + d, b + e, c + f


# Built for the interpreter (TRITON_INTERPRET=1 when this module was imported).
_INTERPRETED = tl.constexpr(not isinstance(_add_triples, triton.runtime.JITFunction))


@triton.jit
def _column_sums_of_three(a, b, c):
    """The column sums of three tiles of one shape: compiled, one three-way reduction (one
    pass over the tile); under the interpreter, three numpy sums (a three-way combine runs
    there per element in Python)."""
    if _INTERPRETED:
        sums = tl.reduce(a, 0, _add), tl.reduce(b, 0, _add), tl.reduce(c, 0, _add)
    else:
        sums = tl.reduce((a, b, c), 0, _add_triples)
    return sums


@triton.jit
def _tile_mask(rows, num_rows, columns, num_columns, FULL_WIDTH: tl.constexpr):
    """The elements of a [rows, columns] tile that exist. FULL_WIDTH (the head size is the
    block's): a mask per row, constant along the row, so loads and stores stay vectorised
    (a mask per element forced 2-byte accesses)."""
    if FULL_WIDTH:
        return rows[:, None] < num_rows
    else:
        return (rows[:, None] < num_rows) & (columns[None, :] < num_columns)


@triton.jit
def _load_tile(BASE, rows, row_stride, num_rows, columns, num_columns, FULL_WIDTH: tl.constexpr):
    """A [rows, columns] tile of a row-major matrix (unit column stride), 0 outside it."""
    mask = _tile_mask(rows, num_rows, columns, num_columns, FULL_WIDTH)
    return tl.load(BASE + rows[:, None] * row_stride + columns[None, :], mask=mask, other=0.0)


@triton.jit
def _key_end(start_m, q_start, first, N, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """One past the last key that rows [start_m, start_m + BLOCK_M) may see."""
    end = N
    if CAUSAL:
        # A row with no real key up to its own position is opened to every key.
        end = tl.where(start_m + q_start < first, N, tl.minimum(N, start_m + BLOCK_M + q_start))
    return end


@triton.jit
def _query_begin(start_n, q_start, first, SPANS, b, M, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, HAS_KEYS: tl.constexpr, CAUSAL: tl.constexpr):  # fmt: skip
    """The first query block whose rows may see keys [start_n, start_n + BLOCK_N); with a key
    mask, the end of the last where no row sees them: the block holds no visible key
    (`_key_span`) and no row is opened to every key (causal, before its first real key). A
    bound of its own for that case (only the opened rows) spilled Triton 3.6's dK/dV for
    TUPE-R's 128-wide fold."""
    begin = 0
    if CAUSAL:
        begin = tl.where(
            q_start < first, 0, (tl.maximum(start_n - q_start, 0) // BLOCK_M) * BLOCK_M
        )
    if HAS_KEYS:
        hidden = (start_n + BLOCK_N <= tl.load(SPANS + 3 * b + 1)) | (
            start_n >= tl.load(SPANS + 3 * b + 2)
        )
        if CAUSAL:
            hidden = hidden & (q_start >= first)
        begin = tl.where(hidden, (M + BLOCK_M - 1) // BLOCK_M * BLOCK_M, begin)
    return begin


@triton.jit
def _key_span(SPANS, b, start_m, q_start, first, N, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, HAS_KEYS: tl.constexpr, CAUSAL: tl.constexpr):  # fmt: skip
    """[begin, end) of the keys that rows [start_m, start_m + BLOCK_M) may see, begin a block
    start: `_key_end`, and with a key mask the blocks between batch element b's first and
    last visible key (SPANS [B, 3]: first real key, first and one past the last visible
    key), so that blocks of padding are never read - unless a row of the block is opened to
    every key (causal, before its first real key)."""
    begin = 0
    end = _key_end(start_m, q_start, first, N, BLOCK_M, CAUSAL)
    if HAS_KEYS:
        low = tl.load(SPANS + 3 * b + 1) // BLOCK_N * BLOCK_N
        high = tl.load(SPANS + 3 * b + 2)
        if CAUSAL:
            opened = start_m + q_start < first
            low, high = tl.where(opened, 0, low), tl.where(opened, N, high)
        end = tl.maximum(tl.minimum(end, high), low)
        begin = tl.multiple_of(low, BLOCK_N)
    return begin, end


@triton.jit
def _tail_key_blocks(start_m, key_end, tail_low, tail_high, M, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):  # fmt: skip
    """For the rows [start_m, start_m + BLOCK_M), the key blocks [0, low_end) whose every
    score reads the table at an index <= tail_low (its low tail), and [high_start, key_end)
    at an index >= tail_high (its high tail); the blocks between read the table. A tile's
    scores read j - i + M - 1, from start_n - start_m - BLOCK_M + M + 1 up to start_n -
    start_m + BLOCK_N + M - 2. Both bounds are block starts (key_end rounded up to a block
    where no tail follows), and said to be, so that the loops from there know their keys'
    alignment as a loop from 0 does: each row's shifted table copy stays out of the loop
    (the forward's loop between the tails: 513 -> 284 instructions per step on sm_90)."""
    last = (key_end + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    low = tl.maximum(tail_low + start_m - M + 2, 0) // BLOCK_N * BLOCK_N
    low_end = tl.minimum(low, last)
    high = tl.maximum(tail_high + start_m + BLOCK_M - M, 0)
    high_start = tl.minimum(tl.maximum((high + BLOCK_N - 1) // BLOCK_N * BLOCK_N, low_end), last)
    return tl.multiple_of(low_end, BLOCK_N), tl.multiple_of(high_start, BLOCK_N)


@triton.jit
def _tail_query_blocks(start_n, begin, tail_low, tail_high, M, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr):  # fmt: skip
    """For the keys [start_n, start_n + BLOCK_N), the query blocks [begin, high_end) in the
    table's high tail and [low_start, M) in its low tail (`_tail_key_blocks`, seen from the
    keys: the high tail comes first); block starts, as there (begin is one)."""
    last = (M + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    high = tl.maximum(start_n + M - tail_high, 0) // BLOCK_M * BLOCK_M
    high_end = tl.minimum(tl.maximum(high, begin), last)
    low = tl.maximum(start_n + BLOCK_N + M - 2 - tail_low, 0)
    low_start = tl.minimum(tl.maximum((low + BLOCK_M - 1) // BLOCK_M * BLOCK_M, high_end), last)
    return tl.multiple_of(high_end, BLOCK_M), tl.multiple_of(low_start, BLOCK_M)


@triton.jit
def _key_parts(start_m, q_start, first, N, SPANS, b, TABLE, SLOPES, h, H, stride_th, tail_low,
               tail_high, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               HAS_KEYS: tl.constexpr, CAUSAL: tl.constexpr, TAILS: tl.constexpr,
               LINEAR: tl.constexpr):  # fmt: skip
    """A query-major kernel's key blocks in parts (`_blocks`) and its tails (`_tails`):
    (key_begin, key_end, low_end, high_start, low value, high value, low slope, high slope)
    for rows [start_m, start_m + BLOCK_M) (`_key_span`), each tail empty without TAILS."""
    key_begin, key_end = _key_span(
        SPANS, b, start_m, q_start, first, N, BLOCK_M, BLOCK_N, HAS_KEYS, CAUSAL
    )
    low_end, high_start = key_end, key_end
    if TAILS:
        low_end, high_start = _tail_key_blocks(
            start_m, key_end, tail_low, tail_high, M, BLOCK_M, BLOCK_N
        )
        if HAS_KEYS:  # the blocks before the span are in no part
            low_end = tl.multiple_of(tl.maximum(low_end, key_begin), BLOCK_N)
            high_start = tl.multiple_of(tl.maximum(high_start, key_begin), BLOCK_N)
    low_value, high_value, low_slope, high_slope = _tails(
        TABLE, SLOPES, h, H, stride_th, tail_low, tail_high, TAILS, LINEAR
    )
    return key_begin, key_end, low_end, high_start, low_value, high_value, low_slope, high_slope


@triton.jit
def _tails(TABLE, SLOPES, h, H, stride_th, low_at, high_at, TAILS: tl.constexpr,
           LINEAR: tl.constexpr):  # fmt: skip
    """(low value, high value, low slope, high slope) of the table's tails for head h: the
    values at the bounds, read from copy 0 of the table's copies at low_at and high_at (the
    table, or key-major the table reversed), the slopes (0 for flat tails) from SLOPES [2, H]
    (log2(e) units, as the table)."""
    low_value, high_value, low_slope, high_slope = 0.0, 0.0, 0.0, 0.0
    if TAILS:
        low_value = tl.load(TABLE + h * stride_th + low_at)
        high_value = tl.load(TABLE + h * stride_th + high_at)
    if TAILS & LINEAR:
        low_slope = tl.load(SLOPES + h)
        high_slope = tl.load(SLOPES + H + h)
    return low_value, high_value, low_slope, high_slope


@triton.jit
def _part(part: tl.constexpr, first, cut, second_cut, last):
    """[begin, end) of a loop's part: 0 the blocks [first, cut), 1 [cut, second_cut) (the
    blocks between the tails, which read the table), 2 [second_cut, last)."""
    begin, end = first, cut
    if part == 1:
        begin, end = cut, second_cut
    if part == 2:
        begin, end = second_cut, last
    return begin, end


@triton.jit
def _blocks(part: tl.constexpr, half: tl.constexpr, first, cut, second_cut, last, split_at,
            SPLIT: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """[begin, end) of one loop over blocks: the part's (`_part`) and, with SPLIT, its half 0
    [begin, mid) or half 1 [mid, end), mid = split_at (a block start) kept inside the part
    (causal blocks below the diagonal and on it)."""
    begin, end = _part(part, first, cut, second_cut, last)
    if SPLIT:
        mid = tl.multiple_of(tl.minimum(tl.maximum(split_at, begin), end), BLOCK)
        begin, end = (begin, mid) if half == 0 else (mid, end)
    return begin, end


@triton.jit
def _keys_seen_whole(start_m, q_start, N, BLOCK_N: tl.constexpr):
    """Causal: one past the last key block that every row of [start_m, ...) sees whole (at or
    below the block's first row, inside N): those take no mask."""
    return tl.multiple_of(tl.minimum((start_m + q_start + 1) // BLOCK_N, N // BLOCK_N) * BLOCK_N,
                          BLOCK_N)  # fmt: skip


@triton.jit
def _queries_seeing_whole(start_n, q_start, N, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Causal: the first query block whose every row sees the keys [start_n, start_n +
    BLOCK_N) whole (they are at or below its first row, inside N): it and the later ones take
    no mask."""
    first = (tl.maximum(start_n + BLOCK_N - 1 - q_start, 0) + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    last = (M + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    return tl.multiple_of(tl.where(start_n + BLOCK_N <= N, tl.minimum(first, last), last), BLOCK_M)


@triton.jit
def _pick(part: tl.constexpr, first, last):
    """What belongs to part 0 (`first`) or to part 2 (`last`) of a loop (`_part`)."""
    return first if part == 0 else last


@triton.jit
def _tail_shift(value, slope, base, start_n, start_m, BLOCK_M: tl.constexpr,
                LINEAR: tl.constexpr):  # fmt: skip
    """The part of a tail tile's bias that depends on its query rows alone, which the kernels
    take off LSE or add to the running maximum instead of adding it per score: the tail's
    value (flat), or for a linear tail value + slope (start_n + base - i), base = M - 1 -
    bound, the rest, slope (j - start_n), being added per score (`_scores`). Written as a
    scalar per tile less slope times the rows' steps, which stays out of the loop (dK/dV's
    loop, key-major: 446 instructions a step with the rows' own, as many as reading the
    table)."""
    shift = value
    if LINEAR:
        at_first_row = value + slope * (start_n + base - start_m).to(tl.float32)
        shift = at_first_row - slope * tl.arange(0, BLOCK_M).to(tl.float32)
    return shift


@triton.jit
def _segment_pairs(qi, kj, b, SEGMENT_IDS, stride_sb, q_start, M, N, NUM_SEGMENTS: tl.constexpr):
    """The (query segment, key segment) pair of each score, as S * s_i + s_j (qi, kj: the
    tile's query and key indices, one a column and one a row, in the tile's orientation)."""
    query = tl.load(SEGMENT_IDS + b * stride_sb + qi + q_start, mask=qi < M, other=0)
    key = tl.load(SEGMENT_IDS + b * stride_sb + kj, mask=kj < N, other=0)
    return query * NUM_SEGMENTS + key


@triton.jit
def _untied(bias, qi, kj, h, UNTIE, untie_row, untie_column):
    """TUPE's [CLS] untie on a tile of the table's bias: row untie_row 0 (the [CLS] row's
    value is a constant per row, which the softmax ignores), column untie_column UNTIE[h] on
    the other rows."""
    bias = tl.where(kj == untie_column, tl.load(UNTIE + h), bias)
    return tl.where(qi == untie_row, 0.0, bias)


@triton.jit
def _in_block(index, start, SIZE: tl.constexpr):
    """Whether `index` falls in the block [start, start + SIZE)."""
    return (index >= start) & (index < start + SIZE)


@triton.jit
def _holds_untie(start_m, start_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, untie_row,
                 untie_column):  # fmt: skip
    """Whether the tile of rows [start_m, +BLOCK_M) and keys [start_n, +BLOCK_N) holds the
    untied row or column: the untie's selects run in those tiles only (a scalar test per tile
    instead of two selects per score; TUPE-R's dQ loop issued 38% more for them)."""
    return _in_block(untie_row, start_m, BLOCK_M) | _in_block(untie_column, start_n, BLOCK_N)


@triton.jit
def _untied_positions(qi, kj, untie_row, untie_column):
    """The scores of a tile whose bias the untie sets instead of the table."""
    return (qi == untie_row) | (kj == untie_column)


@triton.jit
def _table_bias(TABLE, h, stride_th, stride_tk, table_shift, rows, columns, start_column, num_rows):
    """A tile of an offset table's bias, bias[r, c] = table[c - r + table_shift]. Row r reads
    the table from start = columns[0] - r + table_shift on, a run as long as the columns, from
    the copy shifted by start % 4, where the run begins on a 16-byte boundary: the loads go 4
    values at a time (the tables are padded past their end, so only the rows are masked; a
    score past the last column is hidden by the caller)."""
    start = start_column - rows + table_shift
    shift = ((start % 4) + 4) % 4
    aligned = tl.multiple_of(start - shift, 4)
    row = TABLE + h * stride_th + shift * stride_tk + aligned
    return tl.load(
        row[:, None] + (columns - start_column)[None, :], mask=rows[:, None] < num_rows, other=0.0
    )


@triton.jit
def _scores(
    q, k, offs_m, offs_n, start_m, start_n, b, h, scale2, TABLE, stride_th, stride_tk,
    table_shift, UNTIE,
    untie_row, untie_column, KEYS, stride_kb, first, q_start, M, N, SEGMENTS, SEGMENT_IDS,
    stride_sb,
    HAS_TABLE: tl.constexpr, HAS_UNTIE: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr,
    MASK_TAIL: tl.constexpr, KEY_MAJOR: tl.constexpr = False, TAIL: tl.constexpr = False,
    tail_value=0.0, LINEAR: tl.constexpr = False, slope=0.0,
):  # fmt: skip
    """log2(e) * s for one [BLOCK_M, BLOCK_N] tile, -inf where a key is hidden; KEY_MAJOR: its
    transpose [BLOCK_N, BLOCK_M], computed as k q^T, so that a product whose rows are the
    keys (dK, dV) has BLOCK_N rows, as Hopper's warpgroup MMA needs at least 64 of. The tables
    come multiplied by log2(e), the offset table as `table_copies`: bias[i, j] = T[j - i +
    table_shift], and key-major the table reversed, bias[j, i] = R[i - j + table_shift], so
    that both read increasing addresses along a row (TableBiasAttention.backward).
    start_m, start_n: the tile's first query and key. TAIL: the tile lies in one of the
    table's tails (`_tail_key_blocks`), whose bias is `tail_value` everywhere (flat) or, with
    LINEAR, a line through it: no table is read, and the scores come back less their rows'
    part (`_tail_shift`), which the caller adds per row (to the running maximum, or takes off
    LSE) instead of per score: sm_90's dK/dV loop issued 384 instructions a step with the
    add per score, 32 of them for it. A linear tail's keys' part, slope (j - start_n), is
    added per score. The untie only with flat tails (`tail_rules`).

    Only hidden keys are masked, and keys past N only where MASK_TAIL (N not a multiple of the
    key block, in a kernel where such a key would reach a real one's result: the forward and
    dQ; dK/dV's keys past N are never stored). Rows past M go unmasked: the forward stores
    none of them, and the backward's P is 0 there, their lse being +inf. Each mask costs one
    select per score, and a score takes some 16 instructions per thread (sm_90)."""
    if KEY_MAJOR:
        s = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale2
        qi, kj = offs_m[None, :], offs_n[:, None]
    else:
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale2
        qi, kj = offs_m[:, None], offs_n[None, :]
    holds = False
    if HAS_UNTIE:
        holds = _holds_untie(
            start_m, start_n, offs_m.shape[0], offs_n.shape[0], untie_row, untie_column
        )
    if HAS_TABLE & TAIL:
        if LINEAR:
            steps = tl.arange(0, offs_n.shape[0]).to(tl.float32) * slope
            s += steps[:, None] if KEY_MAJOR else steps[None, :]
        if holds:  # the untie, less the flat value like every score
            s += _untied(tail_value, qi, kj, h, UNTIE, untie_row, untie_column) - tail_value
    elif HAS_TABLE:
        if KEY_MAJOR:
            bias = _table_bias(
                TABLE, h, stride_th, stride_tk, table_shift, offs_n, offs_m, start_m, N
            )
        else:
            bias = _table_bias(
                TABLE, h, stride_th, stride_tk, table_shift, offs_m, offs_n, start_n, M
            )
        if holds:
            bias = _untied(bias, qi, kj, h, UNTIE, untie_row, untie_column)
        s += bias
    elif holds:  # the untie on zeros (TUPE-A: its absolute part folded into q and k)
        s += _untied(0.0, qi, kj, h, UNTIE, untie_row, untie_column)
    if NUM_SEGMENTS > 0:
        # Segment ids past M or N read as 0: every pair stays inside the table.
        pair = _segment_pairs(qi, kj, b, SEGMENT_IDS, stride_sb, q_start, M, N, NUM_SEGMENTS)
        s += tl.load(SEGMENTS + h * NUM_SEGMENTS * NUM_SEGMENTS + pair)
    if HAS_KEYS or CAUSAL or MASK_TAIL:
        inside = kj < N
        visible = inside
        if HAS_KEYS:  # 0 past N
            visible = tl.load(KEYS + b * stride_kb + kj, mask=inside, other=0) != 0
        if CAUSAL:
            rows = qi + q_start
            visible = (visible & (kj <= rows)) | (inside & (rows < first))
        s = tl.where(visible, s, float("-inf"))
    return s


@triton.jit
def _forward_step(
    acc, l_i, m_i, q, start_m, start_n, offs_m, offs_d, offs_dv, b, h, K, V,
    skb, skh, skn, svb, svh, svn, D, DV, scale2, TABLE, stride_th, stride_tk, table_shift, UNTIE,
    untie_row, untie_column, KEYS, stride_kb,
    first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb,
    HAS_TABLE: tl.constexpr, HAS_UNTIE: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr,
    BLOCK_N: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, MASK_TAIL: tl.constexpr,
    TAIL: tl.constexpr = False, tail_value=0.0, LINEAR: tl.constexpr = False, slope=0.0,
    base=0,
):  # fmt: skip
    """One key block of the online softmax: (acc, l_i, m_i) updated."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = _load_tile(K + b * skb + h * skh, offs_n, skn, N, offs_d, D, EVEN_D)
    v = _load_tile(V + b * svb + h * svh, offs_n, svn, N, offs_dv, DV, EVEN_DV)
    s = _scores(
        q, k, offs_m, offs_n, start_m, start_n, b, h, scale2, TABLE, stride_th, stride_tk,
        table_shift, UNTIE, untie_row, untie_column, KEYS, stride_kb,
        first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb,
        HAS_TABLE, HAS_UNTIE, HAS_KEYS, CAUSAL, PRECISION, NUM_SEGMENTS, MASK_TAIL,
        TAIL=TAIL, tail_value=tail_value, LINEAR=LINEAR, slope=slope,
    )  # fmt: skip
    if TAIL:  # s is less its rows' part (`_scores`)
        shift = _tail_shift(tail_value, slope, base, start_n, start_m, offs_m.shape[0], LINEAR)
        m_new = tl.maximum(m_i, tl.reduce(s, 1, _maximum) + shift)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw no key yet
        p = tl.exp2(s - (m_safe - shift)[:, None])
    else:
        m_new = tl.maximum(m_i, tl.reduce(s, 1, _maximum))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.reduce(p, 1, _add)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, l_i, m_new


@triton.jit
def _forward(
    Q, K, V, OUT, LSE, TABLE, SLOPES, UNTIE, KEYS, SPANS, SEGMENTS, SEGMENT_IDS,
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som, stride_th, stride_tk, stride_kb,
    stride_sb,
    H, M, N, D, DV, q_start, rows, table_shift, untie_row, untie_column, tail_low, tail_high,
    scale2,
    HAS_TABLE: tl.constexpr, HAS_UNTIE: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, MASK_TAIL: tl.constexpr,
    TAILS: tl.constexpr, LINEAR: tl.constexpr,
):  # fmt: skip
    """TAILS: the table is known below tail_low and above tail_high (`table_bias_attention`'s
    `tails`): flat, or with LINEAR a line (SLOPES); the key blocks inside either tail run in
    loops of their own and read no table."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q = _load_tile(Q + b * sqb + h * sqh, offs_m, sqm, M, offs_d, D, EVEN_D)
    first = 0
    if CAUSAL:
        first = tl.load(SPANS + 3 * b)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_DV], 0.0, tl.float32)
    key_begin, key_end, low_end, high_start, low_value, high_value, low_slope, high_slope = (
        _key_parts(
            start_m, q_start, first, N, SPANS, b, TABLE, SLOPES, h, H, stride_th, tail_low,
            tail_high, M, BLOCK_M, BLOCK_N, HAS_KEYS, CAUSAL, TAILS, LINEAR,
        )
    )  # fmt: skip
    # Causal without padding: the key blocks below the diagonal take no mask (half 0).
    SPLIT: tl.constexpr = CAUSAL & (not HAS_KEYS)
    seen = _keys_seen_whole(start_m, q_start, N, BLOCK_N)
    # The low tail, the blocks that read the table, the high tail (one part without tails).
    for part in tl.static_range(3 if TAILS else 1):
        for half in tl.static_range(2 if SPLIT else 1):
            begin, end = _blocks(
                part, half, key_begin, low_end, high_start, key_end, seen, SPLIT, BLOCK_N
            )
            for start_n in range(begin, end, BLOCK_N):
                acc, l_i, m_i = _forward_step(
                    acc, l_i, m_i, q, start_m, start_n, offs_m, offs_d, offs_dv, b, h, K, V,
                    skb, skh, skn, svb, svh, svn, D, DV, scale2, TABLE, stride_th, stride_tk,
                    table_shift, UNTIE, untie_row, untie_column, KEYS, stride_kb, first, q_start,
                    M, N, SEGMENTS, SEGMENT_IDS, stride_sb, HAS_TABLE, HAS_UNTIE, HAS_KEYS,
                    CAUSAL & ((not SPLIT) | (half == 1)), PRECISION, NUM_SEGMENTS, BLOCK_N,
                    EVEN_D, EVEN_DV, MASK_TAIL & ((not SPLIT) | (half == 1)),
                    TAIL=TAILS & (part != 1), tail_value=_pick(part, low_value, high_value),
                    LINEAR=LINEAR,
                    slope=_pick(part, low_slope, high_slope),
                    base=M - 1 - _pick(part, tail_low, tail_high),
                )  # fmt: skip
    # A row that sees no key (out of range, or every key hidden) gives 0, not 0 / 0.
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    tl.store(
        OUT + b * sob + h * soh + offs_m[:, None] * som + offs_dv[None, :],
        out.to(OUT.dtype.element_ty),
        mask=_tile_mask(offs_m, M, offs_dv, DV, EVEN_DV),
    )
    # Such a row keeps LSE = +inf: its probabilities recompute to 0 in backward. So do the
    # rows past M up to `rows`, which dK/dV then reads without a mask (`_dk_dv_step`).
    lse = tl.where((l_i > 0) & (offs_m < M), m_i + tl.log2(l_safe), float("inf"))
    tl.store(LSE + bh * rows + offs_m, lse, mask=offs_m < rows)


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
def _add_diagonal_sums(
    ds, start_m, start_n, h, DTABLE, stride_dth, table_shift, table_len,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DIAGONALS: tl.constexpr,
):  # fmt: skip
    """DTABLE[h, j - i + shift] += sum of ds over the tile's diagonal j - i, in two halves of
    rows (each skewed in registers a quarter of the whole tile's size: the whole-tile skew
    spilled registers on sm_90). DIAGONALS: the skewed width (`_skewed_sums`)."""
    halves = tl.permute(tl.reshape(ds, (2, BLOCK_M // 2, BLOCK_N)), (1, 2, 0))
    top, bottom = tl.split(halves)
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
def _dk_dv_step(
    dk, dv, k, v, start_m, offs_n, start_n, offs_d, offs_dv, b, h, LSE_ROW, DELTA_ROW, Q, DO,
    sqb, sqh, sqm, sdob, sdoh, sdom, D, DV, scale2, TABLE, stride_th, stride_tk, table_shift, UNTIE,
    untie_row, untie_column, KEYS, stride_kb, first, q_start, M, N, SEGMENTS, SEGMENT_IDS,
    stride_sb,
    HAS_TABLE: tl.constexpr, HAS_UNTIE: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr,
    BLOCK_M: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
    KEY_MAJOR: tl.constexpr, TAIL: tl.constexpr = False, tail_value=0.0,
    LINEAR: tl.constexpr = False, slope=0.0, base=0,
):  # fmt: skip
    """One query block's share of a key block's dK and dV; KEY_MAJOR: with P and dS as
    [BLOCK_N, BLOCK_M] tiles (dV += P^T dO, dK += dS^T Q without turning them)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = _load_tile(Q + b * sqb + h * sqh, offs_m, sqm, M, offs_d, D, EVEN_D)
    do = _load_tile(DO + b * sdob + h * sdoh, offs_m, sdom, M, offs_dv, DV, EVEN_DV)
    # Unmasked: rows past M hold LSE = +inf and D = 0 up to the last query block's end (a mask
    # here was a select per query per thread and step: 11% of this loop's instructions).
    lse = tl.load(LSE_ROW + offs_m)
    delta = tl.load(DELTA_ROW + offs_m)
    s = _scores(
        q, k, offs_m, offs_n, start_m, start_n, b, h, scale2, TABLE, stride_th, stride_tk,
        table_shift, UNTIE, untie_row, untie_column, KEYS, stride_kb,
        first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb,
        HAS_TABLE, HAS_UNTIE, HAS_KEYS, CAUSAL, PRECISION, NUM_SEGMENTS, False, KEY_MAJOR,
        TAIL=TAIL, tail_value=tail_value, LINEAR=LINEAR, slope=slope,
    )  # fmt: skip
    if TAIL:  # s is less its rows' part (`_scores`)
        lse -= _tail_shift(tail_value, slope, base, start_n, start_m, offs_m.shape[0], LINEAR)
    if KEY_MAJOR:
        p_t = tl.exp2(s - lse[None, :])
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
    else:
        p = tl.exp2(s - lse[:, None])
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
    return dk, dv


@triton.jit
def _backward_dk_dv(
    Q, K, V, DO, LSE, DELTA, DK, DV_, TABLE, SLOPES, UNTIE, KEYS, SPANS, SEGMENTS, SEGMENT_IDS,
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sdob, sdoh, sdom,
    sdkb, sdkh, sdkn, sdvb, sdvh, sdvn, stride_th, stride_tk, stride_kb, stride_sb,
    H, M, N, D, DV, q_start, rows, table_shift, untie_row, untie_column, tail_low, tail_high,
    scale, scale2,
    HAS_TABLE: tl.constexpr, HAS_UNTIE: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, KEY_MAJOR: tl.constexpr,
    TAILS: tl.constexpr, LINEAR: tl.constexpr,
):  # fmt: skip
    """dK, dV of one key block, over every query block that sees it. TABLE: the aligned
    copies of the offset table, or key-major of the table reversed (`_scores`). TAILS:
    as the forward's, the query blocks in the table's high tail first."""
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    k = _load_tile(K + b * skb + h * skh, offs_n, skn, N, offs_d, D, EVEN_D)
    v = _load_tile(V + b * svb + h * svh, offs_n, svn, N, offs_dv, DV, EVEN_DV)
    first = 0
    if CAUSAL:
        first = tl.load(SPANS + 3 * b)
    dk = tl.full([BLOCK_N, BLOCK_D], 0.0, tl.float32)
    dv = tl.full([BLOCK_N, BLOCK_DV], 0.0, tl.float32)
    begin = _query_begin(start_n, q_start, first, SPANS, b, M, BLOCK_M, BLOCK_N, HAS_KEYS, CAUSAL)
    high_end, low_start = M, M
    if TAILS:
        high_end, low_start = _tail_query_blocks(
            start_n, begin, tail_low, tail_high, M, BLOCK_M, BLOCK_N
        )
    # Copy 0 holds the table, or key-major the table reversed: index M + N - 2 - x.
    low_at, high_at = tail_low, tail_high
    if KEY_MAJOR:
        low_at, high_at = M + N - 2 - tail_low, M + N - 2 - tail_high
    low_value, high_value, low_slope, high_slope = _tails(
        TABLE, SLOPES, h, H, stride_th, low_at, high_at, TAILS, LINEAR
    )
    # Causal without padding: the query blocks that see this key block whole take no mask
    # (half 1).
    SPLIT: tl.constexpr = CAUSAL & (not HAS_KEYS)
    seeing = _queries_seeing_whole(start_n, q_start, N, M, BLOCK_M, BLOCK_N)
    # The high tail, the blocks that read the table, the low tail (one part without tails).
    for part in tl.static_range(3 if TAILS else 1):
        for half in tl.static_range(2 if SPLIT else 1):
            start, end = _blocks(part, half, begin, high_end, low_start, M, seeing, SPLIT, BLOCK_M)
            for start_m in range(start, end, BLOCK_M):
                dk, dv = _dk_dv_step(
                    dk, dv, k, v, start_m, offs_n, start_n, offs_d, offs_dv, b, h,
                    LSE + bh * rows, DELTA + bh * rows, Q, DO,
                    sqb, sqh, sqm, sdob, sdoh, sdom, D, DV, scale2, TABLE, stride_th, stride_tk,
                    table_shift, UNTIE, untie_row, untie_column, KEYS,
                    stride_kb, first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb, HAS_TABLE,
                    HAS_UNTIE, HAS_KEYS, CAUSAL & ((not SPLIT) | (half == 0)), PRECISION,
                    NUM_SEGMENTS, BLOCK_M, EVEN_D, EVEN_DV, KEY_MAJOR, TAIL=TAILS & (part != 1),
                    tail_value=_pick(part, high_value, low_value), LINEAR=LINEAR,
                    slope=_pick(part, high_slope, low_slope),
                    base=M - 1 - _pick(part, tail_high, tail_low),
                )  # fmt: skip
    tl.store(
        DK + b * sdkb + h * sdkh + offs_n[:, None] * sdkn + offs_d[None, :],
        (dk * scale).to(DK.dtype.element_ty),
        mask=_tile_mask(offs_n, N, offs_d, D, EVEN_D),
    )
    tl.store(
        DV_ + b * sdvb + h * sdvh + offs_n[:, None] * sdvn + offs_dv[None, :],
        dv.to(DV_.dtype.element_ty),
        mask=_tile_mask(offs_n, N, offs_dv, DV, EVEN_DV),
    )


@triton.jit
def _dq_step(
    dq, q, do, lse, delta, start_m, start_n, offs_m, offs_d, offs_dv, b, h, K, V,
    skb, skh, skn, svb, svh, svn, D, DV, scale2, TABLE, DTABLE, stride_th, stride_tk, stride_dth,
    table_shift, UNTIE, DUNTIE, untie_row, untie_column,
    table_len, KEYS, stride_kb, first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb,
    DSEGMENTS,
    HAS_TABLE: tl.constexpr, TABLE_GRAD: tl.constexpr, HAS_UNTIE: tl.constexpr,
    UNTIE_GRAD: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr,
    SEGMENT_GRAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, DIAGONALS: tl.constexpr,
    MASK_TAIL: tl.constexpr, TAIL: tl.constexpr = False, tail_value=0.0,
    LINEAR: tl.constexpr = False, slope=0.0, base=0,
):  # fmt: skip
    """One key block's share of a query block's dQ, and of the tables' gradients; returns dQ
    and the tile's dS as the offset table sees it (the circular skew's sums are carried by the
    caller, `_carried_diagonal_sums`; a TAIL tile's, one value, summed by the caller too)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = _load_tile(K + b * skb + h * skh, offs_n, skn, N, offs_d, D, EVEN_D)
    v = _load_tile(V + b * svb + h * svh, offs_n, svn, N, offs_dv, DV, EVEN_DV)
    s = _scores(
        q, k, offs_m, offs_n, start_m, start_n, b, h, scale2, TABLE, stride_th, stride_tk,
        table_shift, UNTIE, untie_row, untie_column, KEYS, stride_kb,
        first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb,
        HAS_TABLE, HAS_UNTIE, HAS_KEYS, CAUSAL, PRECISION, NUM_SEGMENTS, MASK_TAIL,
        TAIL=TAIL, tail_value=tail_value, LINEAR=LINEAR, slope=slope,
    )  # fmt: skip
    if TAIL:  # s is less its rows' part (`_scores`)
        lse -= _tail_shift(tail_value, slope, base, start_n, start_m, offs_m.shape[0], LINEAR)
    p = tl.exp2(s - lse[:, None])
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    ds_table = ds
    if TABLE_GRAD & HAS_UNTIE:  # noqa: SIM102 (compiled in or out; the test inside per tile)
        # The untie's scores do not read the table.
        if _holds_untie(start_m, start_n, BLOCK_M, BLOCK_N, untie_row, untie_column):
            untied = _untied_positions(offs_m[:, None], offs_n[None, :], untie_row, untie_column)
            ds_table = tl.where(untied, 0.0, ds)
    if TABLE_GRAD & (DIAGONALS != BLOCK_N) & (not TAIL):  # wide: here; circular: the caller
        _add_diagonal_sums(
            ds_table, start_m, start_n, h, DTABLE, stride_dth, table_shift, table_len,
            BLOCK_M, BLOCK_N, DIAGONALS,
        )  # fmt: skip
    if UNTIE_GRAD:  # noqa: SIM102 (compiled in or out; the test inside runs per block)
        # The untied column's value: the sum of dS down that column off the untied row, in
        # the one key block that holds the column.
        if _in_block(untie_column, start_n, BLOCK_N):
            column = (offs_n[None, :] == untie_column) & (offs_m[:, None] != untie_row)
            total = tl.reduce(tl.reduce(tl.where(column, ds, 0.0), 1, _add), 0, _add)
            tl.atomic_add(DUNTIE + h, total, sem="relaxed")
    if SEGMENT_GRAD:
        # One sum of dS per (query segment, key segment) pair per tile.
        pair = _segment_pairs(
            offs_m[:, None], offs_n[None, :], b, SEGMENT_IDS, stride_sb, q_start, M, N,
            NUM_SEGMENTS,
        )  # fmt: skip
        for index in tl.static_range(NUM_SEGMENTS * NUM_SEGMENTS):
            picked = tl.where(pair == index, ds, 0.0)
            total = tl.reduce(tl.reduce(picked, 1, _add), 0, _add)
            tl.atomic_add(DSEGMENTS + h * NUM_SEGMENTS * NUM_SEGMENTS + index, total, sem="relaxed")
    return dq, ds_table


@triton.jit
def _backward_dq_dtable(
    Q, K, V, OUT, DO, LSE, DELTA, DQ, TABLE, SLOPES, DTABLE, UNTIE, DUNTIE, KEYS, SPANS, SEGMENTS,
    SEGMENT_IDS, DSEGMENTS,
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som, sdob, sdoh, sdom,
    sdqb, sdqh, sdqm,
    stride_th, stride_tk, stride_dtb, stride_dth, stride_kb, stride_sb,
    H, M, N, D, DV, q_start, rows, table_shift, table_len, untie_row, untie_column, tail_low,
    tail_high, scale, scale2,
    HAS_TABLE: tl.constexpr, TABLE_GRAD: tl.constexpr, HAS_UNTIE: tl.constexpr,
    UNTIE_GRAD: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr,
    SEGMENT_GRAD: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, DIAGONALS: tl.constexpr,
    MASK_TAIL: tl.constexpr, TAILS: tl.constexpr, LINEAR: tl.constexpr,
):  # fmt: skip
    """dQ of one query block over the keys it sees, and that block's share of dT (in the
    batch element's own copy of dT where stride_dtb is not 0). First D_i = sum_d dO_id O_id
    of its rows, in float32, kept for dK/dV (launched after): a kernel of its own was one
    more launch from the host, which bounds a call at n=1024. TAILS: as the forward's;
    the tiles of a tail add their dS up in registers, and the sum goes to the tail's first
    entry (tail_low or tail_high), where every entry of the tail sends its gradient."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    DTABLE_B = DTABLE + b * stride_dtb
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q = _load_tile(Q + b * sqb + h * sqh, offs_m, sqm, M, offs_d, D, EVEN_D)
    do = _load_tile(DO + b * sdob + h * sdoh, offs_m, sdom, M, offs_dv, DV, EVEN_DV)
    out = _load_tile(OUT + b * sob + h * soh, offs_m, som, M, offs_dv, DV, EVEN_DV)
    delta = tl.reduce(out.to(tl.float32) * do.to(tl.float32), 1, _add)
    tl.store(DELTA + bh * rows + offs_m, delta, mask=offs_m < rows)  # 0 past M
    lse = tl.load(LSE + bh * rows + offs_m, mask=offs_m < M, other=float("inf"))
    first = 0
    if CAUSAL:
        first = tl.load(SPANS + 3 * b)
    dq = tl.full([BLOCK_M, BLOCK_D], 0.0, tl.float32)
    # The circular skew's sums are carried across key blocks (`_carried_diagonal_sums`).
    CARRIED: tl.constexpr = TABLE_GRAD & (DIAGONALS == BLOCK_N)
    near = tl.full([BLOCK_N], 0.0, tl.float32)
    far = tl.full([BLOCK_N], 0.0, tl.float32)
    key_begin, key_end, low_end, high_start, low_value, high_value, low_slope, high_slope = (
        _key_parts(
            start_m, q_start, first, N, SPANS, b, TABLE, SLOPES, h, H, stride_th, tail_low,
            tail_high, M, BLOCK_M, BLOCK_N, HAS_KEYS, CAUSAL, TAILS, LINEAR,
        )
    )  # fmt: skip
    # Causal without padding: the key blocks below the diagonal take no mask (half 0); the
    # carried sums run on across the two halves, which are contiguous.
    SPLIT: tl.constexpr = CAUSAL & (not HAS_KEYS)
    seen = _keys_seen_whole(start_m, q_start, N, BLOCK_N)
    # The low tail, the blocks that read the table, the high tail (one part without tails).
    for part in tl.static_range(3 if TAILS else 1):
        start, end = _part(part, key_begin, low_end, high_start, key_end)
        tail = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
        for half in tl.static_range(2 if SPLIT else 1):
            first_n, end_n = _blocks(
                part, half, key_begin, low_end, high_start, key_end, seen, SPLIT, BLOCK_N
            )
            for start_n in range(first_n, end_n, BLOCK_N):
                dq, ds_table = _dq_step(
                    dq, q, do, lse, delta, start_m, start_n, offs_m, offs_d, offs_dv, b, h, K, V,
                    skb, skh, skn, svb, svh, svn, D, DV, scale2, TABLE, DTABLE_B, stride_th,
                    stride_tk, stride_dth, table_shift, UNTIE, DUNTIE, untie_row, untie_column,
                    table_len, KEYS, stride_kb, first, q_start, M, N, SEGMENTS, SEGMENT_IDS,
                    stride_sb, DSEGMENTS, HAS_TABLE, TABLE_GRAD, HAS_UNTIE, UNTIE_GRAD, HAS_KEYS,
                    CAUSAL & ((not SPLIT) | (half == 1)), PRECISION, NUM_SEGMENTS, SEGMENT_GRAD,
                    BLOCK_M, BLOCK_N, EVEN_D, EVEN_DV, DIAGONALS,
                    MASK_TAIL & ((not SPLIT) | (half == 1)), TAIL=TAILS & (part != 1),
                    tail_value=_pick(part, low_value, high_value), LINEAR=LINEAR,
                    slope=_pick(part, low_slope, high_slope),
                    base=M - 1 - _pick(part, tail_low, tail_high),
                )  # fmt: skip
                if TABLE_GRAD & TAILS & (part != 1):
                    tail += ds_table
                elif CARRIED:
                    near, far = _carried_diagonal_sums(
                        ds_table, near, far, start_m, start_n, h, DTABLE_B, stride_dth,
                        table_shift, table_len, BLOCK_M, BLOCK_N,
                    )  # fmt: skip
        if TABLE_GRAD & TAILS & (part != 1):  # (compiled in or out; the test at run time)
            if end > start:
                total = tl.reduce(tl.reduce(tail, 1, _add), 0, _add)
                # The tail's gradient goes to its bound (flat tails: a table with a
                # gradient has no linear ones, `tail_rules`).
                entry = _pick(part, tail_low, tail_high)
                tl.atomic_add(DTABLE_B + h * stride_dth + entry, total, sem="relaxed")
        elif CARRIED:  # noqa: SIM102 (as above)
            # The two runs still carried, where a block past the last would have added them.
            if end > start:
                end_n = (end + BLOCK_N - 1) // BLOCK_N * BLOCK_N
                index = end_n - start_m + table_shift + tl.arange(0, BLOCK_N)
                _add_to_table(DTABLE_B + h * stride_dth, index - 2 * BLOCK_N, far, table_len)
                _add_to_table(DTABLE_B + h * stride_dth, index - BLOCK_N, near, table_len)
    tl.store(
        DQ + b * sdqb + h * sdqh + offs_m[:, None] * sdqm + offs_d[None, :],
        (dq * scale).to(DQ.dtype.element_ty),
        mask=_tile_mask(offs_m, M, offs_d, D, EVEN_D),
    )


def tiles(device: torch.device, kind: str) -> Tiles:
    """The tiles of the `kind` kernel (a key of `GPU_TILES`): `GPU_TILES` or the environment's
    override on a GPU, `INTERPRETER_TILES` under the CPU interpreter."""
    if device.type != "cuda":
        return INTERPRETER_TILES
    variable = f"POSATTN_TRITON_{kind.upper()}"
    text = os.environ.get(variable)
    if not text:
        return GPU_TILES[kind]
    parts = text.split(",")
    try:
        chosen = Tiles(*(int(part) for part in parts)) if len(parts) == 4 else None
    except ValueError:
        chosen = None
    sizes = () if chosen is None else (chosen.block_m, chosen.block_n)
    if chosen is None or any(size < 16 or size & (size - 1) for size in sizes):
        raise PosAttnConfigError(
            f"{variable}={text!r}: expected block_m,block_n,num_warps,num_stages with "
            "block sizes powers of two >= 16, e.g. '128,64,8,3'"
        )
    return chosen


# Where the dQ kernel adds each tile's diagonal sums: "shared", one [H, L] table for every
# batch element, or "per-batch", a table per element summed after the kernel (H100, T5 at
# n=4096, forward + backward against flash SDPA: 2.71x and 2.77x, in an earlier run 2.72x and
# 2.66x: a tie). Chosen by POSATTN_TRITON_TABLE_GRAD (scripts/triton_tiles.py times both).
# A kernel of its own over block diagonals, one skew per diagonal instead of per tile, ran
# 3.22x at its best tile: it recomputes P and dP, loads four tiles per step where dQ loads
# two, and its causal skip kept the loop from being pipelined (commit a19eddf, removed).
TABLE_GRAD_MODES = ("shared", "per-batch")


def environment_choice(variable: str, choices: tuple[str, ...]) -> str:
    """The environment's value of `variable`, one of `choices` (default: the first)."""
    text = os.environ.get(variable, choices[0])
    if text not in choices:
        raise PosAttnConfigError(
            f"{variable}={text!r}: expected one of {', '.join(map(repr, choices))}"
        )
    return text


def table_grad_mode() -> str:
    return environment_choice("POSATTN_TRITON_TABLE_GRAD", TABLE_GRAD_MODES)


def schedule(tile: Tiles, device: torch.device) -> dict:
    """The launch options of a tile on a GPU (the interpreter takes none)."""
    if device.type != "cuda":
        return {}
    return dict(num_warps=tile.num_warps, num_stages=tile.num_stages)


# How the dQ kernel skews each half of a dS tile for the table's diagonal sums: "circular"
# (rotated in place, 32 wide, where a half is square, its sums carried from one key block to
# the next: one atomic per diagonal per block; else wide) or "wide" (zero-padded to a power of
# two >= the diagonals it spans: 64 for 32 x 32, four atomics per diagonal per block). Chosen
# by POSATTN_TRITON_SKEW; the tile sweep times both. Circular is the default on sm_90 builds'
# counts (dQ's loop 390 instructions per warp and step against 638, T5-like table, 64 x 32),
# not yet on a GPU's clock; wide was measured (2.71x flash SDPA, T5 training at n=4096).
SKEWS = ("circular", "wide")


def skew_choice() -> str:
    return environment_choice("POSATTN_TRITON_SKEW", SKEWS)


# The orientation of the dK/dV kernel's score tiles: "key-major" ([keys, queries], every
# product with the keys as its rows; the default, see GPU_TILES) or "query-major" ([queries,
# keys] turned for those products, as before). Chosen by POSATTN_TRITON_DK_DV_ORDER; the tile
# sweep times both.
DK_DV_ORDERS = ("key-major", "query-major")


def dk_dv_order() -> str:
    return environment_choice("POSATTN_TRITON_DK_DV_ORDER", DK_DV_ORDERS)


# How a kernel is launched: "direct", Triton's compiled launcher called with the kernel
# kept per key (`triton_launch.DirectLaunch`: a third of a T5 training call's host time went
# to Triton's launch path), or "triton", through `kernel[grid](...)` each time. Chosen by
# POSATTN_TRITON_LAUNCH; the interpreter always takes Triton's path.
LAUNCHES = ("direct", "triton")


def launch_choice() -> str:
    return environment_choice("POSATTN_TRITON_LAUNCH", LAUNCHES)


# Whether a table's tails (`table_bias_attention`'s `tails`: T5's buckets past max_distance,
# DIET-REL's clipped offsets, ALiBi's lines) run in loops of their own without reading the
# table ("on") or read it like any other entry ("off"). Chosen by POSATTN_TRITON_TABLE_TAILS;
# the tile sweep times both.
TAIL_CHOICES = ("on", "off")


def tails_choice() -> str:
    return environment_choice("POSATTN_TRITON_TABLE_TAILS", TAIL_CHOICES)


_DIRECT: dict[object, DirectLaunch] = {}


def launch(
    kernel, grid: tuple[int, int], mode: str, tensors: tuple, scalars: tuple, constexprs: dict
) -> None:  # fmt: skip
    """`kernel[grid](*tensors, *scalars, **constexprs)`, directly where `mode` says so and
    the kernel is compiled (not interpreted), and not while torch.compile traces the call
    (which knows Triton's own launches, not a launcher called by hand)."""
    interpreted = not isinstance(kernel, triton.runtime.JITFunction)
    if mode == "triton" or interpreted or torch.compiler.is_compiling():
        kernel[grid](*tensors, *scalars, **constexprs)
        return
    direct = _DIRECT.get(kernel)
    if direct is None:
        direct = _DIRECT[kernel] = DirectLaunch(kernel)
    direct(grid, tensors, scalars, constexprs)


def diagonal_block(tile: Tiles, skew: str = "circular") -> int:
    """DIAGONALS of the dQ kernel: BLOCK_N for the circular skew, where the tile is two squares
    (`_carried_diagonal_sums`), else the wide skew's width for each half of the tile's rows
    (`_add_diagonal_sums`)."""
    if skew == "circular" and tile.block_m // 2 == tile.block_n:
        return tile.block_n
    return power_of_two_at_least(tile.block_m // 2 + tile.block_n - 1)


# Host-side integer helpers instead of triton.cdiv / triton.next_power_of_2: Triton 3.9 makes
# those constexpr functions with a call wrapper (ten calls cost a call about 50 us under the
# profiler; scripts/triton_host.py --profile), and at n=1024 a GPU call waits on the host.
def power_of_two_at_least(size: int) -> int:
    return 1 << max(0, size - 1).bit_length()


def head_block(size: int) -> int:
    """A power of two >= the head size (tl.arange), at least 16 (tl.dot)."""
    return max(16, power_of_two_at_least(size))


def kernel_flags(
    dtype: torch.dtype, D: int, DV: int, *, has_table: bool, has_keys: bool, causal: bool,
    num_segments: int, has_untie: bool = False, tails: bool = False, linear_tails: bool = False,
) -> dict:  # fmt: skip
    """The compile-time flags every kernel of one call shares."""
    return dict(
        HAS_TABLE=has_table,
        TAILS=has_table and tails,
        LINEAR=has_table and tails and linear_tails,
        HAS_UNTIE=has_untie,
        HAS_KEYS=has_keys,
        CAUSAL=causal,
        PRECISION="ieee" if dtype == torch.float32 else "tf32",
        NUM_SEGMENTS=num_segments,
        BLOCK_D=head_block(D),
        BLOCK_DV=head_block(DV),
        EVEN_D=head_block(D) == D,
        EVEN_DV=head_block(DV) == DV,
    )


def dk_dv_flags(flags: dict) -> dict:
    """The dK/dV kernel's flags: without the table's tails where q and k are wider than 64
    (TUPE-R's fold, 128): with them, Triton 3.6 (the lent GPU image's) spilled 256 bytes per
    thread in its key-major 64 x 128 tile, holding 128-wide keys and their gradient; it reads
    its table there as before (3.9 fitted it in 255 registers)."""
    if flags["BLOCK_D"] <= 64:
        return flags
    return {**flags, "TAILS": False, "LINEAR": False}


def blocks(length: int, block: int) -> int:
    """How many blocks of `block` cover `length`."""
    return -(-length // block)


def _rounded(length: int, block: int) -> int:
    """`length` rounded up to a whole number of blocks."""
    return blocks(length, block) * block


def _rows_past(
    count: int, rows: int, written: int, value: float, device: torch.device
) -> Tensor:  # fmt: skip
    """[count, rows] float32 for a kernel that writes the first `written` of each row's
    entries (its blocks' reach): left to it where that covers the rows, else `value`-filled
    first (only where a tile override makes dK/dV's query blocks longer than its writer's)."""
    if written >= rows:
        return torch.empty(count, rows, dtype=torch.float32, device=device)
    return torch.full((count, rows), value, dtype=torch.float32, device=device)


# The environment variables a call's choices are read from: each kernel's tiles, then the
# backward's and the launches' choices.
SETTING_VARIABLES = (
    *(f"POSATTN_TRITON_{kind.upper()}" for kind in GPU_TILES),
    "POSATTN_TRITON_DK_DV_ORDER",
    "POSATTN_TRITON_SKEW",
    "POSATTN_TRITON_TABLE_GRAD",
    "POSATTN_TRITON_LAUNCH",
    "POSATTN_TRITON_TABLE_TAILS",
)


@dataclass(frozen=True)
class CallSettings:
    """Everything a call chooses from its device and the environment, read in its forward and
    kept for its backward: each kernel's tiles and launch options, the longest table run a
    tile reads, and the backward's and launches' choices."""

    tiles: dict[str, Tiles]
    schedules: dict[str, dict]
    longest_run: int
    key_major: bool
    skew: str
    grad_mode: str
    launch_mode: str
    tails: bool


def call_settings(device: torch.device) -> CallSettings:
    """The call's settings, as the environment says now (a change applies from the next call),
    built once per device type, distinct environment and tile chooser (`tiles` and `schedule`,
    which the stand-in GPU and tests replace): built per call, the tiles and the choices took
    about a tenth of a training call's host time (scripts/triton_host.py)."""
    environment = tuple(map(os.environ.get, SETTING_VARIABLES))
    return _settings(device.type, environment, tiles, schedule)


@functools.lru_cache(maxsize=16)
def _settings(device_type: str, environment: tuple, choose_tiles, choose_schedule) -> CallSettings:
    """(`environment`, the variables' values, is part of the key: the choosers read them.)"""
    device = torch.device(device_type)
    chosen = {kind: choose_tiles(device, kind) for kind in GPU_TILES}
    return CallSettings(
        tiles=chosen,
        schedules={kind: choose_schedule(tile, device) for kind, tile in chosen.items()},
        longest_run=longest_table_run(chosen),
        key_major=dk_dv_order() == "key-major",
        skew=skew_choice(),
        grad_mode=table_grad_mode(),
        launch_mode=launch_choice(),
        tails=tails_choice() == "on",
    )


def longest_table_run(chosen: dict[str, Tiles]) -> int:
    """The longest run of the table one row of a tile reads: a tile's width (its block_n, or
    key-major in dK/dV its block_m), so at most its larger side, over every kernel's tile."""
    return max(max(tile.block_m, tile.block_n) for tile in chosen.values())


def kept_per_device(make):
    """`make(device, *key)` made once per arguments and kept, outside inference mode (so that a
    training call may save it for backward); inside a CUDA graph's capture made fresh, since
    memory allocated there belongs to the graph's pool. For the small tensors a call would
    otherwise make on every launch (at n=1024 a GPU call waits on the host)."""
    kept = functools.lru_cache(maxsize=64)(_outside_inference_mode(make))

    @functools.wraps(make)
    def once(device: torch.device, *key):
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return make(device, *key)
        return kept(device, *key)

    once.cache_clear = kept.cache_clear
    return once


def _outside_inference_mode(make):
    @functools.wraps(make)
    def made(*arguments):
        with torch.inference_mode(False):
            return make(*arguments)

    return made


def table_copies(
    table: Tensor, longest_run: int, scale: float = 1.0, with_reversed: bool = False
) -> Tensor:  # fmt: skip
    """[H, L] -> [H, C, W] float32, C = 4, or 8 `with_reversed`: copy c < 4 holds
    scale * table[:, c:], copy 4 + c the same of the table reversed (R[x] = table[:, L-1-x],
    which dK/dV reads key-major), each zero past its end and W (a multiple of 16) at least
    L + longest_run, so that a run of either starting at any index s begins on a 16-byte
    boundary in copy s % 4 (at s - s % 4) and a run of up to `longest_run` values past the end
    stays inside (its scores are hidden anyway). One gather from the table followed by a zero,
    by an index kept per shape, then the scale in place: three ops a call, where a pad, a
    scaling copy of four windows and a second gather for the reversed copies took five (at
    n=1024 a GPU call is bound by the host, not by these bytes)."""
    heads, length = table.shape
    width = _rounded(length + longest_run, 16)
    index = copies_index(table.device, length, width, with_reversed)
    extended = torch.cat((table.float(), zero_column(table.device, heads)), dim=1)
    return torch.index_select(extended, 1, index).mul_(scale).view(heads, -1, width)


@kept_per_device
def copies_index(device: torch.device, length: int, width: int, with_reversed: bool) -> Tensor:
    """[C * width] int64 into the table followed by one zero (index `length`): copy c's entry x
    is table[c + x], copy 4 + c's is table[length - 1 - c - x], or the zero past either's end.
    Made on the device itself: a copy from the host could not run inside a capture."""
    shifts = torch.arange(4, device=device)[:, None]
    position = shifts + torch.arange(width, device=device)[None, :]
    if with_reversed:
        position = torch.cat((position, length - 1 - position))
    inside = (position >= 0) & (position < length)
    return torch.where(inside, position, length).flatten()


@kept_per_device
def zero_column(device: torch.device, heads: int) -> Tensor:
    """[heads, 1] float32 zeros: the entry past the table's end that `table_copies` reads."""
    return torch.zeros(heads, 1, dtype=torch.float32, device=device)


@kept_per_device
def absent(device: torch.device, dtype: torch.dtype, dims: int = 1) -> Tensor:
    """A one-element stand-in for a tensor argument whose flag is off (the kernels neither read
    nor write it), made once per device and dtype: made per call, each was a fill kernel
    launched from the host (10 of a training call without a table, on the H100 profile)."""
    return torch.zeros((1,) * dims, dtype=dtype, device=device)


def last_dim_contiguous(x: Tensor) -> Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


class TableBiasAttention(torch.autograd.Function):
    """softmax(q k^T * scale + T[h, j - i + M - 1], masked) v with the gradients of q, k, v and
    the table T (see the module docstring)."""

    @staticmethod
    def forward(
        ctx, q, k, v, table, keys, first, causal, q_start, scale, segments, segment_ids, untie,
        column_value, grad_enabled, tails, tail_slopes, spans,
    ):  # fmt: skip
        q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
        batch, heads, M, D = q.shape
        N, DV = k.shape[-2], v.shape[-1]
        # The tables in the kernels' base-2 units: multiplied by log2(e) once, not per score.
        device, float32 = q.device, torch.float32
        keys_ = absent(device, torch.int8) if keys is None else keys
        if spans is None:
            spans = key_spans(keys, first, causal, batch, N, device)
        spans = absent(device, torch.int32) if spans is None else spans
        segments32 = (
            absent(device, float32) if segments is None
            else (segments.float() * LOG2E).contiguous()
        )  # fmt: skip
        ids = absent(device, torch.int32, 2) if segment_ids is None else segment_ids
        untie_row, untie_column = (-1, -1) if untie is None else untie
        untie32 = absent(device, float32) if untie is None else column_value.float() * LOG2E
        out = torch.empty(batch, heads, M, DV, dtype=q.dtype, device=q.device)
        settings = call_settings(q.device)
        tile, keys_tile = settings.tiles["forward"], settings.tiles["dk_dv"]
        block_m, block_n = tile.block_m, tile.block_n
        # LSE per row, and +inf past M up to the end of dK/dV's last query block, which it
        # reads unmasked; the forward writes them where its own blocks reach that far.
        rows = _rounded(M, keys_tile.block_m)
        lse = _rows_past(batch * heads, rows, _rounded(M, block_m), float("inf"), q.device)
        flags = kernel_flags(
            q.dtype, D, DV, has_table=table is not None, has_keys=keys is not None,
            causal=causal, num_segments=0 if segments is None else math.isqrt(segments.shape[-1]),
            has_untie=untie is not None, tails=tails is not None and settings.tails,
            linear_tails=tail_slopes is not None,
        )  # fmt: skip
        # The tails' bounds inside the table: an entry past either end is a tail of one.
        tail_low, tail_high = (min(max(x, 0), M + N - 2) for x in tails or (0, M + N - 2))
        slopes = absent(device, float32)
        if flags["LINEAR"]:  # in the table's base-2 units, low then high
            slopes = (torch.stack(tail_slopes).float() * LOG2E).contiguous()
        grid = (blocks(M, block_m), batch * heads)
        # dK/dV key-major reads the table reversed, whose copies are made here with the
        # forward's.
        with_reversed = settings.key_major and grad_enabled and any(ctx.needs_input_grad)
        copies = (
            absent(device, float32, 3)
            if table is None
            else table_copies(table, settings.longest_run, LOG2E, with_reversed)
        )
        launch(
            _forward, grid, settings.launch_mode,
            (q, k, v, out, lse, copies, slopes, untie32, keys_, spans, segments32, ids),
            (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
             copies.stride(0), copies.stride(1), keys_.stride(0), ids.stride(0),
             heads, M, N, D, DV, q_start, rows, M - 1, untie_row, untie_column, tail_low,
             tail_high, scale * LOG2E),
            dict(BLOCK_M=block_m, BLOCK_N=block_n, MASK_TAIL=N % block_n != 0, **flags,
                 **settings.schedules["forward"]),
        )  # fmt: skip
        ctx.save_for_backward(
            q, k, v, out, lse, copies, slopes, untie32, keys_, spans, segments32, ids
        )
        ctx.table_shape = None if table is None else table.shape
        ctx.call, ctx.rows = settings, rows
        ctx.settings = (scale, q_start, flags, table is not None and table.requires_grad)
        ctx.untie = (untie_row, untie_column, untie is not None and column_value.requires_grad)
        ctx.tails = (tail_low, tail_high)
        ctx.segment_grad = segments is not None and segments.requires_grad
        ctx.dtypes = tuple(None if t is None else t.dtype for t in (table, segments, column_value))
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, copies, slopes, untie32, keys_, spans, segments32, ids = (
            ctx.saved_tensors
        )
        scale, q_start, flags, table_grad = ctx.settings
        untie_row, untie_column, untie_grad = ctx.untie
        tail_low, tail_high = ctx.tails
        grad_out = last_dim_contiguous(grad_out)
        batch, heads, M, D = q.shape
        N, DV = k.shape[-2], v.shape[-1]
        # The forward's tiles: it sized the table's copies and LSE's rows for them.
        settings, rows = ctx.call, ctx.rows
        tile, keys_tile = settings.tiles["dq"], settings.tiles["dk_dv"]
        # D_i = rowsum(dO * O), the term every row of dS subtracts: written by the dQ kernel
        # (0 past M), read by dK/dV after it, unmasked like LSE.
        delta = _rows_past(batch * heads, rows, _rounded(M, tile.block_m), 0.0, q.device)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        # dT's atomics go to one table or to one per batch element (summed after): fewer
        # programs add to each address, at B tables of memory (`table_grad_mode`).
        per_batch = table_grad and settings.grad_mode == "per-batch"
        device, float32 = q.device, torch.float32
        dtable = absent(device, float32)
        if table_grad:
            dtable = copies.new_zeros(((batch,) if per_batch else ()) + tuple(ctx.table_shape))
        stride_dtb = dtable.stride(0) if per_batch else 0
        stride_dth = dtable.stride(-2) if table_grad else 0
        dsegments = torch.zeros_like(segments32) if ctx.segment_grad else absent(device, float32)
        duntie = torch.zeros_like(untie32) if untie_grad else absent(device, float32)
        common = (heads, M, N, D, DV, q_start, rows)
        launch(
            _backward_dq_dtable, (blocks(M, tile.block_m), batch * heads), settings.launch_mode,
            (q, k, v, out, grad_out, lse, delta, dq, copies, slopes, dtable, untie32, duntie,
             keys_, spans, segments32, ids, dsegments),
            (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
             *grad_out.stride()[:3], *dq.stride()[:3], copies.stride(0), copies.stride(1),
             stride_dtb, stride_dth, keys_.stride(0), ids.stride(0),
             *common, M - 1, M + N - 1, untie_row, untie_column, tail_low, tail_high, scale,
             scale * LOG2E),
            dict(TABLE_GRAD=table_grad, UNTIE_GRAD=untie_grad, SEGMENT_GRAD=ctx.segment_grad,
                 BLOCK_M=tile.block_m, BLOCK_N=tile.block_n, MASK_TAIL=N % tile.block_n != 0,
                 DIAGONALS=diagonal_block(tile, settings.skew if table_grad else "wide"),
                 **flags, **settings.schedules["dq"]),
        )  # fmt: skip
        # Key-major, dK/dV reads bias[j, i] = R[i - j + N - 1] from the reversed table R (its
        # rows run along the queries).
        keys_copies, keys_shift = copies, M - 1
        if settings.key_major and flags["HAS_TABLE"]:
            keys_copies, keys_shift = copies[:, 4:], N - 1
        launch(
            _backward_dk_dv, (blocks(N, keys_tile.block_n), batch * heads), settings.launch_mode,
            (q, k, v, grad_out, lse, delta, dk, dv, keys_copies, slopes, untie32, keys_, spans,
             segments32, ids),
            (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3],
             *dk.stride()[:3], *dv.stride()[:3], keys_copies.stride(0), keys_copies.stride(1),
             keys_.stride(0), ids.stride(0),
             *common, keys_shift, untie_row, untie_column, tail_low, tail_high, scale,
             scale * LOG2E),
            dict(BLOCK_M=keys_tile.block_m, BLOCK_N=keys_tile.block_n,
                 KEY_MAJOR=settings.key_major, **dk_dv_flags(flags),
                 **settings.schedules["dk_dv"]),
        )  # fmt: skip
        if per_batch:
            dtable = dtable.sum(0)
        grad_table = dtable.to(ctx.dtypes[0]) if table_grad else None
        grad_segments = dsegments.to(ctx.dtypes[1]) if ctx.segment_grad else None
        grad_untie = duntie.to(ctx.dtypes[2]) if untie_grad else None
        return (
            dq, dk, dv, grad_table, None, None, None, None, None, grad_segments, None, None,
            grad_untie, None, None, None, None,
        )  # fmt: skip


def table_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    table: Tensor | None = None,
    keys: Tensor | None = None,
    causal: bool = False,
    first_real: Tensor | None = None,
    query_start: int = 0,
    segments: Tensor | None = None,
    segment_ids: Tensor | None = None,
    untie: tuple[int, int, Tensor] | None = None,
    tails: tuple[int, int] | None = None,
    tail_slopes: tuple[Tensor, Tensor] | None = None,
    spans: Tensor | None = None,
) -> Tensor:
    """q [B, H, M, D], k [B, H, N, D], v [B, H, N, DV] -> [B, H, M, DV].

    table: [H, M + N - 1] float, bias[h, i, j] = table[h, j - i + M - 1], or None.
    keys: [B, N] int8, nonzero for keys that may be seen, or None (all).
    causal: row i sees keys j <= i + query_start, unless i + query_start < first_real[b]
        (int32 [B]: a row without a real key up to its position is opened to every key;
        None: the first key that `keys` shows, 0 without keys).
        Blocks of keys that no row sees (before the first or after the last visible key,
        and not seen by an opened row) are skipped.
    segments: [H, S * S] float, bias[b, h, i, j] += segments[h, S * ids[b, i + query_start] +
        ids[b, j]] with segment_ids int32 [B, N] (DIET's segment pairs), or None.
    untie: (row, column, values [H]), TUPE's [CLS] untie on the table's bias (on zeros
        without a table): bias[h, row, :] = 0 and bias[h, i, column] = values[h] for
        i != row (`posattn.toeplitz.ClsUntie`), or None.
    tails: (low, high) table indices, low <= high, past which the table is known by
        construction: flat (every entry at an index <= low is the entry at low, made from the
        same parameter, so that the gradient of them all may go to that one; likewise >=
        high: T5's buckets past max_distance, a clipped offset), or with `tail_slopes` a line.
        Tiles inside a tail then read no table, nor sum their gradient along diagonals;
        nothing is checked against the table's values (`posattn.toeplitz.TableTails`).
    tail_slopes: ([H], [H]), the low and the high tail's slope per index: table[t] =
        table[bound] + slope (t - bound) past a bound (ALiBi), for a table that takes no
        gradient and has no untie; or None (flat tails).
    spans: `posattn.kernels.masks.key_spans` of keys and first_real, where the caller keeps
        them across calls (`table_bias.key_rules`: once per mask); None: made here.
    """
    if table is not None:
        require_table_shape("table.shape", table, q, k)
    if tails is not None:
        require(
            len(tails) == 2 and all(isinstance(x, int) for x in tails) and tails[0] <= tails[1],
            "tails", tails, "(low, high): integer table indices with low <= high",
        )  # fmt: skip
    if tail_slopes is not None:
        require(
            tails is not None and lines_served(table, untie),
            "tail_slopes", "given", "linear tails with `tails`, for a table that takes no "
            "gradient and has no untie (a line's gradient is not one entry's)",
        )  # fmt: skip
    rule, column_value = (None, None) if untie is None else (untie[:2], untie[2])
    # A float whatever it was given as: Triton compiles an integer 1 as a constant and a float
    # as an fp32 argument, and a direct launch's key tells 1 from 1.0 by value only. Whether
    # grad is on is read here: inside the forward it is always off.
    return TableBiasAttention.apply(
        q, k, v, table, keys, first_real, causal, int(query_start), float(scale), segments,
        segment_ids, rule, column_value, torch.is_grad_enabled(), tails, tail_slopes, spans,
    )  # fmt: skip
