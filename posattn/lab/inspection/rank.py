"""DIET Theorem 1 (Figs. 2 and 8): the rank of attention logit matrices.

With positions added to the input, every layer's logits are Q K^T with Q, K of width d_h, so
their rank is at most d_h whatever the input (Theorem 1, first part). A per-head positional
term P_Q P_K^T (DIET-ABS), a relative bias (T5, DIET-REL, TUPE-R) or TUPE's untied term adds
its own rank on top. Measured here per matrix, in float64:

- spectrum: singular values divided by the largest;
- numerical rank: singular values above sigma_1 * n * eps(float64) (torch.linalg.matrix_rank);
- rank at 99% energy: the fewest singular values holding 99% of sum sigma_k^2 (what a trained
  model effectively uses).
"""

from __future__ import annotations

import torch
from torch import Tensor

ENERGY = 0.99


def singular_values(m: Tensor) -> Tensor:
    return torch.linalg.svdvals(m.to(torch.float64))


def numerical_rank(values: Tensor, n: int) -> Tensor:
    """Singular values above sigma_1 * n * eps, torch.linalg.matrix_rank's default."""
    tolerance = values[..., :1] * n * torch.finfo(torch.float64).eps
    return (values > tolerance).sum(-1)


def energy_rank(values: Tensor, share: float = ENERGY) -> Tensor:
    energy = values.pow(2)
    cumulative = energy.cumsum(-1) / energy.sum(-1, keepdim=True).clamp_min(1e-300)
    return (cumulative < share - 1e-12).sum(-1) + 1


def rank_summary(m: Tensor) -> dict:
    """[B, H, n, n] (or [H, n, n]) -> per head: mean numerical and 99%-energy rank over the
    leading texts, and the mean normalised spectrum."""
    m = m if m.dim() == 4 else m.unsqueeze(0)
    values = singular_values(m)
    return {
        "numerical_rank": numerical_rank(values, max(m.shape[-2:])).double().mean(0).tolist(),
        "energy_rank": energy_rank(values).double().mean(0).tolist(),
        "spectrum": (values / values[..., :1].clamp_min(1e-300)).mean(0).tolist(),
    }
