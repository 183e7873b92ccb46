"""The CPU path that reads a Toeplitz bias from its [H, 2n-1] table (`LayerTerms.offset_bias`)
and returns the table's gradient: exact against eager, padded and causal, and reached from the
models for every table-based encoding."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_encoder

from posattn import execution
from posattn.attention import MultiHeadAttention
from posattn.encodings import ModelDims, build_encoding
from posattn.encodings.relative import lookup_by_head
from posattn.errors import PosAttnConfigError
from posattn.kernels import (
    KERNELS,
    build_attention_mask,
    eager_attention,
    fused_bias,
    fused_parts,
    register_kernel,
)
from posattn.kernels.fused_bias import (
    DiagonalSums,
    fused_bias_attention,
    fused_table_attention,
)
from posattn.toeplitz import ClsUntie, toeplitz

# (encoding, options) whose bias is described by its diagonals; alibi's table is fixed.
TABLE_ENCODINGS = [
    ("t5", {}),
    ("t5", {"bidirectional": False}),
    ("bert-r", {}),
    ("diet-rel", {"max_distance": 3}),
    ("kerple", {"kernel": "power"}),
    ("kerple", {"kernel": "log"}),
    ("alibi", {}),
]
TRAINING_KERNELS = ("sdpa", "sdpa-lowmem", "auto")


def masks(batch: int, n: int) -> dict:
    padding = torch.ones(batch, n, dtype=torch.bool)
    padding[1, n - 2 :] = False  # right padding
    padding[-1, :2] = False  # left padding
    return {
        "none": None,
        "padded": build_attention_mask(padding, n, False, "cpu"),
        "causal": build_attention_mask(None, n, True, "cpu"),
        "padded causal": build_attention_mask(padding, n, True, "cpu"),
    }


@pytest.fixture(params=[2**20, 1], ids=["one head group", "a group per head"])
def chunk_elements(request, monkeypatch):
    """The backward in one head group, and in several (a block smaller than [H, n, n])."""
    monkeypatch.setattr(fused_bias, "CHUNK_ELEMENTS_PER_THREAD", request.param)
    return request.param


@pytest.mark.parametrize("mask_name", ["none", "padded", "causal", "padded causal"])
def test_table_attention_gradcheck(mask_name, chunk_elements):
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, requires_grad=True) for _ in range(3))
    table = torch.randn(2, 9, requires_grad=True)
    mask = masks(3, 5)[mask_name]
    assert torch.autograd.gradcheck(
        lambda q, k, v, t: fused_table_attention(q, k, v, t, mask, 0.6), (q, k, v, table)
    )


def test_table_attention_gradcheck_over_uneven_head_groups(monkeypatch):
    """Heads 0-1 in one group, head 2 alone: the diagonal sums' buffer reused at another size."""
    per_thread = -(-2 * 5 * 5 // torch.get_num_threads())  # two heads of 5 x 5 in all threads
    monkeypatch.setattr(fused_bias, "CHUNK_ELEMENTS_PER_THREAD", per_thread)
    assert [g.stop - g.start for g in fused_bias.head_groups(3, 5, 5)] == [2, 1]
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 3, 5, 4, requires_grad=True) for _ in range(3))
    table = torch.randn(3, 9, requires_grad=True)
    mask = masks(2, 5)["padded"]
    assert torch.autograd.gradcheck(
        lambda q, k, v, t: fused_table_attention(q, k, v, t, mask, 0.6), (q, k, v, table)
    )


@pytest.mark.parametrize("mask_name", ["none", "padded", "padded causal"])
@pytest.mark.parametrize(
    "bias_shape", [(1, 2, 5, 5), (3, 2, 5, 5), (3, 2, 1, 5), (1, 1, 5, 5), (3, 1, 1, 5)]
)
def test_bias_attention_gradcheck_over_head_groups(mask_name, bias_shape, chunk_elements):
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, requires_grad=True) for _ in range(3))
    bias = torch.randn(bias_shape, requires_grad=True)
    mask = masks(3, 5)[mask_name]
    assert torch.autograd.gradcheck(
        lambda q, k, v, b: fused_bias_attention(q, k, v, b, mask, 0.6), (q, k, v, bias)
    )


@pytest.mark.parametrize("mask_name", ["none", "padded", "causal"])
def test_table_attention_equals_eager_with_the_toeplitz_bias(mask_name, chunk_elements):
    torch.manual_seed(1)
    q, k, v = (torch.randn(4, 3, 11, 8, requires_grad=True) for _ in range(3))
    table = torch.randn(3, 21, requires_grad=True)
    mask = masks(4, 11)[mask_name]
    grad_out = torch.randn(4, 3, 11, 8)
    results = []
    for attend in (
        lambda: fused_table_attention(q, k, v, table, mask, 0.3),
        lambda: eager_attention(q, k, v, mask=mask, bias=toeplitz(table), scale=0.3),
    ):
        out = attend()
        results.append((out, *torch.autograd.grad(out, (q, k, v, table), grad_out)))
    for ours, reference in zip(*results, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-10)


def test_a_built_bias_is_read_and_its_gradient_goes_to_the_table():
    """The forward reads the Toeplitz matrix it is given; the table alone gets the gradient
    (the bias is built from it: a gradient for both would count it twice)."""
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 3, 6, 4, requires_grad=True) for _ in range(3))
    table = torch.randn(3, 11, requires_grad=True)
    built = toeplitz(table).unsqueeze(0)
    grad_out = torch.randn(2, 3, 6, 4)
    results = []
    for bias in (built, None):
        out = fused_table_attention(q, k, v, table, None, 0.4, bias)
        results.append((out, *torch.autograd.grad(out, (q, k, v, table), grad_out)))
    for given, rebuilt in zip(*results, strict=True):
        torch.testing.assert_close(given, rebuilt, rtol=0, atol=0)
    shifted = fused_table_attention(q, k, v, table, None, 0.4, built + 1.0)  # + 1 per row
    torch.testing.assert_close(shifted, results[0][0], rtol=1e-12, atol=1e-12)
    doubled = fused_table_attention(q, k, v, table, None, 0.4, 2 * built)
    assert not torch.allclose(doubled, results[0][0])
    with pytest.raises(PosAttnConfigError, match="bias"):
        fused_table_attention(q, k, v, table, None, 0.4, built[:, :2])


def test_diagonal_sums_are_the_toeplitz_backward():
    torch.manual_seed(0)
    table = torch.randn(3, 13, requires_grad=True)
    blocks = torch.randn(2, 3, 7, 7)
    (expected,) = torch.autograd.grad(toeplitz(table), table, blocks.sum(0))
    sums = DiagonalSums(3, 7, torch.float64)
    for block in blocks:
        sums.add(block)
    torch.testing.assert_close(sums.total(), expected, rtol=0, atol=1e-12)


def test_a_table_of_the_wrong_shape_is_refused():
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(PosAttnConfigError, match=r"offset_bias.*\(2, 9\)"):
        fused_table_attention(q, q, q, torch.randn(2, 7), None, 1.0)


@pytest.fixture
def table_calls(monkeypatch):
    calls = []
    original = fused_bias.FusedTableAttention.apply
    monkeypatch.setattr(
        fused_bias.FusedTableAttention, "apply", lambda *a: calls.append(1) or original(*a)
    )
    return calls


@pytest.mark.parametrize(("encoding", "options"), TABLE_ENCODINGS)
@pytest.mark.parametrize("causal", [False, True])
def test_models_train_through_the_table_with_eager_gradients(
    encoding, options, causal, table_calls
):
    torch.manual_seed(3)
    ids = torch.randint(1, 40, (3, 9))
    padding = torch.ones(3, 9, dtype=torch.bool)
    padding[1, 6:] = False
    padding[2, :2] = False
    if causal and encoding in ("t5", "bert-r"):
        options = {**options, "bidirectional": False}
    model = tiny_encoder(encoding, causal=causal, encoding_options=options)
    learned = any(p.requires_grad for p in model.encoding.parameters())
    results = {}
    for kernel in ("eager", *TRAINING_KERNELS):
        model.set_kernel(kernel)
        model.zero_grad()
        out = model(ids, padding)
        out[padding].square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results[kernel] = (out.detach(), grads)
    # sdpa-lowmem reads the table on CPU when it is learned (2 layers)
    assert len(table_calls) == (2 if learned else 0)
    out_eager, grads_eager = results["eager"]
    for kernel in TRAINING_KERNELS:
        out, grads = results[kernel]
        torch.testing.assert_close(out, out_eager, rtol=1e-10, atol=1e-10)
        assert len(grads) == len(grads_eager)
        for ours, reference in zip(grads, grads_eager, strict=True):
            torch.testing.assert_close(ours, reference, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    ("encoding", "fused_path"),
    [("t5", "table"), ("tupe-r", "parts"), ("tupe-a", "parts"), ("diet-abs", "parts")],
)
def test_auto_recomputes_above_its_threshold_with_eager_gradients(
    encoding, fused_path, monkeypatch
):
    """kernel="auto" on CPU: SDPA's math path for a learned bias below
    `recompute_threshold_bytes`, the recomputing backward above it (the table path for a
    Toeplitz bias, the parts path for TUPE's and DIET-ABS's), with eager's values and
    gradients."""
    calls = {"table": [], "bias": [], "parts": []}
    for path, function in (("table", fused_bias.FusedTableAttention),
                           ("bias", fused_bias.FusedBiasAttention),
                           ("parts", fused_parts.FusedPartsAttention)):  # fmt: skip
        original = function.apply
        monkeypatch.setattr(function, "apply", lambda *a, c=calls[path], o=original: c.append(1)
                            or o(*a))  # fmt: skip
    torch.manual_seed(5)
    ids = torch.randint(1, 40, (3, 9))
    padding = torch.ones(3, 9, dtype=torch.bool)
    padding[1, 6:] = False
    model = tiny_encoder(encoding)
    results = []
    for kernel, threshold in (("eager", None), ("auto", 2**30), ("auto", 0)):
        model.set_kernel(kernel)
        model.zero_grad()
        with execution.choose(recompute_threshold_bytes=threshold or 0):
            out = model(ids, padding)
            out[padding].square().sum().backward()
        results.append((out.detach(), *[p.grad.clone() for p in model.parameters()
                                        if p.grad is not None]))  # fmt: skip
        if threshold == 2**30:
            assert calls == {"table": [], "bias": [], "parts": []}
    assert len(calls[fused_path]) == 2 and sum(map(len, calls.values())) == 2  # two layers
    for ours in results[1:]:
        assert len(ours) == len(results[0])
        for value, reference in zip(ours, results[0], strict=True):
            torch.testing.assert_close(value, reference, rtol=1e-9, atol=1e-9)


def test_decoding_rows_read_the_sliced_bias_and_keep_eager_gradients(table_calls):
    """query_rows keeps the table's first n_q + n_k - 1 values: the rows [start, n) read it
    with the gradients of eager."""
    dims = ModelDims(d_model=12, num_heads=3, num_layers=1, max_len=16, causal=True)
    encoding = build_encoding("t5", dims, {"bidirectional": False})
    attention = MultiHeadAttention(12, 3, kernel="sdpa-lowmem")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 4) for _ in range(3))
    q = q[:, :, 6:]
    mask = build_attention_mask(None, 9, True, "cpu", query_start=6)
    results = []
    for kernel in ("sdpa-lowmem", "eager"):
        attention.set_kernel(kernel)
        encoding.zero_grad()
        terms = encoding.window_terms(6, 9, torch.device("cpu"), torch.float64)[0]
        out = attention.attend(q, k, v, terms, mask)
        out.square().sum().backward()
        results.append((out, *[p.grad.clone() for p in encoding.parameters()]))
    assert len(table_calls) == 1
    for ours, reference in zip(*results, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-10)


def test_a_user_kernel_declaring_offset_bias_receives_the_table():
    seen = []

    def reads_table(q, k, v, *, mask, bias, scale, dropout_p=0.0, offset_bias=None):
        seen.append(offset_bias)
        return eager_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)

    def plain(q, k, v, *, mask, bias, scale, dropout_p=0.0):
        return eager_attention(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p)

    register_kernel("reads-table", reads_table)
    register_kernel("plain", plain)
    try:
        ids = torch.randint(1, 40, (2, 6))
        for encoding, has_table in (("t5", True), ("tupe-r", False)):
            seen.clear()
            model = tiny_encoder(encoding, kernel="reads-table")
            with torch.no_grad():
                model(ids)
            terms = model.encoding.layer_terms(6, torch.device("cpu"), torch.float64)[0]
            assert len(seen) == 2
            if has_table:
                torch.testing.assert_close(seen[0], terms.offset_bias)
            else:
                assert seen == [None, None]
        tiny_encoder("t5", kernel="plain")(ids)  # the plain contract: no table keyword
    finally:
        del KERNELS["reads-table"], KERNELS["plain"]


@pytest.mark.parametrize("mask_name", ["none", "padded", "causal", "padded causal"])
def test_flex_reads_the_table_and_skips_masked_blocks(mask_name):
    """FlexAttention's score_mod reads table[h, j - i + n - 1] and the mask is a BlockMask:
    the same values as eager with the Toeplitz bias (its reference forward on CPU)."""
    from posattn.kernels.flex import block_mask_of, flex_attention_kernel

    torch.manual_seed(2)
    n = 300  # more than two of flex's 128-wide blocks
    q, k, v = (torch.randn(2, 3, n, 4) for _ in range(3))
    table = torch.randn(3, 2 * n - 1)
    mask = masks(2, n)[mask_name]
    ours = flex_attention_kernel(
        q, k, v, mask=mask, bias=torch.zeros(1), scale=0.5, offset_bias=table
    )
    reference = eager_attention(q, k, v, mask=mask, bias=toeplitz(table), scale=0.5)
    torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-10)
    if mask_name == "causal":  # of 3 x 3 blocks, the 3 above the diagonal are never visited
        block_mask = block_mask_of(mask, n, n)
        assert (block_mask.kv_num_blocks + block_mask.full_kv_num_blocks).sum() == 6


@pytest.mark.parametrize("mask_name", ["padded", "causal"])
def test_flex_reads_tupe_rs_cls_untie_from_the_table(mask_name):
    """With TUPE's [CLS] untie, flex's score_mod reads the table off the untied row and
    column and the untie's values on them: eager's values with the bias written out; and a
    TUPE-R model with its absolute part folded hands flex the table and the untie."""
    from posattn.kernels.flex import flex_attention_kernel

    torch.manual_seed(3)
    n = 150
    q, k, v = (torch.randn(2, 3, n, 4) for _ in range(3))
    table, untie = torch.randn(3, 2 * n - 1), ClsUntie(5, 5, torch.randn(3))
    mask = masks(2, n)[mask_name]
    ours = flex_attention_kernel(
        q, k, v, mask=mask, bias=torch.zeros(1), scale=0.5, offset_bias=table, cls_untie=untie
    )
    bias = untie.applied(toeplitz(table))
    reference = eager_attention(q, k, v, mask=mask, bias=bias, scale=0.5)
    torch.testing.assert_close(ours, reference, rtol=1e-10, atol=1e-10)

    seen = []
    flex = KERNELS["flex"]

    def recording_flex(q, k, v, *, mask, bias, scale, dropout_p=0.0, offset_bias=None,
                       cls_untie=None):  # fmt: skip
        seen.append((offset_bias, cls_untie))
        return flex(q, k, v, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p,
                    offset_bias=offset_bias, cls_untie=cls_untie)  # fmt: skip

    register_kernel("recording-flex", recording_flex)
    try:
        model = tiny_encoder("tupe-r", encoding_options={"cls_index": 2}).eval()
        ids = torch.randint(1, 40, (2, 7))
        with torch.no_grad():
            expected = model(ids)
            model.set_kernel("recording-flex")
            with execution.choose(fold=True):
                folded = model(ids)
        torch.testing.assert_close(folded, expected)
        terms = model.encoding.layer_terms(7, torch.device("cpu"), torch.float64)[0]
        assert len(seen) == 2
        for offset_bias, cls_untie in seen:
            torch.testing.assert_close(offset_bias, terms.offset_bias)
            assert (cls_untie.row, cls_untie.column) == (2, 2)
    finally:
        del KERNELS["recording-flex"]


@pytest.mark.parametrize("name", ["t5", "bert-r", "diet-rel", "kerple", "alibi"])
def test_table_biases_are_built_with_rows_of_keys_contiguous(name):
    """Tables read as weight[buckets].T have their heads innermost; a bias built in that layout
    made every kernel step over H values per key (measured several times slower on a CPU).
    The bias is still the Toeplitz matrix of its table, read entry by entry."""
    encoding = build_encoding(name, ModelDims(32, 4, 1, 9), {})
    terms = encoding.layer_terms(9, "cpu", torch.float64)[0]
    table = terms.offset_bias.detach()
    expected = [[[table[h, j - i + 8] for j in range(9)] for i in range(9)] for h in range(4)]
    assert terms.bias.is_contiguous()
    torch.testing.assert_close(terms.bias[0].detach(), torch.tensor(expected), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["t5", "bert-r", "diet-rel", "tupe-r", "kerple", "alibi", "fire"])
def test_biases_at_given_positions_keep_each_heads_keys_contiguous(name):
    """`layer_terms_at` (position_ids, cached decoding) gathers a table at [B, n, n] indices:
    read as table[index] the heads would be innermost (FIRE's MLP likewise puts them last).
    Each head's [n, n] block is contiguous, and the bias is the one of `layer_terms` where the
    positions are 0..n-1, entry by entry."""
    options = {"untie_cls": False} if name == "tupe-r" else {}
    encoding = build_encoding(name, ModelDims(32, 4, 1, 9, causal=name == "fire"), options)
    positions = torch.arange(9).expand(2, 9)
    at = encoding.layer_terms_at(positions, torch.float64)[0].bias.detach()
    assert at.stride()[-1] == 1 and at.stride()[-2] == 9
    plain = encoding.layer_terms(9, "cpu", torch.float64)[0].bias.detach()
    assert plain.is_contiguous()
    # TUPE-R's position product and FIRE's MLP are summed in another order there.
    exact = name not in ("tupe-r", "fire")
    tolerance = {} if not exact else {"rtol": 0, "atol": 0}
    torch.testing.assert_close(at, plain.expand_as(at), **tolerance)


def test_lookup_by_head_reads_the_table_at_every_index():
    table = torch.randn(5, 3)
    index = torch.randint(0, 5, (2, 4, 4))
    looked_up = lookup_by_head(table, index)
    expected = [[[[table[index[b, i, j], h] for j in range(4)] for i in range(4)] for h in range(3)]
                for b in range(2)]  # fmt: skip
    assert looked_up.shape == (2, 3, 4, 4)
    torch.testing.assert_close(looked_up, torch.tensor(expected), rtol=0, atol=0)
    assert looked_up[1, 2].is_contiguous()


@pytest.mark.parametrize("path", ["table", "bias"])
def test_the_recomputing_backward_gives_dk_and_dv_key_major(path):
    """dK^T = q^T dS and dV^T = dO^T P are written into [B, H, d, n] buffers (their products
    read dS and P untransposed: 0.75 of the time at n=1024 on the development CPU), handed to
    autograd as their transposes; values as eager's."""
    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 3, 6, 4, requires_grad=True) for _ in range(3))
    table = torch.randn(3, 11, requires_grad=True)
    if path == "table":
        out = fused_table_attention(q, k, v, table, None, 0.5)
    else:
        out = fused_bias_attention(q, k, v, toeplitz(table).unsqueeze(0), None, 0.5)
    grad = torch.randn_like(out)
    grad_q, grad_k, grad_v = torch.autograd.grad(out, (q, k, v), grad)
    assert grad_q.is_contiguous()
    assert grad_k.mT.is_contiguous() and grad_v.mT.is_contiguous()
    reference = eager_attention(q, k, v, mask=None, bias=toeplitz(table).unsqueeze(0), scale=0.5)
    for ours, theirs in zip(
        (grad_q, grad_k, grad_v), torch.autograd.grad(reference, (q, k, v), grad), strict=True
    ):
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
