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
