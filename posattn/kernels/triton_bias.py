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
batch element's first visible key or after its last (`key_spans`). Blocks that every row
sees whole - below the causal diagonal, and in the forward and dQ inside a run of visible
keys (padding on either side: `key_runs_choice`) - run in loops of their own without masks.
The scores run in base 2 (exp2) with the scale and the tables multiplied by log2(e), the
tables once per call. Each row of a tile reads a run of the offset table; four shifted
copies of it (`table_copies`) let every run start on a 16-byte boundary, so the runs load
four values at a time (compiled for sm_90: the forward's 96 four-byte copy instructions
become 24 of 16 bytes, each backward kernel's 48 become 12; `posattn.kernels.triton_aot`).
Float32 inputs take IEEE float32 dot products (no TF32), so results match the eager
reference to float32 rounding.

A table known past two indices by construction (`tails`, `LayerTerms.offset_tails`): flat,
as T5's last buckets and DIET-REL's clipped offsets, or a line, as ALiBi's fixed table, is not
read in the tiles inside either tail, which every kernel runs in loops of their own
(`_tail_key_blocks`, `_tail_query_blocks`): the rows' part of the bias is taken off their
running maximum or LSE rather than added to each score (a line's keys' part is added), and dQ
sums a flat tail's dS in registers into the tail's bound instead of along diagonals.

Here: the autograd function that launches the kernels and its entry, `table_bias_attention`.
The kernels: `triton_forward`, `triton_backward`; what they share: `triton_scores` (a tile's
scores), `triton_blocks` (which blocks a program visits), `triton_table_grad` (the diagonal
sums), `triton_tile_ops`; a call's choices: `triton_settings`; the table's copies and
stand-ins: `triton_inputs`.
"""

from __future__ import annotations

import math
import warnings

import torch
import triton
from torch import Tensor

from ..errors import require
from ..toeplitz import lines_served, require_table_shape
from .masks import key_spans
from .triton_backward import _backward_dk_dv, _backward_dq_dtable
from .triton_factors import factor_gradients, factor_inputs, factor_sums, scaled_factors
from .triton_forward import _forward
from .triton_inputs import (
    absent,
    empty_in_layout_of,
    kept_in,
    last_dim_contiguous,
    table_copies,
)
from .triton_launch import DirectLaunch
from .triton_settings import (
    CallSettings,
    blocks,
    call_settings,
    circular_skew,
    diagonal_block,
    dk_dv_flags,
    dk_dv_tiles,
    kernel_flags,
    launch_options,
    rounded_up,
)
from .triton_tile_ops import _write_kept

LOG2E = 1.4426950408889634


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


def _rows_past(
    count: int, rows: int, written: int, value: float, device: torch.device
) -> Tensor:  # fmt: skip
    """[count, rows] float32 for a kernel that writes the first `written` of each row's
    entries (its blocks' reach): left to it where that covers the rows, else `value`-filled
    first (only where a tile override makes dK/dV's query blocks longer than its writer's)."""
    if written >= rows:
        return torch.empty(count, rows, dtype=torch.float32, device=device)
    return torch.full((count, rows), value, dtype=torch.float32, device=device)


def base2_slopes(tail_slopes: tuple[Tensor, Tensor]) -> Tensor:
    """[2, H] float32: linear tails' slopes per index (low, then high) in the kernels' base-2
    units."""
    return (torch.stack(tail_slopes).float() * LOG2E).contiguous()


def dropout_scalars(dropout_p: float) -> tuple[int, float]:
    """(drop_below, keep_scale) of the kernels' dropout: a score is dropped where 24 bits of
    its Philox draw fall below drop_below = p 2^24 (`_kept`), and a kept one is scaled by
    the inverse of the chance that leaves."""
    drop_below = round(dropout_p * 2**24)
    return drop_below, 2**24 / (2**24 - drop_below)


def alert_nondeterministic(gradients: str) -> None:
    """torch.use_deterministic_algorithms(True)'s rule for a backward that is not
    deterministic: an error, or with warn_only=True a warning. kernel="triton" sums the
    tables' gradients per query block and those in a fixed order when determinism is asked
    for (`triton_bias.gradient_mode`), except where a block adds to one entry more than
    twice (the wide skew), in whatever order the adds land."""
    if not torch.are_deterministic_algorithms_enabled():
        return
    message = (
        f"kernel='triton' adds the gradient of {gradients} with atomics, in the order its "
        "blocks run: no deterministic implementation there, but "
        "torch.use_deterministic_algorithms(True) is set; the circular skew (the default: "
        "POSATTN_TRITON_SKEW=circular and a dQ tile of two squares) is deterministic, and "
        "kernel='sdpa' or 'eager' follow torch's deterministic setting"
    )
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(message, stacklevel=4)
    else:
        raise RuntimeError(message)


def gradient_mode(grads: tuple[bool, bool, bool], chosen: str, circular: bool) -> str:
    """Where the dQ kernel adds the tables' gradients (`grads`: the table's, the untie's,
    the segment table's): `chosen` (POSATTN_TRITON_TABLE_GRAD: one copy shared by every
    block, or one per batch element, each address added to by many blocks with atomics, in
    the order they run) or, under torch.use_deterministic_algorithms(True), "per-block": a
    copy per query block, summed after in a fixed order. There an entry of the table's copy
    takes at most two adds with the circular skew, which give one value in either order;
    the wide skew adds more (`alert_nondeterministic`)."""
    if not any(grads) or not torch.are_deterministic_algorithms_enabled():
        return chosen
    if grads[0] and not circular:
        alert_nondeterministic(
            "the bias table under the wide skew (POSATTN_TRITON_SKEW=wide, or a dQ tile "
            "that is not two squares: POSATTN_TRITON_DQ)"
        )
    return "per-block"


def gradient_copies(
    grads: tuple[bool, bool, bool], mode: str, table_shape, copies: Tensor, untie32: Tensor,
    segments32: Tensor, programs: tuple[int, int, int],
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """(dT, the untie's, the segment table's) gradient buffers, zeros, for `gradient_mode`'s
    mode: dT [H, L], [B, H, L] per batch element or [B * query blocks, H, L] per block; per
    block also the untie's [B * query blocks, H] and the segment table's per key block too,
    [B * query blocks * key blocks, H, S * S]. `programs`: (B, query blocks, key blocks).
    An absent one where its gradient is not asked for."""
    batch, query_blocks, key_blocks = programs
    per_block = mode == "per-block"
    leading = {"shared": (), "per-batch": (batch,), "per-block": (batch * query_blocks,)}[mode]
    table_grad, untie_grad, segment_grad = grads
    device, float32 = copies.device, torch.float32
    dtable = copies.new_zeros(leading + tuple(table_shape)) if table_grad else None
    duntie = untie32.new_zeros(leading[:per_block] + untie32.shape) if untie_grad else None
    segment_copies = (batch * query_blocks * key_blocks,) if per_block else ()
    dsegments = segments32.new_zeros(segment_copies + segments32.shape) if segment_grad else None
    return tuple(absent(device, float32) if t is None else t for t in (dtable, duntie, dsegments))


class TableBiasAttention(torch.autograd.Function):
    """softmax(q k^T * scale + T[h, j - i + M - 1], masked) v with the gradients of q, k, v and
    the table T (see the module docstring)."""

    @staticmethod
    def forward(
        ctx, q, k, v, table, keys, first, causal, q_start, scale, segments, segment_ids, untie,
        column_value, grad_enabled, tails, tail_slopes, spans, dropout_p, fq, fk, kept,
    ):  # fmt: skip
        q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
        batch, heads, M, own = q.shape
        N, DV = k.shape[-2], v.shape[-1]
        # The width the kernels read q and k at: with a low-rank bias's factors beside them.
        D = own if fq is None else own + fq.shape[-1]
        fq_, fk_, factor_strides = factor_inputs(fq, fk, batch, heads, M, N, q)
        # The tables in the kernels' base-2 units: multiplied by log2(e) once, not per score.
        device, float32 = q.device, torch.float32
        keys_ = absent(device, torch.int8) if keys is None else keys
        if spans is None:
            spans = key_spans(keys, first, causal, batch, N, device)
        spans = absent(device, torch.int32) if spans is None else spans
        # The tables in base 2, made once per forward (`kept_in`: the layers share them).
        segments32 = (
            absent(device, float32) if segments is None
            else kept_in(kept, (segments,), ("segments",),
                         lambda: (segments.float() * LOG2E).contiguous())
        )  # fmt: skip
        ids = absent(device, torch.int32, 2) if segment_ids is None else segment_ids
        untie_row, untie_column = (-1, -1) if untie is None else untie
        untie32 = (
            absent(device, float32) if untie is None
            else kept_in(kept, (column_value,), ("untie",), lambda: column_value.float() * LOG2E)
        )  # fmt: skip
        # Dropout's seed, drawn from the device's generator (torch.manual_seed) without a
        # host sync, kept for the backward, which drops the same scores.
        seed = absent(device, torch.int64)
        if dropout_p:
            seed = torch.randint(0, 2**31 - 1, (1,), device=device)
        dropout = dropout_scalars(dropout_p)
        out = empty_in_layout_of(q, DV)
        settings = call_settings(q.device)
        tile, (keys_tile, _) = settings.tiles["forward"], dk_dv_tiles(settings, dropout_p > 0)
        block_m, block_n = tile.block_m, tile.block_n
        # LSE per row, and +inf past M up to the end of dK/dV's last query block, which it
        # reads unmasked; the forward writes them where its own blocks reach that far.
        rows = rounded_up(M, keys_tile.block_m)
        lse = _rows_past(batch * heads, rows, rounded_up(M, block_m), float("inf"), q.device)
        flags = kernel_flags(
            q.dtype, D, DV, has_table=table is not None, has_keys=keys is not None,
            causal=causal, num_segments=0 if segments is None else math.isqrt(segments.shape[-1]),
            has_untie=untie is not None, tails=tails is not None and settings.tails,
            linear_tails=tail_slopes is not None, key_runs=settings.key_runs,
            dropout=dropout_p > 0, factor_at=0 if fq is None else own,
            table_l1=settings.table_l1,
        )  # fmt: skip
        # The tails' bounds inside the table: an entry past either end is a tail of one.
        tail_low, tail_high = (min(max(x, 0), M + N - 2) for x in tails or (0, M + N - 2))
        slopes = absent(device, float32)
        if flags["LINEAR"]:  # once a forward (`kept_in`: the layers share them)
            slopes = kept_in(kept, tail_slopes, ("slopes",), lambda: base2_slopes(tail_slopes))
        grid = (blocks(M, block_m), batch * heads)
        mask_tail = N % block_n != 0  # a partial last key block
        # dK/dV key-major reads the table reversed, whose copies are made here with the
        # forward's.
        with_reversed = settings.key_major and grad_enabled and any(ctx.needs_input_grad)
        copies = (
            absent(device, float32, 3) if table is None
            else kept_in(kept, (table,), ("copies", settings.longest_run, with_reversed),
                         lambda: table_copies(table, settings.longest_run, LOG2E, with_reversed))
        )  # fmt: skip
        launch(
            _forward, grid, settings.launch_mode,
            (q, k, v, out, lse, copies, slopes, untie32, keys_, spans, segments32, ids, seed,
             fq_, fk_),
            (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
             copies.stride(0), copies.stride(1), keys_.stride(0), ids.stride(0),
             *factor_strides, heads, M, N, D, DV, q_start, rows, M - 1, untie_row,
             untie_column, tail_low, tail_high, scale * LOG2E, *dropout),
            dict(BLOCK_M=block_m, BLOCK_N=block_n, MASK_TAIL=mask_tail, **flags,
                 RAW_MAX=scale >= 0,
                 **launch_options(settings.schedules["forward"], flags, mask_tail)),
        )  # fmt: skip
        ctx.save_for_backward(
            q, k, v, out, lse, copies, slopes, untie32, keys_, spans, segments32, ids, seed, fq_,
            fk_,
        )  # fmt: skip
        ctx.factors = None if fq is None else (fq.shape, fk.shape)
        ctx.width, ctx.factor_strides = D, factor_strides
        ctx.dropout = dropout
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
        saved = ctx.saved_tensors
        q, k, v, out, lse, copies, slopes, untie32, keys_, spans, segments32, ids, seed = saved[:13]
        fq_, fk_ = saved[13:]
        scale, q_start, flags, table_grad = ctx.settings
        untie_row, untie_column, untie_grad = ctx.untie
        tail_low, tail_high = ctx.tails
        grad_out = last_dim_contiguous(grad_out)
        batch, heads, M, own = q.shape
        N, DV = k.shape[-2], v.shape[-1]
        D, factor_strides = ctx.width, ctx.factor_strides
        # The forward's tiles: it sized the table's copies and LSE's rows for them.
        settings, rows = ctx.call, ctx.rows
        tile, (keys_tile, keys_schedule) = (
            settings.tiles["dq"],
            dk_dv_tiles(settings, flags["DROPOUT"]),
        )
        if fused_backward(settings, flags, table_grad):
            return fused_backward_pass(ctx, q, k, v, out, grad_out, lse, copies, slopes, keys_,
                                       spans, seed)  # fmt: skip
        # D_i = rowsum(dO * O), the term every row of dS subtracts: written by the dQ kernel
        # (0 past M), read by dK/dV after it, unmasked like LSE.
        delta = _rows_past(batch * heads, rows, rounded_up(M, tile.block_m), 0.0, q.device)
        # q's and k's gradients, and their factors' summed in float32 by the kernels (or,
        # where gradients must be deterministic, beside q's and k's: a row per batch element
        # and head, summed after in a fixed order).
        sums = ctx.factors is not None and not torch.are_deterministic_algorithms_enabled()
        width = own if sums or ctx.factors is None else D
        dq, dk = empty_in_layout_of(q, width), empty_in_layout_of(k, width)
        dv = torch.empty_like(v)
        dfq, dfk = factor_sums(fq_, fk_, sums)
        diagonals = diagonal_block(tile, settings.skew if table_grad else "wide")
        grads = (table_grad, untie_grad, ctx.segment_grad)
        mode = gradient_mode(grads, settings.grad_mode, circular_skew(settings))
        dtable, duntie, dsegments = gradient_copies(
            grads, mode, ctx.table_shape, copies, untie32, segments32,
            (batch, blocks(M, tile.block_m), blocks(N, tile.block_n)),
        )  # fmt: skip
        stride_dtb = dtable.stride(0) if table_grad and mode != "shared" else 0
        stride_dth = dtable.stride(-2) if table_grad else 0
        common = (heads, M, N, D, DV, q_start, rows)
        mask_tail = N % tile.block_n != 0
        launch(
            _backward_dq_dtable, (blocks(M, tile.block_m), batch * heads), settings.launch_mode,
            (q, k, v, out, grad_out, lse, delta, dq, copies, slopes, dtable, untie32, duntie,
             keys_, spans, segments32, ids, dsegments, seed, fq_, fk_, dfq),
            (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
             *grad_out.stride()[:3], *dq.stride()[:3], copies.stride(0), copies.stride(1),
             stride_dtb, stride_dth, keys_.stride(0), ids.stride(0), *factor_strides,
             *common, M - 1, M + N - 1, untie_row, untie_column, tail_low, tail_high, scale,
             scale * LOG2E, *ctx.dropout),
            dict(TABLE_GRAD=table_grad, UNTIE_GRAD=untie_grad, SEGMENT_GRAD=ctx.segment_grad,
                 BLOCK_M=tile.block_m, BLOCK_N=tile.block_n, MASK_TAIL=mask_tail,
                 DIAGONALS=diagonals, PER_BLOCK=mode == "per-block", FACTOR_SUMS=sums, **flags,
                 **launch_options(settings.schedules["dq"], flags, mask_tail)),
        )  # fmt: skip
        # Key-major, dK/dV reads bias[j, i] = R[i - j + N - 1] from the reversed table R (its
        # rows run along the queries).
        keys_copies, keys_shift = copies, M - 1
        if settings.key_major and flags["HAS_TABLE"]:
            keys_copies, keys_shift = copies[:, 4:], N - 1
        unfused = absent(q.device, torch.float32)
        launch(
            _backward_dk_dv, (blocks(N, keys_tile.block_n), batch * heads), settings.launch_mode,
            (q, k, v, grad_out, lse, delta, dk, dv, keys_copies, slopes, untie32, keys_, spans,
             segments32, ids, seed, unfused, unfused, fq_, fk_, dfk),
            (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3],
             *dk.stride()[:3], *dv.stride()[:3], 0, 0, keys_copies.stride(0),
             keys_copies.stride(1), 0, keys_.stride(0), ids.stride(0), *factor_strides,
             *common, keys_shift, untie_row, untie_column, tail_low, tail_high, scale,
             scale * LOG2E, *ctx.dropout),
            dict(BLOCK_M=keys_tile.block_m, BLOCK_N=keys_tile.block_n,
                 KEY_MAJOR=settings.key_major, **dk_dv_flags(flags), FUSED=False,
                 FACTOR_SUMS=sums,
                 TABLE_GRAD=False, MASK_TAIL=False, **launch_options(keys_schedule, flags)),
        )  # fmt: skip
        # The copies summed (in a fixed order: `gradient_mode`).
        if mode == "per-block":
            dtable, duntie, dsegments = (
                copy.sum(0) if grad else copy
                for copy, grad in zip((dtable, duntie, dsegments), grads, strict=True)
            )
        elif mode == "per-batch" and table_grad:
            dtable = dtable.sum(0)
        grad_table = dtable.to(ctx.dtypes[0]) if table_grad else None
        grad_segments = dsegments.to(ctx.dtypes[1]) if ctx.segment_grad else None
        grad_untie = duntie.to(ctx.dtypes[2]) if untie_grad else None
        # fq's and fk's needs: the last inputs but `kept`.
        dq, dk, grad_fq, grad_fk = factor_gradients(
            dq, dk, own, ctx.factors, ctx.needs_input_grad[-3:-1], (dfq, dfk) if sums else None
        )
        return (
            dq, dk, dv, grad_table, None, None, None, None, None, grad_segments, None, None,
            grad_untie, None, None, None, None, None, grad_fq, grad_fk, None,
        )  # fmt: skip


def fused_backward(settings: CallSettings, flags: dict, table_grad: bool) -> bool:
    """Whether the call's backward runs fused (POSATTN_TRITON_BACKWARD=fused, where it serves
    the call: `triton_settings.BACKWARDS`); a table's gradient needs dK/dV's tile to hold
    twice as many keys as queries (two squares: the circular skew). Not with a low-rank
    bias's factors (its dQ sum would be as wide as q and the factor together)."""
    tile, _ = dk_dv_tiles(settings, flags["DROPOUT"])
    return (
        settings.fused_backward
        and settings.key_major
        and (not table_grad or tile.block_n == 2 * tile.block_m)
        and not flags["HAS_UNTIE"]
        and flags["NUM_SEGMENTS"] == 0
        and flags["FACTOR_AT"] == 0
        and not torch.are_deterministic_algorithms_enabled()
    )


def fused_backward_pass(ctx, q, k, v, out, grad_out, lse, copies, slopes, keys_, spans, seed):
    """`TableBiasAttention.backward` as one dK/dV kernel that also adds dQ and the table's
    gradient (`_backward_dk_dv`'s FUSED), D_i = rowsum(dO O) computed by torch before it."""
    scale, q_start, flags, table_grad = ctx.settings
    tail_low, tail_high = ctx.tails
    batch, heads, M, D = q.shape
    N = k.shape[-2]
    settings, rows = ctx.call, ctx.rows
    keys_tile, keys_schedule = dk_dv_tiles(settings, flags["DROPOUT"])
    device, float32 = q.device, torch.float32
    # D_i, 0 past M up to the last query block's end (read unmasked, like LSE).
    delta = torch.zeros(batch * heads, rows, dtype=float32, device=device)
    delta[:, :M] = (out.float() * grad_out.float()).sum(-1).flatten(0, 1)
    dq_sum = torch.zeros(batch * heads, rows, D, dtype=float32, device=device)
    # The table's gradient reversed (entry i - j + N - 1), flipped after.
    reversed_grad = copies.new_zeros(ctx.table_shape) if table_grad else absent(device, float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    # Key-major, dK/dV reads the table reversed (`TableBiasAttention.backward`).
    keys_copies = copies[:, 4:] if flags["HAS_TABLE"] else copies
    unused = absent(device, float32)
    launch(
        _backward_dk_dv, (blocks(N, keys_tile.block_n), batch * heads), settings.launch_mode,
        (q, k, v, grad_out, lse, delta, dk, dv, keys_copies, slopes, unused, keys_, spans,
         unused, absent(device, torch.int32, 2), seed, dq_sum, reversed_grad, q, k, unused),
        (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3],
         *dk.stride()[:3], *dv.stride()[:3], dq_sum.stride(0), dq_sum.stride(1),
         keys_copies.stride(0), keys_copies.stride(1),
         reversed_grad.stride(0) if table_grad else 0, keys_.stride(0), 0, *(0,) * 6,
         heads, M, N, D, v.shape[-1], q_start, rows, N - 1, -1, -1, tail_low, tail_high,
         scale, scale * LOG2E, *ctx.dropout),
        dict(BLOCK_M=keys_tile.block_m, BLOCK_N=keys_tile.block_n, KEY_MAJOR=True,
             **dk_dv_flags(flags), FUSED=True, FACTOR_SUMS=False, TABLE_GRAD=table_grad,
             MASK_TAIL=table_grad and N % keys_tile.block_n != 0,
             **launch_options(keys_schedule, flags)),
    )  # fmt: skip
    # Scaled, cast and laid out as q in one copy (a model then splits its heads by a view).
    dq = empty_in_layout_of(q, D).copy_((dq_sum[:, :M] * scale).view(batch, heads, M, D))
    grad_table = reversed_grad.flip(-1).to(ctx.dtypes[0]) if table_grad else None
    return (
        dq, dk, dv, grad_table, None, None, None, None, None, None, None, None, None, None,
        None, None, None, None, None, None, None,
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
    dropout_p: float = 0.0,
    factors: tuple[Tensor, Tensor] | None = None,
    kept: dict | None = None,
) -> Tensor:
    """q [B, H, M, D], k [B, H, N, D], v [B, H, N, DV] -> [B, H, M, DV], in q's order of
    heads and rows (`empty_in_layout_of`).

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
    dropout_p: attention dropout, 0 <= dropout_p < 1: each probability kept with chance
        1 - dropout_p and scaled by 1 / (1 - dropout_p), from a seed drawn from the device's
        generator; the backward drops the same ones (`_kept`: a Philox draw per score, four
        per call; `kept_scores` gives the mask).
    factors: (f_q [.., M, r], f_k [.., N, r]) broadcasting to [B, H, M or N, r]: a low-rank
        bias f_q f_k^T added to the logits (TUPE's absolute part, DIET-ABS), read beside q
        and k (`triton_factors`), or None.
    kept: a dict that lives as long as the terms the tables and factors came from
        (`LayerTerms.kernel_inputs`): what the call derives from them alone (the table's
        aligned copies, the factors scaled) is kept there for the next call that reads the
        same ones (`kept_in`: the layers of a forward), or None: made for this call.
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
    require(
        isinstance(dropout_p, (int, float)) and 0 <= dropout_p < 1,
        "dropout_p", dropout_p, "a probability 0 <= dropout_p < 1",
    )  # fmt: skip
    fq, fk = (None, None) if factors is None else kept_in(
        kept, factors, ("factors", q.shape[:-1], k.shape[:-1], q.dtype, k.dtype, float(scale)),
        lambda: scaled_factors(factors, q, k, scale),
    )  # fmt: skip
    rule, column_value = (None, None) if untie is None else (untie[:2], untie[2])
    # A float whatever it was given as: Triton compiles an integer 1 as a constant and a float
    # as an fp32 argument, and a direct launch's key tells 1 from 1.0 by value only. Whether
    # grad is on is read here: inside the forward it is always off.
    return TableBiasAttention.apply(
        q, k, v, table, keys, first_real, causal, int(query_start), float(scale), segments,
        segment_ids, rule, column_value, torch.is_grad_enabled(), tails, tail_slopes, spans,
        float(dropout_p), fq, fk, kept,
    )  # fmt: skip


def kept_scores(seed: Tensor, batch: int, heads: int, n_q: int, n_k: int, dropout_p: float):
    """[B, H, n_q, n_k] bool: the scores that attention dropout keeps in a call whose seed
    is `seed` (int64 [1], the first draw from the device's generator after the seed the call
    was made under): the mask its forward and backward apply, for a reference to compare
    with or a look at what was dropped."""
    out = torch.empty(batch * heads, n_q, n_k, dtype=torch.int8, device=seed.device)
    grid = (batch * heads, blocks(n_q, 32), blocks(n_k, 32))
    drop_below, _ = dropout_scalars(dropout_p)
    _write_kept[grid](seed, out, n_q, n_k, drop_below, BLOCK_M=32, BLOCK_N=32)
    return out.bool().view(batch, heads, n_q, n_k)
