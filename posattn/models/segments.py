"""Segment (token-type) information: at the input (BERT) or inside attention (DIET Eq. 2)."""

from __future__ import annotations

from torch import Tensor, nn

from ..encodings.base import OwnsParameters, empty_parameter
from ..initialization import normal_
from ..kernels.table_bias import SegmentPairs

SEGMENT_MODES = ("none", "input", "attention")


def reads_segments(config) -> bool:
    """Whether a model reads segment ids: one without segments (segments='none') ignores
    them, so it takes 0 only (what a tokenizer gives a single text) and refuses a pair's 1s."""
    return config.segments != "none"


class SegmentAttentionBias(OwnsParameters, nn.Module):
    """DIET Eq. 2: E_S(S(i), S(j)) = s^{l,h}_{S(i), S(j)}, a learned scalar per (query segment,
    key segment) pair per head, added to the logits of every layer.

    DIET leaves open whether the table is per layer; posattn keeps one per layer (it costs
    L * H * S^2 scalars) so that each layer can weigh segments as it weighs positions.
    """

    def __init__(self, num_layers: int, num_heads: int, num_segments: int, std: float) -> None:
        super().__init__()
        self.num_segments = num_segments
        self.std = std
        self.table = empty_parameter(num_layers, num_heads, num_segments**2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """s: N(0, init_std)."""
        normal_(self.table, std=self.std)

    def forward(self, segment_ids: Tensor) -> list[Tensor]:
        """[B, n] segment ids -> per layer a [B, H, n, n] bias."""
        return [pairs.dense() for pairs in self.described(segment_ids)]

    def described(self, segment_ids: Tensor) -> list[SegmentPairs]:
        """The same bias per layer as its [H, S * S] table and the ids, for a kernel that
        reads tables (kernel="triton")."""
        return [SegmentPairs(table, segment_ids, self.num_segments) for table in self.table]
