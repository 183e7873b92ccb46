"""A low-rank bias folded into the dot product: the fused kernels stay fused and no
[B, H, n, n] bias gradient exists. Whether it runs is `posattn.execution`'s `fold` choice."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

# Head sizes SDPA's memory-efficient GPU kernel takes: multiples of 8.
FUSED_HEAD_MULTIPLE = 8


def folded_head_size(head: int, rank: int) -> int:
    """The width q and k fold to with `rank` factor columns: rounded up to a multiple of
    `FUSED_HEAD_MULTIPLE` (`fold_into_queries_keys`)."""
    width = head + rank
    return width + -width % FUSED_HEAD_MULTIPLE


def fold_into_queries_keys(
    q: Tensor, k: Tensor, factors: tuple[Tensor, Tensor], scale: float
) -> tuple[Tensor, Tensor]:
    """q', k' with scale * q' k'^T = scale * q k^T + f_q f_k^T: q' = [q, f_q / scale, 0],
    k' = [k, f_k, 0]. The width is rounded up to a multiple of 8 with zero columns (TUPE-A:
    64 + 65 = 129 -> 136): SDPA's memory-efficient GPU kernel, the fused one that takes a
    bias, requires a last dimension divisible by 8 (pytorch/pytorch#110630), and without it
    the unfused math path runs. Not yet measured on a GPU."""
    f_q, f_k = factors
    f_q = (f_q / scale).to(q.dtype).expand(*q.shape[:-1], -1)
    f_k = f_k.to(k.dtype).expand(*k.shape[:-1], -1)
    zeros = folded_head_size(q.shape[-1], f_q.shape[-1]) - q.shape[-1] - f_q.shape[-1]
    q, k = (torch.cat(pair, -1) for pair in ((q, f_q), (k, f_k)))
    if zeros:  # a pad of nothing still copies q and k (TUPE-R: 64 + 64)
        q, k = F.pad(q, (0, zeros)), F.pad(k, (0, zeros))
    return q, k


def fold_bias_factors(
    q: Tensor, k: Tensor, v: Tensor, factors: tuple[Tensor, Tensor], scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    """`fold_into_queries_keys`, and v padded with zeros to the same width (SDPA's fused CPU
    kernel needs equal head sizes), so that softmax(.) v' holds softmax(.) v in its first d_v
    columns."""
    q, k = fold_into_queries_keys(q, k, factors, scale)
    return q, k, F.pad(v, (0, q.shape[-1] - v.shape[-1]))
