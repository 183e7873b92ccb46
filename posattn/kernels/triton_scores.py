"""One tile of scores of kernel="triton", in Triton: scale * q k^T plus the bias read from its
offset table (4-aligned runs of `triton_inputs.table_copies`), TUPE's [CLS] untie, DIET's
segment pairs, and the key mask and causal rule; a tail tile's bias as a shift per row."""

from __future__ import annotations

import triton
import triton.language as tl


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
def _table_bias(TABLE, h, stride_th, stride_tk, table_shift, rows, columns, start_column, num_rows,
                TABLE_L1: tl.constexpr = True):  # fmt: skip
    """A tile of an offset table's bias, bias[r, c] = table[c - r + table_shift]. Row r reads
    the table from start = columns[0] - r + table_shift on, a run as long as the columns, from
    the copy shifted by start % 4, where the run begins on a 16-byte boundary: the loads go 4
    values at a time (the tables are padded past their end, so only the rows are masked; a
    score past the last column is hidden by the caller). TABLE_L1: the loads are cached in L1
    (`table_cache_choice`): a tile's rows read overlapping runs, 2.5 KiB of distinct 32-byte
    sectors in a 128 x 32 tile's 16 KiB, of which the next key block reads 0.5 KiB anew;
    without, each 16-byte copy into shared memory bypasses L1 (cp.async.cg), and the whole
    16 KiB comes from L2 every key block, twice the bytes of the block's K and V."""
    start = start_column - rows + table_shift
    shift = ((start % 4) + 4) % 4
    aligned = tl.multiple_of(start - shift, 4)
    row = TABLE + h * stride_th + shift * stride_tk + aligned
    pointers = row[:, None] + (columns - start_column)[None, :]
    cache: tl.constexpr = ".ca" if TABLE_L1 else ""
    return tl.load(pointers, mask=rows[:, None] < num_rows, other=0.0, cache_modifier=cache)


@triton.jit
def _scores(
    q, k, offs_m, offs_n, start_m, start_n, b, h, scale2, TABLE, stride_th, stride_tk,
    table_shift, UNTIE,
    untie_row, untie_column, KEYS, stride_kb, first, q_start, M, N, SEGMENTS, SEGMENT_IDS,
    stride_sb,
    HAS_TABLE: tl.constexpr, HAS_UNTIE: tl.constexpr, HAS_KEYS: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NUM_SEGMENTS: tl.constexpr,
    MASK_TAIL: tl.constexpr, KEY_MAJOR: tl.constexpr = False, TAIL: tl.constexpr = False,
    tail_value=0.0, LINEAR: tl.constexpr = False, slope=0.0, TABLE_L1: tl.constexpr = True,
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
                TABLE, h, stride_th, stride_tk, table_shift, offs_n, offs_m, start_m, N, TABLE_L1
            )
        else:
            bias = _table_bias(
                TABLE, h, stride_th, stride_tk, table_shift, offs_m, offs_n, start_n, M, TABLE_L1
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
