"""The eager reference and SDPA agree for every encoding; padding never leaks or makes NaN."""

from __future__ import annotations

import pytest
import torch
from conftest import PROJECTED, settings_of, tiny_encoder

from posattn import execution
from posattn.encodings import ENCODINGS, ModelDims, build_encoding
from posattn.errors import PosAttnConfigError
from posattn.kernels import (
    KERNELS,
    build_attention_mask,
    eager_attention,
    get_kernel,
    register_kernel,
)


def with_values(name: str) -> dict:
    return {"values": True} if name == "shaw" else {}


def padded_batch():
    torch.manual_seed(3)
    ids = torch.randint(1, 40, (4, 12))
    mask = torch.ones(4, 12, dtype=torch.bool)
    mask[1, 7:] = False  # right padding
    mask[2, :4] = False  # left padding
    mask[3, :] = False  # a fully padded sequence
    segments = (torch.arange(12) >= 6).long().expand(4, 12)
    return ids, mask, segments


# FlexAttention has no backward on CPU (tests/test_gpu_kernels.py checks its gradients on GPU).
CPU_TRAINING_KERNELS = ("eager", "sdpa", "sdpa-lowmem", "auto")

# Kernels that serve every layer on CPU: "triton" reads table-described biases only and runs
# on CPU under Triton's interpreter alone (tests/test_triton_kernel.py).
CPU_KERNELS = tuple(name for name in KERNELS if name != "triton")

# Every setting each encoding supports; the others' errors are tested in test_errors.
SETTINGS = [(name, *setting) for name in ENCODINGS for setting in settings_of(name)]


@pytest.mark.parametrize(("encoding", "causal", "segments"), SETTINGS)
def test_kernels_agree(encoding, segments, causal, choose):
    # low-rank biases folded into q/k (the GPU training path) whatever the device
    choose(fold=True)
    ids, mask, segment_ids = padded_batch()
    options = {"bidirectional": False} if causal and encoding in ("t5", "bert-r", "tupe-r") else {}
    model = tiny_encoder(encoding, segments=segments, causal=causal, encoding_options=options)
    outputs = {}
    with torch.no_grad():
        for kernel in CPU_KERNELS:
            model.set_kernel(kernel)
            outputs[kernel] = (model(ids, mask, segment_ids), model(ids, segment_ids=segment_ids))
    for kernel in set(CPU_KERNELS) - {"eager"}:  # flex: its reference forward on CPU
        for ours, reference in zip(outputs[kernel], outputs["eager"], strict=True):
            torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(outputs["sdpa"][0]).all()


@pytest.mark.parametrize(
    ("encoding", "options"),
    [
        ("shaw", {"values": True}),
        ("tupe-r", {}),
        ("diet-abs", {"sharing": "none", "rank": 5}),
        ("tupe-a", {"cls_index": 3}),
        ("tupe-a", {"untie_cls": False}),
    ],
)
@pytest.mark.parametrize("fold", [False, True])
def test_kernels_agree_in_gradients(encoding, options, fold, choose):
    choose(fold=fold)
    ids, mask, segment_ids = padded_batch()
    segments = "input" if encoding in PROJECTED else "attention"
    model = tiny_encoder(encoding, segments=segments, encoding_options=options)
    grads = {}
    for kernel in CPU_TRAINING_KERNELS:
        model.set_kernel(kernel)
        model.zero_grad()
        model(ids, mask, segment_ids)[mask].square().sum().backward()
        grads[kernel] = [p.grad.clone() for p in model.parameters()]
    for kernel in CPU_TRAINING_KERNELS:
        for a, b in zip(grads[kernel], grads["eager"], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_padded_tokens_do_not_change_real_outputs(encoding, kernel):
    """Padded keys get zero weight: whatever the padded tokens are, real rows are unchanged."""
    ids, mask, segment_ids = padded_batch()
    model = tiny_encoder(encoding, kernel=kernel, encoding_options=with_values(encoding))
    other = torch.where(mask, ids, torch.randint(1, 40, ids.shape))
    with torch.no_grad():
        out, out_other = model(ids, mask, segment_ids), model(other, mask, segment_ids)
    assert torch.isfinite(out).all() and torch.isfinite(out_other).all()
    torch.testing.assert_close(out[mask], out_other[mask])


def test_padded_keys_get_exactly_zero_weight():
    torch.manual_seed(0)
    q, k = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    padding = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    mask = build_attention_mask(padding, 5, causal=False, device=torch.device("cpu"))
    identity = torch.eye(5).expand(2, 2, 5, 5)
    # with v = identity the output rows are the attention probabilities themselves
    probs = eager_attention(q, k, identity, mask=mask, bias=None, scale=0.5)
    assert (probs[0, :, :, 3:] == 0).all()
    torch.testing.assert_close(probs[0].sum(-1), torch.ones(2, 5))
    # a sequence without any real token attends as if unmasked instead of producing NaN
    unmasked = torch.softmax(q[1] @ k[1].transpose(-1, -2) * 0.5, -1)
    torch.testing.assert_close(probs[1], unmasked)
    sdpa = get_kernel("sdpa")(q, k, identity, mask=mask, bias=None, scale=0.5)
    torch.testing.assert_close(sdpa, probs)


def test_key_spans_give_each_rows_first_real_key_its_visible_run_and_whether_it_has_holes():
    """kernel="triton"'s spans per batch element, written out: first real key, first and one
    past the last visible key, 1 where every key between them is visible (padding on either
    side: those blocks take no mask) and 0 where one is hidden."""
    from posattn.kernels.masks import key_spans

    keys = torch.tensor(
        [[1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1], [0, 1, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0],
         [1, 1, 1, 1, 1, 1]], dtype=torch.int8,
    )  # fmt: skip
    spans = key_spans(keys, None, True, 5, 6, torch.device("cpu"))
    expected = [[0, 0, 3, 1], [2, 2, 6, 1], [1, 1, 5, 0], [6, 0, 0, 1], [0, 0, 6, 1]]
    assert spans.dtype == torch.int32 and spans.tolist() == expected
    given = key_spans(keys, torch.tensor([0, 1, 2, 3, 4]), True, 5, 6, torch.device("cpu"))
    assert given[:, 0].tolist() == [0, 1, 2, 3, 4] and torch.equal(given[:, 1:], spans[:, 1:])
    causal = key_spans(None, torch.tensor([2, 0]), True, 2, 6, torch.device("cpu"))
    assert causal.tolist() == [[2, 0, 6, 1], [0, 0, 6, 1]]
    assert key_spans(None, None, False, 2, 6, torch.device("cpu")) is None


def test_causal_mask_gives_future_keys_zero_weight():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    mask = build_attention_mask(None, 6, causal=True, device=torch.device("cpu"))
    bias = torch.randn(1, 2, 6, 6)
    for kernel in ("eager", "sdpa"):
        probs = get_kernel(kernel)(
            q, k, torch.eye(6).expand(1, 2, 6, 6), mask=mask, bias=bias, scale=1.0
        )
        assert (probs.triu(1) == 0).all()


@pytest.mark.parametrize("bias_batch", [1, 3])
@pytest.mark.parametrize("padded", [False, True])
def test_fused_bias_attention_gradcheck(bias_batch, padded):
    """The fused forward + chunked recomputing backward of a learned bias (posattn's CPU
    path for T5, TUPE, DIET) has exact gradients for q, k, v and the bias."""
    from posattn.kernels.fused_bias import fused_bias_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, requires_grad=True) for _ in range(3))
    bias = torch.randn(bias_batch, 2, 5, 5, requires_grad=True)
    mask = None
    if padded:
        mask = build_attention_mask(
            torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]]), 5, False, "cpu"
        )
    assert torch.autograd.gradcheck(
        lambda q, k, v, b: fused_bias_attention(q, k, v, b, mask, 0.6), (q, k, v, bias)
    )


@pytest.mark.parametrize(
    ("encoding", "path"), [("fire", "FusedBiasAttention"), ("tupe-r", "FusedPartsAttention")]
)
def test_lowmem_kernel_takes_the_fused_path_for_learned_biases(encoding, path, monkeypatch):
    """A learned bias tensor (FIRE's) through the bias path, one described by its parts
    (TUPE-R's factors, table and untie) through the parts path."""
    from posattn.kernels import fused_bias, fused_parts

    function = getattr(fused_bias if path == "FusedBiasAttention" else fused_parts, path)
    calls = []
    original = function.apply
    monkeypatch.setattr(function, "apply", lambda *a: calls.append(1) or original(*a))
    tiny_encoder(encoding, kernel="sdpa")(torch.randint(0, 40, (2, 6))).sum().backward()
    assert not calls  # plain sdpa leaves a learned bias to SDPA's math path
    model = tiny_encoder(encoding, kernel="sdpa-lowmem")
    model(torch.randint(0, 40, (2, 6))).sum().backward()
    assert len(calls) == 2  # one per layer
    with torch.no_grad():
        model(torch.randint(0, 40, (2, 6)))
    assert len(calls) == 2  # inference passes a detached bias straight to SDPA


def test_flex_kernel_refuses_to_train_on_cpu():
    model = tiny_encoder("t5", kernel="flex")
    with pytest.raises(PosAttnConfigError, match=r"kernel.*'flex'.*GPU"):
        model(torch.randint(0, 40, (2, 6))).sum().backward()


def test_flex_score_mod_broadcasts_bias_and_mask():
    """Every broadcast shape the attention core produces reads the right bias element."""
    from posattn.kernels.flex import flex_attention_kernel

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    mask = build_attention_mask(torch.tensor([[1, 1, 1, 0, 0], [1] * 5]), 5, True, "cpu")
    for shape in [(1, 3, 5, 5), (2, 1, 5, 5), (3, 5, 5), (2, 3, 5, 5), (1, 3, 1, 5)]:
        bias = torch.randn(shape)
        ours = flex_attention_kernel(q, k, v, mask=mask, bias=bias, scale=0.4)
        reference = eager_attention(q, k, v, mask=mask, bias=bias, scale=0.4)
        torch.testing.assert_close(ours, reference, atol=1e-6, rtol=1e-6)


@pytest.fixture
def recording_kernel():
    """A user kernel, "recording", that keeps what reaches it and runs eager; unregistered
    after the test."""
    seen = []

    def recording(q, k, v, *, mask, bias, scale, dropout_p=0.0):
        seen.append((q, bias))
        return eager_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)

    register_kernel("recording", recording)
    yield seen
    del KERNELS["recording"]


@pytest.mark.parametrize("encoding", ["diet-abs", "tupe-a"])
def test_fused_kernels_fold_low_rank_biases_into_the_dot_product(encoding, recording_kernel):
    """Folded (fold=True), DIET-ABS and TUPE-A reach the kernel as wider q and k without a
    bias tensor; with fold=False as q and k of the head size plus a [H, n, n] bias."""
    model = tiny_encoder(encoding, kernel="recording")
    ids = torch.randint(0, 40, (2, 6))
    with execution.choose(fold=True):
        folded = model(ids)
    assert len(recording_kernel) == 2 and all(bias is None for _, bias in recording_kernel)
    assert all(q.shape[-1] > 8 for q, _ in recording_kernel)  # d_h = 8 plus the features
    recording_kernel.clear()
    with execution.choose(fold=False):
        added = model(ids)
    assert len(recording_kernel) == 2
    assert all(q.shape[-1] == 8 and bias.shape[-2:] == (6, 6) for q, bias in recording_kernel)
    torch.testing.assert_close(folded, added)


def random_terms_of_9(name: str, options: dict):
    """Layer terms for n=9 of a float64 encoding (2 heads of 8) with random parameters."""
    dims = ModelDims(d_model=16, num_heads=2, num_layers=1, max_len=12)
    encoding = build_encoding(name, dims, options).double()
    torch.manual_seed(1)
    for parameter in encoding.parameters():
        torch.nn.init.normal_(parameter)
    return encoding.layer_terms(9, torch.device("cpu"), torch.float64)[0]


@pytest.mark.parametrize("options", [{}, {"cls_index": 3}, {"untie_cls": False}])
def test_tupe_a_is_its_factors_plus_the_cls_untie_on_zeros(options):
    """TUPE-A's bias is its low-rank factors (the absolute part, off the [CLS] position) plus
    the [CLS] untie on zeros, up to a constant per query row; folded for the kernels that add
    a bias tensor, the untie is one more factor column (d_h + 1 wide, no bias left)."""
    terms = random_terms_of_9("tupe-a", options)
    f_q, f_k = terms.bias_factors
    untied = options.get("untie_cls") is not False
    assert f_q.shape[-1] == 8 and (terms.cls_untie is not None) == untied
    zeros = torch.zeros(2, 9, 9, dtype=torch.float64)
    rest = f_q @ f_k.mT + (terms.cls_untie.applied(zeros) if untied else zeros) - terms.bias
    torch.testing.assert_close(rest - rest[..., :1], torch.zeros_like(rest), atol=1e-12, rtol=0)
    folded_q, folded_k = terms.folded_factors()
    assert folded_q.shape[-1] == 8 + untied and terms.unfolded_bias() is None
    rest = folded_q @ folded_k.mT - terms.bias
    torch.testing.assert_close(rest - rest[..., :1], torch.zeros_like(rest), atol=1e-12, rtol=0)


@pytest.mark.parametrize("options", [{}, {"cls_index": 3}, {"untie_cls": False}])
def test_tupe_r_is_t5s_table_plus_folded_factors(options, recording_kernel):
    """TUPE-R's bias is its low-rank factors (the absolute part, off the [CLS] position) plus
    the Toeplitz matrix of T5's table with the [CLS] untie written in (`cls_untie`), up to a
    constant per query row; folded, the kernel gets q and k wider by d_h (a multiple of 8
    whatever the untie) and that matrix as its bias."""
    terms = random_terms_of_9("tupe-r", options)
    f_q, f_k = terms.bias_factors
    table = terms.offset_bias
    by_index = torch.stack([torch.stack([table[:, j - i + 8] for j in range(9)], -1)
                            for i in range(9)], -2)  # fmt: skip
    untied = options.get("untie_cls") is not False
    assert (terms.cls_untie is not None) == untied
    matrix = terms.cls_untie.applied(by_index) if untied else by_index
    rest = f_q @ f_k.transpose(-1, -2) + matrix - terms.bias
    torch.testing.assert_close(rest - rest[..., :1], torch.zeros_like(rest), atol=1e-12, rtol=0)
    assert f_q.shape[-1] == 8
    if untied:  # the reset's row and column are the untie's, the factors' [CLS] rows zero
        cls = options.get("cls_index", 0)
        assert (terms.cls_untie.row, terms.cls_untie.column) == (cls, cls)
        assert (f_q[..., cls, :] == 0).all() and (f_k[..., cls, :] == 0).all()
    torch.testing.assert_close(terms.unfolded_bias(), matrix.unsqueeze(0))

    model = tiny_encoder("tupe-r", kernel="recording", encoding_options=options)
    ids = torch.randint(0, 40, (2, 6))
    with execution.choose(fold=True):
        folded = model(ids)
    assert {q.shape[-1] for q, _ in recording_kernel} == {16}
    terms = model.encoding.layer_terms(6, torch.device("cpu"), torch.float32)[0]
    for _, bias in recording_kernel:
        torch.testing.assert_close(bias, terms.unfolded_bias().to(bias.dtype))
    recording_kernel.clear()
    with execution.choose(fold=False):
        added = model(ids)
    assert all(q.shape[-1] == 8 for q, _ in recording_kernel)
    torch.testing.assert_close(folded, added)


def test_a_registered_user_kernel_serves_a_model_like_eager():
    """A kernel of one's own, registered by name, runs inside a model (PosAttnConfig accepts
    the name) and gives the eager reference's outputs."""
    calls = []

    def mine(q, k, v, *, mask, bias, scale, dropout_p=0.0):
        calls.append(1)
        logits = q @ k.transpose(-1, -2) * scale + (0 if bias is None else bias)
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))
        return torch.softmax(logits, -1) @ v

    register_kernel("mine", mine)
    try:
        assert "mine" in KERNELS and get_kernel("mine") is mine
        ids, mask, segment_ids = padded_batch()
        model = tiny_encoder("tupe-r", kernel="mine", segments="attention")
        with torch.no_grad():
            ours = model(ids, mask, segment_ids)
            model.set_kernel("eager")
            reference = model(ids, mask, segment_ids)
        assert len(calls) == 2  # one per layer
        torch.testing.assert_close(ours, reference, atol=1e-12, rtol=1e-12)
        with pytest.raises(PosAttnConfigError, match=r"name='mine'.*overwrite=True"):
            register_kernel("mine", eager_attention)
        register_kernel("mine", eager_attention, overwrite=True)
        assert get_kernel("mine") is eager_attention
    finally:
        del KERNELS["mine"]
    with pytest.raises(PosAttnConfigError, match=r"kernel='mine'"):
        tiny_encoder("tupe-r", kernel="mine")
    with pytest.raises(PosAttnConfigError, match=r"name='eager'"):
        register_kernel("eager", eager_attention)


def test_shaw_values_run_eager_whatever_the_kernel(recording_kernel):
    """Shaw's value term needs the probabilities: its layers never reach the module's kernel,
    and every kernel name gives the eager result."""
    ids, mask, _ = padded_batch()
    model = tiny_encoder("shaw", encoding_options={"values": True})
    outputs = {}
    with torch.no_grad():
        for kernel in ("eager", "sdpa", "sdpa-lowmem", "flex", "auto", "recording"):
            model.set_kernel(kernel)
            outputs[kernel] = model(ids, mask)
    assert not recording_kernel
    for out in outputs.values():
        torch.testing.assert_close(out, outputs["eager"], atol=0, rtol=0)


@pytest.mark.parametrize(
    ("encoding", "options", "bounds", "linear"),
    [
        ("t5", {"num_buckets": 8, "max_distance": 9}, (-9, 9), False),
        ("t5", {"num_buckets": 8, "max_distance": 9, "bidirectional": False}, (-9, 0), False),
        ("bert-r", {"num_buckets": 16, "max_distance": 12}, (-12, 12), False),
        ("tupe-r", {"num_buckets": 8, "max_distance": 9}, (-9, 9), False),
        ("diet-rel", {"max_distance": 3, "sharing": "none"}, (-3, 3), False),
        ("diet-rel", {}, (-39, 39), False),
        ("alibi", {}, (0, 0), True),
        ("kerple", {}, None, False),
    ],
)
def test_offset_tails_are_where_the_table_is_known_by_construction(
    encoding, options, bounds, linear
):
    """`offset_tails` (what kernel="triton" handles without reading the table): past a bound,
    every entry of `offset_bias` equals the bound's and takes its gradient from the same
    parameter entries (flat), or lies on the line of its slope through the bound's (ALiBi,
    no gradient), for whole biases and decoding rows; none where the bias keeps varying."""
    dims = ModelDims(d_model=12, num_heads=3, num_layers=2, max_len=40)
    module = build_encoding(encoding, dims, options)
    parameters = [p for p in module.parameters() if p.requires_grad]
    n = 40
    for terms in (module.layer_terms(n, "cpu", torch.float32)[1],
                  module.layer_terms(n, "cpu", torch.float32)[0].query_rows(25)):  # fmt: skip
        tails = terms.offset_tails
        assert (tails is None) == (bounds is None)
        if tails is None:
            continue
        assert (tails.low, tails.high) == bounds and (tails.slopes is not None) == linear
        table = terms.offset_bias
        offsets = torch.arange(table.shape[-1]) - (n - 1)  # index t is offset t - (n_k - 1)
        for side, bound, beyond in ((0, tails.low, offsets < tails.low),
                                    (1, tails.high, offsets > tails.high)):  # fmt: skip
            if not beyond.any():
                continue
            at_bound = table[:, bound + n - 1, None]
            if linear:
                line = at_bound + tails.slopes[side][:, None] * (offsets[beyond] - bound)
                torch.testing.assert_close(table[:, beyond], line.to(table.dtype))
                assert not table.requires_grad
                continue
            torch.testing.assert_close(
                table[:, beyond], at_bound.expand(-1, int(beyond.sum())), rtol=0, atol=0
            )
            weights = torch.randn(int(beyond.sum()))
            tail = torch.autograd.grad(
                (table[:, beyond] * weights).sum(), parameters, retain_graph=True, allow_unused=True
            )
            edge = torch.autograd.grad(
                at_bound.sum() * weights.sum(), parameters, retain_graph=True, allow_unused=True
            )
            for a, b in zip(tail, edge, strict=True):
                assert (a is None) == (b is None)
                if a is not None:
                    torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    ("encoding", "options"),
    [
        ("t5", {}),
        ("t5", {"bidirectional": False}),
        ("diet-rel", {"max_distance": 3}),
        ("diet-rel", {"sharing": "none"}),
        ("kerple", {"kernel": "power"}),
        ("alibi", {}),
    ],
)
def test_offset_bias_describes_the_same_bias_by_its_diagonals(encoding, options):
    # A kernel that reads the table must see exactly the bias the eager path adds.
    dims = ModelDims(d_model=12, num_heads=3, num_layers=2, max_len=16)
    module = build_encoding(encoding, dims, options)
    module.eval()
    seq_len = 7
    for terms in module.layer_terms(seq_len, "cpu", torch.float32):
        table = terms.offset_bias
        assert table.shape == (3, 2 * seq_len - 1)
        i, j = torch.meshgrid(torch.arange(seq_len), torch.arange(seq_len), indexing="ij")
        expected = table[:, j - i + seq_len - 1]
        torch.testing.assert_close(terms.bias[0], expected, rtol=0, atol=0)
        # Decoding rows [2, n) over all n keys: the same rule with n_q = n - 2 rows.
        rows = terms.query_rows(2)
        assert rows.offset_bias.shape == (3, (seq_len - 2) + seq_len - 1)
        i, j = torch.meshgrid(torch.arange(seq_len - 2), torch.arange(seq_len), indexing="ij")
        expected = rows.offset_bias[:, j - i + seq_len - 2 - 1]
        torch.testing.assert_close(rows.bias[0], expected, rtol=0, atol=0)


def test_kept_in_makes_a_value_once_per_terms_and_anew_when_anything_it_reads_changes():
    """`kept_in` (what kernel="triton" derives from a forward's shared terms) hands the value
    made first to every later call with the same key and sources, and makes it anew for a
    changed key, another source object, a source written in place, another grad or inference
    mode, a source that is an inference tensor, and without a dict."""
    from dataclasses import replace

    from posattn.encodings.base import LayerTerms
    from posattn.kernels.triton_inputs import kept_in

    made = []

    def make():
        made.append(object())
        return made[-1]

    def makes(*arguments) -> int:
        """How many values one call of kept_in made (0: it handed out a kept one)."""
        before = len(made)
        kept_in(*arguments, make)
        return len(made) - before

    table, other = torch.randn(3, 5), torch.randn(3, 5)
    kept = {}
    first = kept_in(kept, (table,), ("copies", 4), make)
    assert kept_in(kept, (table,), ("copies", 4), make) is first
    assert makes(kept, (table, None), ("copies", 4)) == 1  # other sources
    assert makes(kept, (table,), ("copies", 8)) == 1  # another key
    assert makes(kept, (other,), ("copies", 8)) == 1  # another source object
    assert makes(kept, (table,), ("copies", 4)) == 1
    assert makes(kept, (table,), ("copies", 4)) == 0
    table.mul_(2)  # written in place: its version moves
    assert makes(kept, (table,), ("copies", 4)) == 1
    with torch.no_grad():
        assert makes(kept, (table,), ("copies", 4)) == 1
        assert makes(kept, (table,), ("copies", 4)) == 0
    with torch.inference_mode():
        assert makes(kept, (table,), ("copies", 4)) == 1
        assert makes(kept, (table,), ("copies", 4)) == 0
        frozen = torch.randn(3, 5)  # an inference tensor: no version counter, never kept
        assert makes(kept, (frozen,), ("x",)) == makes(kept, (frozen,), ("x",)) == 1
    assert makes(None, (table,), ("copies", 4)) == makes(None, (table,), ("copies", 4)) == 1
    # The dict lives with the terms: each LayerTerms has its own, which replace() does not copy.
    terms = LayerTerms(scale=1.0, offset_bias=table)
    terms.kernel_inputs["copies"] = "kept"
    assert replace(terms, scale=2.0).kernel_inputs == {}
    assert LayerTerms(scale=1.0).kernel_inputs == {}
