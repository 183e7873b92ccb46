"""Context-extension rules for rotary encodings: which inverse frequencies, and which factor on
cos/sin, a rotary encoding uses when it is stretched past the length it was trained at.

Each rule maps (rotated dims d, base theta, the current length n) to
  inv_freq [d/2]: the angle of pair i at position m is m * inv_freq[i] (plain RoPE:
                  theta^(-2i/d), RoFormer Eq. 15);
  attention_factor: a multiplier of cos and sin, so the logits scale by its square.

  linear    Position interpolation (Chen et al. 2023, Eq. 2): m -> m / s, i.e. inv_freq / s.
  dynamic   NTK-aware scaling applied at the current length (the "dynamic NTK" rule): past the
            original length L, theta -> theta * (s n / L - (s - 1))^(d / (d - 2)).
  yarn      YaRN (Peng et al. 2023, Eq. 18-23): pairs whose wavelength is long against L are
            interpolated (/ s), short ones kept, a linear ramp in between (beta_fast, beta_slow
            rotations); cos and sin scaled by sqrt(t) = 0.1 ln(s) + 1 (Eq. 22).
  llama3    Llama 3.1's rule: wavelengths above L / low_freq_factor divided by s, below
            L / high_freq_factor kept, smoothly interpolated between.
  longrope  LongRoPE (Ding et al. 2024): one rescale factor per pair, `short_factor` up to L
            and `long_factor` past it; cos and sin scaled by sqrt(1 + ln(s) / ln(L)).

Keys follow transformers' `rope_parameters` (rope_type, factor, original_max_position_embeddings,
...), so a configuration moves between the two libraries unchanged; the values are checked
against transformers' `ROPE_INIT_FUNCTIONS` in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..errors import invalid, require, require_choice

ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope")

# The keys each rule reads (besides rope_type); anything else is refused by name.
KEYS = {
    "linear": {"factor"},
    "dynamic": {"factor", "original_max_position_embeddings"},
    "yarn": {
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "truncate",
    },
    "llama3": {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"},
    "longrope": {
        "factor",
        "original_max_position_embeddings",
        "attention_factor",
        "short_factor",
        "long_factor",
    },
}
REQUIRED = {
    "linear": {"factor"},
    "dynamic": {"factor"},
    "yarn": {"factor"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor"},
    "longrope": {"short_factor", "long_factor"},
}


def check_scaling(scaling: Mapping[str, Any], rotary_pairs: int | None = None) -> None:
    """Refuse an unknown rule, an unknown or missing key, and out-of-range values."""
    require(isinstance(scaling, Mapping), "scaling", scaling, "a mapping with a 'rope_type' key")
    rope_type = scaling.get("rope_type")
    require_choice("scaling.rope_type", rope_type, ROPE_TYPES)
    unknown = set(scaling) - KEYS[rope_type] - {"rope_type"}
    if unknown:
        raise invalid(
            "scaling",
            sorted(unknown),
            f"keys of rope_type={rope_type!r}: {sorted(KEYS[rope_type])}",
        )
    missing = REQUIRED[rope_type] - set(scaling)
    if missing:
        raise invalid("scaling", dict(scaling), f"rope_type={rope_type!r} needs {sorted(missing)}")
    factor = scaling.get("factor")
    if factor is not None:
        require(factor >= 1.0, "scaling.factor", factor, "a scaling factor >= 1")
    original = scaling.get("original_max_position_embeddings")
    if original is not None:
        require(
            isinstance(original, int) and original > 0,
            "scaling.original_max_position_embeddings",
            original,
            "a positive int",
        )
    if rope_type == "llama3":
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        require(0 < low < high, "scaling.low_freq_factor", low, f"in (0, high_freq_factor={high})")
    if rope_type == "longrope" and rotary_pairs is not None:
        for key in ("short_factor", "long_factor"):
            require(
                len(scaling[key]) == rotary_pairs,
                f"scaling.{key}",
                len(scaling[key]),
                f"one factor per rotated pair: {rotary_pairs} values",
            )


def plain_inverse_frequency(dim: int, base: float) -> Tensor:
    """theta^(-2i/d), i = 0 .. d/2 - 1, in float64."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN Eq. 22's sqrt(t) = 0.1 ln(s) + 1 (times mscale, DeepSeek's variant)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_ramp_bounds(
    dim: int, base: float, original: int, beta_fast: float, beta_slow: float, truncate: bool
) -> tuple[float, float]:
    """The pair indices where a wavelength fits beta_fast and beta_slow times into L (YaRN Eq. 17):
    pair i turns r times over L when i = d ln(L / (2 pi r)) / (2 ln theta)."""

    def pair_index(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index(beta_fast), pair_index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def scaled_inverse_frequency(
    scaling: Mapping[str, Any] | None, dim: int, base: float, max_len: int, seq_len: int
) -> tuple[Tensor, float]:
    """(inv_freq [d/2] float64, attention_factor) of a rule at the current length `seq_len`;
    `max_len` stands for original_max_position_embeddings where a rule needs it and the
    configuration leaves it out (transformers reads max_position_embeddings there)."""
    plain = plain_inverse_frequency(dim, base)
    if scaling is None:
        return plain, 1.0
    rope_type = scaling["rope_type"]
    original = scaling.get("original_max_position_embeddings") or max_len
    factor = scaling.get("factor")
    if rope_type == "linear":
        return plain / factor, 1.0
    if rope_type == "dynamic":
        length = max(seq_len, original)
        grown = base * (factor * length / original - (factor - 1)) ** (dim / (dim - 2))
        return plain_inverse_frequency(dim, grown), 1.0
    if rope_type == "yarn":
        attention_factor = scaling.get("attention_factor")
        if attention_factor is None:
            mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
            attention_factor = (
                yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all)
                if mscale and mscale_all
                else yarn_mscale(factor)
            )
        low, high = yarn_ramp_bounds(
            dim,
            base,
            original,
            scaling.get("beta_fast") or 32,
            scaling.get("beta_slow") or 1,
            scaling.get("truncate", True),
        )
        high = high + 0.001 if low == high else high
        # 1 where a pair keeps its frequency (extrapolation), 0 where it is interpolated.
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        keep = 1 - ramp
        return plain / factor * (1 - keep) + plain * keep, float(attention_factor)
    if rope_type == "llama3":
        low_wavelength = original / scaling["low_freq_factor"]
        high_wavelength = original / scaling["high_freq_factor"]
        wavelength = 2 * math.pi / plain
        smooth = (original / wavelength - scaling["low_freq_factor"]) / (
            scaling["high_freq_factor"] - scaling["low_freq_factor"]
        )
        blended = (1 - smooth) * plain / factor + smooth * plain
        scaled = torch.where(wavelength > low_wavelength, plain / factor, plain)
        middle = (wavelength >= high_wavelength) & (wavelength <= low_wavelength)
        return torch.where(middle, blended, scaled), 1.0
    # longrope
    factor = factor if factor is not None else max_len / original
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = (
            1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
        )
    per_pair = scaling["long_factor"] if seq_len > original else scaling["short_factor"]
    return plain / torch.tensor(per_pair, dtype=torch.float64), float(attention_factor)
