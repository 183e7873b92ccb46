"""Triton helpers on whole tiles shared by every kernel of kernel="triton": sums and maxima
that the CPU interpreter reduces in numpy, and masked loads and stores of a row-major tile."""

from __future__ import annotations

import triton
import triton.language as tl

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
def _load_folded(
    BASE, rows, row_stride, num_rows, columns, num_columns, FULL_WIDTH: tl.constexpr, FACTORS,
    factor_stride, FACTOR_AT: tl.constexpr,
):  # fmt: skip
    """`_load_tile` of [x, f]: a low-rank bias's factor f read beside q or k (x) as folding
    it in would lay it out (`posattn.kernels.fold`), without the folded copy: the columns
    below FACTOR_AT from x's rows, the rest from f's (factor_stride apart; the tile's column
    c is f's column c - FACTOR_AT); num_columns: x's width and f's together. FACTOR_AT 0: x
    alone. FACTOR_AT is a constant, so that each mask is constant along runs of columns and
    the loads stay vectorised. Where the two halves fill the tile (TUPE's 64 + 64) one load
    of both: sm_90's loops issue 3-7% more than a folded copy's (dQ's tails 12%); two masked
    loads of the whole tile issued 10-19% more."""
    if FACTOR_AT == 0:
        return _load_tile(BASE, rows, row_stride, num_rows, columns, num_columns, FULL_WIDTH)
    if columns.shape[0] == 2 * FACTOR_AT:
        # Two halves, x's and f's: one load of [rows, 2, half], whose pointers switch between
        # the two along the middle axis only, so each half's row stays one contiguous run.
        half = tl.arange(0, FACTOR_AT)
        side = tl.arange(0, 2)[None, :, None]
        own_ptrs = BASE + rows[:, None, None] * row_stride + half[None, None, :]
        factor_ptrs = FACTORS + rows[:, None, None] * factor_stride + half[None, None, :]
        ptrs = tl.where(side == 0, own_ptrs, factor_ptrs)
        inside = rows[:, None, None] < num_rows
        if not FULL_WIDTH:
            inside = inside & (side * FACTOR_AT + half[None, None, :] < num_columns)
        tile = tl.load(ptrs, mask=inside, other=0.0)
        return tl.reshape(tile, (rows.shape[0], columns.shape[0]))
    own = columns[None, :] < FACTOR_AT
    inside = _tile_mask(rows, num_rows, columns, num_columns, FULL_WIDTH)
    x = tl.load(BASE + rows[:, None] * row_stride + columns[None, :], mask=inside & own, other=0.0)
    f = tl.load(
        FACTORS + rows[:, None] * factor_stride + (columns - FACTOR_AT)[None, :],
        mask=inside & (columns[None, :] >= FACTOR_AT),
        other=0.0,
    )
    return tl.where(own, x, f)


@triton.jit
def _store_folded(
    BASE, rows, row_stride, num_rows, columns, num_columns, values, SUMS, sums_stride,
    FACTOR_AT: tl.constexpr,
):  # fmt: skip
    """Stores a gradient tile of [x, f] (`_load_folded`'s layout): x's columns (below
    FACTOR_AT) into BASE's rows, as wide as x, and f's added in float32 into SUMS's
    (sums_stride apart), where every program that read the same rows of f adds its share:
    the factor's gradient summed over what it is broadcast along, without a copy per batch
    element and head (the backward kernels' FACTOR_SUMS; without, they store whole tiles)."""
    inside = rows[:, None] < num_rows
    own = columns[None, :] < FACTOR_AT
    tl.store(
        BASE + rows[:, None] * row_stride + columns[None, :],
        values.to(BASE.dtype.element_ty), mask=inside & own,
    )  # fmt: skip
    tl.atomic_add(
        SUMS + rows[:, None] * sums_stride + (columns - FACTOR_AT)[None, :], values,
        mask=inside & (columns[None, :] >= FACTOR_AT) & (columns[None, :] < num_columns),
        sem="relaxed",
    )  # fmt: skip


# Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC 2011): its two multipliers and the Weyl
# increments of its key.
PHILOX_M0, PHILOX_M1 = tl.constexpr(0xD2511F53), tl.constexpr(0xCD9E8D57)
PHILOX_W0, PHILOX_W1 = tl.constexpr(0x9E3779B9), tl.constexpr(0xBB67AE85)


@triton.jit
def _philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of the counter (c0, c1, c2, c3) under the key (k0, k1), all uint32:
    four uint32 draws. posattn's own (Triton's tl.randint4x is built when triton is first
    imported, for the compiler alone where the interpreter is switched on later: the tests'
    case)."""
    m0 = tl.full(c0.shape, PHILOX_M0, tl.uint32)
    m1 = tl.full(c0.shape, PHILOX_M1, tl.uint32)
    for _ in tl.static_range(10):
        high0, low0 = tl.umulhi(m0, c0), m0 * c0
        high1, low1 = tl.umulhi(m1, c2), m1 * c2
        c0, c1, c2, c3 = high1 ^ c1 ^ k0, low1, high0 ^ c3 ^ k1, low0
        k0 = (k0 + PHILOX_W0).to(tl.uint32)  # modulo 2^32, whatever the sum was widened to
        k1 = (k1 + PHILOX_W1).to(tl.uint32)
    return c0, c1, c2, c3


@triton.jit
def _kept(
    seed, bh, start_m, start_n, N, drop_below, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    KEY_MAJOR: tl.constexpr = False,
):  # fmt: skip
    """Which scores of a [BLOCK_M queries, BLOCK_N keys] tile (KEY_MAJOR: [keys, queries])
    attention dropout keeps: score (i, j) is dropped where 24 bits of a Philox draw fall
    below drop_below = p 2^24. One Philox call gives four draws, for four keys in a row
    (from 4 (j // 4)): the head's stream (seed + b * H + h), counter i * ceil(N / 4) +
    j // 4; draw (j % 4: 0, 2, 1, 3) of the four. The forward, dQ and dK/dV drop the same
    scores whatever their tiles (blocks of keys start at multiples of 4)."""
    groups = (N + 3) // 4
    queries = start_m + tl.arange(0, BLOCK_M)
    fours = start_n // 4 + tl.arange(0, BLOCK_N // 4)
    if KEY_MAJOR:
        counters = queries[None, :] * groups + fours[:, None]
    else:
        counters = queries[:, None] * groups + fours[None, :]
    key = seed + bh
    zero = tl.full(counters.shape, 0, tl.uint32)
    r0, r1, r2, r3 = _philox(
        counters.to(tl.uint32), zero, zero, zero, (key & 0xFFFFFFFF).to(tl.uint32),
        (key >> 32).to(tl.uint32),
    )  # fmt: skip
    draws = tl.join(tl.join(r0, r1), tl.join(r2, r3))  # [.., 4 keys' draws as 2 x 2]
    if KEY_MAJOR:
        draws = tl.reshape(tl.permute(draws, (0, 2, 3, 1)), (BLOCK_N, BLOCK_M))
    else:
        draws = tl.reshape(draws, (BLOCK_M, BLOCK_N))
    return (draws >> 8).to(tl.int32) >= drop_below


@triton.jit
def _write_kept(SEED, OUT, M, N, drop_below, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """OUT[b * H + h, i, j] = whether dropout keeps score (i, j) (`_kept`), a tile per
    program (grid: B * H, query blocks, key blocks)."""
    bh = tl.program_id(0)
    start_m, start_n = tl.program_id(1) * BLOCK_M, tl.program_id(2) * BLOCK_N
    kept = _kept(tl.load(SEED), bh, start_m, start_n, N, drop_below, BLOCK_M, BLOCK_N)
    rows = start_m + tl.arange(0, BLOCK_M)[:, None]
    columns = start_n + tl.arange(0, BLOCK_N)[None, :]
    inside = (rows < M) & (columns < N)
    tl.store(OUT + bh * M * N + rows * N + columns, kept.to(tl.int8), mask=inside)
