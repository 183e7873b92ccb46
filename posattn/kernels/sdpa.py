"""torch's fused scaled_dot_product_attention, with the bias merged into its float mask."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from .fused_bias import fused_bias_attention, fused_table_attention


def uses_fused_bias(q: Tensor, bias: Tensor, dropout_p: float) -> bool:
    """A learned bias (or bias table) on CPU without dropout: the fused forward with a
    recomputing backward (SDPA itself would fall back to its unfused math path). On GPU,
    SDPA's own efficient kernel returns bias gradients."""
    return (
        bias.requires_grad and torch.is_grad_enabled() and q.device.type == "cpu" and not dropout_p
    )


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    recompute_bias: bool = False,
    offset_bias: Tensor | None = None,
) -> Tensor:
    """recompute_bias: for a learned bias on CPU, the fused forward and one backward that
    recomputes the probabilities in blocks (`fused_bias`): faster than SDPA's math path for
    large biases and less than half its extra memory. Off in kernel="sdpa"; on in
    kernel="sdpa-lowmem", and in kernel="auto" above the execution choice
    `recompute_threshold_bytes` (`posattn.execution`, with the measurements).

    offset_bias: the [H, 2n-1] table of a Toeplitz `bias` (`LayerTerms.offset_bias`). With
    recompute_bias, a learned table on CPU takes the fused path that reads the table and returns
    its gradient (diagonal sums of dS, no [H, n, n] gradient)."""
    table = recompute_bias and bias is not None and offset_bias is not None
    if table and uses_fused_bias(q, offset_bias, dropout_p):
        built = bias if bias.dim() == 4 else bias.unsqueeze(0)
        built = built if built.shape[:2] == (1, q.shape[1]) else None  # else built again
        return fused_table_attention(q, k, v, offset_bias, mask, scale, built)
    if bias is None:
        attn_mask = mask
    else:
        bias = bias.to(q.dtype)
        # SDPA takes a 4-D mask only; a 3-D one is rejected by its fused kernels.
        bias = bias if bias.dim() == 4 else bias.unsqueeze(0)
        if recompute_bias and uses_fused_bias(q, bias, dropout_p):
            return fused_bias_attention(q, k, v, bias, mask, scale)
        bias = bias.detach() if not torch.is_grad_enabled() else bias
        if mask is None:
            attn_mask = bias
        else:
            attn_mask = torch.where(mask, bias, torch.tensor(float("-inf"), dtype=q.dtype))
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale
    )
