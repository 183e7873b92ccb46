"""FIRE: functional interpolation for relative positions (Li et al., ICLR 2024)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn

from ..errors import require, require_positive_int
from ..tracing import read_on_host
from .base import (
    LayerTerms,
    ModelDims,
    OwnsParameters,
    Place,
    PositionalEncoding,
    empty_parameter,
    require_causal,
)
from .relative import offsets, position_differences, toeplitz


@dataclass(frozen=True)
class FireOptions:
    mlp_width: int = 32
    init_c: float = 0.1
    init_threshold: float = 512.0
    eps: float = 1e-6

    def __post_init__(self) -> None:
        require_positive_int("mlp_width", self.mlp_width)
        require(self.init_threshold > 0, "init_threshold", self.init_threshold, "a length > 0")
        require(self.eps > 0, "eps", self.eps, "a small positive number")


class FireBias(OwnsParameters, nn.Module):
    """One layer's FIRE: an MLP from the normalised log distance to a bias per head; c and
    the threshold L start at the options' init_c and init_threshold."""

    def __init__(self, num_heads: int, options: FireOptions) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(1, options.mlp_width), nn.ReLU(), nn.Linear(options.mlp_width, num_heads)
        )
        self.options = options
        self.c = empty_parameter()
        self.threshold = empty_parameter()
        self.eps = options.eps
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.c, self.options.init_c)
        nn.init.constant_(self.threshold, self.options.init_threshold)

    def psi(self, x: Tensor) -> Tensor:
        return torch.log1p(torch.abs(self.c * x))

    def normalised_distance(self, seq_len: int, device, start: int = 0) -> Tensor:
        """[n - start, n] psi(i - j) / psi(max(L, i)), psi(x) = log(|c x| + 1), for the query
        rows i >= start."""
        positions = torch.arange(seq_len, device=device)
        relative = -position_differences(positions, start).to(self.c.dtype)  # i - j, its rows
        query = positions[start:].to(self.c.dtype)
        normaliser = torch.maximum(query, self.threshold.abs())[:, None]
        return self.psi(relative) / (self.psi(normaliser) + self.eps)

    def normalised_distance_at(self, positions: Tensor, start: int = 0) -> Tensor:
        """`normalised_distance` at given positions [B, n]: [B, n - start, n] with i, j the
        positions of the query and the key, for the query rows [start, n)."""
        relative = -position_differences(positions, start).to(self.c.dtype)  # p_i - p_j
        query = positions[..., start:].to(self.c.dtype)
        normaliser = torch.maximum(query, self.threshold.abs())[..., :, None]
        return self.psi(relative) / (self.psi(normaliser) + self.eps)

    def forward(self, seq_len: int, device, start: int = 0) -> Tensor:
        """[1, H, n - start, n] bias of the query rows [start, n) (cached decoding asks for
        its new rows: it built all n^2 scores' MLP at every token). Query rows i < |L| have
        the constant normaliser psi(|L|), so there the bias is a function of i - j alone: the
        MLP runs on the 2n-1 offsets and their Toeplitz matrix gives those rows (for n <=
        |L|, every row: 2n-1 MLP inputs instead of n^2). Rows from |L| on keep their own
        normaliser."""
        # Compiled: one graph for every |L| (the split would be a graph break); on the meta
        # device (construction-time checks) there is no value to split at.
        dense = torch.compiler.is_compiling() or self.threshold.is_meta
        rows = 0 if dense else self.rows_below_threshold(seq_len)
        if rows <= start:
            return self.bias_of(self.normalised_distance(seq_len, device, start)).unsqueeze(0)
        by_offset = self.by_head(self.distance_by_offset(seq_len, device))  # [H, 2n-1]
        # The offsets of rows [start, rows) only: no Toeplitz rows built to be cut off.
        bias = toeplitz(by_offset[:, seq_len - rows : 2 * seq_len - 1 - start], seq_len)
        if rows < seq_len:
            tail = self.normalised_distance(seq_len, device, start=rows)  # ties as maximum's
            bias = torch.cat([bias, self.bias_of(tail)], dim=1)
        return bias.unsqueeze(0)

    def rows_below_threshold(self, seq_len: int) -> int:
        """How many query rows i lie strictly below |L|: min(n, ceil(|L|)), read on the host
        (the row split is a shape: one device sync a layer on a GPU, where the MLP on every
        score would hold [n, n, mlp_width] hidden units, 2 GiB a layer in float32 at n=4096);
        none for a NaN L (every row computed as it is), or for thresholds that torch.func's
        vmap batches (an ensemble of models: a split per model is no one shape)."""
        read = read_on_host(self.threshold.detach().abs())
        if read is None:
            return 0
        (threshold,) = read
        if math.isnan(threshold):
            return 0
        return seq_len if threshold >= seq_len else math.ceil(threshold)

    def distance_by_offset(self, seq_len: int, device) -> Tensor:
        """[2n-1] psi(i - j) / psi(|L|) at the offsets j - i in `toeplitz` order: the
        normalised distance of a row below the threshold."""
        relative = -offsets(seq_len, device).to(self.c.dtype)  # i - j
        return self.psi(relative) / (self.psi(self.threshold.abs()) + self.eps)

    def at(self, positions: Tensor, start: int = 0) -> Tensor:
        """[B, H, n - start, n] bias of tokens at positions [B, n], query rows [start, n)."""
        return self.bias_of(self.normalised_distance_at(positions, start))

    def bias_of(self, distance: Tensor) -> Tensor:
        """The MLP of distances [..., m, n] -> [..., H, m, n]."""
        return self.by_head(distance.flatten(-2)).unflatten(-1, distance.shape[-2:])

    def by_head(self, distance: Tensor) -> Tensor:
        """The MLP of distances [..., m] -> [..., H, m], heads outermost: its last layer as
        W [H, w] times the hidden units' transpose, so that the bias is written with each
        head's keys contiguous (the MLP's own output [..., m, H] has the heads innermost,
        which attention kernels read several times slower)."""
        first, activation, last = self.mlp
        hidden = activation(first(distance[..., None]))  # [..., m, w]
        if not isinstance(last, nn.Linear):  # a replaced layer: torch's dynamic quantization
            return last(hidden).mT.contiguous()
        return (last.weight @ hidden.mT).add_(last.bias[:, None])


class Fire(PositionalEncoding):
    """[fire] FIRE, Li et al. 2023, progressive interpolation with a threshold (FIRE
    f(psi(i-j)/psi(max(L,i)))), as its reference code computes it:

    alpha_ij = q_i k_j^T / sqrt(d_h) + f_theta(psi(i - j) / psi(max(L, i))),  j <= i,

    psi(x) = log(c x + 1); f_theta: Linear(1, 32) -> ReLU -> Linear(32, H), per layer; c
    (init 0.1) and the threshold L (init 512) are learned. Normalising by the query position
    maps every distance into [0, 1], which is what lets it run past the training length.
    Causal only: the normaliser max(L, i) is defined for keys at or before the query.
    """

    name = "fire"
    Options = FireOptions
    paper = "Li et al. 2023 (FIRE)"
    equation = "FIRE f(psi(i-j)/psi(max(L,i)))"
    places = (Place.LOGIT_BIAS,)
    cost = "per layer, MLP over the 2n-1 offsets (each score in rows i >= abs(L)), [H,n,n]"

    def __init__(self, dims: ModelDims, options: FireOptions) -> None:
        require_causal(self.name, dims)
        super().__init__(dims, options)
        self.layers = nn.ModuleList(
            FireBias(dims.num_heads, options) for _ in range(dims.num_layers)
        )

    # Each layer's bias by its query rows (`LayerTerms.of_rows`): a decoding step's alone.
    def layer_terms(self, seq_len, device, dtype):
        scale = self.content_scale()
        return [LayerTerms.of_rows(scale, partial(layer, seq_len, device)) for layer in self.layers]

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        scale = self.content_scale()
        return [LayerTerms.of_rows(scale, partial(layer.at, positions)) for layer in self.layers]
