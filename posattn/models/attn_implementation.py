"""transformers' `attn_implementation` on posattn's models: one name per posattn kernel.

posattn's attention is a positional encoding's terms (bias, q/k transform, content x position
logits, value term) plus a kernel that computes softmax(q k^T * scale + bias, masked) v
(`posattn.kernels`). `PosAttnConfig.kernel` names that kernel and is saved with the model;
transformers' `config._attn_implementation` is the same choice under transformers' names:

    attn_implementation          posattn kernel   what runs
    "eager"                      "eager"          probabilities materialised (the reference)
    "sdpa"                       "sdpa"           torch's scaled_dot_product_attention, the
                                                  bias merged into its float mask
    "flex_attention"             "flex"           torch's FlexAttention, the bias read in its
                                                  score_mod (compiled on GPU; on CPU the
                                                  forward only: training raises)
    "posattn-auto"               "auto"           SDPA, or for a large learned bias flex on
                                                  GPU and sdpa-lowmem on CPU
                                                  (posattn.execution, the default)
    "posattn-sdpa-lowmem"        "sdpa-lowmem"    SDPA with a recomputing bias backward on CPU
    "posattn-NAME"               NAME             a kernel of one's own (`register_kernel`)

`from_pretrained(..., attn_implementation=...)`, `set_attn_implementation(...)` and a config
built with `attn_implementation=` all set `config.kernel`; `config._attn_implementation` is
read from `config.kernel`, so it always names the kernel the attention modules hold
(`Encoder.set_kernel` included). As for every posattn kernel, an encoding with a value-side
term (Shaw's relative values) needs the probabilities and runs its attention on the eager
path whatever the choice (`MultiHeadAttention.attend`).

posattn's own names (the `posattn-` ones) are registered in transformers' `AttentionInterface`
(with a boolean mask, as for "sdpa"), so that transformers' checks accept them and any
transformers model can run a posattn kernel: `BertModel.from_pretrained(...,
attn_implementation="posattn-sdpa-lowmem")`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..errors import PosAttnConfigError
from ..kernels import get_kernel, kernel_names

# posattn kernel -> transformers' own name for the same computation.
TRANSFORMERS_NAMES = {"eager": "eager", "sdpa": "sdpa", "flex": "flex_attention"}
PREFIX = "posattn-"


def attn_implementation_of(kernel: str) -> str:
    """The `attn_implementation` name of a posattn kernel (the table above)."""
    return TRANSFORMERS_NAMES.get(kernel, PREFIX + kernel)


def kernel_of(attn_implementation: str) -> str:
    """The posattn kernel an `attn_implementation` name selects; a clear error for any other
    name. `posattn-eager`, `posattn-sdpa` and `posattn-flex` are accepted too."""
    own = {name: kernel for kernel, name in TRANSFORMERS_NAMES.items()}
    if attn_implementation in own:
        return own[attn_implementation]
    if isinstance(attn_implementation, str) and attn_implementation.startswith(PREFIX):
        kernel = attn_implementation.removeprefix(PREFIX)
        if kernel in kernel_names():
            register_with_transformers(kernel)
            return kernel
    allowed = sorted({attn_implementation_of(kernel) for kernel in kernel_names()})
    # transformers' own wording first, so that code matching transformers' message matches it.
    raise PosAttnConfigError(
        f'Specified `attn_implementation="{attn_implementation}"` is not supported: '
        f"attn_implementation={attn_implementation!r} is not allowed: one of {allowed} "
        "(posattn's kernels under transformers' names; see posattn.models.attn_implementation)"
    )


def transformers_attention(kernel: str):
    """A transformers attention function (`AttentionInterface`) running posattn's `kernel`:
    query [B, H, n_q, d], key/value [B, H_kv, n_k, d] (grouped heads repeated), a boolean
    (True = attend) or additive float mask; returns ([B, n_q, H, d], None)."""

    def attention(
        module: nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        scaling: float | None = None,
        dropout: float = 0.0,
        **kwargs,
    ) -> tuple[Tensor, None]:
        groups = query.shape[1] // key.shape[1]
        if groups > 1:
            key, value = (t.repeat_interleave(groups, dim=1) for t in (key, value))
        mask = bias = None
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:
                mask = attention_mask
            else:
                bias = attention_mask[..., : key.shape[-2]]
        if mask is None and getattr(module, "is_causal", False) and query.shape[2] > 1:
            n_q, n_k = query.shape[2], key.shape[2]
            mask = torch.ones(n_q, n_k, dtype=torch.bool, device=query.device).tril(n_k - n_q)
        scale = query.shape[-1] ** -0.5 if scaling is None else scaling
        out = get_kernel(kernel)(
            query, key, value, mask=mask, bias=bias, scale=scale, dropout_p=dropout
        )
        return out.transpose(1, 2).contiguous(), None

    return attention


def register_with_transformers(kernel: str) -> None:
    """Make `posattn-<kernel>` a name transformers accepts (models and masks)."""
    name = attn_implementation_of(kernel)
    if kernel in TRANSFORMERS_NAMES or name in AttentionInterface._global_mapping:
        return
    AttentionInterface.register(name, transformers_attention(kernel))
    AttentionMaskInterface.register(name, sdpa_mask)


def register_posattn_kernels() -> None:
    for kernel in kernel_names():
        register_with_transformers(kernel)
