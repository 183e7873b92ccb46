"""Linformer (Wang et al. 2020) and DIET-ABS inside it (DIET Eq. 4): attention over k
projected keys and values, cost linear in the sequence length."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from torch import Tensor
from torch.nn import Parameter

from ..errors import require, require_positive_int
from ..initialization import normal_
from ..tracing import leading
from .absolute import Learned
from .base import LayerTerms, ModelDims, Place, PositionalEncoding, empty_parameter


@dataclass(frozen=True)
class LinformerOptions:
    k: int = 32  # projected length (DIET: 32 on GLUE, 256 on XTREME)
    share_kv: bool = False  # one projection for keys and values (Linformer's key-value sharing)

    def __post_init__(self) -> None:
        require_positive_int("k", self.k)


class SequenceProjection(PositionalEncoding):
    """Per-layer projections E, F in R^{k x max_len} along the sequence, shared by the heads;
    a sequence of n <= max_len tokens uses their first n columns."""

    positions_refusal = (
        "projects keys and values along the sequence with E, F in R^{k x max_len}, whose "
        "columns are token indices 0..n-1, not positions: other positions (packed documents, "
        "left padding) have no meaning there"
    )

    def __init__(self, dims: ModelDims, options: LinformerOptions) -> None:
        super().__init__(dims, options)
        require(
            not dims.causal,
            "causal",
            dims.causal,
            f"encoding {self.name!r} mixes every position into each projected key: it is "
            "defined for bidirectional (encoder) attention only",
        )
        shape = (dims.num_layers, options.k, dims.max_len)
        self.key_projection = empty_parameter(*shape)
        self.value_projection = None if options.share_kv else empty_parameter(*shape)
        self.reset_projections()

    def reset_parameters(self) -> None:
        self.reset_projections()

    def reset_projections(self) -> None:
        # Linformer initialises E, F like any linear layer: N(0, 1/k) keeps E k at k's scale.
        for projection in (self.key_projection, self.value_projection):
            if projection is not None:
                normal_(projection, std=self.options.k**-0.5)

    def positional_parameters(self) -> list[Parameter]:
        """E and F are the attention's projections along the sequence, initialised like a
        linear layer's weight (N(0, 1/k), std 0.18 at k=32) rather than a position term's
        N(0, init_std): they train at the run's rate, so that `trainer.positional_lr_scale`
        moves DIET-ABS's factors (or BERT's input table) alone."""
        projections = {id(self.key_projection), id(self.value_projection)}
        return [p for p in self.parameters() if id(p) not in projections]

    @property
    def max_positions(self) -> int:
        return self.dims.max_len

    def projections(self, layer: int, seq_len: int) -> tuple[Tensor, Tensor]:
        keys = leading(self.key_projection[layer], -1, seq_len)
        if self.value_projection is None:
            return keys, keys
        return keys, leading(self.value_projection[layer], -1, seq_len)

    def _project(self, layer: int, seq_len: int, k: Tensor, v: Tensor, keep) -> tuple:
        if keep is not None:
            k, v = k * keep, v * keep
        e, f = self.projections(layer, seq_len)
        return e.to(k.dtype) @ k, f.to(v.dtype) @ v

    def position_bias(self, seq_len: int) -> Tensor | None:
        return None

    def layer_terms(self, seq_len, device, dtype):
        bias = self.position_bias(seq_len)
        return [
            LayerTerms(
                scale=self.content_scale(),
                bias=bias,
                project_kv=partial(self._project, layer, seq_len),
            )
            for layer in range(self.dims.num_layers)
        ]


@dataclass(frozen=True)
class LinformerInputOptions(LinformerOptions):
    # False: E and F alone, no input position table - the control that tells what DIET-ABS
    # inside Linformer gains by its own factors from what dropping BERT's table gives
    input_positions: bool = True


class Linformer(SequenceProjection):
    """[linformer] Linformer Eq. 7 (Wang et al. 2020) with BERT's input positions:

    head = softmax((X W_Q)(E X W_K)^T / sqrt(d_h)) (F X W_V),  x_i^1 = w_i + p_i,

    E, F in R^{k x n} per layer, shared by the heads. The baseline of DIET Table 2's
    Linformer rows. Bidirectional only; cost O(n k) instead of O(n^2). With
    `input_positions=False`, x_i^1 = w_i: no position table, E and F's columns the only
    trace of token order.
    """

    name = "linformer"
    Options = LinformerInputOptions
    paper = "Wang et al. 2020 (Linformer)"
    equation = "Linformer Eq. 7"
    places = (Place.INPUT, Place.SEQUENCE_PROJECTION)
    cost = "per layer, E k and F v: O(n k d), attention [n,k]"

    def __init__(self, dims: ModelDims, options: LinformerInputOptions) -> None:
        super().__init__(dims, options)
        self.absolute = Learned(dims, None) if options.input_positions else None
        if self.absolute is None:
            self.places = (Place.SEQUENCE_PROJECTION,)

    def input_position_parameters(self) -> list[Parameter]:
        return [] if self.absolute is None else self.absolute.input_position_parameters()

    def input_embedding(self, seq_len, device, dtype):
        if self.absolute is None:
            return None
        return self.absolute.input_embedding(seq_len, device, dtype)


@dataclass(frozen=True)
class DietAbsLinOptions(LinformerOptions):
    rank: int | None = None  # d_p; None means d_h

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rank is not None:
            require_positive_int("rank", self.rank)


class DietAbsLin(SequenceProjection):
    """[diet-abs-lin] DIET-ABS inside Linformer, DIET Eq. 4 as printed:

    A_ij = (X_i W_Q)((E X)_j W_K)^T / sqrt(d_h) + (P_Q P_K^T)_ij,   i <= n, j <= k,

    P_Q in R^{max_len x d_p} and P_K in R^{k x d_p} per head, shared across layers (DIET-ABS's
    default): P_K is a table of its own with one row per projected key, not E applied to a
    per-token table, so the position term is n x k like the content term and does not depend
    on how many (padded) tokens the batch has. Padded keys are zeroed before E, so appending
    pads leaves real positions unchanged. No input positions; segments stay at the input (as
    in DIET). Bidirectional only.
    """

    name = "diet-abs-lin"
    Options = DietAbsLinOptions
    paper = "Chen et al. 2021 (DIET)"
    equation = "DIET Eq. 4"
    places = (Place.LOGIT_BIAS, Place.SEQUENCE_PROJECTION)
    cost = "per layer, E k and F v; one rank-d_p [H,n,k] bias for all layers: linear in n"

    def __init__(self, dims: ModelDims, options: DietAbsLinOptions) -> None:
        super().__init__(dims, options)
        rank = options.rank or dims.head_dim
        self.query = empty_parameter(dims.num_heads, dims.max_len, rank)
        self.key = empty_parameter(dims.num_heads, options.k, rank)
        self.reset_factors()

    def reset_parameters(self) -> None:
        self.reset_projections()
        self.reset_factors()

    def reset_factors(self) -> None:
        """P_Q, P_K: N(0, init_std)."""
        normal_(self.query, std=self.dims.init_std)
        normal_(self.key, std=self.dims.init_std)

    def position_bias(self, seq_len: int) -> Tensor:
        """P_Q P_K^T: [1, H, n, k], the same in every layer."""
        return (leading(self.query, -2, seq_len) @ self.key.transpose(-1, -2)).unsqueeze(0)
