"""On a GPU: FlexAttention (and the automatic kernel choice) agree with the eager reference in
values and gradients, bias tables included. Skipped without CUDA; run on a lent GPU with
`pytest tests/test_gpu_kernels.py`."""

from __future__ import annotations

import pytest
import torch
from conftest import no_dynamo_cache_warnings, settings_of, tiny_encoder
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
    """Above `flex_threshold_bytes` a learned bias that triton does not take goes to flex
    (TUPE-R, with triton's threshold out of reach)."""
    from posattn.kernels import flex

    choose(flex_threshold_bytes=0, triton_threshold_bytes=2**62)
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


@pytest.mark.parametrize("encoding", ["t5", "tupe-r"])
def test_auto_kernel_takes_triton_for_a_large_table_bias_on_gpu(monkeypatch, choose, encoding):
    """Above `triton_threshold_bytes` a learned Toeplitz bias (T5; TUPE-R, its absolute part
    folded into q and k, its [CLS] untie read in the kernel) goes to the Triton kernel,
    decided in `attend` before the bias is built, with eager's values and gradients."""
    pytest.importorskip("triton")
    from posattn import attention

    choose(triton_threshold_bytes=0)
    calls = []
    original = attention.triton_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(attention, "triton_attention", counted)
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder(encoding, d_model=48).cuda()
    finally:
        torch.set_default_dtype(torch.float64)
    ids, mask, segment_ids = (t.cuda() for t in padded_batch())
    out_ref, grads_ref = outputs_and_grads(model, "eager", ids, mask, segment_ids)
    out, grads = outputs_and_grads(model, "auto", ids, mask, segment_ids)
    assert len(calls) == 2  # one per layer
    torch.testing.assert_close(out, out_ref, atol=2e-4, rtol=2e-4)
    for ours, reference in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(ours, reference, atol=2e-4, rtol=2e-3)


def test_auto_kernel_takes_triton_for_a_large_table_in_inference_on_gpu(monkeypatch, choose):
    """Without gradients, above `triton_inference_threshold_bytes`, T5's table goes to the
    Triton kernel too, with eager's values."""
    pytest.importorskip("triton")
    from posattn import attention

    choose(triton_inference_threshold_bytes=0)
    calls = []
    original = attention.triton_attention
    monkeypatch.setattr(
        attention, "triton_attention", lambda *a, **kw: calls.append(1) or original(*a, **kw)
    )
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder("t5", d_model=48).cuda().eval()
    finally:
        torch.set_default_dtype(torch.float64)
    ids, mask, segment_ids = (t.cuda() for t in padded_batch())
    with torch.no_grad():
        model.set_kernel("eager")
        reference = model(ids, mask, segment_ids)
        model.set_kernel("auto")
        out = model(ids, mask, segment_ids)
    assert len(calls) == 2  # one per layer
    torch.testing.assert_close(out[mask], reference[mask], atol=2e-4, rtol=2e-4)


TABLE_ENCODINGS = [
    ("t5", {}, False),
    ("t5", {"bidirectional": False}, True),
    ("diet-rel", {}, False),
    ("kerple", {}, True),
    ("alibi", {}, False),
    ("tupe-a", {}, False),
    ("tupe-r", {"cls_index": 3}, False),
]


@pytest.mark.parametrize(("encoding", "options", "causal"), TABLE_ENCODINGS)
def test_triton_kernel_agrees_with_eager_in_float32(encoding, options, causal):
    """kernel="triton" compiled for the GPU: values and every parameter gradient (the bias
    tables included) equal eager's in float32 (IEEE dot products, no TF32), on a first call
    (each kernel's first launch through Triton's path) and a second (every launch direct:
    `triton_launch.DirectLaunch`)."""
    pytest.importorskip("triton")
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder(encoding, causal=causal, encoding_options=options, d_model=48).cuda()
    finally:
        torch.set_default_dtype(torch.float64)
    ids, mask, _ = (t.cuda() for t in padded_batch())
    out_ref, grads_ref = outputs_and_grads(model, "eager", ids, mask, None)
    for _ in range(2):
        out, grads = outputs_and_grads(model, "triton", ids, mask, None)
        torch.testing.assert_close(out, out_ref, atol=2e-4, rtol=2e-4)
        for ours, reference in zip(grads, grads_ref, strict=True):
            torch.testing.assert_close(ours, reference, atol=2e-4, rtol=2e-3)


@pytest.mark.parametrize("encoding", ["alibi", "t5"])
def test_the_fused_backward_agrees_with_eager_in_float32(monkeypatch, launched_kernels, encoding):
    """POSATTN_TRITON_BACKWARD=fused compiled for the GPU (dQ added with atomics inside the
    dK/dV kernel): ALiBi (whose table takes no gradient) and T5 with its table frozen give
    eager's values and gradients in float32, padded and causal; the dQ kernel is not
    launched."""
    pytest.importorskip("triton")
    monkeypatch.setenv("POSATTN_TRITON_BACKWARD", "fused")
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder(encoding, causal=encoding == "t5", d_model=48).cuda()
    finally:
        torch.set_default_dtype(torch.float64)
    model.encoding.requires_grad_(False)
    ids, mask, _ = (t.cuda() for t in padded_batch())
    out_ref, grads_ref = outputs_and_grads(model, "eager", ids, mask, None)
    out, grads = outputs_and_grads(model, "triton", ids, mask, None)
    torch.testing.assert_close(out, out_ref, atol=2e-4, rtol=2e-4)
    for ours, reference in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(ours, reference, atol=2e-4, rtol=2e-3)
    assert "_backward_dk_dv" in launched_kernels
    assert "_backward_dq_dtable" not in launched_kernels


@pytest.mark.parametrize(
    ("table_grad", "skew", "order"),
    [
        ("shared", "circular", "key-major"),
        ("per-batch", "circular", "key-major"),
        ("shared", "wide", "key-major"),
        ("shared", "circular", "query-major"),
    ],
)
@pytest.mark.parametrize("causal", [False, True])
def test_triton_kernel_in_bfloat16_is_as_close_to_float32_as_sdpa(
    monkeypatch, causal, table_grad, skew, order
):
    """At a realistic size (n=333, d_h=64, bf16) the Triton kernel's output and gradients
    stay as close to the float32 eager reference as bf16 SDPA with the materialised bias,
    the table's gradient added to one table or to one per batch element
    (POSATTN_TRITON_TABLE_GRAD), each tile skewed zero-padded or rotated in place
    (POSATTN_TRITON_SKEW), dK/dV's scores key-major or query-major
    (POSATTN_TRITON_DK_DV_ORDER)."""
    pytest.importorskip("triton")
    monkeypatch.setenv("POSATTN_TRITON_TABLE_GRAD", table_grad)
    monkeypatch.setenv("POSATTN_TRITON_SKEW", skew)
    monkeypatch.setenv("POSATTN_TRITON_DK_DV_ORDER", order)
    from posattn.kernels import build_attention_mask, eager_attention, get_kernel
    from posattn.kernels.table_bias import TableBias

    torch.manual_seed(0)
    batch, heads, n, d = 2, 4, 333, 64
    q, k, v = (torch.randn(batch, heads, n, d, device="cuda", dtype=torch.float32) for _ in "qkv")
    table = torch.randn(heads, 2 * n - 1, device="cuda", dtype=torch.float32)
    padding = torch.ones(batch, n, dtype=torch.bool, device="cuda")
    padding[1, 300:] = False
    mask = build_attention_mask(padding, n, causal, torch.device("cuda"))
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    grad = torch.randn(batch, heads, n, d, device="cuda")

    def run(kernel, dtype, **tables):
        inputs = [t.to(dtype).detach().requires_grad_() for t in (q, k, v)]
        table_in = table.detach().requires_grad_()
        if tables:
            out = get_kernel(kernel)(*inputs, mask=mask, bias=None, scale=d**-0.5,
                                     tables=TableBias(offset=table_in))  # fmt: skip
        else:
            full_bias = table_in[:, (j - i + n - 1).cuda()]
            fn = eager_attention if kernel == "eager" else get_kernel(kernel)
            out = fn(*inputs, mask=mask, bias=full_bias, scale=d**-0.5)
        grads = torch.autograd.grad(out, [*inputs, table_in], grad.to(dtype))
        return [out.float()] + [g.float() for g in grads]

    reference = run("eager", torch.float32)
    for ours, sdpa, ref in zip(
        run("triton", torch.bfloat16, tables=True), run("sdpa", torch.bfloat16), reference,
        strict=True,
    ):  # fmt: skip
        scale = ref.abs().max()
        assert (ours - ref).abs().max() <= 2 * (sdpa - ref).abs().max() + 1e-2 * scale
    for ours, ref in zip(run("triton", torch.float32, tables=True), reference, strict=True):
        torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(
    ("encoding", "options", "backend"),
    [("t5", {}, "aot_eager"), ("t5", {}, "inductor"), ("tupe-r", {"cls_index": 3}, "aot_eager")],
)
def test_torch_compile_of_a_model_on_the_triton_kernel_agrees_with_eager(
    encoding, options, backend
):
    """torch.compile(fullgraph=True) of a float32 model with kernel="triton": the kernels run
    inside the compiled graph (AOT autograd's functional form of a Triton kernel call, and
    inductor's code around it) and give eager's values and every parameter gradient.
    tests/test_triton_stand_in.py checks the graph on a machine without a GPU."""
    pytest.importorskip("triton")
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder(encoding, encoding_options=options, d_model=48).cuda()
    finally:
        torch.set_default_dtype(torch.float64)
    compiled_on_kernel_agrees_with_eager(model, "triton", backend)


def test_torch_compile_of_a_model_on_flex_agrees_with_eager():
    """A T5 model with kernel="flex" compiled whole (fullgraph, inductor): flex is compiled
    with the model, not through its own cached compile, and gives eager's values and
    gradients."""
    torch.set_default_dtype(torch.float32)
    try:
        model = tiny_encoder("t5", d_model=48).cuda()
    finally:
        torch.set_default_dtype(torch.float64)
    compiled_on_kernel_agrees_with_eager(model, "flex", "inductor")


def compiled_on_kernel_agrees_with_eager(model, kernel: str, backend: str) -> None:
    """torch.compile(fullgraph=True) of `model` on `kernel`: eager's values and every
    parameter gradient, and no warning from dynamo of a cache it traced through."""
    ids, mask, _ = (t.cuda() for t in padded_batch())
    out_ref, grads_ref = outputs_and_grads(model, "eager", ids, mask, None)
    model.set_kernel(kernel)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    torch._dynamo.reset()
    try:
        with no_dynamo_cache_warnings():
            model.zero_grad()
            out = compiled(ids, mask)
            out[mask].square().sum().backward()
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(out.detach(), out_ref, atol=2e-4, rtol=2e-4)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) == len(grads_ref)
    for ours, reference in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(ours, reference, atol=2e-4, rtol=2e-3)


def test_deterministic_triton_gradients_repeat_bit_for_bit():
    """Under torch.use_deterministic_algorithms(True) kernel="triton" adds the tables'
    gradients per query block and sums those in a fixed order: two backward passes give the
    same bits (a table, TUPE's untie and DIET's segment pairs over 16 query blocks, 8 batch
    rows), and the values of the default shared table's."""
    pytest.importorskip("triton")
    from posattn.kernels import get_kernel
    from posattn.kernels.table_bias import SegmentPairs, TableBias
    from posattn.toeplitz import ClsUntie

    torch.manual_seed(0)
    batch, heads, n, d = 8, 4, 1000, 64
    q, k, v = (
        torch.randn(batch, heads, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in "qkv"
    )
    table = torch.randn(heads, 2 * n - 1, device="cuda", requires_grad=True)
    column = torch.randn(heads, device="cuda", requires_grad=True)
    pairs = torch.randn(heads, 4, device="cuda", requires_grad=True)
    ids = (torch.arange(n, device="cuda") >= n // 2).long().expand(batch, n)
    grad = torch.randn(batch, heads, n, d, device="cuda", dtype=torch.bfloat16)
    leaves = [q, k, v, table, column, pairs]
    tables = TableBias(offset=table, segments=SegmentPairs(pairs, ids, 2),
                       cls_untie=ClsUntie(0, 0, column))  # fmt: skip

    def gradients():
        out = get_kernel("triton")(q, k, v, mask=None, bias=None, scale=d**-0.5, tables=tables)
        return torch.autograd.grad(out, leaves, grad)

    shared = gradients()
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        first, second = gradients(), gradients()
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    for one, two, reference in zip(first, second, shared, strict=True):
        assert torch.equal(one, two)
        torch.testing.assert_close(one.float(), reference.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_triton_dropout_equals_eager_with_the_kernels_mask(causal):
    """Attention dropout inside kernel="triton" on the GPU (bf16, n=333, d_h=64, with a
    table): output and gradients as close to eager's in float32 - with the scores the kernel
    drops (`kept_scores`) zeroed and the rest scaled - as without dropout (the kernel's own
    error at bf16); about 1 - p of the scores kept."""
    pytest.importorskip("triton")
    from posattn.kernels import build_attention_mask, get_kernel
    from posattn.kernels.table_bias import TableBias
    from posattn.kernels.triton_bias import kept_scores

    torch.manual_seed(0)
    batch, heads, n, d, p = 2, 4, 333, 64, 0.2
    q, k, v = (torch.randn(batch, heads, n, d, device="cuda") for _ in "qkv")
    table = torch.randn(heads, 2 * n - 1, device="cuda")
    padding = torch.ones(batch, n, dtype=torch.bool, device="cuda")
    padding[1, 300:] = False
    mask = build_attention_mask(padding, n, causal, torch.device("cuda"))
    grad = torch.randn(batch, heads, n, d, device="cuda")
    torch.manual_seed(5)
    inputs = [t.bfloat16().requires_grad_() for t in (q, k, v)]
    table_in = table.clone().requires_grad_()
    out = get_kernel("triton")(*inputs, mask=mask, bias=None, scale=d**-0.5, dropout_p=p,
                               tables=TableBias(offset=table_in))  # fmt: skip
    ours = [out.float(), *(g.float() for g in torch.autograd.grad(out, [*inputs, table_in],
                                                                  grad.bfloat16()))]  # fmt: skip
    torch.manual_seed(5)
    kept = kept_scores(torch.randint(0, 2**31 - 1, (1,), device="cuda"), batch, heads, n, n, p)
    assert abs(kept[mask.expand_as(kept)].float().mean().item() - (1 - p)) < 0.01
    leaves = [t.clone().requires_grad_() for t in (q, k, v, table)]
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    bias = leaves[3][:, (j - i + n - 1).cuda()]
    logits = leaves[0] @ leaves[1].transpose(-1, -2) * d**-0.5 + bias
    probs = logits.masked_fill(~mask, float("-inf")).softmax(-1)
    reference = (probs * kept / (1 - p)) @ leaves[2]
    expected = [reference, *torch.autograd.grad(reference, leaves, grad)]
    for mine, ref in zip(ours, expected, strict=True):
        assert (mine - ref).abs().max() <= 2e-2 * ref.abs().max(), (mine - ref).abs().max()
