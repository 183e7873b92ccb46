"""The CPU recomputing backward (`fused_bias`) for a bias described by its parts, whose
gradient goes to the parts head group by head group instead of to an [H, n, n] tensor.

The parts are those of `LayerTerms`: low-rank factors f_q f_k^T (`bias_factors`: TUPE's
absolute correlation, DIET-ABS), a Toeplitz table (`offset_bias`: TUPE-R's T5 part) and
TUPE's [CLS] untie of the table's matrix, or of zeros (`cls_untie`):

    bias = f_q f_k^T + untie(toeplitz(table) or 0)   (up to a constant per query row),

so with G = the sum over the batch of dS [H, n_q, n_k]: d f_q = G f_k, d f_k = G^T f_q, the
untie's column values take G's column off the untied row, and the table the sums of G along
its diagonals once the untied row and column are set aside.

Why not the [H, n, n] gradient and autograd through the parts: at n=1024 and H=8 that
gradient and each tensor autograd makes from it (the untie's two in-place writes copy it,
the Toeplitz matrix's flip flips it) is a fresh 32 MiB tensor, which glibc's malloc maps
from the kernel every time (allocations of 32 MiB and more are mmapped) and pays in page
faults: about 11 ms each on the 2-core development CPU, four of them per TUPE-R training
call. Here the backward holds one [g, n_q, n_k] block of G and one block of diagonal sums,
made once a call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..toeplitz import ClsUntie
from .fused_bias import (
    DiagonalSums,
    additive_mask,
    blocks_of,
    empty_grads,
    flash_forward,
    grad_logits,
    head_groups,
    pick,
    require_first_order,
)


@dataclass(frozen=True)
class BiasParts:
    """A bias's parts as `LayerTerms` describes them (any of them None, not all)."""

    table: Tensor | None = None
    factors: tuple[Tensor, Tensor] | None = None
    untie: ClsUntie | None = None

    def served(self, bias: Tensor) -> bool:
        """Whether the backward here serves this bias [B or 1, H or 1, n_q, n_k]: one bias
        for the whole batch (factors at given positions differ by batch element: their
        gradients need each dS, not their sum)."""
        per_batch = [bias] + ([] if self.factors is None else list(self.factors))
        return all(t.shape[0] == 1 for t in per_batch)

    def inputs(self) -> tuple:
        """The tensors autograd sees, in `FusedPartsAttention`'s order (None where absent)."""
        f_q, f_k = (None, None) if self.factors is None else self.factors
        column = None if self.untie is None else self.untie.column_value
        return self.table, f_q, f_k, column


class PartsGradient:
    """Sums dS over the batch for one head group at a time and hands each finished group's
    sum G to the parts: `add(heads, b, grad_s)` in grad_logits' order (every batch element
    of a group, then the next group)."""

    def __init__(self, ctx, parts: tuple, untie_at: tuple[int, int] | None, shape, dtype) -> None:
        needs = ctx.needs_input_grad[-4:]
        self.parts, self.untie_at, self.batch = parts, untie_at, shape[0]
        heads, n_q, n_k = shape[1:]
        self.grads = [
            torch.zeros(t.shape, dtype=dtype) if t is not None and need else None
            for t, need in zip(parts, needs, strict=True)
        ]
        self.group = None  # G of the group in progress, one buffer for every group
        self.buffer = torch.empty(head_groups(heads, n_q, n_k)[0].stop, n_q, n_k, dtype=dtype)
        self.sums = None
        if self.grads[0] is not None:
            self.sums = DiagonalSums(self.buffer.shape[0], n_q, dtype, n_k)

    def add(self, heads: slice, b: int, grad_s: Tensor) -> None:
        if b == 0:
            self.group = self.buffer[: grad_s.shape[0]].copy_(grad_s)
        else:
            self.group.add_(grad_s)
        if b == self.batch - 1:
            self.finish(heads, self.group)

    def finish(self, heads: slice, group: Tensor) -> None:
        _, f_q, f_k, _ = self.parts
        grad_table, grad_fq, grad_fk, grad_column = self.grads
        if grad_fq is not None:
            add_factor_gradient(grad_fq, heads, group, f_k)
        if grad_fk is not None:
            add_factor_gradient(grad_fk, heads, group.mT, f_q)
        if self.untie_at is not None:
            # The untie replaces the table's matrix on its row (a constant there) and its
            # column (a value per head): neither takes the table's gradient.
            row, column = self.untie_at
            if 0 <= row < group.shape[1]:  # a decoding step's rows may not hold it
                group[:, row] = 0
            if grad_column is not None:
                grad_column[heads] = group[:, :, column].sum(-1)
            group[:, :, column] = 0
        if grad_table is not None:
            self.sums.restart(group.shape[0])
            self.sums.add(group)
            grad_table[heads] = self.sums.total()

    def results(self) -> list:
        return [
            None if grad is None else grad.to(part.dtype)
            for grad, part in zip(self.grads, self.parts, strict=True)
        ]


def add_factor_gradient(grad: Tensor, heads: slice, group: Tensor, other: Tensor) -> None:
    """grad [1, H or 1, n, r] += G [g, n, m] @ other [1, H or 1, m, r] for the group's heads
    (summed over them where the factor is shared by the heads)."""
    other = pick(other, 0, heads).to(group.dtype)  # [g or 1, m, r]
    product = torch.bmm(group, other.expand(group.shape[0], -1, -1))
    if grad.shape[1] > 1:
        grad[0, heads] = product
    else:
        grad[0, 0] += product.sum(0)


class FusedPartsAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, mask, scale, untie_at, table, f_q, f_k, column):
        """bias: the [1, H or 1, n_q, n_k] bias the parts describe, built (read, never
        differentiated); untie_at: the untie's (row, column), or None."""
        bias = bias.detach().to(q.dtype)
        out, lse = flash_forward(ctx, q, k, v, additive_mask(bias, mask), scale)
        ctx.untie_at = untie_at
        ctx.save_for_backward(q, k, v, out, lse, bias, mask, table, f_q, f_k, column)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        require_first_order()
        q, k, v, out, lse, bias, mask, *parts = ctx.saved_tensors
        grads = empty_grads(q, k, v)
        shape = (*q.shape[:3], k.shape[2])
        sink = PartsGradient(ctx, tuple(parts), ctx.untie_at, shape, q.dtype)

        chunks = grad_logits(q, k, v, out, lse, grad_out, ctx.scale, blocks_of(bias, mask), grads)
        for heads, b, grad_s in chunks:
            sink.add(heads, b, grad_s)
        return *grads, None, None, None, None, *sink.results()


def fused_parts_attention(q, k, v, bias, mask, scale, parts: BiasParts) -> Tensor:
    """softmax(q k^T * scale + bias, masked) v with the fused CPU forward, the gradient of
    `bias` going to its `parts` (which it must equal up to a constant per query row)."""
    untie = parts.untie
    untie_at = None if untie is None else (untie.row, untie.column)
    return FusedPartsAttention.apply(q, k, v, bias, mask, scale, untie_at, *parts.inputs())
