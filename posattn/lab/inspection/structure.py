"""How structured a logit matrix is, measured where attention can see it.

Softmax ignores a constant added to a row, so every measure here works on the within-row
variation of M (M minus its row means):

- toeplitz_r2: share of that variation explained by a function of the offset j - i, the least
  squares fit M_ij ~ r_i + t_{j-i} (a relative-position pattern; a Toeplitz matrix scores 1);
- rank1_r2: share of it held by the best rank-1 approximation of the row-centred matrix (a
  key-driven pattern such as every query looking at the same keys scores 1);
- noise levels: the same two numbers for the same entries shuffled, i.e. what structureless
  values of the same distribution score (about 2/n and 4/n).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


def row_centred(m: Tensor) -> Tensor:
    return m - m.mean(-1, keepdim=True)


@functools.lru_cache(maxsize=4)
def _toeplitz_design(n: int, left_out: int | None) -> tuple[Tensor, Tensor, Tensor]:
    """(D, pinv(D), kept positions) of M_ij = r_i + t_{j-i} over the entries off row and
    column `left_out` (None: every entry): n row effects and 2n - 1 offsets, float64. Each
    entry keeps its own offset j - i (dropping an inner row renumbers the rest)."""
    kept = torch.tensor([i for i in range(n) if i != left_out])
    rows, cols = kept.repeat_interleave(len(kept)), kept.repeat(len(kept))
    design = torch.zeros(len(rows), n + 2 * n - 1, dtype=torch.float64)
    design[torch.arange(len(rows)), rows] = 1.0
    design[torch.arange(len(rows)), n + cols - rows + n - 1] = 1.0
    return design, torch.linalg.pinv(design), kept


def toeplitz_r2(m: Tensor, without: int | None = None) -> Tensor:
    """[..., n, n] -> [...]: share of within-row variance explained by t_{j-i}; with
    `without`, over the entries off that row and column (the [CLS] position's)."""
    design, pinv, kept = _toeplitz_design(m.shape[-1], without)
    size = len(kept)
    if without is not None:
        m = m[..., kept[:, None], kept[None, :]]
    flat = m.reshape(-1, size * size).to(torch.float64)
    fitted = (flat @ pinv.T) @ design.T
    residual = (flat - fitted).pow(2).sum(-1)
    total = row_centred(flat.view(-1, size, size)).pow(2).sum((-1, -2))
    return (1 - residual / total.clamp_min(1e-300)).view(m.shape[:-2])


def rank1_r2(m: Tensor) -> Tensor:
    """[..., n, n] -> [...]: share of the row-centred energy in its top singular value."""
    values = torch.linalg.svdvals(row_centred(m.to(torch.float64)))
    energy = values.pow(2)
    return energy[..., 0] / energy.sum(-1).clamp_min(1e-300)


def shuffled(m: Tensor, seed: int = 0) -> Tensor:
    """Each [n, n] matrix with its entries in a random order (the structureless reference)."""
    generator = torch.Generator().manual_seed(seed)
    flat = m.reshape(-1, m.shape[-2] * m.shape[-1])
    order = torch.stack([torch.randperm(flat.shape[1], generator=generator) for _ in flat])
    return flat.gather(1, order.to(m.device)).view(m.shape)


def structure(m: Tensor) -> dict[str, float]:
    """The measures above, averaged over every leading index (texts, heads)."""
    noise = shuffled(m)
    return {
        "toeplitz_r2": toeplitz_r2(m).mean().item(),
        "rank1_r2": rank1_r2(m).mean().item(),
        "noise_toeplitz_r2": toeplitz_r2(noise).mean().item(),
        "noise_rank1_r2": rank1_r2(noise).mean().item(),
        "within_row_std": row_centred(m).pow(2).mean().sqrt().item(),
    }
