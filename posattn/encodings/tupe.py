"""TUPE (Ke, He, Liu, ICLR 2021): untied positional correlation, and its BERT-Ad ablation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn

from ..errors import invalid, is_real, require
from ..initialization import normal_
from ..toeplitz import ClsUntie
from .base import LayerTerms, ModelDims, OwnsParameters, Place, PositionalEncoding, empty_parameter
from .relative import position_differences, toeplitz
from .t5 import T5BiasTable, T5Options, bucket_tails, cached_buckets, t5_relative_bucket


class UntiedPositions(OwnsParameters, nn.Module):
    """p_i -> LayerNorm -> per-head U^Q, U^K (TUPE Sec. 3.1 and App. B, official code).

    One table p in R^{max_len x d} shared by the heads; one LayerNorm; U^Q, U^K: Linear(d, d) with
    bias, split into H heads of d_h. Shared across all layers. p and the extra rows: N(0, init_std);
    U^Q, U^K: N(0, init_std) weights, zero biases. Without extra rows `special` is None: an
    empty parameter that no forward reads made DistributedDataParallel fail BERT-Ad's second
    step (a parameter without a gradient, under its default find_unused_parameters=False).
    """

    def __init__(self, dims: ModelDims, extra_rows: int = 0) -> None:
        super().__init__()
        self.num_heads = dims.num_heads
        self.std = dims.init_std
        self.table = empty_parameter(dims.max_len, dims.d_model)
        # p_theta1, p_theta2 of TUPE App. B: learnable rows whose self-correlation is theta.
        self.special = empty_parameter(extra_rows, dims.d_model) if extra_rows else None
        self.reset_parameters()
        self.norm = nn.LayerNorm(dims.d_model)
        self.query = nn.Linear(dims.d_model, dims.d_model)
        self.key = nn.Linear(dims.d_model, dims.d_model)
        for linear in (self.query, self.key):
            normal_(linear.weight, std=dims.init_std)
            nn.init.zeros_(linear.bias)

    def reset_parameters(self) -> None:
        normal_(self.table, std=self.std)
        if self.special is not None:
            normal_(self.special, std=self.std)

    def _heads(self, x: Tensor) -> Tensor:
        return x.unflatten(-1, (self.num_heads, -1)).transpose(-2, -3)  # [..., H, m, d_h]

    def project(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """[..., m, d] position rows -> (p U^Q, p U^K), each [..., H, m, d_h]."""
        normed = self.norm(rows)
        return self._heads(self.query(normed)), self._heads(self.key(normed))


@dataclass(frozen=True)
class TupeOptions:
    untie_cls: bool = True
    cls_index: int = 0

    def __post_init__(self) -> None:
        require(
            isinstance(self.cls_index, int) and self.cls_index >= 0,
            "cls_index",
            self.cls_index,
            "an integer >= 0 (the position of [CLS] in every sequence)",
        )


@dataclass(frozen=True)
class TupeROptions(TupeOptions, T5Options):
    def __post_init__(self) -> None:
        TupeOptions.__post_init__(self)
        T5Options.__post_init__(self)


def require_cls_inside(cls_index: int, seq_len: int) -> None:
    # The message is formatted only on failure: formatting a length that torch.compile
    # traces as symbolic would fix it to this call's value.
    if not cls_index < seq_len:
        raise invalid(
            "cls_index",
            cls_index,
            f"must lie inside the sequence of length {seq_len} (0 <= cls_index < {seq_len})",
        )


def untie_cls_at(
    values: Tensor, is_cls: Tensor, row_value: Tensor, column_value: Tensor, start: int = 0
) -> Tensor:
    """`untie_cls` on [B, H, n - start, n], the query rows [start, n), where the [CLS] tokens
    are is_cls [B, n] (True where a token's position is cls_index: each packed document's own
    [CLS])."""
    is_row = is_cls[:, None, start:, None]
    is_column = is_cls[:, None, None, :] & ~is_row
    values = torch.where(is_column, column_value[:, None, None], values)
    return torch.where(is_row, row_value[:, None, None], values)


def untie_cls(values: Tensor, cls_index: int, row_value: Tensor, column_value: Tensor) -> Tensor:
    """reset_theta of TUPE Eq. 9 on [H, n, n]: the [CLS] row becomes row_value[h], the [CLS]
    column (other rows) column_value[h]; (cls, cls) belongs to the row."""
    return untie_cls_(values.clone(), cls_index, row_value, column_value)


def untie_cls_(
    values: Tensor, cls_index: int, row_value: Tensor, column_value: Tensor, start: int = 0
) -> Tensor:
    """`untie_cls` in place, for a tensor that no autograd node saved (a fresh product or
    sum): 2n writes instead of two [H, n, n] selections, forward and backward. `values` may
    hold the query rows [start, n) only ([H, n - start, n]: a decoding step's)."""
    # Expanded to the slice's shape by expand_as: an assignment's own broadcast fixed the
    # length in a torch.jit.trace (copy_ instead lost the values in the ONNX export).
    column = values[:, :, cls_index]
    values[:, :, cls_index] = column_value[:, None].expand_as(column)
    if cls_index >= start:  # after the column: (cls, cls) is the row's
        row = values[:, cls_index - start, :]
        values[:, cls_index - start, :] = row_value[:, None].expand_as(row)
    return values


class TupeAbsolute(PositionalEncoding):
    """[tupe-a] TUPE-A, TUPE Eq. 10 (with Eq. 7 and Eq. 9), as the official code does it:

    alpha_ij = (x_i W^{Q,l})(x_j W^{K,l})^T / sqrt(2 d_h)
               + reset_theta((LN(p_i) U^Q)(LN(p_j) U^K)^T / sqrt(2 d_h), i, j).

    No input position embedding. U^Q, U^K per head, shared across layers, so the [H, n, n]
    positional logits are built once per forward and shared by every layer. The paper's d is
    the head size in the code: both terms are scaled by 1/sqrt(2 d_h).
    [CLS] untie (Eq. 9, App. B): row cls_index -> theta_1, column cls_index -> theta_2, with
    theta_k = (LN(p_theta_k) U^Q)(LN(p_theta_k) U^K)^T / sqrt(2 d_h) per head.
    `untie_cls=False` is TUPE's tie-cls ablation.
    """

    name = "tupe-a"
    Options = TupeOptions
    paper = "Ke et al. 2021 (TUPE)"
    equation = "TUPE Eq. 10 (with Eq. 7 and Eq. 9)"
    places = (Place.LOGIT_BIAS,)
    cost = "once per forward, rank-d_h [H,n,n], shared by layers"

    def __init__(self, dims: ModelDims, options: TupeOptions) -> None:
        super().__init__(dims, options)
        self.positions = UntiedPositions(dims, extra_rows=2 if options.untie_cls else 0)

    @property
    def max_positions(self) -> int:
        return self.dims.max_len

    def content_scale(self) -> float:
        return 1.0 / math.sqrt(2 * self.dims.head_dim)

    def projected(self, seq_len: int) -> tuple[Tensor, Tensor, Tensor | None]:
        """(LN(p) U^Q / sqrt(2 d_h), LN(p) U^K) of the n positions, [H, n, d_h] each, and
        theta [H, 2] when [CLS] is untied."""
        rows = self.positions.table[:seq_len]
        if self.options.untie_cls:
            rows = torch.cat([rows, self.positions.special])
        pq, pk = self.positions.project(rows)
        pq = pq * self.content_scale()
        if not self.options.untie_cls:
            return pq, pk, None
        require_cls_inside(self.options.cls_index, seq_len)
        theta = (pq[:, seq_len:] * pk[:, seq_len:]).sum(-1)
        return pq[:, :seq_len], pk[:, :seq_len], theta

    def absolute_logits(self, seq_len: int) -> Tensor:
        """[H, n, n] content-free positional logits after the [CLS] reset."""
        return self.reset_logits(*self.projected(seq_len))

    def reset_logits(self, pq: Tensor, pk: Tensor, theta: Tensor | None, start: int = 0) -> Tensor:
        """`absolute_logits` from `projected`'s output, its query rows [start, n)."""
        logits = pq[:, start:] @ pk.transpose(-1, -2)
        if theta is None:
            return logits
        return untie_cls_(logits, self.options.cls_index, theta[:, 0], theta[:, 1], start)

    def cls_left_out(self, pq: Tensor, pk: Tensor, column: Tensor):
        """(factors without the [CLS] position, the untie that gives its row and column):
        the [CLS] row becomes a constant (softmax ignores theta_1's row), its column `column`
        ([H]: theta_2, plus T5's column bucket in TUPE-R)."""
        cls = self.options.cls_index
        keep = torch.ones(pq.shape[-2], 1, dtype=pq.dtype, device=pq.device)
        keep[cls] = 0
        factors = ((pq * keep).unsqueeze(0), (pk * keep).unsqueeze(0))
        return factors, ClsUntie(row=cls, column=cls, column_value=column)

    def layer_terms(self, seq_len, device, dtype):
        """The [H, n, n] bias, also described as low-rank factors (the absolute part off the
        [CLS] position) and the [CLS] untie on zeros (`cls_untie`), for the kernels that fold
        factors into q and k."""
        pq, pk, theta = self.projected(seq_len)  # once for the bias and its factors
        factors, untie = (pq.unsqueeze(0), pk.unsqueeze(0)), None
        if theta is not None:
            factors, untie = self.cls_left_out(pq, pk, theta[:, 1])
        # Deferred (`DeferredBias`): a kernel that folds the factors never builds it, and a
        # decoding step builds its rows alone.
        terms = LayerTerms.of_rows(
            self.content_scale(),
            lambda start: self.reset_logits(pq, pk, theta, start).unsqueeze(0),
            bias_factors=factors,
            cls_untie=untie,
        )
        return [terms] * self.dims.num_layers

    def absolute_logits_at(self, positions: Tensor, start: int = 0) -> Tensor:
        """`absolute_logits` of tokens at positions [B, n]: [B, H, n - start, n] for the
        query rows [start, n), the [CLS] untie on the tokens at position cls_index."""
        pq, pk = self.positions.project(self.positions.table[positions])  # [B, H, n, d_h]
        logits = (pq[..., start:, :] * self.content_scale()) @ pk.transpose(-1, -2)
        if not self.options.untie_cls:
            return logits
        spq, spk = self.positions.project(self.positions.special)
        theta = (spq * self.content_scale() * spk).sum(-1)  # [H, 2]
        is_cls = positions == self.options.cls_index
        return untie_cls_at(logits, is_cls, theta[:, 0], theta[:, 1], start)

    def bias_at(self, positions: Tensor, start: int = 0) -> Tensor:
        """The bias of tokens at positions [B, n], query rows [start, n)."""
        return self.absolute_logits_at(positions, start)

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        # Built when read; a decoding step's rows alone (`bias_rows`).
        terms = LayerTerms.of_rows(self.content_scale(), partial(self.bias_at, positions))
        return [terms] * self.dims.num_layers


class TupeRelative(TupeAbsolute):
    """[tupe-r] TUPE-R, TUPE Eq. 11: TUPE-A plus T5's relative bias inside the reset:

    alpha_ij = (x_i W^{Q,l})(x_j W^{K,l})^T / sqrt(2 d_h)
               + reset_theta((LN(p_i) U^Q)(LN(p_j) U^K)^T / sqrt(2 d_h) + b_{bucket(j-i)}, i, j).

    b: per head, shared across layers, unscaled; 32 bidirectional buckets up to distance 128 as
    in the official code. With the untie, two extra buckets per head carry the [CLS] row and
    column of the relative part (the code's buckets 16 and 32), so the [CLS] row is
    theta_1 + b_row and the column theta_2 + b_column.
    """

    name = "tupe-r"
    Options = TupeROptions
    equation = "TUPE Eq. 11"
    cost = "once per forward, [H,n,n], shared by layers"

    def __init__(self, dims: ModelDims, options: TupeROptions) -> None:
        super().__init__(dims, options)
        extra = 2 if options.untie_cls else 0
        self.relative = T5BiasTable(options.num_buckets + extra, dims.num_heads, dims.init_std)

    def relative_bias(self, seq_len: int, device) -> Tensor:
        """T5's bias [H, n, n], the [CLS] row and column on their own two buckets if untied."""
        bias = self.tied_relative_bias(seq_len, device)
        if not self.options.untie_cls:
            return bias
        return untie_cls(bias, self.options.cls_index, *self.relative_cls_values())

    def tied_relative_bias(self, seq_len: int, device) -> Tensor:
        return toeplitz(self.relative_by_offset(seq_len, device))

    def relative_by_offset(self, seq_len: int, device) -> Tensor:
        """T5's bias by offset j - i, [H, 2n-1] (before the [CLS] reset)."""
        o = self.options
        buckets = cached_buckets(
            seq_len, str(device), o.bidirectional, o.num_buckets, o.max_distance
        )
        return self.relative.by_offset(buckets)

    def relative_cls_values(self) -> tuple[Tensor, Tensor]:
        """The relative part's [CLS] row and column values, [H] each (its two extra buckets)."""
        weight, buckets = self.relative.weight, self.options.num_buckets
        return weight[buckets], weight[buckets + 1]

    def layer_terms(self, seq_len, device, dtype):
        """absolute_logits + relative_bias, with one reset of their sum (the [CLS] row
        theta_1 + b_row, the column theta_2 + b_column): equal to resetting each. Also
        described as T5's table (`offset_bias`) with the reset on its Toeplitz matrix
        (`cls_untie`: the row 0, the column theta_2 + b_column) plus low-rank factors that
        carry the absolute part off the [CLS] position, for the kernels that read tables."""
        pq, pk, theta = self.projected(seq_len)
        by_offset = self.relative_by_offset(seq_len, device)
        factors, untie, values = (pq.unsqueeze(0), pk.unsqueeze(0)), None, None
        if theta is not None:
            row, column = self.relative_cls_values()
            values = theta[:, 0] + row, theta[:, 1] + column
            factors, untie = self.cls_left_out(pq, pk, values[1])

        def bias(start: int) -> Tensor:
            """The query rows [start, n) (all from 0; a decoding step's new ones)."""
            # toeplitz's flip is a fresh tensor that its backward does not keep: the product
            # is added into it in place (one [H, n, n] tensor instead of three; n=1024 on the
            # 2-core CPU: 23 ms against 62 ms of product, sum and flip). Under autocast pq and
            # pk come out of their projections in bf16 / fp16 while the table stays float32;
            # the in-place product takes the table's dtype.
            absolute = pq[:, start:].to(by_offset.dtype), pk.to(by_offset.dtype).mT
            rows = toeplitz(by_offset[:, : 2 * seq_len - 1 - start], seq_len)
            summed = rows.baddbmm_(*absolute)
            if values is not None:
                summed = untie_cls_(summed, self.options.cls_index, *values, start)
            return summed.unsqueeze(0)

        # The [H, n, n] bias is built where something reads it (`DeferredBias`): the kernels
        # that fold the factors and read the table (GPU training, kernel="triton") never do.
        terms = LayerTerms.of_rows(
            self.content_scale(),
            bias,
            bias_factors=factors,
            offset_bias=by_offset,
            offset_tails=bucket_tails(self.options.bidirectional, self.options.max_distance),
            cls_untie=untie,
        )
        return [terms] * self.dims.num_layers

    def relative_bias_at(self, positions: Tensor, start: int = 0) -> Tensor:
        """`relative_bias` of tokens at positions [B, n]: [B, H, n - start, n], query rows
        [start, n)."""
        o = self.options
        differences = position_differences(positions, start)
        buckets = t5_relative_bucket(differences, o.bidirectional, o.num_buckets, o.max_distance)
        bias = self.relative.at(buckets)
        if not o.untie_cls:
            return bias
        cls_values = self.relative_cls_values()
        return untie_cls_at(bias, positions == o.cls_index, *cls_values, start)

    def bias_at(self, positions: Tensor, start: int = 0) -> Tensor:
        return self.absolute_logits_at(positions, start) + self.relative_bias_at(positions, start)


@dataclass(frozen=True)
class BertAdOptions:
    """scale_multiple: the logits are divided by sqrt(scale_multiple * d_h). 4 is BERT-Ad as
    TUPE defines it; 2 scales the four terms as TUPE scales its two, so that the cross terms
    are all that tells BERT-Ad from TUPE-A with `untie_cls=False`."""

    scale_multiple: float = 4.0

    def __post_init__(self) -> None:
        require(
            is_real(self.scale_multiple) and self.scale_multiple > 0,
            "scale_multiple",
            self.scale_multiple,
            "a number > 0 (the logits are divided by sqrt(scale_multiple * d_h); TUPE's "
            "BERT-Ad: 4)",
        )


class BertAd(PositionalEncoding):
    """[bert-ad] TUPE's BERT-A_d ablation (TUPE Sec. 4.2): positions with their own
    projections, all four word/position terms kept, scaled 1/sqrt(4 d_h):

    alpha_ij = [(x_i W^Q)(x_j W^K)^T + (x_i W^Q)(p_j U^K)^T + (p_i U^Q)(x_j W^K)^T
                + (p_i U^Q)(p_j U^K)^T] / sqrt(4 d_h)
             = (q_i + p_i U^Q)(k_j + p_j U^K)^T / sqrt(4 d_h).

    p -> LayerNorm -> U^Q, U^K as in TUPE, shared across layers, no input position embedding and
    no [CLS] untie. The cross terms need the content, so they are paid in every layer; written
    as the factored form above they cost an O(n d) addition to q and k and keep the fused kernel.
    `scale_multiple` replaces the 4 (`BertAdOptions`).
    """

    name = "bert-ad"
    paper = "Ke et al. 2021 (TUPE ablation)"
    equation = "TUPE Sec. 4.2"
    places = (Place.CONTENT_POSITION, Place.QK_TRANSFORM)
    cost = "per layer, O(n d) added to q and k"
    Options = BertAdOptions

    def __init__(self, dims: ModelDims, options: BertAdOptions) -> None:
        super().__init__(dims, options)
        self.positions = UntiedPositions(dims)

    @property
    def max_positions(self) -> int:
        return self.dims.max_len

    def content_scale(self) -> float:
        return 1.0 / math.sqrt(self.options.scale_multiple * self.dims.head_dim)

    @staticmethod
    def _add_positions(pq: Tensor, pk: Tensor, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q + pq.to(q.dtype), k + pk.to(k.dtype)

    def layer_terms(self, seq_len, device, dtype):
        pq, pk = self.positions.project(self.positions.table[:seq_len])
        terms = LayerTerms(
            scale=self.content_scale(),
            transform_qk=partial(self._add_positions, pq.unsqueeze(0), pk.unsqueeze(0)),
        )
        return [terms] * self.dims.num_layers

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        pq, pk = self.positions.project(self.positions.table[positions])  # [B, H, n, d_h]
        terms = LayerTerms(
            scale=self.content_scale(), transform_qk=partial(self._add_positions, pq, pk)
        )
        return [terms] * self.dims.num_layers
