"""T5's bucketed relative bias (Raffel et al. 2020) and TUPE's BERT-R baseline."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import require, require_positive_int
from ..initialization import normal_
from ..kept_tensors import outside_inference_mode
from ..toeplitz import TableTails
from ..tracing import traced
from .absolute import Learned
from .base import LayerTerms, ModelDims, OwnsParameters, Place, PositionalEncoding, empty_parameter
from .relative import lookup_by_head, offsets, toeplitz


def t5_relative_bucket(
    relative_position: Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """Bucket id of each relative position r = j - i (key minus query), as in T5.

    Bidirectional: half of the buckets for r > 0. In each half, distances below half of the
    half's buckets get a bucket each; longer ones share logarithmically wider bins up to
    max_distance, beyond which all fall into the last bucket. Causal: only r <= 0 is
    distinguished (future keys share bucket 0 with r = 0; the causal mask removes them).
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_exact = distance < max_exact
    # The float32 arithmetic matches T5's, so bin edges agree with its checkpoints.
    log_ratio = torch.log(distance.clamp(min=1).float() / max_exact) / math.log(
        max_distance / max_exact
    )
    log_bucket = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(
        max=num_buckets - 1
    )
    return buckets + torch.where(is_exact, distance, log_bucket)


def bucket_tails(bidirectional: bool, max_distance: int) -> TableTails:
    """The offsets j - i past which `t5_relative_bucket` is one bucket (flat tails,
    `LayerTerms.offset_tails`): at distances >= max_distance each direction's last bucket;
    causal, every r >= 0 shares bucket 0 with r = 0."""
    return TableTails(-max_distance, max_distance if bidirectional else 0)


def offset_buckets(
    seq_len: int, device: str, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """The bucket of every offset j - i in `offsets` order, [2n - 1]."""
    relative = offsets(seq_len, torch.device(device))
    return t5_relative_bucket(relative, bidirectional, num_buckets, max_distance)


# Made outside inference mode: the first length may be an evaluation's, the next forward training.
_cached_offset_buckets = functools.lru_cache(maxsize=32)(outside_inference_mode(offset_buckets))


def cached_buckets(
    seq_len: int, device: str, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """`offset_buckets`, once per length and device in eager mode; computed in the graph
    while torch.compile / torch.export trace (a cached traced tensor would outlive the
    trace, and dynamo does not trace through lru_cache) and afresh under torch.func's
    transforms (forward mode wraps even these integers, at a level that ends with it)."""
    if traced():
        return offset_buckets(seq_len, device, bidirectional, num_buckets, max_distance)
    return _cached_offset_buckets(seq_len, device, bidirectional, num_buckets, max_distance)


@dataclass(frozen=True)
class T5Options:
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True

    def __post_init__(self) -> None:
        require_positive_int("num_buckets", self.num_buckets)
        require(
            self.num_buckets >= (4 if self.bidirectional else 2) and self.num_buckets % 2 == 0,
            "num_buckets",
            self.num_buckets,
            "an even number >= 4 (bidirectional) or >= 2 (causal)",
        )
        exact = self.num_buckets // (4 if self.bidirectional else 2)
        require(
            isinstance(self.max_distance, int) and self.max_distance > exact,
            "max_distance",
            self.max_distance,
            f"an integer larger than the exact-bucket range {exact}",
        )


class T5BiasTable(OwnsParameters, nn.Module):
    """A scalar per (bucket, head), looked up by bucket ids: b_{bucket(j-i), h}; N(0, std)."""

    def __init__(self, num_buckets: int, num_heads: int, std: float) -> None:
        super().__init__()
        self.std = std
        self.weight = empty_parameter(num_buckets, num_heads)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        normal_(self.weight, std=self.std)

    def by_offset(self, offset_buckets: Tensor) -> Tensor:
        """[2n - 1] buckets of the offsets (`cached_buckets`) -> [H, 2n - 1] per offset."""
        return self.weight[offset_buckets].T

    def at(self, buckets: Tensor) -> Tensor:
        """Bucket ids [B, n, n] (any shape [..., n, n]) -> the bias [..., H, n, n]."""
        return lookup_by_head(self.weight, buckets)

    def forward(self, offset_buckets: Tensor) -> Tensor:
        """[2n - 1] buckets of the offsets (`cached_buckets`) -> the bias [1, H, n, n]."""
        return toeplitz(self.by_offset(offset_buckets)).unsqueeze(0)


class T5Bias(PositionalEncoding):
    """[t5] T5 relative bias (TUPE Eq. 5; Raffel et al. 2020):

    alpha_ij = (x_i W^Q)(x_j W^K)^T / sqrt(d_h) + b_{bucket(j - i)}.

    b: one scalar per bucket per head, shared across all layers, unscaled (no 1/sqrt(d)).
    32 log buckets up to distance 128 by default; `bidirectional=False` gives the causal form.
    """

    name = "t5"
    Options = T5Options
    paper = "Raffel et al. 2020 (T5)"
    equation = "TUPE Eq. 5"
    places = (Place.LOGIT_BIAS,)
    cost = "once per forward, [H,n,n], shared by layers"

    def __init__(self, dims: ModelDims, options: T5Options) -> None:
        super().__init__(dims, options)
        self.relative = T5BiasTable(options.num_buckets, dims.num_heads, dims.init_std)

    def buckets(self, seq_len: int, device) -> Tensor:
        o = self.options
        return cached_buckets(seq_len, str(device), o.bidirectional, o.num_buckets, o.max_distance)

    def layer_terms(self, seq_len, device, dtype):
        by_offset = self.relative.by_offset(self.buckets(seq_len, device))
        tails = bucket_tails(self.options.bidirectional, self.options.max_distance)
        return [LayerTerms.of_table(self.content_scale(), by_offset, tails)] * self.dims.num_layers

    def buckets_of(self, differences: Tensor) -> Tensor:
        """Differences p_j - p_i [B, m, n] -> their buckets."""
        o = self.options
        return t5_relative_bucket(differences, o.bidirectional, o.num_buckets, o.max_distance)

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        terms = LayerTerms.of_differences(
            self.content_scale(), positions, lambda d: self.relative.at(self.buckets_of(d))
        )
        return [terms] * self.dims.num_layers


class BertRelative(T5Bias):
    """[bert-r] TUPE's BERT-R baseline (TUPE Eq. 3 + Eq. 5): BERT-A input embeddings plus the
    T5 bias.

    x_i^1 = w_i + p_i;  alpha_ij = (x_i W^Q)(x_j W^K)^T / sqrt(d_h) + b_{bucket(j - i)}.
    """

    name = "bert-r"
    paper = "Ke et al. 2021 (TUPE baseline)"
    equation = "TUPE Eq. 3 + Eq. 5"
    places = (Place.INPUT, Place.LOGIT_BIAS)
    cost = "input O(n d) + [H,n,n] once per forward"

    def __init__(self, dims: ModelDims, options: T5Options) -> None:
        super().__init__(dims, options)
        self.absolute = Learned(dims, None)

    @property
    def max_positions(self) -> int:
        return self.dims.max_len

    def input_position_parameters(self) -> list[nn.Parameter]:
        return self.absolute.input_position_parameters()

    def input_embedding(self, seq_len, device, dtype):
        return self.absolute.input_embedding(seq_len, device, dtype)

    def input_embedding_at(self, positions, dtype):
        return self.absolute.input_embedding_at(positions, dtype)
