"""Slow references written straight from the papers' equations: Python loops over (i, j)."""

from __future__ import annotations

import math

import torch


def layer_norm(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def t5_bucket(r: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5 bucket of one relative position r = j - i, from the T5 paper's description."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if r > 0:
            bucket = num_buckets
        distance = abs(r)
    else:
        distance = max(-r, 0)
    exact = num_buckets // 2
    if distance < exact:
        return bucket + distance
    # float32, as T5 computes it, so that bin edges agree to the last bucket
    ratio = torch.log(torch.tensor(distance / exact, dtype=torch.float32)) / math.log(
        max_distance / exact
    )
    log_bucket = exact + int(ratio * (num_buckets - exact))
    return bucket + min(log_bucket, num_buckets - 1)


def content(q, k, b, h, i, j) -> float:
    return float(q[b, h, i] @ k[b, h, j])


def logits_from(fn, shape) -> torch.Tensor:
    """Fill a [B, H, n, n] tensor with fn(b, h, i, j)."""
    batch, heads, n, _ = shape
    out = torch.empty(shape)
    for b in range(batch):
        for h in range(heads):
            for i in range(n):
                for j in range(n):
                    out[b, h, i, j] = fn(b, h, i, j)
    return out
