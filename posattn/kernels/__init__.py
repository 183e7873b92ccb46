"""Ways to compute softmax(q k^T * scale + bias + mask) v. Positional code never sees which runs."""

from functools import partial

from ..errors import require_choice
from .eager import attention_logits, eager_attention
from .flex import auto_attention, flex_attention_kernel
from .masks import build_attention_mask
from .sdpa import sdpa_attention

KERNELS = {
    "auto": auto_attention,
    "eager": eager_attention,
    "sdpa": sdpa_attention,
    "sdpa-lowmem": partial(sdpa_attention, recompute_bias=True),
    "flex": flex_attention_kernel,
}


def get_kernel(name: str):
    require_choice("kernel", name, tuple(KERNELS))
    return KERNELS[name]


__all__ = ["KERNELS", "attention_logits", "build_attention_mask", "eager_attention", "get_kernel"]
