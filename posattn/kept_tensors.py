"""Tensors kept across calls (caches of buckets, of a kernel's small inputs) are made outside
inference mode: one first made under `torch.inference_mode()` (an evaluation) would be an
inference tensor, which a later training forward cannot save for backward."""

from __future__ import annotations

import functools

import torch


def outside_inference_mode(make):
    """`make`, run with inference mode off, so that what it returns may be kept and then
    read by a forward that autograd records."""

    @functools.wraps(make)
    def made(*arguments):
        with torch.inference_mode(False):
            return make(*arguments)

    return made
