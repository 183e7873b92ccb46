"""The [B, n] padding masks a model takes: nonzero (or True) marks a real token, 0 padding."""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import invalid


def check_padding_mask(name: str, mask: Tensor | None, shape: tuple[int, int], what: str) -> None:
    """mask: None, or [B, n] = `shape` (`what` says what B and n count). A float mask must hold
    1 and 0 only: an additive mask (0 where visible, -inf or a large negative number where
    hidden), which attention functions elsewhere take, would be read inverted here - its 0s
    as padding, its negatives as real tokens - and silently attend to the padding alone.
    Only a float mask is read on the host (bool and integer masks cannot be additive)."""
    if mask is None:
        return
    if tuple(mask.shape) != shape:
        raise invalid(f"{name}.shape", tuple(mask.shape), f"must be {shape} ({what})")
    if not mask.is_floating_point() or not mask.numel():
        return
    binary = ((mask == 0) | (mask == 1)).all()
    allowed = (
        "1 for a real token and 0 for padding (or a bool mask, True = real token); an "
        "additive mask (0 = attend, -inf = hidden) would be read inverted: pass (mask == 0)"
    )
    if torch.compiler.is_compiling():
        # Reading the values out would break the graph: the check runs inside it.
        torch._assert_async(binary, f"{name} must hold {allowed}")
    elif not bool(binary):
        low, high = float(mask.min()) + 0.0, float(mask.max()) + 0.0  # + 0.0: no '-0'
        raise invalid(name, f"a {mask.dtype} mask with values in [{low:g}, {high:g}]", allowed)
