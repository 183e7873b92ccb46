"""Ways to compute softmax(q k^T * scale + bias + mask) v. Positional code never sees which runs.

Every kernel follows one contract, `Kernel`: q [B, H, n_q, d], k [B, H, n_k, d], v
[B, H, n_k, d_v]; mask a bool tensor broadcastable to [B, H, n_q, n_k] (True = may attend) or
None; bias a float tensor broadcastable to [B, H, n_q, n_k] (3-D [H, n_q, n_k] included) or
None, added after scaling; the output [B, H, n_q, d_v]. A kernel of one's own joins the registry
with `register_kernel(name, fn)` and is then a `kernel=` name like the built-in ones.
"""

from __future__ import annotations

from functools import partial
from typing import Protocol

from torch import Tensor

from ..errors import invalid, require, require_choice
from .eager import attention_logits, attention_probabilities, eager_attention
from .flex import auto_attention, flex_attention_kernel
from .masks import build_attention_mask
from .sdpa import sdpa_attention


class Kernel(Protocol):
    """softmax(q k^T * scale + bias, masked) v, with dropout on the probabilities."""

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        mask: Tensor | None,
        bias: Tensor | None,
        scale: float,
        dropout_p: float = 0.0,
    ) -> Tensor: ...


# The live registry: `register_kernel` adds to it, and every `kernel=` name is checked against
# it when used.
KERNELS: dict[str, Kernel] = {
    "auto": auto_attention,
    "eager": eager_attention,
    "sdpa": sdpa_attention,
    "sdpa-lowmem": partial(sdpa_attention, recompute_bias=True),
    "flex": flex_attention_kernel,
}


def register_kernel(name: str, fn: Kernel, *, overwrite: bool = False) -> None:
    """Make `fn` available as kernel=`name` (MultiHeadAttention, PosAttnConfig, set_kernel).
    An existing name is replaced only with overwrite=True."""
    require(isinstance(name, str) and name != "", "name", name, "a non-empty string")
    require(callable(fn), "fn", fn, "a callable following posattn.kernels.Kernel")
    if name in KERNELS and not overwrite:
        raise invalid(
            "name", name, "a kernel name not registered yet (pass overwrite=True to replace it)"
        )
    KERNELS[name] = fn


def kernel_names() -> tuple[str, ...]:
    """The registered kernel names, user kernels included."""
    return tuple(KERNELS)


def get_kernel(name: str) -> Kernel:
    require_choice("kernel", name, kernel_names())
    return KERNELS[name]


__all__ = [
    "KERNELS",
    "Kernel",
    "attention_logits",
    "attention_probabilities",
    "build_attention_mask",
    "eager_attention",
    "get_kernel",
    "kernel_names",
    "register_kernel",
]
