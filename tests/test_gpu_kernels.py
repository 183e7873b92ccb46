"""On a GPU: FlexAttention (and the automatic kernel choice) agree with the eager reference in
values and gradients, bias tables included. Skipped without CUDA; run on a lent GPU with
`pytest tests/test_gpu_kernels.py`."""

from __future__ import annotations

import pytest
import torch
from conftest import settings_of, tiny_encoder
from test_kernels import padded_batch

from posattn.encodings import ENCODINGS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GPU_KERNELS = ("sdpa", "flex", "auto")


def outputs_and_grads(model, kernel: str, ids, mask, segment_ids):
    model.set_kernel(kernel)
    model.zero_grad()
    out = model(ids, mask, segment_ids)
    out[mask].square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize(
    ("encoding", "causal", "segments"),
    [(name, *settings_of(name)[0]) for name in ENCODINGS] + [("diet-rel", False, "attention")],
)
def test_gpu_kernels_agree_with_eager_in_values_and_gradients(encoding, causal, segments):
    torch.set_default_dtype(torch.float32)
    try:
        # head dim 16: the smallest FlexAttention's GPU kernels take
        model = tiny_encoder(encoding, causal=causal, segments=segments, d_model=48).cuda()
    finally:
        torch.set_default_dtype(torch.float64)
    ids, mask, segment_ids = (t.cuda() for t in padded_batch())
    out_ref, grads_ref = outputs_and_grads(model, "eager", ids, mask, segment_ids)
    for kernel in GPU_KERNELS:
        out, grads = outputs_and_grads(model, kernel, ids, mask, segment_ids)
        torch.testing.assert_close(out, out_ref, atol=2e-4, rtol=2e-4)
        assert len(grads) == len(grads_ref)
        for ours, reference in zip(grads, grads_ref, strict=True):
            torch.testing.assert_close(ours, reference, atol=2e-4, rtol=2e-3)


def test_auto_kernel_takes_flex_for_a_large_learned_bias_on_gpu(monkeypatch, choose):
    from posattn.kernels import flex

    choose(flex_threshold_bytes=0)
    calls = []
    original = flex.run_flex
    monkeypatch.setattr(flex, "run_flex", lambda *a: calls.append(1) or original(*a))
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder("tupe-r", kernel="auto", d_model=48).cuda()
    finally:
        torch.set_default_dtype(torch.float64)
    model(torch.randint(0, 40, (2, 6), device="cuda")).sum().backward()
    assert len(calls) == 2  # one per layer
