"""torch's fused scaled_dot_product_attention, with the bias merged into its float mask."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..toeplitz import ClsUntie
from ..tracing import requires_grad_beneath, under_forward_mode, under_func_transform
from .fused_bias import fused_bias_attention, fused_table_attention
from .fused_parts import BiasParts, fused_parts_attention


def uses_fused_bias(q: Tensor, bias: Tensor, dropout_p: float) -> bool:
    """A learned bias (or bias table) on CPU without dropout: the fused forward with a
    recomputing backward (SDPA itself would fall back to its unfused math path). On GPU,
    SDPA's own efficient kernel returns bias gradients. Not under torch.func's transforms,
    which take no autograd.Function without a vmap rule and forward-mode derivative."""
    return (
        bias.requires_grad
        and torch.is_grad_enabled()
        and q.device.type == "cpu"
        and not dropout_p
        and not under_func_transform()
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
    cls_untie: ClsUntie | None = None,
    bias_factors: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """recompute_bias: for a learned bias on CPU, the fused forward and one backward that
    recomputes the probabilities in blocks (`fused_bias`): faster than SDPA's math path for
    large biases and less than half its extra memory. Off in kernel="sdpa"; on in
    kernel="sdpa-lowmem", and in kernel="auto" above the execution choice
    `recompute_threshold_bytes` (`posattn.execution`, with the measurements).

    offset_bias: the [H, 2n-1] table of a Toeplitz `bias` (`LayerTerms.offset_bias`). With
    recompute_bias, a learned table on CPU takes the fused path that reads the table and returns
    its gradient (diagonal sums of dS, no [H, n, n] gradient).

    cls_untie, bias_factors: with them (TUPE-R, TUPE-A, DIET-ABS), `bias` is described by
    its parts (`fused_parts`); with recompute_bias, a learned one on CPU takes the fused path
    that returns each part's gradient, again without an [H, n, n] gradient."""
    if recompute_bias and bias is not None:
        parts = BiasParts(offset_bias, bias_factors, cls_untie)
        described = recomputed_by_parts(q, k, v, bias, mask, scale, dropout_p, parts)
        if described is not None:
            return described
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
    # In torch.func's forward mode (jvp, jacfwd, hessian) the math path: the fused kernels
    # have no forward-mode derivative. grad and vmap take them (per-sample gradients of a
    # 4 x 256 masked LM at n=512, 16 examples, one CPU thread: 3.0 s against 6.3 s), except
    # with a learned bias under autograd (vmap(loss)(...).sum().backward()): vmap's rule
    # sends it to the CPU flash kernel, which has no gradient for its mask, where SDPA
    # outside vmap takes the math path for such a mask.
    tracked = bias is not None and torch.is_grad_enabled()
    math = under_func_transform() and (
        under_forward_mode() or (tracked and requires_grad_beneath(bias))
    )
    backend = sdpa_kernel(SDPBackend.MATH) if math else nullcontext()
    with backend:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale
        )


def recomputed_by_parts(q, k, v, bias, mask, scale, dropout_p, parts: BiasParts):
    """`sdpa_attention`'s recomputing paths for a bias described by its parts, where they
    serve it, else None: a Toeplitz table alone reads its table (`fused_table_attention`),
    any other description returns the parts' gradients (`fused_parts_attention`)."""
    learned = [t for t in parts.inputs() if t is not None and t.requires_grad]
    if not learned or not uses_fused_bias(q, learned[0], dropout_p):
        return None
    built = bias if bias.dim() == 4 else bias.unsqueeze(0)
    if parts.factors is None and parts.untie is None:
        built = built if built.shape[:2] == (1, q.shape[1]) else None  # else built again
        return fused_table_attention(q, k, v, parts.table, mask, scale, built)
    if not parts.served(built):
        return None
    return fused_parts_attention(q, k, v, built, mask, scale, parts)
