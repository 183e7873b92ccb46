"""A low-rank bias folded into the dot product: the fused kernels stay fused and no
[B, H, n, n] bias gradient exists. Whether it runs is `posattn.execution`'s `fold` choice."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F


def fold_bias_factors(
    q: Tensor, k: Tensor, v: Tensor, factors: tuple[Tensor, Tensor], scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v such that scale * q' k'^T = scale * q k^T + f_q f_k^T and softmax(.) v' holds
    softmax(.) v in its first d_v columns: q' = [q, f_q / scale], k' = [k, f_k], v padded
    with zeros to the same width (SDPA's fused CPU kernel needs equal head sizes)."""
    f_q, f_k = factors
    f_q = (f_q / scale).to(q.dtype).expand(*q.shape[:-1], -1)
    f_k = f_k.to(k.dtype).expand(*k.shape[:-1], -1)
    q, k = torch.cat([q, f_q], -1), torch.cat([k, f_k], -1)
    return q, k, F.pad(v, (0, q.shape[-1] - v.shape[-1]))
