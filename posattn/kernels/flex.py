"""FlexAttention: the positional bias read inside the fused kernel, on GPU.

SDPA on CUDA takes a learned bias only through its memory-efficient kernel, whose backward
materialises the bias gradient for the whole batch (measured on an H100, bf16, B=8, H=8, n=4096:
5.3x the time of bias-free flash attention and 2.3 GiB against 0.2 GiB). FlexAttention adds
`bias[b, h, i, j]` to each score inside its fused kernel, and its backward accumulates the
bias gradient without a [B, H, n, n] tensor.

Flex has no backward on CPU; there the forward runs the uncompiled reference implementation
(for tests) and a training call raises a clear error. Dropout needs the probabilities, so
those calls go to `sdpa_attention`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import cache

import torch
from torch import Tensor

from ..errors import invalid
from ..execution import flex_threshold_bytes
from .sdpa import sdpa_attention


def broadcast_index(tensor: Tensor) -> Callable:
    """score_mod indexing of a tensor broadcastable to [B, H, n_q, n_k]: a size-1 dimension is
    read at index 0 (multiplying the index by 0 keeps it a traced tensor)."""
    keep = [int(size != 1) for size in tensor.shape]

    def read(b, h, q_idx, kv_idx):
        return tensor[b * keep[0], h * keep[1], q_idx * keep[2], kv_idx * keep[3]]

    return read


def score_modifier(bias: Tensor | None, mask: Tensor | None) -> Callable | None:
    """score -> score + bias[b, h, i, j], then -inf where the mask hides key j."""
    if bias is None and mask is None:
        return None
    read_bias = None if bias is None else broadcast_index(bias)
    read_mask = None if mask is None else broadcast_index(mask)

    def score_mod(score, b, h, q_idx, kv_idx):
        if read_bias is not None:
            score = score + read_bias(b, h, q_idx, kv_idx)
        if read_mask is not None:
            score = torch.where(read_mask(b, h, q_idx, kv_idx), score, -float("inf"))
        return score

    return score_mod


def flex_with_terms(q, k, v, bias, mask, scale):
    """One flex_attention call; the score_mod closure is built inside the compiled region,
    so that a new bias tensor is a new input, not a new function to recompile for."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=score_modifier(bias, mask), scale=scale)


@cache
def compiled_flex_with_terms() -> Callable:
    return torch.compile(flex_with_terms)


def run_flex(q, k, v, bias, mask, scale) -> Tensor:
    if q.device.type == "cuda":
        return compiled_flex_with_terms()(q, k, v, bias, mask, scale)
    with warnings.catch_warnings():
        # On CPU the uncompiled reference forward is the point (tests), not a slow surprise.
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_with_terms(q, k, v, bias, mask, scale)


def flex_attention_kernel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
) -> Tensor:
    if dropout_p:
        return sdpa_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)
    inputs = [t for t in (q, k, v, bias) if t is not None]
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs) and q.device.type != "cuda":
        raise invalid(
            "kernel",
            "flex",
            f"a GPU for training (FlexAttention has no backward on {q.device.type}); "
            "use kernel='sdpa' or 'auto'",
        )
    if bias is not None:
        # In q's dtype: a float32 bias tile next to bf16 q/k tiles overflows the GPU kernel's
        # shared memory (seen on an H100), and SDPA rounds it the same way.
        bias = (bias if bias.dim() == 4 else bias.unsqueeze(0)).to(q.dtype)
    return run_flex(q, k, v, bias, mask, scale)


def bias_gradient_bytes(q: Tensor, k: Tensor) -> int:
    """What SDPA's efficient backward materialises for a learned bias: [B, H, n_q, n_k]."""
    batch, heads, n_q, _ = q.shape
    return batch * heads * n_q * k.shape[-2] * q.element_size()


def auto_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
) -> Tensor:
    """The measured choice per call: SDPA (the fastest on CPU and, for these shapes, on GPU),
    except for a learned bias on GPU whose full gradient would pass the execution choice
    `flex_threshold_bytes` (`posattn.execution`), where FlexAttention keeps the memory near
    bias-free attention's for a few percent of time."""
    use_flex = (
        q.device.type == "cuda"
        and bias is not None
        and bias.requires_grad
        and torch.is_grad_enabled()
        and not dropout_p
        and bias_gradient_bytes(q, k) > flex_threshold_bytes()
    )
    # kernel="triton" (a table-reading kernel, `table_bias`) is not among the choices yet: no
    # GPU measurement of it exists. Where it measures faster, `MultiHeadAttention.attend` would
    # route table-described layers to it (it needs `LayerTerms.offset_bias`, not this `bias`).
    kernel = flex_attention_kernel if use_flex else sdpa_attention
    return kernel(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)
