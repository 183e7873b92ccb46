"""Rotary position embedding (RoPE) and its length-extrapolatable variant xPos."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor

from ..errors import require, require_choice
from .base import LayerTerms, ModelDims, Place, PositionalEncoding, require_causal
from .pair_rotation import rotate
from .rope_scaling import check_scaling, scaled_inverse_frequency

LAYOUTS = ("interleaved", "half")


@dataclass(frozen=True)
class RopeOptions:
    # Required: users confuse the two layouts, so the choice is never implicit.
    layout: str | None = field(default=None, metadata={"required": True})
    base: float = 10000.0
    fraction: float = 1.0
    scale: float = 1.0
    # A context-extension rule in transformers' rope_parameters keys (rope_scaling.py), e.g.
    # {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}.
    scaling: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        require(
            self.layout is not None,
            "layout",
            self.layout,
            "rotary encodings need an explicit layout: 'interleaved' (GPT-J, RoFormer pairs "
            "(x0,x1),(x2,x3),...) or 'half' (GPT-NeoX, Llama pairs (x_i, x_{i+d/2}))",
        )
        require_choice("layout", self.layout, LAYOUTS)
        require(self.base > 1.0, "base", self.base, "a rotary base theta > 1")
        require(0.0 < self.fraction <= 1.0, "fraction", self.fraction, "a fraction in (0, 1]")
        require(self.scale >= 1.0, "scale", self.scale, "an interpolation factor >= 1")
        if self.scaling is not None:
            check_scaling(self.scaling)
            require(
                self.scale == 1.0,
                "scale",
                self.scale,
                "1.0 when `scaling` is set (scaling={'rope_type': 'linear', 'factor': s} is the "
                "same interpolation)",
            )


def rotary_dim(head_dim: int, fraction: float) -> int:
    dim = int(head_dim * fraction)
    require(
        head_dim % 2 == 0 or fraction < 1.0,
        "head_dim",
        head_dim,
        "rotary encodings rotate pairs of dimensions: the head dimension must be even",
    )
    require(
        dim >= 2 and dim % 2 == 0,
        "fraction",
        fraction,
        f"fraction * head_dim = {head_dim * fraction:g} must give an even number >= 2 of "
        "rotated dimensions",
    )
    return dim


def rotary_angles(positions: Tensor, dim: int, base: float, scale: float) -> Tensor:
    """[..., dim/2] angles (m / scale) * base^(-2i/dim) of positions [...]  (RoFormer Eq. 15;
    PI: m -> m / scale)."""
    inverse_frequency = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return (positions.double()[..., None] / scale) * inverse_frequency.to(positions.device)


class Rope(PositionalEncoding):
    """[rope] Rotary position embedding, RoFormer Eq. 14-16 (Su et al. 2021):

    q_m -> R(m) q_m, k_n -> R(n) k_n, so (R(m) q)^T (R(n) k) = q^T R(n - m) k depends on n - m.

    R rotates pairs of dims by m * theta_i, theta_i = base^(-2i/d_rot). `layout` is required:
    "interleaved" pairs (x_{2i}, x_{2i+1}) (RoFormer, GPT-J), "half" pairs (x_i, x_{i+d_rot/2})
    (GPT-NeoX, Llama). `fraction` rotates only the first fraction * d_h dims (GPT-NeoX
    rotary_pct); `scale` > 1 is position interpolation (Chen et al. 2023): m -> m / scale.
    `scaling` takes the context-extension rules of transformers' rope_parameters (linear,
    dynamic NTK, YaRN, Llama 3.1, LongRoPE; `rope_scaling.py`): other inverse frequencies, and
    for YaRN and LongRoPE a factor on cos and sin. No parameters; any length; causal or
    bidirectional.
    """

    name = "rope"
    Options = RopeOptions
    paper = "Su et al. 2021 (RoFormer)"
    equation = "RoFormer Eq. 14-16"
    places = (Place.QK_TRANSFORM,)
    cost = "per layer, O(n d) on q and k"

    def __init__(self, dims: ModelDims, options: RopeOptions) -> None:
        super().__init__(dims, options)
        self.rotary_dim = rotary_dim(dims.head_dim, options.fraction)
        if options.scaling is not None:
            check_scaling(options.scaling, rotary_pairs=self.rotary_dim // 2)

    def frequencies(self, seq_len: int) -> tuple[Tensor, float]:
        """(inv_freq [d_rot/2] float64, the factor on cos and sin) at length seq_len."""
        o = self.options
        inverse, factor = scaled_inverse_frequency(
            o.scaling, self.rotary_dim, o.base, self.dims.max_len, seq_len
        )
        return inverse / o.scale, factor

    def angles(self, seq_len: int, device) -> Tensor:
        if self.options.scaling is None:
            o = self.options
            positions = torch.arange(seq_len, device=device)
            return rotary_angles(positions, self.rotary_dim, o.base, o.scale)
        inverse, _ = self.frequencies(seq_len)
        positions = torch.arange(seq_len, device=device, dtype=torch.float64)
        return positions[:, None] * inverse.to(device)

    def cos_sin(self, seq_len: int, device) -> tuple[Tensor, Tensor]:
        """cos and sin of the angles, times the rule's attention factor (1 without one)."""
        angles = self.angles(seq_len, device)
        factor = 1.0 if self.options.scaling is None else self.frequencies(seq_len)[1]
        return angles.cos() * factor, angles.sin() * factor

    @staticmethod
    def _rotate_qk(cos, sin, layout, q, k):
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return rotate(q, cos, sin, layout), rotate(k, cos, sin, layout)

    def layer_terms(self, seq_len, device, dtype):
        transform = partial(self._rotate_qk, *self.cos_sin(seq_len, device), self.options.layout)
        terms = LayerTerms(scale=self.content_scale(), transform_qk=transform)
        return [terms] * self.dims.num_layers

    def cos_sin_at(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """`cos_sin` of the tokens at positions [B, n]: [B, 1, n, d_rot/2] each (broadcast
        over heads). A scaling rule that depends on the length (dynamic NTK, LongRoPE) takes
        the largest position + 1, as transformers' rotary embeddings do with position_ids."""
        o = self.options
        if o.scaling is None:
            angles = rotary_angles(positions, self.rotary_dim, o.base, o.scale)[:, None]
            return angles.cos(), angles.sin()
        inverse, factor = self.frequencies(int(positions.max()) + 1)
        angles = (positions.double()[..., None] * inverse.to(positions.device))[:, None]
        return angles.cos() * factor, angles.sin() * factor

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        transform = partial(self._rotate_qk, *self.cos_sin_at(positions), self.options.layout)
        return [LayerTerms(scale=self.content_scale(), transform_qk=transform)] * (
            self.dims.num_layers
        )


@dataclass(frozen=True)
class XposOptions(RopeOptions):
    gamma: float = 0.4
    scale_base: float = 512.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.gamma > 0, "gamma", self.gamma, "a positive gamma")
        require(self.scale_base > 0, "scale_base", self.scale_base, "a positive scale_base")


class Xpos(Rope):
    """[xpos] xPos, Sun et al. 2022 ("A Length-Extrapolatable Transformer"), as in its
    torchscale code (xPos scaled rotation):

    q_m -> R(m) q_m * zeta^(m / B), k_n -> R(n) k_n * zeta^(-n / B), so the logit of offset
    m - n carries zeta_i^((m - n) / B) per rotated pair: a decay with distance for m >= n.

    zeta_i = (2i / d_rot + gamma) / (1 + gamma), gamma = 0.4, B = scale_base = 512.
    Causal only: for a future key the factor grows without bound, so a bidirectional form is
    not defined. Positions are centred on the sequence for the exponent (a shift of every
    position changes no logit) so that long inputs stay finite.
    """

    name = "xpos"
    Options = XposOptions
    paper = "Sun et al. 2022 (xPos)"
    equation = "xPos scaled rotation"
    cost = "per layer, O(n d) on q and k"

    def __init__(self, dims: ModelDims, options: XposOptions) -> None:
        require_causal(self.name, dims)
        super().__init__(dims, options)

    def decay(self, seq_len: int, device) -> Tensor:
        """[n, d_rot/2] zeta_i^(m / B), m centred."""
        positions = torch.arange(seq_len, device=device, dtype=torch.float64) - seq_len // 2
        return self.decay_of(positions)

    def decay_of(self, centred: Tensor) -> Tensor:
        """[..., d_rot/2] zeta_i^(m / B) of centred positions m [...]."""
        o = self.options
        index = torch.arange(0, self.rotary_dim, 2, dtype=torch.float64, device=centred.device)
        zeta = (index / self.rotary_dim + o.gamma) / (1 + o.gamma)
        return zeta ** (centred.double()[..., None] / o.scale_base)

    def layer_terms_at(self, positions, dtype):
        self.require_positions(positions)
        # Centred per row as the default path centres on the length: (max + 1) // 2 is
        # n // 2 for positions 0..n-1. The centre cancels in every logit.
        centre = torch.div(positions.amax(-1, keepdim=True) + 1, 2, rounding_mode="floor")
        transform = partial(
            self._rotate_scaled,
            *self.cos_sin_at(positions),
            self.decay_of(positions - centre)[:, None],
            self.options.layout,
        )
        return [LayerTerms(scale=self.content_scale(), transform_qk=transform)] * (
            self.dims.num_layers
        )

    @staticmethod
    def _rotate_scaled(cos, sin, decay, layout, q, k):
        cos, sin, decay = cos.to(q.dtype), sin.to(q.dtype), decay.to(q.dtype)
        return (
            rotate(q, cos * decay, sin * decay, layout),
            rotate(k, cos / decay, sin / decay, layout),
        )

    def layer_terms(self, seq_len, device, dtype):
        transform = partial(
            self._rotate_scaled,
            *self.cos_sin(seq_len, device),
            self.decay(seq_len, device),
            self.options.layout,
        )
        terms = LayerTerms(scale=self.content_scale(), transform_qk=transform)
        return [terms] * self.dims.num_layers
