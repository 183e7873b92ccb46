"""Mixed precision (`trainer.bf16`): every encoding trains under bf16 autocast, its outputs and
gradients within bf16 rounding of the float32 ones. Autocast hands the encodings bf16
projections beside float32 tables (TUPE-R's in-place product once refused to mix them)."""

from __future__ import annotations

import pytest
import torch
from conftest import settings_of, tiny_encoder

from posattn.encodings import ENCODINGS


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return ((ours.float() - reference).norm() / reference.norm()).item()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_bf16_autocast_matches_float32_in_outputs_and_gradients(encoding):
    causal, segments = settings_of(encoding)[0]
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder(encoding, causal=causal, segments=segments)
    finally:
        torch.set_default_dtype(torch.float64)
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(0))
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        model.zero_grad()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            out = model(ids)
        out.float().square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((out.detach().float(), grads))
    (reference, reference_grads), (ours, grads) = results
    assert relative_error(ours, reference) < 3e-2
    assert len(grads) == len(reference_grads)
    # All gradients as one vector: a parameter whose float32 gradient is nearly zero would make
    # its own relative error meaningless.
    assert relative_error(torch.cat([g.flatten() for g in grads]),
                          torch.cat([g.flatten() for g in reference_grads])) < 0.1  # fmt: skip
