"""TUPE Figure 6: what each head attends to on real text, and a pattern class per head.

From the attention probabilities a_ij (softmax of the layer's logits, unpadded blocks of real
text), averaged over the texts and the queries i:

- distance = sum_j a_ij |i - j| (tokens), entropy = -sum_j a_ij log a_ij (nats, and divided by
  log n, 1 = uniform);
- previous = a_{i,i-1}, next = a_{i,i+1}, local = sum_{|i-j| <= LOCAL_WINDOW} a_ij;
- global = max_j (mean_i a_ij): the share of all attention taken by the single most attended
  key (a vertical stripe: every query looks at the same token, e.g. [CLS] or [SEP]).

Classification, first rule that holds (thresholds at one half: that pattern carries most of
the attention):

1. previous: previous >= 0.5;
2. next: next >= 0.5;
3. global: global >= 0.5;
4. local: local >= 0.5 (a band around the diagonal with neither side dominant);
5. broad: none of the above: no offset, key or band takes half the attention; the entropy
   says how spread it is.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

LOCAL_WINDOW = 2
THRESHOLD = 0.5
CLASSES = ("previous", "next", "global", "local", "broad")


def head_statistics(logits: Tensor) -> dict[str, list[float]]:
    """[B, H, n, n] logits (no padding) -> per head statistic lists of length H."""
    probs = torch.softmax(logits.to(torch.float64), dim=-1)
    n = probs.shape[-1]
    index = torch.arange(n, device=probs.device)
    offset = index[None, :] - index[:, None]  # j - i
    entropy = -(probs * probs.clamp_min(1e-300).log()).sum(-1).mean((0, 2))
    stats = {
        "distance": (probs * offset.abs()).sum(-1).mean((0, 2)),
        "entropy": entropy,
        "entropy_normalised": entropy / math.log(n),
        "previous": probs.diagonal(-1, -2, -1).mean((0, 2)),
        "next": probs.diagonal(1, -2, -1).mean((0, 2)),
        "local": (probs * (offset.abs() <= LOCAL_WINDOW)).sum(-1).mean((0, 2)),
        "global": probs.mean(2).amax(-1).mean(0),
    }
    return {name: value.tolist() for name, value in stats.items()}


def classify(previous: float, next: float, global_: float, local: float) -> str:
    """The rule of the module docstring."""
    for name, value in (
        ("previous", previous),
        ("next", next),
        ("global", global_),
        ("local", local),
    ):
        if value >= THRESHOLD:
            return name
    return "broad"


def bias_classes(bias: Tensor) -> list[str] | None:
    """The class of each head of a content-free bias [H, n, n] taken as the logits alone:
    where the bias by itself would send the attention. On text, content shares each row with
    it, so a bias that clearly prefers one offset (DIET-REL's tables put +3.4 on offset -1)
    can still leave its head "broad" there; this says what the method's positional part asks
    for. None for a bias that is not square (keys projected, decoding rows)."""
    if bias.shape[-1] != bias.shape[-2]:
        return None
    return head_patterns([bias[None]])[0]["class"]


def head_patterns(logits_per_layer: list[Tensor]) -> list[dict]:
    """One dict per layer: the statistics and the class of every head."""
    layers = []
    for logits in logits_per_layer:
        stats = head_statistics(logits)
        stats["class"] = [
            classify(p, nx, g, lo)
            for p, nx, g, lo in zip(
                stats["previous"], stats["next"], stats["global"], stats["local"], strict=True
            )
        ]
        layers.append(stats)
    return layers
