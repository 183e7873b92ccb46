"""Which blocks each program of kernel="triton" visits, in Triton: the key blocks a block of
query rows may see (causality, the key mask's span of visible keys), the query blocks that may
see a block of keys, and both split into parts at the table's tails (`triton_bias`: blocks no
row sees are never read; a tail's blocks read no table)."""

from __future__ import annotations

import triton
import triton.language as tl


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
        hidden = (start_n + BLOCK_N <= tl.load(SPANS + 4 * b + 1)) | (
            start_n >= tl.load(SPANS + 4 * b + 2)
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
    last visible key (SPANS [B, 4]: first real key, first and one past the last visible key,
    whether every key between is visible: `key_spans`), so that blocks of padding are never
    read - unless a row of the block is opened to every key (causal, before its first real
    key)."""
    begin = 0
    end = _key_end(start_m, q_start, first, N, BLOCK_M, CAUSAL)
    if HAS_KEYS:
        low = tl.load(SPANS + 4 * b + 1) // BLOCK_N * BLOCK_N
        high = tl.load(SPANS + 4 * b + 2)
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
def _blocks(part: tl.constexpr, piece: tl.constexpr, first, cut, second_cut, last, inner_begin,
            inner_end, FIRST_PIECE: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """[begin, end) of one loop over blocks: the part's (`_part`) cut in up to three pieces
    at the blocks that take no mask, [inner_begin, inner_end) (block starts; kept inside the
    part): piece 0 the masked blocks before them, 1 those blocks, 2 the masked blocks after
    them. FIRST_PIECE: the first piece a kernel loops over - 2, the part whole (no mask
    spares a block); 1, cut at inner_end alone (inner_begin at or before the part: causal
    without padding); 0, cut at both. The part's own bounds go through untouched where they
    are not cut: a bound clamped where it need not be cost the forward's loop between a
    table's tails 32 instructions per step (sm_90)."""
    begin, end = _part(part, first, cut, second_cut, last)
    if FIRST_PIECE == 0:
        low = tl.multiple_of(tl.minimum(tl.maximum(inner_begin, begin), end), BLOCK)
        high = tl.multiple_of(tl.minimum(tl.maximum(inner_end, low), end), BLOCK)
        if piece == 0:
            end = low
        if piece == 1:
            begin, end = low, high
        if piece == 2:
            begin = high
    if FIRST_PIECE == 1:
        mid = tl.multiple_of(tl.minimum(tl.maximum(inner_end, begin), end), BLOCK)
        begin, end = (begin, mid) if piece == 1 else (mid, end)
    return begin, end


@triton.jit
def _unmasked_keys(SPANS, b, seen, BLOCK_N: tl.constexpr, RUNS: tl.constexpr,
                   DIAGONAL: tl.constexpr):  # fmt: skip
    """[begin, end), block starts, of the key blocks that every row of a query block sees
    whole, which take no mask (`_blocks`' piece 1): with DIAGONAL, the blocks below the
    causal diagonal (seen: `_keys_seen_whole`); with RUNS, only those inside batch element
    b's visible keys, and only where no key between its first and last visible one is hidden
    (padding on either side), else none. A row opened to every key (causal, before its first
    real key) sees them too."""
    begin = 0
    end = 0
    if DIAGONAL:
        end = seen
    if RUNS:
        whole = tl.load(SPANS + 4 * b + 3) != 0
        low = (tl.load(SPANS + 4 * b + 1) + BLOCK_N - 1) // BLOCK_N * BLOCK_N
        high = tl.load(SPANS + 4 * b + 2) // BLOCK_N * BLOCK_N
        if DIAGONAL:
            high = tl.minimum(high, seen)
        begin, end = tl.where(whole, low, 0), tl.where(whole, high, 0)
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
