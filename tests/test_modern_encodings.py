"""RoPE, xPos, ALiBi, DeBERTa, KERPLE and FIRE against slow references from their papers'
equations, and invariants they promise."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import layer_logits, projections, tiny_encoder
from reference import content, layer_norm, logits_from
from test_compile import fresh_dynamo, masked_lm, mlm_batch  # noqa: F401 - an autouse fixture

D_H = 8
TOL = dict(atol=1e-6, rtol=1e-6)


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


def pairs(layout: str, rotary_dim: int) -> list[tuple[int, int]]:
    """The (a, b) dimension pairs rotated together, pair i turning at frequency i."""
    half = rotary_dim // 2
    if layout == "half":
        return [(i, i + half) for i in range(half)]
    return [(2 * i, 2 * i + 1) for i in range(half)]


def rotate_vector(x: torch.Tensor, m: float, layout: str, rotary_dim: int, base: float):
    """RoFormer Eq. 13-15: pair i of x turned by angle m * base^(-2i/d)."""
    out = x.clone()
    for i, (a, b) in enumerate(pairs(layout, rotary_dim)):
        angle = m * base ** (-2 * i / rotary_dim)
        out[a] = x[a] * math.cos(angle) - x[b] * math.sin(angle)
        out[b] = x[a] * math.sin(angle) + x[b] * math.cos(angle)
    return out


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize(("fraction", "scale", "base"), [(1.0, 1.0, 10000.0), (0.5, 2.0, 500.0)])
def test_rope_matches_roformer_eq(layout, fraction, scale, base, hidden):
    options = {"layout": layout, "fraction": fraction, "scale": scale, "base": base}
    model = tiny_encoder("rope", encoding_options=options)
    q, k = projections(model, hidden, 1)
    rotary_dim = int(D_H * fraction)
    rq = torch.empty_like(q)
    rk = torch.empty_like(k)
    for b in range(2):
        for h in range(3):
            for m in range(9):
                rq[b, h, m] = rotate_vector(q[b, h, m], m / scale, layout, rotary_dim, base)
                rk[b, h, m] = rotate_vector(k[b, h, m], m / scale, layout, rotary_dim, base)
    expected = logits_from(
        lambda b, h, i, j: content(rq, rk, b, h, i, j) / math.sqrt(D_H), (2, 3, 9, 9)
    )
    torch.testing.assert_close(layer_logits(model, hidden, 1), expected, **TOL)


def test_rope_layouts_differ():
    x = torch.randn(1, 9, 24)
    half = tiny_encoder("rope", encoding_options={"layout": "half"})
    interleaved = tiny_encoder("rope", encoding_options={"layout": "interleaved"})
    assert (layer_logits(half, x, 0) - layer_logits(interleaved, x, 0)).abs().max() > 1e-3


def test_xpos_matches_eq_decay_per_pair(hidden):
    """xPos: each rotated pair's contribution to the logit is scaled by zeta_i^((m - n) / B),
    zeta_i = (2i / d + 0.4) / 1.4 (rows m are queries, columns n keys)."""
    B = 4.0
    model = tiny_encoder("xpos", encoding_options={"layout": "interleaved", "scale_base": B})
    q, k = projections(model, hidden, 0)

    def logit(b, h, m, n):
        qm = rotate_vector(q[b, h, m], m, "interleaved", D_H, 10000.0)
        kn = rotate_vector(k[b, h, n], n, "interleaved", D_H, 10000.0)
        total = 0.0
        for i, (a, c) in enumerate(pairs("interleaved", D_H)):
            zeta = (2 * i / D_H + 0.4) / 1.4
            total += float(qm[a] * kn[a] + qm[c] * kn[c]) * zeta ** ((m - n) / B)
        return total / math.sqrt(D_H)

    expected = logits_from(logit, (2, 3, 9, 9))
    torch.testing.assert_close(layer_logits(model, hidden, 0), expected, **TOL)


def alibi_reference_slopes(heads: int) -> list[float]:
    """ALiBi Sec. 3, written out: 2^(-8/n) geometric for the largest power of two n <= H,
    then every other slope of the 2n-head sequence."""
    n = 2 ** int(math.log2(heads))
    slopes = [(2 ** (-8 / n)) ** (i + 1) for i in range(n)]
    slopes += [(2 ** (-8 / (2 * n))) ** (i + 1) for i in range(0, 2 * n, 2)][: heads - n]
    return slopes


@pytest.mark.parametrize("heads", [6, 8, 12, 16])
def test_alibi_slopes_equal_bloom_and_the_paper(heads):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    from posattn.encodings.alibi import alibi_slopes

    ours = alibi_slopes(heads)
    torch.testing.assert_close(ours, torch.tensor(alibi_reference_slopes(heads)))
    torch.testing.assert_close(ours.float(), _get_alibi_slopes(heads, torch.device("cpu")))


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_matches_eq(causal, hidden):
    from posattn.encodings.alibi import alibi_slopes

    model = tiny_encoder("alibi", causal=causal)
    q, k = projections(model, hidden, 1)
    slopes = alibi_slopes(3)

    def logit(b, h, i, j):
        distance = (i - j) if causal else abs(i - j)  # future keys are masked when causal
        return content(q, k, b, h, i, j) / math.sqrt(D_H) - float(slopes[h]) * distance

    logits = layer_logits(model, hidden, 1)
    expected = logits_from(logit, (2, 3, 9, 9))
    if causal:
        lower = torch.ones(9, 9, dtype=torch.bool).tril()
        torch.testing.assert_close(logits[..., lower], expected[..., lower], **TOL)
    else:
        torch.testing.assert_close(logits, expected, **TOL)


def test_alibi_causal_bias_equals_mpt_up_to_a_row_constant():
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    heads, n = 12, 10
    model = tiny_encoder("alibi", d_model=48, num_heads=heads, causal=True)
    ours = model.encoding.layer_terms(n, torch.device("cpu"), torch.float64)[0].bias[0]
    mpt = build_mpt_alibi_tensor(heads, n).double()  # [H, 1, n]: slope * (j - n + 1)
    difference = ours - mpt
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    for i in range(n):
        row = difference[:, i, lower[i]]
        torch.testing.assert_close(row, row[:, :1].expand_as(row), atol=1e-5, rtol=0)


def deberta_bucket(r: int, bucket_size: int, max_position: int) -> int:
    """DeBERTa-v2 log bucket of one r = i - j (in the default float dtype, as DeBERTa). With
    max_position - 1 <= mid there are no log buckets, and every longer distance lies at or past
    max_position: past the last bucket (2 mid - 1), which the row's clip holds at the edge."""
    mid = bucket_size // 2
    if abs(r) <= mid:
        return r
    if max_position - 1 <= mid:
        return int(math.copysign(2 * mid, r))
    ratio = torch.log(torch.tensor(abs(r) / mid)) / torch.log(
        torch.tensor((max_position - 1) / mid)
    )
    return int(math.copysign(math.ceil(float(ratio * (mid - 1))) + mid, r))


DEBERTA_OPTIONS = {"position_buckets": 6, "max_relative_positions": 16}


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("terms", [("c2p", "p2c"), ("c2p",), ("p2c",)])
@pytest.mark.parametrize("skew", [False, True])
@pytest.mark.parametrize(("span", "max_relative"), [(6, 16), (4, 16), (32, 16), (8, 5)])
def test_deberta_matches_disentangled_eq(share, terms, skew, span, max_relative, hidden, choose):
    """By index gather (CPU) and by offset windows (GPU training); with fewer keys (9) than
    embedding rows (2s = 12) and more (2s = 8), where p2c gathers along the keys' rows or
    along the embeddings'; with 2s = 64 the 9 keys read rows 24-40, the gathers rows 24-55
    (widened to 32) of P. With max_relative_positions 5 and 8 buckets (mid 4) there are no
    log buckets: a model of max_len 5 run at 9 tokens reads distances 5-8 at the edge rows
    (the gathers had read past the rows they took: "index out of bounds")."""
    choose(skew=skew)
    options = {
        "position_buckets": span,
        "max_relative_positions": max_relative,
        "share_att_key": share,
        "terms": terms,
    }
    model = tiny_encoder("deberta", encoding_options=options, max_len=max_relative)
    layer = 1
    encoding = model.encoding
    attention = model.layers[layer].attention
    q, k = projections(model, hidden, layer)
    rel = layer_norm(
        encoding.embeddings, encoding.norm.weight, encoding.norm.bias, encoding.norm.eps
    )

    def heads(linear):
        return (rel @ linear.weight.T + linear.bias).unflatten(-1, (3, D_H)).transpose(0, 1)

    pk = (
        heads(attention.k_proj if share else encoding.key_projections[layer])
        if "c2p" in terms
        else None
    )
    pq = (
        heads(attention.q_proj if share else encoding.query_projections[layer])
        if "p2c" in terms
        else None
    )

    def index(r):
        return max(0, min(2 * span - 1, deberta_bucket(r, span, max_relative) + span))

    def logit(b, h, i, j):
        total = content(q, k, b, h, i, j)
        if "c2p" in terms:
            total += float(q[b, h, i] @ pk[h, index(i - j)])
        if "p2c" in terms:
            total += float(k[b, h, j] @ pq[h, index(-(j - i))])
        return total / math.sqrt(D_H * (1 + len(terms)))

    expected = logits_from(logit, (2, 3, 9, 9))
    torch.testing.assert_close(layer_logits(model, hidden, layer), expected, **TOL)


def test_deberta_buckets_equal_transformers():
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    from posattn.encodings.deberta import deberta_log_bucket

    relative = torch.arange(-600, 601)
    for buckets, max_position in [(256, 512), (6, 16), (32, 100)]:
        theirs = make_log_bucket_position(relative, buckets, max_position).long()
        assert torch.equal(deberta_log_bucket(relative, buckets, max_position), theirs)


def test_deberta_buckets_without_a_log_region_stay_monotone():
    """max_relative_positions <= mid + 1 (a model of max_len 32 with DeBERTa's 256 buckets):
    transformers' formula divides by log(31 / 128) < 0 and sends |r| = 255 back to bucket 67;
    posattn puts every distance past mid past the last bucket, as log buckets would."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    from posattn.encodings.deberta import deberta_log_bucket

    relative = torch.arange(-300, 301)
    ours = deberta_log_bucket(relative, 256, 32)
    near = relative.abs() <= 128
    assert torch.equal(ours[near], relative[near])
    assert torch.equal(ours[~near], 256 * relative[~near].sign())
    assert torch.all(ours[1:] >= ours[:-1])
    assert int(make_log_bucket_position(torch.tensor([255]), 256, 32)) == 67  # why ours differs
    assert torch.equal(ours, torch.tensor([deberta_bucket(r, 256, 32) for r in range(-300, 301)]))


@pytest.mark.parametrize("share", [True, False])
def test_deberta_equals_transformers_disentangled_attention(share, hidden):
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    options = {**DEBERTA_OPTIONS, "share_att_key": share}
    model = tiny_encoder("deberta", encoding_options=options)
    layer, ours = 0, model.layers[0].attention
    config = DebertaV2Config(
        hidden_size=24,
        num_attention_heads=3,
        relative_attention=True,
        position_buckets=6,
        max_relative_positions=16,
        max_position_embeddings=16,
        share_att_key=share,
        pos_att_type=["p2c", "c2p"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    theirs = DisentangledSelfAttention(config).double().eval()
    theirs.query_proj.load_state_dict(ours.q_proj.state_dict())
    theirs.key_proj.load_state_dict(ours.k_proj.state_dict())
    if not share:
        theirs.pos_key_proj.load_state_dict(model.encoding.key_projections[layer].state_dict())
        theirs.pos_query_proj.load_state_dict(model.encoding.query_projections[layer].state_dict())
    encoding = model.encoding
    rel = encoding.norm(encoding.embeddings)
    query = theirs.transpose_for_scores(theirs.query_proj(hidden), 3)
    key = theirs.transpose_for_scores(theirs.key_proj(hidden), 3)
    scale = math.sqrt(D_H * 3)
    expected = query @ key.transpose(-1, -2) / scale
    expected = expected + theirs.disentangled_attention_bias(query, key, None, rel, 3)
    torch.testing.assert_close(layer_logits(model, hidden, layer), expected.view(2, 3, 9, 9), **TOL)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_kerple_matches_eq(kernel, hidden):
    model = tiny_encoder("kerple", encoding_options={"kernel": kernel})
    with torch.no_grad():  # inside the valid range (tiny_encoder draws any real number)
        model.encoding.r1.copy_(torch.tensor([0.3, 1.2, 0.05]))
        model.encoding.r2.copy_(torch.tensor([1.5, 0.4, 0.9]))
    r1, r2 = model.encoding.r1, model.encoding.r2
    for layer in (0, 1):
        q, k = projections(model, hidden, layer)

        def logit(b, h, i, j, q=q, k=k):
            d = abs(i - j)
            position = -r1[h] * math.log(1 + r2[h] * d) if kernel == "log" else -r1[h] * d ** r2[h]
            return content(q, k, b, h, i, j) / math.sqrt(D_H) + float(position)

        expected = logits_from(logit, (2, 3, 9, 9))
        torch.testing.assert_close(layer_logits(model, hidden, layer), expected, **TOL)


def test_kerple_keeps_parameters_in_range_while_training():
    model = tiny_encoder("kerple", encoding_options={"kernel": "power"}).train()
    with torch.no_grad():
        model.encoding.r1.copy_(torch.tensor([-1.0, 0.5, 3.0]))
        model.encoding.r2.copy_(torch.tensor([5.0, -2.0, 1.0]))
    model.encoding.layer_terms(4, torch.device("cpu"), torch.float64)
    torch.testing.assert_close(model.encoding.r1, torch.tensor([0.01, 0.5, 3.0]))
    torch.testing.assert_close(model.encoding.r2, torch.tensor([2.0, 0.01, 1.0]))


def test_fire_matches_eq(hidden):
    model = tiny_encoder("fire", encoding_options={"init_threshold": 5.0})
    for layer in (0, 1):
        fire = model.encoding.layers[layer]
        c, threshold = float(fire.c), abs(float(fire.threshold))
        q, k = projections(model, hidden, layer)

        def mlp(x, fire=fire):
            first, second = fire.mlp[0], fire.mlp[2]
            h = torch.relu(first.weight[:, 0] * x + first.bias)
            return second.weight @ h + second.bias

        def logit(b, h, i, j, q=q, k=k, c=c, threshold=threshold, mlp=mlp):
            psi = lambda x: math.log(abs(c * x) + 1)  # noqa: E731
            distance = psi(i - j) / (psi(max(threshold, i)) + 1e-6)
            return content(q, k, b, h, i, j) / math.sqrt(D_H) + float(mlp(distance)[h])

        logits = layer_logits(model, hidden, layer)
        expected = logits_from(logit, (2, 3, 9, 9))
        lower = torch.ones(9, 9, dtype=torch.bool).tril()  # FIRE is causal
        torch.testing.assert_close(logits[..., lower], expected[..., lower], **TOL)


@pytest.mark.parametrize("threshold", [1e6, 30.0, 9.0, 4.5, 4.0, -3.0, 0.2, 0.0])
def test_fire_by_offsets_below_the_threshold_equals_every_score(threshold):
    """FIRE's rows below |L| come from the MLP at the 2n-1 offsets; the bias and the gradients
    of c, L and the MLP equal the MLP run on every score (rows at and above |L|, the tie
    i = |L| included, keep their own normaliser)."""
    model = tiny_encoder("fire", encoding_options={"init_threshold": 5.0})
    fire = model.encoding.layers[0].double()
    with torch.no_grad():
        fire.threshold.fill_(threshold)
        fire.c.fill_(0.3)
    weights = torch.randn(1, 3, 9, 9, dtype=torch.float64)

    def bias_and_grads(build):
        fire.zero_grad()
        with torch.enable_grad():
            bias = build()
            (bias * weights).sum().backward()
        return bias.detach(), [p.grad.clone() for p in fire.parameters()]

    by_offsets, grads = bias_and_grads(lambda: fire(9, "cpu"))
    every, expected = bias_and_grads(lambda: fire.bias_of(fire.normalised_distance(9, "cpu"))[None])
    assert fire.rows_below_threshold(9) == (9 if abs(threshold) >= 9 else math.ceil(abs(threshold)))
    torch.testing.assert_close(by_offsets, every, rtol=1e-12, atol=1e-12)
    for grad, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, want, rtol=1e-10, atol=1e-12)
    assert by_offsets.is_contiguous()
    # A decoding step's rows [start, n) alone, below, across and past the threshold.
    with torch.no_grad():
        for start in range(1, 9):
            rows = fire(9, "cpu", start)
            torch.testing.assert_close(rows, every[..., start:, :], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("threshold", "rows"), [(math.nan, 0), (math.inf, 9), (-math.inf, 9)])
def test_fire_with_a_threshold_that_is_not_finite_still_runs(threshold, rows):
    """A diverged L: NaN computes every row as it is (NaN logits, as before), an infinite one
    is above every row."""
    fire = tiny_encoder("fire").encoding.layers[0]
    with torch.no_grad():
        fire.threshold.fill_(threshold)
    assert fire.rows_below_threshold(9) == rows
    every = fire.bias_of(fire.normalised_distance(9, "cpu"))[None]
    torch.testing.assert_close(fire(9, "cpu"), every, equal_nan=True)


@pytest.mark.parametrize(
    ("encoding", "options"),
    [
        ("rope", {"layout": "half"}),
        ("rope", {"layout": "interleaved", "fraction": 0.5}),
        ("xpos", {}),
        ("alibi", {}),
        ("kerple", {"kernel": "log"}),
        ("kerple", {"kernel": "power"}),
        ("fire", {}),  # below the threshold L (set to 20) the normaliser is a constant
        ("deberta", DEBERTA_OPTIONS),
    ],
)
def test_modern_relative_methods_are_shift_invariant(encoding, options):
    model = tiny_encoder(encoding, encoding_options=options)
    with torch.no_grad():
        if encoding == "kerple":
            model.encoding.r1.uniform_(0.1, 1.0)
            model.encoding.r2.uniform_(0.1, 1.0)
        if encoding == "fire":
            for fire in model.encoding.layers:
                fire.threshold.fill_(20.0)
    torch.manual_seed(2)
    x = torch.randn(2, 14, 24)
    lower = torch.ones(9, 9, dtype=torch.bool).tril()
    for shift in (1, 5):
        shifted = layer_logits(model, x, 1)[:, :, shift : shift + 9, shift : shift + 9]
        unshifted = layer_logits(model, x[:, shift : shift + 9], 1)
        torch.testing.assert_close(unshifted[..., lower], shifted[..., lower])


@pytest.mark.parametrize("encoding", ["rope", "xpos", "alibi", "kerple", "fire", "deberta", "t5"])
@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_causal_models_give_future_keys_zero_weight(encoding, kernel):
    """Changing tokens after position i never changes the output at i."""
    options = {"bidirectional": False} if encoding == "t5" else {}
    model = tiny_encoder(encoding, causal=True, kernel=kernel, encoding_options=options)
    ids = torch.randint(0, 40, (2, 12))
    changed = ids.clone()
    changed[:, 7:] = torch.randint(0, 40, (2, 5))
    torch.testing.assert_close(model(ids)[:, :7], model(changed)[:, :7])
    assert (model(ids)[:, 7:] - model(changed)[:, 7:]).abs().max() > 1e-6


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_equals_transformers(layout):
    """half == Llama's apply_rotary_pos_emb; interleaved == RoFormer's rotation."""
    torch.manual_seed(4)
    n, heads = 11, 2
    q, k = torch.randn(1, heads, n, 16), torch.randn(1, heads, n, 16)
    model = tiny_encoder("rope", d_model=32, num_heads=heads, encoding_options={"layout": layout})
    terms = model.encoding.layer_terms(n, torch.device("cpu"), torch.float64)[0]
    ours = terms.transform_qk(q, k)
    if layout == "half":
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import (
            LlamaRotaryEmbedding,
            apply_rotary_pos_emb,
        )

        config = LlamaConfig(hidden_size=32, num_attention_heads=heads)
        config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
        rotary = LlamaRotaryEmbedding(config)
        cos, sin = rotary(q, torch.arange(n)[None])
        theirs = apply_rotary_pos_emb(q, k, cos.double(), sin.double())
    else:
        from transformers.models.roformer.modeling_roformer import (
            RoFormerSelfAttention,
            RoFormerSinusoidalPositionalEmbedding,
        )

        table = RoFormerSinusoidalPositionalEmbedding(n, 16).create_weight().double()
        theirs = RoFormerSelfAttention.apply_rotary_position_embeddings(table[None, None], q, k)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    ("encoding", "options"),
    [("kerple", {"kernel": "power"}), ("kerple", {"kernel": "log"}), ("fire", {}), ("xpos", {})],
)
def test_learned_kernels_get_finite_gradients(encoding, options):
    with torch.enable_grad():
        model = tiny_encoder(encoding, encoding_options=options)
        with torch.no_grad():
            if encoding == "kerple":
                model.encoding.r1.uniform_(0.1, 1.0)
                model.encoding.r2.uniform_(0.1, 1.0)
            if encoding == "fire":  # a threshold inside the sequence, so both branches learn
                for fire in model.encoding.layers:
                    fire.threshold.fill_(4.0)
        model(torch.randint(0, 40, (2, 9))).square().sum().backward()
        for name, parameter in model.encoding.named_parameters():
            assert torch.isfinite(parameter.grad).all(), name
            assert parameter.grad.abs().sum() > 0, name


def test_kerple_projects_without_moving_its_parameters_version_counters():
    """The projection writes past autograd (the values an earlier forward saved are the ones
    it writes back unless out of range), still on every training forward: an update that
    leaves the version counters alone (torch's fused AdamW) is projected too."""
    model = tiny_encoder("kerple", encoding_options={"kernel": "log"}).train()
    encoding = model.encoding
    versions = (encoding.r1._version, encoding.r2._version)
    encoding.r1.data[0] = -3.0  # as a fused optimizer step writes it
    encoding.layer_terms(4, torch.device("cpu"), torch.float64)
    assert float(encoding.r1[0]) == 0.01
    assert (encoding.r1._version, encoding.r2._version) == versions


@pytest.mark.parametrize("compiled", [False, True])
def test_kerple_trains_two_forwards_before_one_backward(compiled):
    """A summed loss of two forwards (R-drop, SimCSE's pairs), eager and compiled (inductor,
    whose partitioner saved the parameters themselves for the backward; aot_eager's did not
    and passed): the second forward's projection leaves the first's saved tensors valid, and
    both match an eager model's gradients and projected values. Compiled, an in-place
    projection failed this backward (a version counter moved)."""
    ids, mask, _, labels = mlm_batch()
    models = [masked_lm("kerple").train() for _ in range(2)]
    for model in models:
        model.posattn.encoder.encoding.r1.data[0] = -3.0  # an update pushed it out of range
    reference, tested = models

    def loss(model, ids):
        return model(ids, attention_mask=mask, labels=labels).loss

    run = torch.compile(loss, fullgraph=True, backend="inductor") if compiled else loss
    with torch.enable_grad():  # this file's tests run without it
        (run(tested, ids) + run(tested, ids.flip(-1))).backward()
        # The reference: one backward per forward, each on the official projection.
        loss(reference, ids).backward()
        loss(reference, ids.flip(-1)).backward()
    pairs = zip(tested.named_parameters(), reference.parameters(), strict=True)
    for (name, got), expected in pairs:
        torch.testing.assert_close(got, expected, msg=name)
        torch.testing.assert_close(got.grad, expected.grad, msg=name)
    assert float(tested.posattn.encoder.encoding.r1[0]) == 0.01
