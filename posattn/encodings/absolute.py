"""Input-additive encodings and the no-position baseline."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..initialization import normal_
from .base import ModelDims, NoOptions, Place, PositionalEncoding


class NoPosition(PositionalEncoding):
    """[none] No position information (NoPE): attention is permutation-equivariant.

    alpha_ij = (x_i W^Q)(x_j W^K)^T / sqrt(d_h)  (TUPE Eq. 2, no p_i anywhere).
    """

    name = "none"
    paper = "- (NoPE)"
    equation = "TUPE Eq. 2"
    places = ()
    cost = "free"


def sinusoidal_table(seq_len: int, d_model: int, device=None, dtype=torch.float32) -> Tensor:
    """Vaswani et al. (2017) Sec. 3.5, interleaved: PE[t, 2i] = sin(t / 10000^(2i/d)),
    PE[t, 2i+1] = cos(t / 10000^(2i/d))."""
    return sinusoids(torch.arange(seq_len, device=device), d_model, dtype)


def sinusoids(positions: Tensor, d_model: int, dtype=torch.float32) -> Tensor:
    """`sinusoidal_table`'s rows at any positions: [...] -> [..., d_model]."""
    positions = positions.to(torch.float64)[..., None]
    even = torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float64)
    angles = positions / torch.pow(10000.0, even / d_model)
    table = torch.empty(*angles.shape[:-1], d_model, device=positions.device, dtype=torch.float64)
    table[..., 0::2] = torch.sin(angles)
    table[..., 1::2] = torch.cos(angles[..., : d_model // 2])
    return table.to(dtype)


class Sinusoidal(PositionalEncoding):
    """[sinusoidal] Vaswani input-additive encoding: x_i^1 = w_i + PE(i).

    PE(i)_{2k} = sin(i / 10000^{2k/d}), PE(i)_{2k+1} = cos(i / 10000^{2k/d})
    (Vaswani Sec. 3.5; TUPE Eq. 3 with a fixed p_i). No parameters; any length.
    """

    name = "sinusoidal"
    paper = "Vaswani et al. 2017"
    equation = "Vaswani Sec. 3.5; TUPE Eq. 3"
    places = (Place.INPUT,)
    cost = "once per forward, O(n d)"

    def input_embedding(self, seq_len, device, dtype):
        return sinusoidal_table(seq_len, self.dims.d_model, device, dtype)

    def input_embedding_at(self, positions, dtype):
        return sinusoids(positions, self.dims.d_model, dtype)


class Learned(PositionalEncoding):
    """[learned] BERT-A: a learned table added to the word embeddings, x_i^1 = w_i + p_i.

    alpha_ij = ((w_i + p_i) W^Q)((w_j + p_j) W^K)^T / sqrt(d_h)  (TUPE Eq. 3).
    p in R^{max_len x d}, initialised N(0, init_std). Cannot run past max_len.
    """

    name = "learned"
    paper = "Devlin et al. 2019 (BERT-A)"
    equation = "TUPE Eq. 3"
    places = (Place.INPUT,)
    cost = "once per forward, O(n d)"

    def __init__(self, dims: ModelDims, options: NoOptions) -> None:
        super().__init__(dims, options)
        self.table = nn.Embedding(dims.max_len, dims.d_model)
        normal_(self.table.weight, std=dims.init_std)

    @property
    def max_positions(self) -> int:
        return self.dims.max_len

    def input_position_parameters(self) -> list[nn.Parameter]:
        return [self.table.weight]

    def input_embedding(self, seq_len, device, dtype):
        return self.table.weight[:seq_len]

    def input_embedding_at(self, positions, dtype):
        return self.table(positions)
