"""kernel="triton": attention that reads a relative bias from its table inside the kernel.

The kernel itself (`posattn.kernels.triton_bias`, Triton) is imported at the first call, so
that posattn imports without triton and `TRITON_INTERPRET` is read when the kernels are built.
Here: what the kernel needs to be told (`TableBias`, the mask's `MaskLayout`) and every
configuration it refuses, with the reason and the kernels that serve it instead.

`MultiHeadAttention.attend` recognises a kernel that reads tables by its attribute
`reads_bias_tables = True` and calls it with `bias=None` and `tables=TableBias(...)`, built
from the layer's `LayerTerms`: the encodings never learn which kernel runs.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass

import torch
from packaging.version import Version
from torch import Tensor

from ..errors import PosAttnConfigError, invalid
from ..toeplitz import ClsUntie, TableTails, lines_served, require_table_shape
from ..tracing import under_func_transform
from .fold import fold_into_queries_keys
from .masks import derived_once, key_spans, mask_layout
from .triton_settings import factors_choice

# The modules that build the kernel's Triton functions, in import order, each as the
# interpreter or the compiler was chosen (TRITON_INTERPRET) when it was imported.
KERNEL_MODULES = tuple(
    f"posattn.kernels.triton_{name}"
    for name in ("tile_ops", "blocks", "scores", "table_grad", "forward", "backward", "bias")
)


def forget_built_kernels() -> None:
    """Drop the kernel's modules (and triton_aot, which holds their functions), so that the
    next import builds the kernels anew, for the interpreter or the compiler as
    TRITON_INTERPRET then says (tests switch between them)."""
    package = vars(sys.modules[__package__])  # posattn.kernels, which holds them by name
    for name in (*KERNEL_MODULES, "posattn.kernels.triton_aot"):
        sys.modules.pop(name, None)
        package.pop(name.rsplit(".", 1)[1], None)


# The built-in kernels that serve every configuration (flex trains on GPU only).
OTHER_KERNELS = "'auto', 'sdpa', 'sdpa-lowmem', 'flex' or 'eager'"


@dataclass(frozen=True)
class SegmentPairs:
    """DIET's segment bias (Eq. 2) described by its table: bias[b, h, i, j] =
    table[h, S * ids[b, i] + ids[b, j]], table [H, S * S], ids [B, n] (S = num_segments)."""

    table: Tensor
    ids: Tensor
    num_segments: int

    def dense(self) -> Tensor:
        """The [B, H, n, n] bias itself (for the kernels that add a bias tensor)."""
        pairs = self.ids[:, :, None] * self.num_segments + self.ids[:, None, :]  # [B, n, n]
        return self.table[:, pairs].transpose(0, 1)


@dataclass(frozen=True)
class TableBias:
    """A bias given by its tables. offset: [H, n_q + n_k - 1] with bias[h, i, j] =
    offset[h, j - i + n_q - 1] (`LayerTerms.offset_bias`), or None; offset_tails: where it
    is known past two position offsets (`LayerTerms.offset_tails`), or None; segments:
    DIET's segment-pair bias added to it, or None; cls_untie: TUPE's [CLS] untie on the
    offset table's matrix, or on zeros without one (`LayerTerms.cls_untie`), or None;
    factors: (f_q, f_k), a low-rank bias f_q f_k^T added beside them (`LayerTerms
    .bias_factors`), for a kernel that reads them (`reads_bias_factors = True`; the others
    get them folded into q and k), or None. kept: a dict that lives as long as the terms
    these tables came from (`LayerTerms.kernel_inputs`), where the kernel keeps what it
    derives from them for the next layer that reads the same terms, or None (nothing kept)."""

    offset: Tensor | None = None
    offset_tails: TableTails | None = None
    segments: SegmentPairs | None = None
    cls_untie: ClsUntie | None = None
    factors: tuple[Tensor, Tensor] | None = None
    kept: dict | None = None


def refusal(kernel: str, reason: str) -> PosAttnConfigError:
    return invalid(
        "kernel",
        kernel,
        f"it cannot serve {reason}; use kernel={OTHER_KERNELS}, which serve it",
    )


def func_transform_refusal(kernel: str) -> PosAttnConfigError:
    """The error for a kernel that torch.func's transforms cannot run through."""
    return invalid(
        "kernel",
        kernel,
        "a kernel that torch.func's transforms (grad, vmap, jvp, jacrev, ...) run through: "
        f"'auto', 'sdpa', 'sdpa-lowmem' or 'eager' (the {kernel} kernel's backward is an "
        "autograd.Function without a vmap rule or a forward-mode derivative)",
    )


def terms_refusal(terms, extra_bias: Tensor | None = None) -> str | None:
    """Why a table-reading kernel cannot serve a layer with these `LayerTerms` (and an extra
    [B, H, n, n] bias such as DIET's segment bias), or None when it can."""
    if terms.value_term is not None:
        return "a value-side term (Shaw's values), which needs the attention probabilities"
    if terms.qk_logits is not None:
        return "content x position logits (qk_logits: Shaw's keys, DeBERTa), computed per score"
    if extra_bias is not None and not isinstance(extra_bias, SegmentPairs):
        return "an extra bias given as [B, H, n, n] values, not as a table (SegmentPairs)"
    # `terms.bias` last: read first, it would build the [H, n, n] bias a table describes.
    if terms.offset_bias is None and terms.bias_factors is None and terms.bias is not None:
        return (
            "a bias with no table description (LayerTerms.offset_bias) and no low-rank factors "
            "(LayerTerms.bias_factors)"
        )
    return None


# The oldest Triton the kernel is known to run on: 3.6 ran it on the lent GPUs, and its direct
# launches call the compiled launcher as 3.6 to 3.9 define it (`triton_launch`). Older ones
# lack what it uses (`triton.knobs` came with 3.4).
OLDEST_TRITON = (3, 6)


def unavailable(device: torch.device) -> str | None:
    """Why the Triton kernel cannot run on `device` in this process, or None."""
    # Dynamo before torch 2.13 does not trace find_spec (an error under fullgraph): while it
    # traces, the kernel module's own import of triton is the check.
    checked = not torch.compiler.is_compiling()
    if checked and importlib.util.find_spec("triton") is None:
        return "anything without the triton package installed (pip install triton)"
    interpreted = device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
    if device.type != "cuda" and not interpreted:
        return (
            f"tensors on {device.type}: it runs on CUDA, or on the CPU under Triton's "
            "interpreter (TRITON_INTERPRET=1 set before the first call; for tests, it is slow)"
        )
    return too_old_triton() if checked else None


@functools.cache
def too_old_triton() -> str | None:
    """Why the installed Triton is too old for the kernel, or None. Read once a process:
    `unavailable` runs at every kernel call and every `auto` choice, and reading a package's
    metadata took 227 us on the 2-core AMD CPU, about a kernel call's whole host time."""
    version = importlib.metadata.version("triton")
    if Version(version).release[:2] < OLDEST_TRITON:
        oldest = ".".join(map(str, OLDEST_TRITON))
        return f"triton {version}: it needs triton >= {oldest} (pip install -U triton)"
    return None


def serves_table(
    q: Tensor,
    k: Tensor,
    offset_bias: Tensor | None,
    mask: Tensor | None,
    head_size: int | None = None,
) -> bool:
    """Whether `auto` may hand a Toeplitz bias to this kernel: the kernel can run here, the
    head size (q's, or `head_size` where a folded low-rank bias widens it: TUPE-R's 64 + 64)
    fills its block (TUPE-R's 64 + 66 = 130, padded to 256 before its [CLS] reset became
    `cls_untie`, spilled registers and ran slower than SDPA), and the mask is one it reads."""
    if offset_bias is None or unavailable(q.device) is not None:
        return False
    width = q.shape[-1] if head_size is None else head_size
    if width < 16 or width & (width - 1):
        return False
    if offset_bias.shape != (q.shape[1], q.shape[-2] + k.shape[-2] - 1):
        return False
    if mask is None or mask_layout(mask) is not None:
        return True
    return mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] == 1


def key_rules(mask: Tensor | None, batch: int, n_k: int) -> tuple:
    """(keys int8 [B, n_k] or None, causal, first_real int32 [B] or None, query_start,
    key spans int32 [B, 4] or None: `key_spans`) for the kernel, from a mask built by
    `build_attention_mask` or a key mask [B or 1, 1, 1, n_k]; made once per mask and shape
    (`derived_once`: every layer of a forward takes the same mask)."""
    if mask is None:
        return None, False, None, 0, None
    layout = mask_layout(mask)
    if layout is None and (mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2] != 1):
        raise invalid(
            "mask",
            f"a tensor of shape {tuple(mask.shape)}",
            "for kernel='triton' a mask built by posattn.kernels.build_attention_mask "
            "(padding, causal; no packed documents) or a key mask of shape [B, 1, 1, n_k]",
        )

    def rules() -> tuple:
        keys, causal, query_start = _key_rules(mask, layout, batch, n_k)
        spans = key_spans(keys, None, causal, batch, n_k, mask.device)
        # The first real key (causal rows before it are opened to every key): the spans'.
        first = spans[:, 0] if causal else None
        return keys, causal, first, query_start, spans

    # A tensor's version counts its writes in place: a mask (or its layout's keys) written
    # so is derived anew. Inference tensors count none: derived in each call, as under
    # torch.compile (whose graph holds the ops; dynamo cannot trace is_inference).
    tensors = [mask] + ([] if layout is None or layout.keys is None else [layout.keys])
    key = None
    if not torch.compiler.is_compiling() and not any(t.is_inference() for t in tensors):
        key = ("triton key rules", batch, n_k, *(tensor._version for tensor in tensors))
    return derived_once(mask, key, rules)


def _key_rules(mask: Tensor, layout, batch: int, n_k: int) -> tuple:
    """(keys, causal, query_start) of `key_rules`."""
    if layout is None:
        # Taken as it is: a row whose keys are all hidden gives 0 (eager: NaN).
        return mask[:, 0, 0, :].expand(batch, n_k).to(torch.int8).contiguous(), False, 0
    keys = layout.keys
    if keys is None:
        return None, layout.causal, layout.query_start
    keys = keys.expand(batch, n_k)
    if not layout.causal:
        # A row that sees no key sees every key (build_attention_mask's rule).
        keys = keys | ~keys.any(-1, keepdim=True)
        return keys.to(torch.int8).contiguous(), False, 0
    return keys.to(torch.int8).contiguous(), True, layout.query_start


def triton_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    bias: Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    tables: TableBias | None = None,
) -> Tensor:
    """The `Kernel` contract with the bias from `tables` instead of `bias` (which must be
    None: an [.., n, n] bias is exactly what this kernel never reads)."""
    if bias is not None:
        raise refusal("triton", "a bias given as [.., n_q, n_k] values (it reads tables only)")
    if under_func_transform():
        raise func_transform_refusal("triton")
    reason = unavailable(q.device)
    if reason is not None:
        raise refusal("triton", reason)
    from .triton_bias import table_bias_attention

    table = None if tables is None else tables.offset
    if table is not None:
        require_table_shape("tables.offset.shape", table, q, k)
    untie = None if tables is None else tables.cls_untie
    tails, slopes = tail_rules(table, None if tables is None else tables.offset_tails, k, untie)
    keys, causal, first, query_start, spans = key_rules(mask, q.shape[0], k.shape[-2])
    pairs = None if tables is None else tables.segments
    factors = None if tables is None else tables.factors
    if factors is not None and not reads_factors_beside(q, factors):
        q, k = fold_into_queries_keys(q, k, factors, scale)
        factors = None
    return table_bias_attention(
        q, k, v, scale=scale, table=table, keys=keys, causal=causal, first_real=first,
        query_start=query_start,
        segments=None if pairs is None else pairs.table,
        segment_ids=None if pairs is None else pairs.ids.to(torch.int32).contiguous(),
        untie=None if untie is None else (untie.row, untie.column, untie.column_value),
        tails=tails, tail_slopes=slopes, spans=spans, dropout_p=dropout_p,
        factors=factors, kept=None if tables is None else tables.kept,
    )  # fmt: skip


def reads_factors_beside(q: Tensor, factors: tuple[Tensor, Tensor]) -> bool:
    """Whether the kernel reads a low-rank bias's factors beside q and k (`triton_factors`)
    or takes them folded into a copy of q and k: as POSATTN_TRITON_FACTORS says ("beside" by
    default), except in float32 where q and its factor together are wider than 64, whose
    tiles read beside outgrow a block's shared memory (sm_90, dK/dV: 240 KiB against 227;
    folded, 208)."""
    wide_float32 = q.dtype == torch.float32 and q.shape[-1] + factors[0].shape[-1] > 64
    return factors_choice() == "beside" and not wide_float32


def tail_rules(table: Tensor | None, known: TableTails | None, k: Tensor, untie) -> tuple:
    """(tails, tail_slopes) for the kernel: the tails' bounds as table indices (offset d sits
    at index d + n_k - 1) and, for linear tails, their slopes. Linear tails only where the
    table takes no gradient and no [CLS] untie sits on it: a line's gradient is not one
    entry's, and the kernel takes the untie off one value per head, not off a line; there the
    table is read (it holds the same values)."""
    if table is None or known is None:
        return None, None
    if known.slopes is not None and not lines_served(table, untie):
        return None, None
    tails = (known.low + k.shape[-2] - 1, known.high + k.shape[-2] - 1)
    return tails, known.slopes


triton_attention.reads_bias_tables = True
triton_attention.reads_bias_factors = True
