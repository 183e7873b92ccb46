"""A low-rank bias f_q f_k^T read by kernel="triton" beside q and k: the kernels load each tile
of q (and of k) as [q, f_q / scale] (and [k, f_k]), the layout folding the factors in would
give (`posattn.kernels.fold`), from the inputs as they are - no [B, H, n, d + r] copy of q and
k is made, nor kept for the backward, and a factor shared by the batch (or the heads) stays
one row per position. The backward kernels add the factors' gradients into one float32 sum
per factor (`factor_sums`) or, under deterministic algorithms, return them beside q's and
k's, summed here (`factor_gradients`)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import require
from .triton_inputs import absent


def factor_inputs(
    fq: Tensor | None, fk: Tensor | None, batch: int, heads: int, M: int, N: int, q: Tensor
) -> tuple[Tensor, Tensor, tuple[int, ...]]:
    """(FQ, FK, their strides along the batch, the heads and the rows) for the kernels: a
    factor broadcast over the batch or the heads takes stride 0 there. Without factors a
    stand-in each and strides 0 (the kernels read neither)."""
    if fq is None:
        stand_in = absent(q.device, q.dtype)
        return stand_in, stand_in, (0,) * 6
    strides = (*expanded_strides(fq, (batch, heads, M)), *expanded_strides(fk, (batch, heads, N)))
    return fq, fk, strides


def expanded_strides(factor: Tensor, leading: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of factor [.., n, r] expanded to [*leading, r] along `leading`, as
    `expand` gives them (0 where a dimension is added or broadcast from 1), computed without
    dispatching an expand per call."""
    shape, strides = factor.shape[:-1], factor.stride()[:-1]
    missing = len(leading) - len(shape)
    return tuple(
        0 if d < missing or (shape[d - missing] == 1 and size != 1) else strides[d - missing]
        for d, size in enumerate(leading)
    )


def factor_sums(fq: Tensor, fk: Tensor, sums: bool) -> tuple[Tensor, Tensor]:
    """Float32 zeros shaped as the factors, into which the backward kernels add the factors'
    gradients (`_store_folded`'s FACTOR_SUMS; the factors are contiguous, so the sums take
    their strides), or stand-ins where they do not."""
    if not sums:
        stand_in = absent(fq.device, torch.float32)
        return stand_in, stand_in
    return tuple(torch.zeros(f.shape, dtype=torch.float32, device=f.device) for f in (fq, fk))


def factor_gradients(
    dq: Tensor, dk: Tensor, own: int, factors: tuple | None, needed: tuple[bool, bool],
    sums: tuple[Tensor, Tensor] | None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:  # fmt: skip
    """(dq, dk, d f_q, d f_k) from the kernels' gradients: the factors' `sums` where the
    kernels added them up, else the columns of [q, f_q] and [k, f_k] past `own` (q's width)
    summed over what each factor was broadcast along, as the folded copy's backward would
    sum them; each factor's where `needed` (autograd's needs_input_grad of the two)."""
    if factors is None:
        return dq, dk, None, None
    fq_shape, fk_shape = factors
    if sums is not None:
        dfq, dfk = sums
        return (
            dq,
            dk,
            dfq.to(dq.dtype) if needed[0] else None,
            dfk.to(dk.dtype) if needed[1] else None,
        )
    grad_fq = dq[..., own:].sum_to_size(fq_shape) if needed[0] else None
    grad_fk = dk[..., own:].sum_to_size(fk_shape) if needed[1] else None
    return dq[..., :own], dk[..., :own], grad_fq, grad_fk


def scaled_factors(
    factors: tuple[Tensor, Tensor] | None, q: Tensor, k: Tensor, scale: float
) -> tuple[Tensor | None, Tensor | None]:
    """(f_q / scale, f_k) in q's and k's dtypes, last dimension contiguous: what the kernels
    read beside q and k so that scale * [q, f_q / scale] [k, f_k]^T = scale * q k^T + f_q f_k^T
    (`fold_into_queries_keys`'s values). The factors must broadcast to q's and k's batch,
    heads and rows, with one width."""
    if factors is None:
        return None, None
    f_q, f_k = factors
    require(
        f_q.shape[-1] == f_k.shape[-1] and f_q.shape[-1] > 0,
        "factors", f"widths {f_q.shape[-1]} and {f_k.shape[-1]}", "one width > 0 for both",
    )  # fmt: skip
    for name, factor, x in (("factors[0].shape", f_q, q), ("factors[1].shape", f_k, k)):
        require(
            broadcasts_to(factor.shape[:-1], x.shape[:-1]),
            name, tuple(factor.shape),
            f"[.., n, r] broadcasting to [B, H, n] = {tuple(x.shape[:-1])}",
        )  # fmt: skip
    # Contiguous: the gradients' float32 sums take their strides (`factor_sums`).
    return (f_q / scale).to(q.dtype).contiguous(), f_k.to(k.dtype).contiguous()


def broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    """Whether `shape` broadcasts to `target` itself (not to something larger)."""
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False
