"""The backward kernels of kernel="triton" (FlashAttention-2's, P recomputed from LSE): dK and
dV with a block of keys held, dQ with a block of queries held, which also reduces the tables'
gradients (offset table, segment pairs, the [CLS] untie's column) in registers."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_blocks import (
    _blocks,
    _key_parts,
    _keys_seen_whole,
    _part,
    _pick,
    _queries_seeing_whole,
    _query_begin,
    _tail_query_blocks,
    _tails,
    _unmasked_keys,
)
from .triton_scores import (
    _holds_untie,
    _in_block,
    _scores,
    _segment_pairs,
    _tail_shift,
    _untied_positions,
)
from .triton_table_grad import (
    _add_diagonal_sums,
    _add_to_table,
    _carried_diagonal_sums,
    _carried_sums_in_halves,
)
from .triton_tile_ops import _add, _kept, _load_folded, _load_tile, _store_folded, _tile_mask


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
    LINEAR: tl.constexpr = False, slope=0.0, base=0, DROPOUT: tl.constexpr = False, seed=0,
    bh=0, drop_below=0, keep_scale=1.0, FUSED: tl.constexpr = False, DQ_ACC=None, sqam=0,
    rows=0, MASK_TAIL: tl.constexpr = False, FQ=None, sfqm=0, FACTOR_AT: tl.constexpr = 0,
    TABLE_L1: tl.constexpr = True,
):  # fmt: skip
    """One query block's share of a key block's dK and dV; KEY_MAJOR: with P and dS as
    [BLOCK_N, BLOCK_M] tiles (dV += P^T dO, dK += dS^T Q without turning them). DROPOUT:
    dV from the kept probabilities, scaled, and dP through the same mask (FlashAttention-2's
    backward with dropout: dS = P (dP Z / (1 - p) - D), Z the kept scores). FUSED (key-major
    only): also the block's share of dQ, dS K, added to a float32 sum with atomics
    (FlashAttention-2's one backward kernel; DQ_ACC's rows sqam apart, `rows` of them). Keys
    past N add nothing there: their rows of K load as 0. Returns dK, dV and, key-major, the
    tile's dS (for the table's gradient, where MASK_TAIL hides the keys past N). FACTOR_AT:
    the queries' factor (FQ, this head's, rows sfqm apart) read beside them (`_load_folded`)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    if FACTOR_AT == 0:  # called directly: the interpreter pays for each helper call
        q = _load_tile(Q + b * sqb + h * sqh, offs_m, sqm, M, offs_d, D, EVEN_D)
    else:
        q = _load_folded(
            Q + b * sqb + h * sqh, offs_m, sqm, M, offs_d, D, EVEN_D, FQ, sfqm, FACTOR_AT
        )
    do = _load_tile(DO + b * sdob + h * sdoh, offs_m, sdom, M, offs_dv, DV, EVEN_DV)
    # Unmasked: rows past M hold LSE = +inf and D = 0 up to the last query block's end (a mask
    # here was a select per query per thread and step: 11% of this loop's instructions).
    lse = tl.load(LSE_ROW + offs_m)
    delta = tl.load(DELTA_ROW + offs_m)
    s = _scores(
        q, k, offs_m, offs_n, start_m, start_n, b, h, scale2, TABLE, stride_th, stride_tk,
        table_shift, UNTIE, untie_row, untie_column, KEYS, stride_kb,
        first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb,
        HAS_TABLE, HAS_UNTIE, HAS_KEYS, CAUSAL, PRECISION, NUM_SEGMENTS, MASK_TAIL, KEY_MAJOR,
        TAIL=TAIL, tail_value=tail_value, LINEAR=LINEAR, slope=slope, TABLE_L1=TABLE_L1,
    )  # fmt: skip
    if TAIL:  # s is less its rows' part (`_scores`)
        lse -= _tail_shift(tail_value, slope, base, start_n, start_m, offs_m.shape[0], LINEAR)
    ds_t = 0.0
    if KEY_MAJOR:
        p_t = tl.exp2(s - lse[None, :])
        dropped = p_t
        if DROPOUT:
            kept = _kept(seed, bh, start_m, start_n, N, drop_below, BLOCK_M, offs_n.shape[0], True)
            dropped = tl.where(kept, p_t * keep_scale, 0.0)
        dv += tl.dot(dropped.to(do.dtype), do, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        if DROPOUT:
            dp_t = tl.where(kept, dp_t * keep_scale, 0.0)
        ds_t = p_t * (dp_t - delta[None, :])
        ds_low = ds_t.to(q.dtype)
        dk += tl.dot(ds_low, q, input_precision=PRECISION)
        if FUSED:  # dQ^T = K^T dS^T: the keys' side as the product's rows, a warpgroup MMA
            tl.atomic_add(
                DQ_ACC + offs_m[None, :] * sqam + offs_d[:, None],
                tl.dot(tl.trans(k), ds_low, input_precision=PRECISION),
                mask=tl.trans(_tile_mask(offs_m, rows, offs_d, D, EVEN_D)), sem="relaxed",
            )  # fmt: skip
    else:
        p = tl.exp2(s - lse[:, None])
        dropped = p
        if DROPOUT:
            kept = _kept(seed, bh, start_m, start_n, N, drop_below, BLOCK_M, offs_n.shape[0])
            dropped = tl.where(kept, p * keep_scale, 0.0)
        dv += tl.dot(tl.trans(dropped.to(do.dtype)), do, input_precision=PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        if DROPOUT:
            dp = tl.where(kept, dp * keep_scale, 0.0)
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
    return dk, dv, ds_t


@triton.jit
def _backward_dk_dv(
    Q, K, V, DO, LSE, DELTA, DK, DV_, TABLE, SLOPES, UNTIE, KEYS, SPANS, SEGMENTS, SEGMENT_IDS,
    SEED, DQ_ACC, DTABLE, FQ, FK, DFK,
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sdob, sdoh, sdom,
    sdkb, sdkh, sdkn, sdvb, sdvh, sdvn, sqab, sqam, stride_th, stride_tk, stride_dth,
    stride_kb, stride_sb, sfqb, sfqh, sfqm, sfkb, sfkh, sfkn,
    H, M, N, D, DV, q_start, rows, table_shift, untie_row, untie_column, tail_low, tail_high,
    scale, scale2, drop_below, keep_scale,
    HAS_TABLE: tl.constexpr, HAS_UNTIE: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, KEY_MAJOR: tl.constexpr,
    TAILS: tl.constexpr, LINEAR: tl.constexpr, DROPOUT: tl.constexpr, FUSED: tl.constexpr,
    TABLE_GRAD: tl.constexpr, MASK_TAIL: tl.constexpr, FACTOR_AT: tl.constexpr,
    FACTOR_SUMS: tl.constexpr, TABLE_L1: tl.constexpr,
):  # fmt: skip
    """dK, dV of one key block, over every query block that sees it. TABLE: the aligned
    copies of the offset table, or key-major of the table reversed (`_scores`). TAILS:
    as the forward's, the query blocks in the table's high tail first. FUSED (key-major):
    also dQ, unscaled, into the float32 DQ_ACC [B H, rows, D] (sqab, sqam apart), and with
    TABLE_GRAD the table's gradient into DTABLE [H, M + N - 1] reversed: entry i - j + N - 1
    sums dS[i, j] (`triton_bias.fused_backward`; the dQ kernel is not launched). Key-major
    tiles of 2 BLOCK_M keys are two squares along the keys, whose diagonals the circular
    skew sums as dQ's does (`_carried_sums_in_halves`, rows and columns swapped, which turns
    j - i into i - j), carried from one query block to the next; a tail's tiles sum their dS
    onto its bound. MASK_TAIL: the keys past N hidden (their dS would reach the table).
    FACTOR_AT: FQ and FK read beside q and k (`_forward`'s); dK holds k's gradient and
    FK's, one row of each batch element and head (D wide), or with FACTOR_SUMS k's alone and
    FK's summed into DFK (float32, FK's strides: `_store_folded`)."""
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    k = _load_folded(
        K + b * skb + h * skh, offs_n, skn, N, offs_d, D, EVEN_D, FK + b * sfkb + h * sfkh, sfkn,
        FACTOR_AT,
    )  # fmt: skip
    v = _load_tile(V + b * svb + h * svh, offs_n, svn, N, offs_dv, DV, EVEN_DV)
    first = 0
    if CAUSAL:
        first = tl.load(SPANS + 4 * b)
    seed = 0
    if DROPOUT:
        seed = tl.load(SEED)
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
    # (piece 2; piece 1 the masked ones before them: `_blocks` cut at `seeing`). With a key
    # mask every block keeps it: a loop of its own for key blocks inside a run of visible
    # keys spilled ALiBi's dK/dV (16 bytes per thread, sm_90).
    SPLIT: tl.constexpr = CAUSAL & (not HAS_KEYS)
    FIRST_PIECE: tl.constexpr = 1 if SPLIT else 2
    seeing = _queries_seeing_whole(start_n, q_start, N, M, BLOCK_M, BLOCK_N)
    SUMS: tl.constexpr = FUSED & TABLE_GRAD
    near = tl.full([BLOCK_M], 0.0, tl.float32)
    far = tl.full([BLOCK_M], 0.0, tl.float32)
    reversed_shift = N - 1  # DTABLE's entry of i - j = 0
    # The high tail, the blocks that read the table, the low tail (one part without tails).
    for part in tl.static_range(3 if TAILS else 1):
        tail = tl.full([BLOCK_N, BLOCK_M], 0.0, tl.float32)
        for piece in tl.static_range(FIRST_PIECE, 3):
            start, end = _blocks(part, piece, begin, high_end, low_start, M, 0, seeing,
                                 FIRST_PIECE, BLOCK_M)  # fmt: skip
            for start_m in range(start, end, BLOCK_M):
                dk, dv, ds_t = _dk_dv_step(
                    dk, dv, k, v, start_m, offs_n, start_n, offs_d, offs_dv, b, h,
                    LSE + bh * rows, DELTA + bh * rows, Q, DO,
                    sqb, sqh, sqm, sdob, sdoh, sdom, D, DV, scale2, TABLE, stride_th, stride_tk,
                    table_shift, UNTIE, untie_row, untie_column, KEYS,
                    stride_kb, first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb, HAS_TABLE,
                    HAS_UNTIE, HAS_KEYS, CAUSAL & ((not SPLIT) | (piece == 1)), PRECISION,
                    NUM_SEGMENTS, BLOCK_M, EVEN_D, EVEN_DV, KEY_MAJOR, TAIL=TAILS & (part != 1),
                    tail_value=_pick(part, high_value, low_value), LINEAR=LINEAR,
                    slope=_pick(part, high_slope, low_slope),
                    base=M - 1 - _pick(part, tail_high, tail_low), DROPOUT=DROPOUT, seed=seed,
                    bh=bh, drop_below=drop_below, keep_scale=keep_scale, FUSED=FUSED,
                    DQ_ACC=DQ_ACC + bh * sqab, sqam=sqam, rows=rows, MASK_TAIL=MASK_TAIL,
                    FQ=FQ + b * sfqb + h * sfqh, sfqm=sfqm, FACTOR_AT=FACTOR_AT,
                    TABLE_L1=TABLE_L1,
                )  # fmt: skip
                if SUMS & TAILS & (part != 1):
                    tail += ds_t
                elif SUMS:
                    near, far = _carried_sums_in_halves(
                        ds_t, near, far, start_n, start_m, h, DTABLE, stride_dth,
                        reversed_shift, M + N - 1, BLOCK_N, BLOCK_M,
                    )  # fmt: skip
        if SUMS & TAILS & (part != 1):
            # A tail's gradient goes to its bound (part 0 the high tail here); a part without
            # blocks adds 0.
            total = tl.reduce(tl.reduce(tail, 1, _add), 0, _add)
            entry = M + N - 2 - _pick(part, tail_high, tail_low)
            tl.atomic_add(DTABLE + h * stride_dth + entry, total, sem="relaxed")
        elif SUMS:
            # The two runs still carried, where a block past the last would have added them.
            part_start, part_end = _part(part, begin, high_end, low_start, M)
            if part_end > part_start:
                end_m = (part_end + BLOCK_M - 1) // BLOCK_M * BLOCK_M
                index = end_m - start_n + reversed_shift + tl.arange(0, BLOCK_M)
                row = DTABLE + h * stride_dth
                _add_to_table(row, index - 2 * BLOCK_M, far, M + N - 1)
                _add_to_table(row, index - BLOCK_M, near, M + N - 1)
    if FACTOR_SUMS:
        _store_folded(
            DK + b * sdkb + h * sdkh, offs_n, sdkn, N, offs_d, D, dk * scale,
            DFK + b * sfkb + h * sfkh, sfkn, FACTOR_AT,
        )  # fmt: skip
    else:  # stored here: the interpreter pays for each helper call
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
    LINEAR: tl.constexpr = False, slope=0.0, base=0, DROPOUT: tl.constexpr = False, seed=0,
    bh=0, drop_below=0, keep_scale=1.0, FK=None, sfkn=0, FACTOR_AT: tl.constexpr = 0,
    TABLE_L1: tl.constexpr = True,
):  # fmt: skip
    """One key block's share of a query block's dQ, and of the tables' gradients; returns dQ
    and the tile's dS as the offset table sees it (the circular skew's sums are carried by the
    caller, `_carried_diagonal_sums`; a TAIL tile's, one value, summed by the caller too).
    FACTOR_AT: the keys' factor (FK, this head's) read beside them (`_load_folded`)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if FACTOR_AT == 0:  # called directly: the interpreter pays for each helper call
        k = _load_tile(K + b * skb + h * skh, offs_n, skn, N, offs_d, D, EVEN_D)
    else:
        k = _load_folded(
            K + b * skb + h * skh, offs_n, skn, N, offs_d, D, EVEN_D, FK, sfkn, FACTOR_AT
        )
    v = _load_tile(V + b * svb + h * svh, offs_n, svn, N, offs_dv, DV, EVEN_DV)
    s = _scores(
        q, k, offs_m, offs_n, start_m, start_n, b, h, scale2, TABLE, stride_th, stride_tk,
        table_shift, UNTIE, untie_row, untie_column, KEYS, stride_kb,
        first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb,
        HAS_TABLE, HAS_UNTIE, HAS_KEYS, CAUSAL, PRECISION, NUM_SEGMENTS, MASK_TAIL,
        TAIL=TAIL, tail_value=tail_value, LINEAR=LINEAR, slope=slope, TABLE_L1=TABLE_L1,
    )  # fmt: skip
    if TAIL:  # s is less its rows' part (`_scores`)
        lse -= _tail_shift(tail_value, slope, base, start_n, start_m, offs_m.shape[0], LINEAR)
    p = tl.exp2(s - lse[:, None])
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    if DROPOUT:  # dP through the dropout mask (`_dk_dv_step`)
        kept = _kept(seed, bh, start_m, start_n, N, drop_below, BLOCK_M, BLOCK_N)
        dp = tl.where(kept, dp * keep_scale, 0.0)
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
    SEGMENT_IDS, DSEGMENTS, SEED, FQ, FK, DFQ,
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som, sdob, sdoh, sdom,
    sdqb, sdqh, sdqm,
    stride_th, stride_tk, stride_dtb, stride_dth, stride_kb, stride_sb, sfqb, sfqh, sfqm, sfkb,
    sfkh, sfkn,
    H, M, N, D, DV, q_start, rows, table_shift, table_len, untie_row, untie_column, tail_low,
    tail_high, scale, scale2, drop_below, keep_scale,
    HAS_TABLE: tl.constexpr, TABLE_GRAD: tl.constexpr, HAS_UNTIE: tl.constexpr,
    UNTIE_GRAD: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr,
    SEGMENT_GRAD: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, DIAGONALS: tl.constexpr,
    MASK_TAIL: tl.constexpr, TAILS: tl.constexpr, LINEAR: tl.constexpr, RUNS: tl.constexpr,
    PER_BLOCK: tl.constexpr, DROPOUT: tl.constexpr, FACTOR_AT: tl.constexpr,
    FACTOR_SUMS: tl.constexpr, TABLE_L1: tl.constexpr,
):  # fmt: skip
    """dQ of one query block over the keys it sees, and that block's share of dT (in the
    batch element's own copy of dT where stride_dtb is not 0). PER_BLOCK (deterministic
    gradients): each query block adds into a copy of its own - of dT (stride_dtb apart), of
    the untie's values, and per key block of the segment table - summed after the kernel in a
    fixed order; with the circular skew each entry of its dT then takes at most two adds
    (one run, one tail's sum), which give the same value in either order.
    First D_i = sum_d dO_id O_id of its rows, in float32, kept for dK/dV (launched after): a
    kernel of its own was one more launch from the host, which bounds a call at n=1024.
    TAILS: as the forward's;
    the tiles of a tail add their dS up in registers, and the sum goes to the tail's first
    entry (tail_low or tail_high), where every entry of the tail sends its gradient.
    FACTOR_AT: FQ and FK read beside q and k (`_forward`'s); dQ holds q's gradient and FQ's
    (times the scale), one row of each batch element and head (D wide), or with FACTOR_SUMS
    q's alone and FQ's summed into DFQ (float32, FQ's strides: `_store_folded`)."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    segment_table = H * NUM_SEGMENTS * NUM_SEGMENTS
    if PER_BLOCK:
        program = b * tl.num_programs(0) + tl.program_id(0)
        DTABLE_B = DTABLE + program * stride_dtb
        DUNTIE_B = DUNTIE + program * H
        DSEGMENTS_B = DSEGMENTS + program * ((N + BLOCK_N - 1) // BLOCK_N) * segment_table
    else:
        DTABLE_B = DTABLE + b * stride_dtb
        DUNTIE_B = DUNTIE
        DSEGMENTS_B = DSEGMENTS
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q = _load_folded(
        Q + b * sqb + h * sqh, offs_m, sqm, M, offs_d, D, EVEN_D, FQ + b * sfqb + h * sfqh, sfqm,
        FACTOR_AT,
    )  # fmt: skip
    do = _load_tile(DO + b * sdob + h * sdoh, offs_m, sdom, M, offs_dv, DV, EVEN_DV)
    out = _load_tile(OUT + b * sob + h * soh, offs_m, som, M, offs_dv, DV, EVEN_DV)
    delta = tl.reduce(out.to(tl.float32) * do.to(tl.float32), 1, _add)
    tl.store(DELTA + bh * rows + offs_m, delta, mask=offs_m < rows)  # 0 past M
    lse = tl.load(LSE + bh * rows + offs_m, mask=offs_m < M, other=float("inf"))
    first = 0
    if CAUSAL:
        first = tl.load(SPANS + 4 * b)
    seed = 0
    if DROPOUT:
        seed = tl.load(SEED)
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
    # The key blocks every row sees whole take no mask (piece 1), as in the forward; the
    # carried sums run on across the pieces, which are contiguous. Not inside runs of
    # visible keys for q and k wider than 64 (TUPE-R's fold): its third loop per part
    # spilled there (4 bytes per thread, sm_90), so a key mask keeps every block masked.
    KEY_RUNS: tl.constexpr = RUNS & (BLOCK_D <= 64)
    DIAGONAL: tl.constexpr = CAUSAL & (KEY_RUNS | (not HAS_KEYS))
    inner_begin, inner_end = _unmasked_keys(
        SPANS, b, _keys_seen_whole(start_m, q_start, N, BLOCK_N), BLOCK_N, KEY_RUNS, DIAGONAL
    )
    FIRST_PIECE: tl.constexpr = 0 if KEY_RUNS else (1 if DIAGONAL else 2)
    # The low tail, the blocks that read the table, the high tail (one part without tails).
    for part in tl.static_range(3 if TAILS else 1):
        start, end = _part(part, key_begin, low_end, high_start, key_end)
        tail = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
        for piece in tl.static_range(FIRST_PIECE, 3):
            first_n, end_n = _blocks(
                part, piece, key_begin, low_end, high_start, key_end, inner_begin, inner_end,
                FIRST_PIECE, BLOCK_N,
            )  # fmt: skip
            for start_n in range(first_n, end_n, BLOCK_N):
                dq, ds_table = _dq_step(
                    dq, q, do, lse, delta, start_m, start_n, offs_m, offs_d, offs_dv, b, h, K, V,
                    skb, skh, skn, svb, svh, svn, D, DV, scale2, TABLE, DTABLE_B, stride_th,
                    stride_tk, stride_dth, table_shift, UNTIE, DUNTIE_B, untie_row,
                    untie_column, table_len, KEYS, stride_kb, first, q_start, M, N, SEGMENTS,
                    SEGMENT_IDS, stride_sb,
                    DSEGMENTS_B + (start_n // BLOCK_N) * segment_table if PER_BLOCK
                    else DSEGMENTS_B,
                    HAS_TABLE, TABLE_GRAD, HAS_UNTIE, UNTIE_GRAD,
                    HAS_KEYS & (piece != 1), CAUSAL & (piece != 1), PRECISION, NUM_SEGMENTS,
                    SEGMENT_GRAD, BLOCK_M, BLOCK_N, EVEN_D, EVEN_DV, DIAGONALS,
                    MASK_TAIL & (piece != 1), TAIL=TAILS & (part != 1),
                    tail_value=_pick(part, low_value, high_value), LINEAR=LINEAR,
                    slope=_pick(part, low_slope, high_slope),
                    base=M - 1 - _pick(part, tail_low, tail_high), DROPOUT=DROPOUT, seed=seed,
                    bh=bh, drop_below=drop_below, keep_scale=keep_scale,
                    FK=FK + b * sfkb + h * sfkh, sfkn=sfkn, FACTOR_AT=FACTOR_AT,
                    TABLE_L1=TABLE_L1,
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
    if FACTOR_SUMS:
        _store_folded(
            DQ + b * sdqb + h * sdqh, offs_m, sdqm, M, offs_d, D, dq * scale,
            DFQ + b * sfqb + h * sfqh, sfqm, FACTOR_AT,
        )  # fmt: skip
    else:  # stored here: the interpreter pays for each helper call
        tl.store(
            DQ + b * sdqb + h * sdqh + offs_m[:, None] * sdqm + offs_d[None, :],
            (dq * scale).to(DQ.dtype.element_ty),
            mask=_tile_mask(offs_m, M, offs_d, D, EVEN_D),
        )
