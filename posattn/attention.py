"""Multi-head attention: projections, the positional terms of the layer, one kernel call.

Everything about where attention's inputs come from lives here: `queries_keys_values` (the
projected heads of a layer's input), `memory_keys_values` and `cross_attend` (an encoder-decoder's
cross-attention), `split_heads` / `merge_heads`; models and the lab call these instead of
reaching into the projections.

Incremental decoding (a key/value cache) needs three things from the caller, all generic:
the layer's terms for the new query rows over every key (`PositionalEncoding.window_terms`),
the mask for those rows (`build_attention_mask(..., query_start=past_length)`) and a cache
with `update(k, v, layer_index) -> (all keys, all values)`, e.g. transformers' `DynamicCache`.
The cache holds the keys *before* the encoding's q/k transform, which `attend` re-applies to
every key with the new queries (xPos' scaling is centred on the length, so transformed keys
from an earlier step would not match).
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from . import execution
from .encodings.base import LayerTerms
from .errors import require, require_positive_int, require_probability
from .kernels import attention_logits, attention_probabilities, get_kernel
from .kernels.flex import auto_takes_triton
from .kernels.fold import fold_bias_factors, fold_into_queries_keys, folded_head_size
from .kernels.table_bias import (
    SegmentPairs,
    TableBias,
    refusal,
    terms_refusal,
    triton_attention,
)


class MultiHeadAttention(nn.Module):
    """Self-attention (`forward`) and cross-attention (`cross_attend`) with one layer's
    positional terms.

    kernel: a name from `posattn.kernels.KERNELS` (user kernels included), or None for the
    execution choice `kernel` in force when the module is built (`posattn.execution`).
    """

    def __init__(
        self, d_model: int, num_heads: int, dropout: float = 0.0, kernel: str | None = None
    ) -> None:
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("num_heads", num_heads)
        require(d_model % num_heads == 0, "d_model", d_model, f"divisible by num_heads={num_heads}")
        require_probability("dropout", dropout)
        self.num_heads = num_heads
        self.dropout = dropout
        self.set_kernel(kernel)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def set_kernel(self, name: str | None) -> None:
        """None: the execution choice `kernel` in force now."""
        name = execution.current().kernel if name is None else name
        self.kernel_name, self.kernel = name, get_kernel(name)
        self.kernel_reads_tables = takes_keyword(self.kernel, "offset_bias")
        self.kernel_reads_untie = takes_keyword(self.kernel, "cls_untie")
        self.kernel_reads_factors = takes_keyword(self.kernel, "bias_factors")

    @property
    def head_dim(self) -> int:
        return self.q_proj.out_features // self.num_heads

    def split_heads(self, x: Tensor) -> Tensor:
        """[B, n, d_model] -> [B, H, n, d_h]."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """[B, H, n, d_h] -> [B, n, d_model]. Exported, by a copy: the export records the
        flatten as a view of the strides SDPA's output has when traced, which its
        decomposition for ONNX does not keep (torch.onnx.export failed on that view)."""
        merged = x.transpose(1, 2)
        if torch.compiler.is_exporting():
            merged = merged.clone(memory_format=torch.contiguous_format)
        return merged.flatten(2)

    def queries_keys_values(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Where a layer's attention inputs come from: the projected heads q, k, v
        [B, H, n, d_h] of x, before any positional transform."""
        return tuple(self.split_heads(p(x)) for p in (self.q_proj, self.k_proj, self.v_proj))

    def project_queries_keys(self, x: Tensor, bias: bool = True) -> tuple[Tensor, Tensor]:
        """q, k heads of x before any positional transform; bias=False leaves out the
        projection biases (the linear part alone, for splitting a sum of inputs into terms)."""
        if bias:
            return self.split_heads(self.q_proj(x)), self.split_heads(self.k_proj(x))
        return (
            self.split_heads(F.linear(x, self.q_proj.weight)),
            self.split_heads(F.linear(x, self.k_proj.weight)),
        )

    def memory_keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values [B, H, n_src, d_h] of an encoder output: computed
        once per source and reused by every decoding step (`cross_attend`)."""
        return self.split_heads(self.k_proj(memory)), self.split_heads(self.v_proj(memory))

    def content_terms(self) -> LayerTerms:
        """Terms without any positional part: content attention scaled by 1/sqrt(d_h)."""
        return LayerTerms(scale=self.head_dim**-0.5)

    def queries_keys(self, x: Tensor, terms: LayerTerms) -> tuple[Tensor, Tensor]:
        """q, k as the logits see them (after the encoding's q/k transform)."""
        q, k = self.project_queries_keys(x)
        return (q, k) if terms.transform_qk is None else terms.transform_qk(q, k)

    def positional_bias(self, q: Tensor, k: Tensor, terms: LayerTerms, extra: Tensor | None):
        """Everything added to q k^T * scale: the encoding's bias, its content x position
        logits, and an extra bias (segments)."""
        bias = terms.bias
        if isinstance(extra, SegmentPairs):
            extra = extra.dense()
        for term in (None if terms.qk_logits is None else terms.qk_logits(q, k, self), extra):
            if term is not None:
                bias = term if bias is None else bias + term
        return bias

    def logits(self, x: Tensor, terms: LayerTerms, extra_bias: Tensor | None = None) -> Tensor:
        """[B, H, n, n] pre-softmax logits before masking, as the eager kernel computes them."""
        q, k = self.queries_keys(x, terms)
        return attention_logits(q, k, terms.scale, self.positional_bias(q, k, terms, extra_bias))

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        terms: LayerTerms,
        mask: Tensor | None = None,
        extra_bias: Tensor | None = None,
        return_probs: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Heads [B, H, n, d_h] -> attention outputs [B, H, n, d_h] with the layer's terms;
        with return_probs, (outputs, probabilities [B, H, n, n_keys]).

        A layer with a value-side term (Shaw values) needs the attention probabilities, which
        no fused kernel returns: it runs here on the eager path, softmax(...) v +
        value_term(softmax(...)), whatever the module's kernel ('auto', and also an explicit
        'sdpa', 'sdpa-lowmem', 'flex' or a user kernel). Otherwise the module's kernel runs,
        with a low-rank bias folded into q and k where the execution choice `fold` says so.
        A kernel that reads the bias from its table runs through `attend_by_tables`.

        return_probs (`output_attentions`) runs the eager path for this call, as transformers
        does: the probabilities are the ones v is multiplied by (after dropout), exactly the
        eager kernel's. Linformer's keys are the k projected ones, so its rows have k entries.
        """
        q, k = (q, k) if terms.transform_qk is None else terms.transform_qk(q, k)
        width = v.shape[-1]
        eager = terms.value_term is not None or return_probs
        if getattr(self.kernel, "reads_bias_tables", False) and not eager:
            out = self.attend_by_tables(q, k, v, terms, mask, extra_bias)
            return out if out.shape[-1] == width else out[..., :width]
        if not eager and self.auto_takes_triton(q, k, terms, mask, extra_bias):
            # Decided before `terms.bias` is read, so the [H, n, n] bias is never built.
            return self.attend_by_tables(q, k, v, terms, mask, extra_bias, triton_attention)
        fused = not eager and self.kernel_name != "eager"
        if (
            terms.bias_factors is not None
            and fused
            and execution.use_fold(q.device, self.learned_rest(terms, extra_bias, q, k))
        ):
            # A low-rank bias rides in the dot product: the fused kernels stay fused and
            # no [B, H, n, n] bias gradient exists; a Toeplitz rest stays a bias. Content
            # terms (qk_logits) read the unfolded q and k.
            factors = terms.folded_factors()
            terms = replace(
                terms, bias=terms.unfolded_bias(), bias_factors=None, bias_rows=None, rows=None
            )
            bias = self.positional_bias(q, k, terms, extra_bias)
            q, k, v = fold_bias_factors(q, k, v, factors, terms.scale)
        else:
            bias = self.positional_bias(q, k, terms, extra_bias)
        k, v, mask = self.project_sequence(k, v, terms, mask)
        dropout_p = self.dropout if self.training else 0.0
        if eager:
            probs = attention_probabilities(
                q, k, mask=mask, bias=bias, scale=terms.scale, dropout_p=dropout_p
            )
            out = probs @ v
            if terms.value_term is not None:
                out = out + terms.value_term(probs)
            return (out, probs) if return_probs else out
        described = bias is terms.bias and terms.project_kv is None
        tables = self.parts_read(terms) if described else {}
        out = self.kernel(
            q, k, v, mask=mask, bias=bias, scale=terms.scale, dropout_p=dropout_p, **tables
        )
        return out if out.shape[-1] == width else out[..., :width]

    def parts_read(self, terms: LayerTerms) -> dict:
        """The parts that describe `terms.bias` (the table of its Toeplitz matrix, the [CLS]
        untie, the low-rank factors) as the kernel's keywords, where the kernel declares each
        part present (`takes_keyword`); else none (it reads `bias`, which it also gets)."""
        parts = {
            "offset_bias": (terms.offset_bias, self.kernel_reads_tables),
            "cls_untie": (terms.cls_untie, self.kernel_reads_untie),
            "bias_factors": (terms.bias_factors, self.kernel_reads_factors),
        }
        if terms.offset_bias is None and terms.bias_factors is None:
            return {}  # an untie describes nothing alone
        present = {name: (part, reads) for name, (part, reads) in parts.items() if part is not None}
        if not all(reads for _, reads in present.values()):
            return {}
        return {name: part for name, (part, _) in present.items()}

    def learned_rest(
        self, terms: LayerTerms, extra_bias: Tensor | None, q: Tensor, k: Tensor
    ) -> bool:
        """Whether a bias with a [B, H, n, n] gradient would stay beside folded factors
        (`execution.use_fold`): an extra bias that takes a gradient, or a learned Toeplitz rest
        (`LayerTerms.learned_rest`) that this kernel adds as a tensor (SDPA on a GPU) - a
        kernel that reads it from its table in training (`reads_tables_in_training(q, k,
        dropout_p)`: flex, and auto where it hands the call to flex; with the untie) keeps no
        such gradient, and the fold pays there."""
        if extra_bias is not None and extra_bias.requires_grad:
            return True
        if not terms.learned_rest():
            return False
        reads = getattr(self.kernel, "reads_tables_in_training", None)
        untie_read = terms.cls_untie is None or self.kernel_reads_untie
        dropout_p = self.dropout if self.training else 0.0
        return not (reads is not None and untie_read and reads(q, k, dropout_p))

    @staticmethod
    def project_sequence(k: Tensor, v: Tensor, terms: LayerTerms, mask):
        """(k, v, mask) after a k/v sequence projection (Linformer), else unchanged: padded
        keys are zeroed before the projection; every projected key is then visible (a fully
        padded row keeps its finite fallback)."""
        if terms.project_kv is None:
            return k, v, mask
        keep = None if mask is None else mask[:, :, -1:, :].transpose(-1, -2)
        k, v = terms.project_kv(k, v, keep)
        return k, v, None

    def auto_takes_triton(self, q, k, terms: LayerTerms, mask, extra_bias) -> bool:
        """kernel="auto" with a learned bias that is a Toeplitz table (with TUPE-R's absolute
        part, which `attend_by_tables` hands over beside q and k, and its [CLS] untie), or without
        gradients a table alone, where `auto_takes_triton` picks the table-reading kernel."""
        table = terms.offset_bias
        plain_table = (
            self.kernel_name == "auto"
            and table is not None
            and extra_bias is None
            and terms.qk_logits is None
            and terms.value_term is None
            and terms.project_kv is None
        )
        factors = terms.bias_factors
        # The width the kernel meets: q's, or what folding the factors widens it to.
        width = (
            q.shape[-1] if factors is None else folded_head_size(q.shape[-1], factors[0].shape[-1])
        )
        # Attention dropout included: the kernel drops scores itself, and BERT-small with
        # dropout 0.1 on an H200 moved as it does without (docs/triton-kernel.md).
        learned = plain_table and table.requires_grad and torch.is_grad_enabled()
        inference = plain_table and factors is None and not torch.is_grad_enabled()
        return auto_takes_triton(q, k, table, mask, learned, width, inference)

    def attend_by_tables(self, q, k, v, terms: LayerTerms, mask, extra_bias, kernel=None):
        """`attend` for a kernel that reads the bias from its table (kernel="triton"): the
        Toeplitz bias as `terms.offset_bias`, a low-rank bias as its factors for a kernel
        that reads them beside q and k (`reads_bias_factors`; kernel="triton") and folded
        into q and k for one that does not (such a kernel adds no [H, n, n] bias, whatever
        the `fold` choice), and a clear refusal for what it cannot serve."""
        reason = terms_refusal(terms, extra_bias)
        if reason is not None:
            raise refusal(self.kernel_name, reason)
        kernel = kernel or self.kernel
        factors = terms.bias_factors  # the whole bias, or what the table leaves
        # Folded where the kernel does not read factors, or where the keys are projected
        # (DIET-ABS inside Linformer: k's factor columns are projected with k); a kernel that
        # reads them decides itself where it folds them after all (`triton_attention`).
        if factors is not None and not (
            getattr(kernel, "reads_bias_factors", False) and terms.project_kv is None
        ):
            # The kernel takes values narrower than q and k: they keep their width.
            q, k = fold_into_queries_keys(q, k, factors, terms.scale)
            factors = None
        k, v, mask = self.project_sequence(k, v, terms, mask)
        dropout_p = self.dropout if self.training else 0.0
        return kernel(
            q, k, v, mask=mask, bias=None, scale=terms.scale, dropout_p=dropout_p,
            tables=TableBias(
                offset=terms.offset_bias, offset_tails=terms.offset_tails, segments=extra_bias,
                cls_untie=terms.cls_untie, factors=factors, kept=terms.kernel_inputs,
            ),
        )  # fmt: skip

    def forward(
        self,
        x: Tensor,
        terms: LayerTerms,
        mask: Tensor | None = None,
        extra_bias: Tensor | None = None,
        cache=None,
        layer_index: int = 0,
        return_probs: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention: x [B, n_new, d] -> [B, n_new, d]. With a cache, x holds only the new
        tokens: their keys and values are appended to the cache's layer `layer_index` and the
        queries attend to every cached key (terms and mask then cover rows
        [past, past + n_new)). return_probs: (output, probabilities) (`attend`)."""
        q, k, v = self.queries_keys_values(x)
        if cache is not None:
            k, v = cache.update(k, v, layer_index)
        return self.project_out(self.attend(q, k, v, terms, mask, extra_bias, return_probs))

    def project_out(self, attended):
        """Heads -> out_proj(merged), passing the probabilities along when `attend` gave them."""
        if isinstance(attended, tuple):
            out, probs = attended
            return self.out_proj(self.merge_heads(out)), probs
        return self.out_proj(self.merge_heads(attended))

    def cross_attend(
        self,
        x: Tensor,
        memory_kv: tuple[Tensor, Tensor],
        memory_mask: Tensor | None = None,
        terms: LayerTerms | None = None,
        return_probs: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Cross-attention: queries from x [B, n, d], keys and values from
        `memory_keys_values(memory)`; memory_mask bool, broadcastable to [B, H, n, n_src]
        (True = may attend). terms: None for content attention (`content_terms`)."""
        q = self.split_heads(self.q_proj(x))
        terms = self.content_terms() if terms is None else terms
        return self.project_out(
            self.attend(q, *memory_kv, terms, memory_mask, return_probs=return_probs)
        )


def takes_keyword(kernel, name: str) -> bool:
    """Whether a kernel declares the optional keyword `name` (`posattn.kernels`): with
    `offset_bias` it also receives a Toeplitz bias as its [H, 2n-1] table, with `cls_untie`
    the [CLS] untie of TUPE-A and TUPE-R, with `bias_factors` the low-rank factors of
    TUPE's and DIET-ABS's biases."""
    try:
        return name in inspect.signature(kernel).parameters
    except (TypeError, ValueError):  # a callable without a signature: the plain contract
        return False
