"""The forward kernel of kernel="triton" (FlashAttention-2's online softmax over key blocks,
in parts at the table's tails): O and the rows' LSE in base 2 (`triton_bias` for the maths)."""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_blocks import _blocks, _key_parts, _keys_seen_whole, _pick, _unmasked_keys
from .triton_scores import _scores, _tail_shift
from .triton_tile_ops import _add, _kept, _load_folded, _load_tile, _maximum, _tile_mask


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
    base=0, PLAIN: tl.constexpr = False, DROPOUT: tl.constexpr = False, seed=0, bh=0,
    drop_below=0, FK=None, sfkn=0, FACTOR_AT: tl.constexpr = 0, TABLE_L1: tl.constexpr = True,
):  # fmt: skip
    """One key block of the online softmax: (acc, l_i, m_i) updated. PLAIN: the tile's
    scores are scale2 q k^T alone (no table read, flat tail's shift aside; no untie,
    segments or mask) and scale2 >= 0: the row maximum is taken before the scale (the same
    value: rounding keeps the order), so that each score's exponent is one FMA instead of
    a multiply and a subtraction. DROPOUT: the probabilities that reach V are those dropout
    keeps (`_kept`); the rows' sums keep every one. FACTOR_AT: the keys' factor (FK, this
    head's, rows sfkn apart) read beside them (`_load_folded`)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if FACTOR_AT == 0:  # called directly: the interpreter pays for each helper call
        k = _load_tile(K + b * skb + h * skh, offs_n, skn, N, offs_d, D, EVEN_D)
    else:
        k = _load_folded(
            K + b * skb + h * skh, offs_n, skn, N, offs_d, D, EVEN_D, FK, sfkn, FACTOR_AT
        )
    v = _load_tile(V + b * svb + h * svh, offs_n, svn, N, offs_dv, DV, EVEN_DV)
    if PLAIN:
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        top = tl.reduce(s, 1, _maximum) * scale2
    else:
        s = _scores(
            q, k, offs_m, offs_n, start_m, start_n, b, h, scale2, TABLE, stride_th, stride_tk,
            table_shift, UNTIE, untie_row, untie_column, KEYS, stride_kb,
            first, q_start, M, N, SEGMENTS, SEGMENT_IDS, stride_sb,
            HAS_TABLE, HAS_UNTIE, HAS_KEYS, CAUSAL, PRECISION, NUM_SEGMENTS, MASK_TAIL,
            TAIL=TAIL, tail_value=tail_value, LINEAR=LINEAR, slope=slope, TABLE_L1=TABLE_L1,
        )  # fmt: skip
        top = tl.reduce(s, 1, _maximum)
    if TAIL:  # s is less its rows' part (`_scores`)
        shift = _tail_shift(tail_value, slope, base, start_n, start_m, offs_m.shape[0], LINEAR)
        m_new = tl.maximum(m_i, top + shift)
    else:
        m_new = tl.maximum(m_i, top)
    # Rows that saw no key yet keep -inf; a PLAIN block hides no key, so every row sees one.
    m_safe = m_new if PLAIN else tl.where(m_new == float("-inf"), 0.0, m_new)
    below = m_safe - shift if TAIL else m_safe
    p = tl.exp2(s * scale2 - below[:, None]) if PLAIN else tl.exp2(s - below[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.reduce(p, 1, _add)
    if DROPOUT:
        kept = _kept(seed, bh, start_m, start_n, N, drop_below, offs_m.shape[0], BLOCK_N)
        p = tl.where(kept, p, 0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, l_i, m_new


@triton.jit
def _forward(
    Q, K, V, OUT, LSE, TABLE, SLOPES, UNTIE, KEYS, SPANS, SEGMENTS, SEGMENT_IDS, SEED, FQ, FK,
    sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som, stride_th, stride_tk, stride_kb,
    stride_sb, sfqb, sfqh, sfqm, sfkb, sfkh, sfkn,
    H, M, N, D, DV, q_start, rows, table_shift, untie_row, untie_column, tail_low, tail_high,
    scale2, drop_below, keep_scale,
    HAS_TABLE: tl.constexpr, HAS_UNTIE: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, MASK_TAIL: tl.constexpr,
    TAILS: tl.constexpr, LINEAR: tl.constexpr, RUNS: tl.constexpr, RAW_MAX: tl.constexpr,
    DROPOUT: tl.constexpr, FACTOR_AT: tl.constexpr, TABLE_L1: tl.constexpr,
):  # fmt: skip
    """TAILS: the table is known below tail_low and above tail_high (`table_bias_attention`'s
    `tails`): flat, or with LINEAR a line (SLOPES); the key blocks inside either tail run in
    loops of their own and read no table. RUNS (with HAS_KEYS): the key blocks inside a run
    of visible keys take no key mask (`key_runs_choice`). RAW_MAX: scale2 >= 0, so that a
    block of scores that are the scaled product alone takes its row maximum before the scale
    (`_forward_step`'s PLAIN). DROPOUT: attention dropout (`_kept`: drop_below = p 2^24),
    the kept probabilities scaled by keep_scale = 1 / (1 - p), from the seed SEED[0].
    FACTOR_AT: a low-rank bias's factors FQ (divided by the scale) and FK, read beside q and
    k from column FACTOR_AT on (`_load_folded`: D is the width of both)."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q = _load_folded(
        Q + b * sqb + h * sqh, offs_m, sqm, M, offs_d, D, EVEN_D, FQ + b * sfqb + h * sfqh, sfqm,
        FACTOR_AT,
    )  # fmt: skip
    first = 0
    if CAUSAL:
        first = tl.load(SPANS + 4 * b)
    seed = 0
    if DROPOUT:
        seed = tl.load(SEED)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_DV], 0.0, tl.float32)
    key_begin, key_end, low_end, high_start, low_value, high_value, low_slope, high_slope = (
        _key_parts(
            start_m, q_start, first, N, SPANS, b, TABLE, SLOPES, h, H, stride_th, tail_low,
            tail_high, M, BLOCK_M, BLOCK_N, HAS_KEYS, CAUSAL, TAILS, LINEAR,
        )
    )  # fmt: skip
    # The key blocks every row sees whole take no mask (piece 1): below the causal diagonal,
    # and with RUNS inside a run of visible keys; without RUNS a key mask masks every block.
    DIAGONAL: tl.constexpr = CAUSAL & (RUNS | (not HAS_KEYS))
    inner_begin, inner_end = _unmasked_keys(
        SPANS, b, _keys_seen_whole(start_m, q_start, N, BLOCK_N), BLOCK_N, RUNS, DIAGONAL
    )
    FIRST_PIECE: tl.constexpr = 0 if RUNS else (1 if DIAGONAL else 2)
    # Blocks whose scores are the scaled product alone, masks aside (piece 1 takes none).
    BARE: tl.constexpr = RAW_MAX & (NUM_SEGMENTS == 0) & (not HAS_UNTIE)
    MASKED: tl.constexpr = HAS_KEYS | CAUSAL | MASK_TAIL
    # The low tail, the blocks that read the table, the high tail (one part without tails).
    for part in tl.static_range(3 if TAILS else 1):
        for piece in tl.static_range(FIRST_PIECE, 3):
            begin, end = _blocks(
                part, piece, key_begin, low_end, high_start, key_end, inner_begin, inner_end,
                FIRST_PIECE, BLOCK_N,
            )  # fmt: skip
            for start_n in range(begin, end, BLOCK_N):
                acc, l_i, m_i = _forward_step(
                    acc, l_i, m_i, q, start_m, start_n, offs_m, offs_d, offs_dv, b, h, K, V,
                    skb, skh, skn, svb, svh, svn, D, DV, scale2, TABLE, stride_th, stride_tk,
                    table_shift, UNTIE, untie_row, untie_column, KEYS, stride_kb, first, q_start,
                    M, N, SEGMENTS, SEGMENT_IDS, stride_sb, HAS_TABLE, HAS_UNTIE,
                    HAS_KEYS & (piece != 1), CAUSAL & (piece != 1), PRECISION, NUM_SEGMENTS,
                    BLOCK_N, EVEN_D, EVEN_DV, MASK_TAIL & (piece != 1),
                    TAIL=TAILS & (part != 1), tail_value=_pick(part, low_value, high_value),
                    LINEAR=LINEAR,
                    slope=_pick(part, low_slope, high_slope),
                    base=M - 1 - _pick(part, tail_low, tail_high),
                    PLAIN=BARE & ((not HAS_TABLE) | (TAILS & (part != 1) & (not LINEAR)))
                    & ((not MASKED) | (piece == 1)),
                    DROPOUT=DROPOUT, seed=seed, bh=bh, drop_below=drop_below,
                    FK=FK + b * sfkb + h * sfkh, sfkn=sfkn, FACTOR_AT=FACTOR_AT,
                    TABLE_L1=TABLE_L1,
                )  # fmt: skip
    # A row that sees no key (out of range, or every key hidden) gives 0, not 0 / 0.
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    out = acc / l_safe[:, None]
    if DROPOUT:
        out *= keep_scale
    tl.store(
        OUT + b * sob + h * soh + offs_m[:, None] * som + offs_dv[None, :],
        out.to(OUT.dtype.element_ty),
        mask=_tile_mask(offs_m, M, offs_dv, DV, EVEN_DV),
    )
    # Such a row keeps LSE = +inf: its probabilities recompute to 0 in backward. So do the
    # rows past M up to `rows`, which dK/dV then reads without a mask (`_dk_dv_step`).
    lse = tl.where((l_i > 0) & (offs_m < M), m_i + tl.log2(l_safe), float("inf"))
    tl.store(LSE + bh * rows + offs_m, lse, mask=offs_m < rows)
