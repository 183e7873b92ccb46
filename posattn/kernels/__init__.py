"""Ways to compute softmax(q k^T * scale + bias + mask) v. Positional code never sees which runs.

Every kernel follows one contract, `Kernel`: q [B, H, n_q, d], k [B, H, n_k, d], v
[B, H, n_k, d_v]; mask a bool tensor broadcastable to [B, H, n_q, n_k] (True = may attend) or
None; bias a float tensor broadcastable to [B, H, n_q, n_k] (3-D [H, n_q, n_k] included) or
None, added after scaling; the output [B, H, n_q, d_v]. A kernel of one's own joins the registry
with `register_kernel(name, fn)` and is then a `kernel=` name like the built-in ones.

A kernel may also declare the keyword `offset_bias` (Tensor | None): where the layer's bias is
a Toeplitz matrix (`LayerTerms.offset_bias`), it then receives that bias's [H, 2n-1] table too
(bias[..., h, i, j] == offset_bias[h, j - i + n - 1]), to read instead of `bias` and to return
the table's gradient; `bias` is passed as well and stays the reference. A kernel that also
declares `cls_untie` (`posattn.toeplitz.ClsUntie` | None) receives TUPE-R's table that way,
with the untie of its matrix's [CLS] row and column (flex, auto); the others get its bias only.
One that declares `bias_factors` too (sdpa, sdpa-lowmem, auto) receives the low-rank factors of
TUPE's and DIET-ABS's biases beside them (`LayerTerms.bias_factors`), where every part present
is declared: on CPU their recomputing backward returns each part's gradient (`fused_parts`).
One whose `reads_tables_in_training(q, k, dropout_p)` says so (flex; auto where it hands the
call to flex) reads the table on a GPU in training too, with no [B, H, n, n] gradient:
low-rank factors beside such a table are then folded into q and k by default
(`posattn.execution`'s `fold`), where beside a bias tensor they are not.

A kernel with the attribute `reads_bias_tables = True` ("triton") takes the bias from its table
instead: it is called with bias=None and `tables=TableBias(...)` (`posattn.kernels.table_bias`).
"""

from __future__ import annotations

from functools import partial

from .eager import attention_logits, attention_probabilities, eager_attention
from .flex import auto_attention, flex_attention_kernel
from .masks import build_attention_mask
from .registry import KERNELS, Kernel, get_kernel, kernel_names, register_kernel
from .sdpa import sdpa_attention
from .table_bias import triton_attention

KERNELS.update(
    {
        "auto": auto_attention,
        "eager": eager_attention,
        "sdpa": sdpa_attention,
        "sdpa-lowmem": partial(sdpa_attention, recompute_bias=True),
        "flex": flex_attention_kernel,
        "triton": triton_attention,
    }
)

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
