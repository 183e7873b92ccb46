"""DIET (Chen et al., EMNLP 2021): decoupled per-head positional attention."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..errors import require, require_choice, require_positive_int
from ..initialization import normal_
from ..toeplitz import TableTails
from ..tracing import leading
from .base import (
    LayerTerms,
    ModelDims,
    Place,
    PositionalEncoding,
    empty_parameter,
    layer_group,
    sharing_groups,
)
from .relative import lookup_by_head, offsets

SHARING = ("none", "layer", "head")


def per_layer_terms(sharing: str, num_layers: int, terms_of_group) -> list:
    """One LayerTerms per layer; layers that share a table share one LayerTerms (and bias)."""
    groups = 1 if sharing == "layer" else num_layers
    terms = [terms_of_group(g) for g in range(groups)]
    return [terms[layer_group(sharing, layer)] for layer in range(num_layers)]


@dataclass(frozen=True)
class DietAbsOptions:
    rank: int | None = None  # d_p; None means d_h
    sharing: str = "layer"

    def __post_init__(self) -> None:
        if self.rank is not None:
            require(
                isinstance(self.rank, int) and self.rank >= 1,
                "rank",
                self.rank,
                "d_p must be an integer >= 1 (or None for d_h)",
            )
        require_choice("sharing", self.sharing, SHARING)


class DietAbsolute(PositionalEncoding):
    """[diet-abs] DIET-ABS, DIET Eq. 1:

    A_ij = (X_i W_Q)(X_j W_K)^T / sqrt(d_h) + (P_Q P_K^T)_ij  [+ E_S(S(i), S(j)), Eq. 2].

    P_Q, P_K in R^{max_len x d_p} learned directly (no projection, no LayerNorm), per head;
    d_p = `rank` (default d_h). The position term is unscaled. No input position embedding.
    sharing: `layer` (default, DIET's recommendation: one set per head shared across layers),
    `none` (per layer and head), `head` (per layer, shared by its heads).
    """

    name = "diet-abs"
    Options = DietAbsOptions
    paper = "Chen et al. 2021 (DIET)"
    equation = "DIET Eq. 1"
    places = (Place.LOGIT_BIAS,)
    cost = "once per forward (per layer if unshared), rank-d_p [H,n,n]"

    def __init__(self, dims: ModelDims, options: DietAbsOptions) -> None:
        super().__init__(dims, options)
        rank = options.rank or dims.head_dim
        layers, heads = sharing_groups(options.sharing, dims)
        self.query = empty_parameter(layers, heads, dims.max_len, rank)
        self.key = empty_parameter(layers, heads, dims.max_len, rank)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """P_Q, P_K: N(0, init_std)."""
        normal_(self.query, std=self.dims.init_std)
        normal_(self.key, std=self.dims.init_std)

    @property
    def max_positions(self) -> int:
        return self.dims.max_len

    def group_factors(self, group: int, seq_len: int) -> tuple[Tensor, Tensor]:
        """(P_Q, P_K) of one layer group, [1, H or 1, n, d_p] each."""
        return tuple(leading(f[None, group], -2, seq_len) for f in (self.query, self.key))

    def group_terms(self, group: int, seq_len: int) -> LayerTerms:
        pq, pk = self.group_factors(group, seq_len)
        return self.factor_terms(pq, pk)

    def factor_terms(self, pq: Tensor, pk: Tensor) -> LayerTerms:
        """The bias P_Q P_K^T by its factors, the [.., n, n] product built where something
        reads it (`DeferredBias`): a kernel that folds the factors never does, and a decoding
        step builds its rows alone."""
        return LayerTerms.of_rows(
            self.content_scale(),
            lambda start: pq[..., start:, :] @ pk.transpose(-1, -2),
            bias_factors=(pq, pk),
        )

    def layer_terms(self, seq_len, device, dtype):
        return per_layer_terms(
            self.options.sharing,
            self.dims.num_layers,
            lambda g: self.group_terms(g, seq_len),
        )

    def group_terms_at(self, group: int, positions: Tensor) -> LayerTerms:
        """P_Q P_K^T at the rows of the positions: factors [B, H or 1, n, d_p]."""
        pq, pk = (table[group][:, positions].transpose(0, 1) for table in (self.query, self.key))
        return self.factor_terms(pq, pk)

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        return per_layer_terms(
            self.options.sharing,
            self.dims.num_layers,
            lambda g: self.group_terms_at(g, positions),
        )


@dataclass(frozen=True)
class DietRelOptions:
    max_distance: int | None = None  # None means max_len - 1: every offset of the table
    sharing: str = "none"

    def __post_init__(self) -> None:
        if self.max_distance is not None:
            require_positive_int("max_distance", self.max_distance)
        require_choice("sharing", self.sharing, SHARING)


class DietRelative(PositionalEncoding):
    """[diet-rel] DIET-REL, DIET Eq. 3:

    A_ij = (X_i W_Q)(X_j W_K)^T / sqrt(d_h) + R_{clip(i - j, m)}  [+ E_S(S(i), S(j))].

    R: one scalar per relative offset per head, no log buckets, offsets clipped to [-m, m] with
    m = max_distance (default max_len - 1, i.e. 2 max_len - 1 scalars). Index order i - j as in
    the paper. sharing: `none` (default, DIET's recommendation), `layer`, `head`.
    Unscaled. Any length: offsets past m share the edge value.
    """

    name = "diet-rel"
    Options = DietRelOptions
    paper = "Chen et al. 2021 (DIET)"
    equation = "DIET Eq. 3"
    places = (Place.LOGIT_BIAS,)
    cost = "per layer gather of [H,n,n] from 2m+1 scalars"

    def __init__(self, dims: ModelDims, options: DietRelOptions) -> None:
        super().__init__(dims, options)
        self.max_distance = options.max_distance or dims.max_len - 1
        layers, heads = sharing_groups(options.sharing, dims)
        self.table = empty_parameter(layers, 2 * self.max_distance + 1, heads)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """R: N(0, init_std)."""
        normal_(self.table, std=self.dims.init_std)

    def rows(self, seq_len: int, device) -> Tensor:
        """The row of R for every offset j - i in `offsets` order: clip(i - j, -m, m) + m."""
        m = self.max_distance
        return (-offsets(seq_len, device)).clamp(-m, m) + m

    def layer_terms(self, seq_len, device, dtype):
        rows = self.rows(seq_len, device)
        scale = self.content_scale()
        return per_layer_terms(
            self.options.sharing,
            self.dims.num_layers,
            lambda g: self.toeplitz_terms(scale, self.table[g][rows].T, self.max_distance),
        )

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        m = self.max_distance
        scale = self.content_scale()

        def group_terms(group: int) -> LayerTerms:
            def bias(differences: Tensor) -> Tensor:  # rows clip(i - j) + m of R
                return lookup_by_head(self.table[group], (-differences).clamp(-m, m) + m)

            return LayerTerms.of_differences(scale, positions, bias)

        return per_layer_terms(self.options.sharing, self.dims.num_layers, group_terms)

    @staticmethod
    def toeplitz_terms(scale: float, by_offset: Tensor, max_distance: int) -> LayerTerms:
        """Offsets past +-max_distance read R's edge rows (`rows`): flat there."""
        return LayerTerms.of_table(scale, by_offset, TableTails(-max_distance, max_distance))


__all__ = ["DietAbsOptions", "DietAbsolute", "DietRelOptions", "DietRelative"]
