"""The transpose of the last two dimensions as a contiguous tensor, made fast on the CPU.

A transposed view read by elementwise ops walks its large tensor column by column: on the
2-core development CPU (one thread) adding the transpose of an [8, 8, 1024, 1024] float32
tensor to another took 269 ms against 20 ms for the untransposed one, and `.contiguous()` on
the view 278 ms; torch's copy of one 2-D transpose at a time (`copy_` of `t()`, which it tiles)
took 51 ms for the whole tensor. DeBERTa's p2c term, gathered with keys as rows, is such a
transpose of [B, H, n, n] logits (`posattn.encodings.deberta`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .tracing import under_func_transform


def transposed_2d(x: Tensor) -> Tensor:
    """x [..., m, n] -> its transpose [..., n, m], contiguous, by one 2-D copy per leading
    index."""
    *lead, m, n = x.shape
    source = x.reshape(-1, m, n)
    out = torch.empty(source.shape[0], n, m, dtype=x.dtype, device=x.device)
    for index in range(source.shape[0]):
        out[index].copy_(source[index].t())
    return out.view(*lead, n, m)


class TransposedCopy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return transposed_2d(x)

    @staticmethod
    def backward(ctx, grad):
        return transposed_2d(grad)


def contiguous_transpose(x: Tensor) -> Tensor:
    """x.transpose(-1, -2), contiguous, gradients included: on the CPU by 2-D copies
    (`transposed_2d`), elsewhere and under torch.func's transforms (which take no
    autograd.Function without a vmap rule) by torch's own `.contiguous()`."""
    if x.device.type != "cpu" or x.dim() < 3 or under_func_transform():
        return x.transpose(-1, -2).contiguous()
    return TransposedCopy.apply(x)
