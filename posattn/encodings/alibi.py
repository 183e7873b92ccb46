"""ALiBi: attention with linear biases (Press, Smith, Lewis, ICLR 2022)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..toeplitz import TableTails
from .base import LayerTerms, Place, PositionalEncoding
from .relative import offsets


def alibi_slopes(num_heads: int, device: torch.device | str | None = None) -> Tensor:
    """The paper's head slopes (ALiBi Sec. 3): for H a power of two, the geometric sequence
    2^(-8/H), 2^(-16/H), ..., 2^(-8). Otherwise the slopes of the nearest smaller power of two
    2^k, followed by every other slope of 2^(k+1) heads for the remaining H - 2^k heads.

    Made on `device` from no host data: a tensor copied there from host memory waits for the
    GPU's queued work (a stream synchronisation a training step, when the terms are rebuilt).
    The exponents -8 i / 2^k are exact in float64; the powers are torch's, within an ulp of
    the correctly rounded value."""
    closest = 2 ** math.floor(math.log2(num_heads))
    steps = torch.arange(1, closest + 1, dtype=torch.float64, device=device)
    exponents = steps * (-8 / closest)
    if closest != num_heads:
        # Every other slope of 2^(k+1) heads: exponents -8 (2 i + 1) / 2^(k+1).
        odd = torch.arange(1, 2 * (num_heads - closest), 2, dtype=torch.float64, device=device)
        exponents = torch.cat([exponents, odd * (-4 / closest)])
    return torch.exp2(exponents)


class Alibi(PositionalEncoding):
    """[alibi] ALiBi Sec. 3 (Press et al. 2022):

    causal:        alpha_ij = q_i k_j^T / sqrt(d_h) - m_h (i - j),  j <= i;
    bidirectional: alpha_ij = q_i k_j^T / sqrt(d_h) - m_h |i - j|  (the symmetric form used for
    encoders; the paper defines only the causal one).

    m_h: fixed per-head slopes (`alibi_slopes`), no parameters, no input positions, any length.
    The form follows the model: causal models get the causal bias.
    """

    name = "alibi"
    paper = "Press et al. 2022 (ALiBi)"
    equation = "ALiBi Sec. 3"
    places = (Place.LOGIT_BIAS,)
    cost = "once per forward, fixed [H,n,n], no gradient"

    def layer_terms(self, seq_len, device, dtype):
        # -m |j - i| equals -m (i - j) wherever the causal mask lets a key through.
        distance = offsets(seq_len, device).abs()
        slopes = alibi_slopes(self.dims.num_heads, device)
        by_offset = (-slopes[:, None] * distance).to(dtype)
        # A line on each side of offset 0: m d below, -m d above (the table has no gradient).
        tails = TableTails(0, 0, (slopes, -slopes))
        terms = LayerTerms.of_table(self.content_scale(), by_offset, tails)
        return [terms] * self.dims.num_layers

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        slopes = alibi_slopes(self.dims.num_heads, positions.device)[:, None, None]

        def bias(differences: Tensor) -> Tensor:  # [B, m, n] -> [B, H, m, n]
            return (-slopes * differences.abs()[:, None]).to(dtype)

        terms = LayerTerms.of_differences(self.content_scale(), positions, bias)
        return [terms] * self.dims.num_layers
