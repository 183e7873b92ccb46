"""A parameter kept in range by projection in the forward (KERPLE's official code), written so
that no forward's saved tensors go stale when a second forward projects again first."""

from __future__ import annotations

import torch
from torch import Tensor


@torch.library.custom_op("posattn::project_in_range", mutates_args=())
def project_in_range(stored: Tensor, low: float, high: float) -> Tensor:
    """`stored` clamped to [low, high], written back past autograd's version counter
    (`.data`), and the clamped values as a new tensor for the forward to read. An op of its
    own so that a compiled graph takes it as it is: traced as an in-place write, the write
    moved the parameter's version counter after the graph had saved the parameter itself for
    its backward, and a second forward before the backward failed that backward."""
    valid = stored.clamp(min=low, max=high)  # a new tensor: the op's output aliases no input
    stored.data.copy_(valid)
    return valid


@project_in_range.register_fake
def _(stored: Tensor, low: float, high: float) -> Tensor:
    return torch.empty_like(stored)


def _pass_through(ctx, grad: Tensor):
    # The gradient of the projected value, whose stored copy equals it once written: the
    # official code's gradient (it clamps `.data`, then differentiates the parameter).
    return grad, None, None


project_in_range.register_autograd(_pass_through)
