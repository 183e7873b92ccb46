"""FlexAttention: the positional bias read inside the fused kernel, on GPU.

SDPA on CUDA takes a learned bias only through its memory-efficient kernel, whose backward
materialises the bias gradient for the whole batch (measured on an H100, bf16, B=8, H=8, n=4096:
5.3x the time of bias-free flash attention and 2.3 GiB against 0.2 GiB). FlexAttention adds
`bias[b, h, i, j]` to each score inside its fused kernel, and its backward accumulates the
bias gradient without a [B, H, n, n] tensor.

A Toeplitz bias (`LayerTerms.offset_bias`) is read from its [H, 2n-1] table by a functional
score_mod (with TUPE's [CLS] untie, `LayerTerms.cls_untie`, where there is one), and the
padding / causal mask is a BlockMask, so blocks no query sees are skipped.

Flex has no backward on CPU (torch 2.13: "FlexAttention does not support backward on CPU" when
q, k or v requires grad, and an InductorError when only a captured table does); there the
forward runs the uncompiled reference implementation (for tests) and a training call raises a
clear error. Dropout needs the probabilities, so
those calls go to `sdpa_attention`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import cache

import torch
from torch import Tensor

from ..errors import invalid
from ..execution import (
    flex_threshold_bytes,
    recompute_threshold_bytes,
    triton_inference_threshold_bytes,
    triton_threshold_bytes,
)
from ..toeplitz import ClsUntie, untied
from ..tracing import under_func_transform
from .sdpa import sdpa_attention
from .table_bias import TableBias, func_transform_refusal, serves_table, triton_attention


def broadcast_index(tensor: Tensor) -> Callable:
    """score_mod indexing of a tensor broadcastable to [B, H, n_q, n_k]: a size-1 dimension is
    read at index 0 (multiplying the index by 0 keeps it a traced tensor)."""
    keep = [int(size != 1) for size in tensor.shape]

    def read(b, h, q_idx, kv_idx):
        return tensor[b * keep[0], h * keep[1], q_idx * keep[2], kv_idx * keep[3]]

    return read


def score_modifier(
    bias: Tensor | None,
    offset_bias: Tensor | None,
    n_k: int,
    untie: tuple[int, int, Tensor] | None = None,
) -> Callable | None:
    """score -> score + the bias at (b, h, i, j): read from the Toeplitz table
    offset_bias[h, j - i + n_q - 1] where there is one (2n-1 values per head instead of n^2),
    with the [CLS] untie's row and column where there is one ((row, column, values [H]): a
    tuple, which torch.compile takes as plain inputs), else from the bias tensor."""
    if offset_bias is not None:
        last = offset_bias.shape[-1] - n_k  # n_q - 1: offset 0 of query row 0

        def table_mod(score, b, h, q_idx, kv_idx):
            value = offset_bias[h, kv_idx - q_idx + last]
            if untie is not None:
                row, column, column_value = untie
                value = untied(value, q_idx, kv_idx, row, column, column_value[h])
            return score + value

        return table_mod
    if bias is None:
        return None
    read_bias = broadcast_index(bias)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + read_bias(b, h, q_idx, kv_idx)

    return score_mod


def block_mask_of(mask: Tensor | None, n_q: int, n_k: int):
    """The padding / causal mask as a BlockMask: blocks that no query may see are skipped, and
    the mask is read (mask_mod) only in partly visible blocks."""
    if mask is None:
        return None
    from torch.nn.attention.flex_attention import create_block_mask

    read_mask = broadcast_index(mask)

    def mask_mod(b, h, q_idx, kv_idx):
        return read_mask(b, h, q_idx, kv_idx)

    batch, heads = (None if size == 1 else size for size in mask.shape[:2])
    return create_block_mask(mask_mod, batch, heads, n_q, n_k, device=mask.device)


def flex_with_terms(q, k, v, bias, offset_bias, block_mask, scale, untie=None):
    """One flex_attention call; the score_mod closure is built inside the compiled region,
    so that a new bias tensor is a new input, not a new function to recompile for."""
    from torch.nn.attention.flex_attention import flex_attention

    score_mod = score_modifier(bias, offset_bias, k.shape[-2], untie)
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


@cache
def compiled_flex_with_terms() -> Callable:
    # Static shapes: a second length compiled dynamically passed the table's offset to flex
    # as a symbolic size, which inductor could not lower (torch 2.11, H100).
    return torch.compile(flex_with_terms, dynamic=False)


def run_flex(q, k, v, bias, offset_bias, mask, scale, untie=None) -> Tensor:
    block_mask = block_mask_of(mask, q.shape[-2], k.shape[-2])
    if q.device.type == "cuda":
        # Inside a model's own torch.compile, flex is compiled with the model (dynamo would
        # trace through the cached function and warn of the cache).
        compiled = torch.compiler.is_compiling()
        run = flex_with_terms if compiled else compiled_flex_with_terms()
        return run(q, k, v, bias, offset_bias, block_mask, scale, untie)
    with warnings.catch_warnings():
        # On CPU the uncompiled reference forward is the point (tests), not a slow surprise.
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_with_terms(q, k, v, bias, offset_bias, block_mask, scale, untie)


def flex_attention_kernel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    offset_bias: Tensor | None = None,
    cls_untie: ClsUntie | None = None,
) -> Tensor:
    """`cls_untie` comes with `offset_bias` (the untie of its Toeplitz matrix), never alone."""
    if under_func_transform():
        raise func_transform_refusal("flex")
    if dropout_p:
        return sdpa_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)
    inputs = [t for t in (q, k, v, bias, offset_bias) if t is not None]
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
    if offset_bias is not None:
        offset_bias = offset_bias.to(q.dtype)
    untie = None
    if cls_untie is not None:
        untie = (cls_untie.row, cls_untie.column, cls_untie.column_value.to(q.dtype))
    return run_flex(q, k, v, bias, offset_bias, mask, scale, untie)


def reads_tables_always(q: Tensor, k: Tensor, dropout_p: float) -> bool:
    return True


# On a GPU it reads a Toeplitz bias from its table in training too, the table's gradient
# taken there: no [B, H, n, n] gradient, so folded factors beside such a table pay
# (`MultiHeadAttention.learned_rest`).
flex_attention_kernel.reads_tables_in_training = reads_tables_always


def bias_gradient_bytes(q: Tensor, k: Tensor) -> int:
    """What SDPA's efficient backward materialises for a learned bias: [B, H, n_q, n_k]."""
    batch, heads, n_q, _ = q.shape
    return batch * heads * n_q * k.shape[-2] * q.element_size()


def auto_takes_triton(
    q: Tensor,
    k: Tensor,
    offset_bias,
    mask,
    learned: bool,
    head_size: int | None = None,
    inference: bool = False,
) -> bool:
    """`auto`'s choice of kernel="triton" (see `auto_attention`): on GPU, a learned bias given
    as a Toeplitz table whose [B, H, n, n] gradient would pass `triton_threshold_bytes`, or,
    in `inference` (no gradients, a table alone), one whose [H, n, n] float32 bias would pass
    `triton_inference_threshold_bytes`, where the kernel serves it at `head_size` (q's, or
    what a folded low-rank part widens it to). `MultiHeadAttention.attend` asks before
    building the bias. Never under torch.func's transforms (`func_transform_refusal`)."""
    if q.device.type != "cuda" or under_func_transform():
        return False
    heads, n_q, n_k = q.shape[1], q.shape[-2], k.shape[-2]
    if learned and torch.are_deterministic_algorithms_enabled():
        # Deterministic gradients under its circular skew only (`triton_bias.gradient_mode`).
        from .triton_settings import call_settings, circular_skew

        learned = circular_skew(call_settings(q.device))
    large = (learned and bias_gradient_bytes(q, k) > triton_threshold_bytes()) or (
        inference and heads * n_q * n_k * 4 > triton_inference_threshold_bytes()
    )
    return large and serves_table(q, k, offset_bias, mask, head_size)


def auto_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    offset_bias: Tensor | None = None,
    cls_untie: ClsUntie | None = None,
    bias_factors: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """The measured choice per call, by the size of a learned bias's [B, H, n, n] gradient:
    on GPU, SDPA (the fastest for these shapes) except above the execution choices
    `triton_threshold_bytes`, where a Toeplitz bias given by its table goes to kernel="triton"
    where it serves it (`table_bias.serves_table`), and `flex_threshold_bytes`
    (`posattn.execution`), where any other learned bias goes to FlexAttention, both keeping
    the memory near bias-free attention's; on CPU,
    SDPA's math path except above `recompute_threshold_bytes`, where the fused forward with a
    recomputing backward is both faster and smaller (`fused_bias`).

    Triton over flex and SDPA there: H200, bf16, B=8, H=8, d_h=64, T5 forward + backward as
    a ratio to bias-free flash SDPA, n=4096: triton 3.80x / 643 MiB, flex 4.95x / 802 MiB,
    SDPA 6.31x / 3010 MiB; n=1024 (128 MiB of gradient, below the threshold): SDPA 3.40x,
    triton 3.42x, flex 4.08x (`posattn bench`, docs/cost.md "On a GPU"). TUPE-R reaches triton
    from `MultiHeadAttention.attend`, which folds its absolute part into q and k alone; handed
    here with its [CLS] untie (`cls_untie`), q, k and v come folded to one width and it stays
    with SDPA or flex, whose bias tensor holds the untie. Handed unfolded with its parts
    (`bias_factors` beside the table and the untie), it goes to SDPA, whose recomputing CPU
    path returns the parts' gradients (`fused_parts`), or to flex with the bias alone."""
    learned = bias is not None and bias.requires_grad and torch.is_grad_enabled() and not dropout_p
    # `bias` is the Toeplitz matrix of `offset_bias` (with the untie) unless factors add to it.
    toeplitz = None if bias_factors is not None else offset_bias
    if cls_untie is None and auto_takes_triton(q, k, toeplitz, mask, learned):
        return triton_attention(
            q, k, v, mask=mask, bias=None, scale=scale, tables=TableBias(offset=offset_bias)
        )
    gradient_bytes = bias_gradient_bytes(q, k) if learned else 0
    on_gpu = q.device.type == "cuda"
    recompute = not on_gpu and gradient_bytes > recompute_threshold_bytes()
    if learned and auto_takes_flex(q, k, dropout_p):
        return flex_attention_kernel(
            q, k, v, mask=mask, bias=bias, scale=scale, offset_bias=toeplitz,
            cls_untie=None if toeplitz is None else cls_untie,
        )  # fmt: skip
    return sdpa_attention(
        q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p,
        recompute_bias=recompute, offset_bias=offset_bias, cls_untie=cls_untie,
        bias_factors=bias_factors,
    )  # fmt: skip


def auto_takes_flex(q: Tensor, k: Tensor, dropout_p: float) -> bool:
    """Whether `auto_attention` hands a learned bias of a training call to flex (which then
    reads a Toeplitz rest from its table: `MultiHeadAttention.learned_rest`)."""
    on_gpu = q.device.type == "cuda" and not under_func_transform()
    return on_gpu and not dropout_p and bias_gradient_bytes(q, k) > flex_threshold_bytes()


auto_attention.reads_tables_in_training = auto_takes_flex
