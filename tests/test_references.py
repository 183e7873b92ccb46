"""Every encoding's logits against a slow reference written from its paper's equation."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import layer_logits, projections, tiny_encoder
from reference import content, layer_norm, logits_from, t5_bucket

D_H = 8  # tiny_config: d_model 24, 3 heads
TOL = dict(atol=1e-6, rtol=1e-6)


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


def untied_projections(positions, rows: torch.Tensor):
    """(LN(p) U^Q, LN(p) U^K) per head, [H, m, d_h], from the raw weights."""
    normed = layer_norm(rows, positions.norm.weight, positions.norm.bias, positions.norm.eps)
    pq = normed @ positions.query.weight.T + positions.query.bias
    pk = normed @ positions.key.weight.T + positions.key.bias
    return pq.unflatten(-1, (3, D_H)).transpose(0, 1), pk.unflatten(-1, (3, D_H)).transpose(0, 1)


@pytest.mark.parametrize("encoding", ["none", "sinusoidal", "learned"])
def test_input_additive_layer_logits_are_plain_scaled_dot_products(encoding, hidden):
    """TUPE Eq. 2/3: inside attention only (x_i W^Q)(x_j W^K)^T / sqrt(d_h)."""
    model = tiny_encoder(encoding)
    q, k = projections(model, hidden, 1)
    expected = logits_from(
        lambda b, h, i, j: content(q, k, b, h, i, j) / math.sqrt(D_H), (2, 3, 9, 9)
    )
    torch.testing.assert_close(layer_logits(model, hidden, 1), expected, **TOL)


def test_sinusoidal_input_is_vaswani_table():
    model = tiny_encoder("sinusoidal")
    table = model.encoding.input_embedding(20, torch.device("cpu"), torch.float64)
    for t in range(20):
        for c in range(24):
            angle = t / 10000 ** ((c - c % 2) / 24)
            expected = math.sin(angle) if c % 2 == 0 else math.cos(angle)
            assert table[t, c].item() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("encoding", ["learned", "bert-r"])
def test_learned_input_is_word_plus_position_plus_segment_then_layernorm(encoding):
    """TUPE Eq. 3 input: x_i^1 = LN(w_i + p_i + s_i) (BERT adds the token type too)."""
    model = tiny_encoder(encoding)
    ids = torch.tensor([[3, 7, 1, 0, 5]])
    segments = torch.tensor([[0, 0, 1, 1, 1]])
    table = (model.encoding.absolute if encoding == "bert-r" else model.encoding).table.weight
    emb = model.embeddings
    raw = torch.stack(
        [
            emb.word.weight[ids[0, i]] + table[i] + emb.segment.weight[segments[0, i]]
            for i in range(5)
        ]
    )
    expected = layer_norm(raw, emb.norm.weight, emb.norm.bias, emb.norm.eps)
    x, *_ = model.layer_inputs(ids, segment_ids=segments)
    torch.testing.assert_close(x[0], expected, **TOL)


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("skew", [False, True])
@pytest.mark.parametrize("t", [3, 40])
def test_shaw_matches_eq4(values, skew, t, hidden, choose):
    """TUPE Eq. 4: (x_i W^Q)(x_j W^K + a_{clip(j-i)})^T / sqrt(d_h), a per layer, t = 3 (9
    tokens reach the clipped rows) and t = 40 (they read rows 32-48 of 81, the gathers rows
    32-63); by index gather (CPU) and by offset windows (GPU)."""
    choose(skew=skew)
    model = tiny_encoder("shaw", encoding_options={"max_distance": t, "values": values})
    layer = 1
    q, k = projections(model, hidden, layer)
    keys = model.encoding.keys[layer]

    def logit(b, h, i, j):
        a = keys[max(-t, min(t, j - i)) + t]
        return (content(q, k, b, h, i, j) + float(q[b, h, i] @ a)) / math.sqrt(D_H)

    expected = logits_from(logit, (2, 3, 9, 9))
    torch.testing.assert_close(layer_logits(model, hidden, layer), expected, **TOL)
    if not values:
        return
    # Shaw Eq. 3: z_i = sum_j softmax(alpha)_ij (x_j W^V + a^V_{clip(j-i)}), then W^O.
    attention = model.layers[layer].attention
    v = (hidden @ attention.v_proj.weight.T + attention.v_proj.bias).unflatten(-1, (3, D_H))
    probs = torch.softmax(expected, -1)
    z = torch.zeros(2, 9, 3, D_H)
    for b in range(2):
        for h in range(3):
            for i in range(9):
                for j in range(9):
                    a_v = model.encoding.values[layer][max(-t, min(t, j - i)) + t]
                    z[b, i, h] += probs[b, h, i, j] * (v[b, j, h] + a_v)
    expected_out = z.flatten(2) @ attention.out_proj.weight.T + attention.out_proj.bias
    terms = model.encoding.layer_terms(9, hidden.device, hidden.dtype)[layer]
    torch.testing.assert_close(attention(hidden, terms), expected_out, **TOL)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_matches_eq5(bidirectional, hidden):
    """TUPE Eq. 5: content / sqrt(d_h) + b_{bucket(j-i)}, unscaled, the same in every layer.
    8 buckets up to distance 6 so that n = 9 reaches the log bins and the last bucket."""
    options = {"num_buckets": 8, "max_distance": 6, "bidirectional": bidirectional}
    model = tiny_encoder("t5", encoding_options=options)
    table = model.encoding.relative.weight
    for layer in (0, 1):
        q, k = projections(model, hidden, layer)

        def logit(b, h, i, j, q=q, k=k):
            bucket = t5_bucket(j - i, bidirectional, 8, 6)
            return content(q, k, b, h, i, j) / math.sqrt(D_H) + float(table[bucket, h])

        expected = logits_from(logit, (2, 3, 9, 9))
        torch.testing.assert_close(layer_logits(model, hidden, layer), expected, **TOL)


@pytest.mark.parametrize("scale_multiple", [None, 2.0])
def test_bert_ad_keeps_all_four_terms_scaled_by_sqrt_4dh(hidden, scale_multiple):
    """TUPE Sec. 4.2: [qk + q(pU^K) + (pU^Q)k + (pU^Q)(pU^K)] / sqrt(4 d_h); with
    `scale_multiple=2`, divided by sqrt(2 d_h) as TUPE's own terms are."""
    options = {} if scale_multiple is None else {"scale_multiple": scale_multiple}
    model = tiny_encoder("bert-ad", encoding_options=options)
    positions = model.encoding.positions
    pq, pk = untied_projections(positions, positions.table[:9])
    q, k = projections(model, hidden, 0)

    def logit(b, h, i, j):
        terms = (
            q[b, h, i] @ k[b, h, j]
            + q[b, h, i] @ pk[h, j]
            + pq[h, i] @ k[b, h, j]
            + pq[h, i] @ pk[h, j]
        )
        return float(terms) / math.sqrt((scale_multiple or 4) * D_H)

    expected = logits_from(logit, (2, 3, 9, 9))
    torch.testing.assert_close(layer_logits(model, hidden, 0), expected, **TOL)


def test_bert_ad_at_tupe_scale_is_the_tied_tupe_a_plus_the_cross_terms(hidden):
    """`bert-ad/tupe-scale` against `tupe-a/tie-cls`: the same parameters drawn from the same
    seed, and logits that differ by the two cross terms over sqrt(2 d_h) alone - what lets a
    run of the two read the cross terms apart from the scale and the [CLS] untie."""
    bert_ad = tiny_encoder("bert-ad", encoding_options={"scale_multiple": 2.0})
    tupe_a = tiny_encoder("tupe-a", encoding_options={"untie_cls": False})
    ours, theirs = dict(bert_ad.named_parameters()), dict(tupe_a.named_parameters())
    assert list(ours) == list(theirs)  # the same parameters, drawn in the same order
    for name, parameter in ours.items():
        torch.testing.assert_close(parameter, theirs[name], rtol=0, atol=0, msg=name)
    positions = bert_ad.encoding.positions
    pq, pk = untied_projections(positions, positions.table[:9])
    for layer in (0, 1):
        q, k = projections(bert_ad, hidden, layer)
        cross = (q @ pk.transpose(-1, -2) + pq @ k.transpose(-1, -2)) / math.sqrt(2 * D_H)
        difference = layer_logits(bert_ad, hidden, layer) - layer_logits(tupe_a, hidden, layer)
        torch.testing.assert_close(difference, cross, **TOL)


def tupe_reference(model, hidden, layer, relative: bool):
    """TUPE Eq. 10 / 11 with the Eq. 9 reset, theta from App. B."""
    encoding = model.encoding
    options = encoding.options
    c = options.cls_index
    positions = encoding.positions
    pq, pk = untied_projections(positions, positions.table[:9])
    if options.untie_cls:  # theta's rows p_theta1, p_theta2 exist with the untie alone
        tq, tk = untied_projections(positions, positions.special)
    scale = 1 / math.sqrt(2 * D_H)
    q, k = projections(model, hidden, layer)
    table = encoding.relative.weight if relative else None
    nb = options.num_buckets if relative else 0

    def position_term(h, i, j):
        if options.untie_cls and i == c:
            value = float(tq[h, 0] @ tk[h, 0]) * scale
            return value + (float(table[nb, h]) if relative else 0.0)
        if options.untie_cls and j == c:
            value = float(tq[h, 1] @ tk[h, 1]) * scale
            return value + (float(table[nb + 1, h]) if relative else 0.0)
        value = float(pq[h, i] @ pk[h, j]) * scale
        if relative:
            value += float(table[t5_bucket(j - i, True, nb, options.max_distance), h])
        return value

    return logits_from(
        lambda b, h, i, j: content(q, k, b, h, i, j) * scale + position_term(h, i, j),
        (2, 3, 9, 9),
    )


@pytest.mark.parametrize("encoding", ["tupe-a", "tupe-r"])
@pytest.mark.parametrize("untie", [True, False])
@pytest.mark.parametrize("cls_index", [0, 4])
def test_tupe_matches_eq10_eq11(encoding, untie, cls_index, hidden):
    options = {"untie_cls": untie, "cls_index": cls_index}
    if encoding == "tupe-r":
        options.update(num_buckets=8, max_distance=6)
    model = tiny_encoder(encoding, encoding_options=options)
    for layer in (0, 1):
        expected = tupe_reference(model, hidden, layer, relative=encoding == "tupe-r")
        torch.testing.assert_close(layer_logits(model, hidden, layer), expected, **TOL)


@pytest.mark.parametrize("sharing", ["none", "layer", "head"])
@pytest.mark.parametrize("rank", [None, 3])
def test_diet_abs_matches_eq1(sharing, rank, hidden):
    """DIET Eq. 1: content / sqrt(d_h) + (P_Q P_K^T)_ij, unscaled."""
    model = tiny_encoder("diet-abs", encoding_options={"sharing": sharing, "rank": rank})
    pq, pk = model.encoding.query, model.encoding.key
    assert pq.shape[-1] == (rank or D_H)
    for layer in (0, 1):
        q, k = projections(model, hidden, layer)
        g = 0 if sharing == "layer" else layer

        def logit(b, h, i, j, q=q, k=k, g=g):
            head = 0 if sharing == "head" else h
            position = sum(
                float(pq[g, head, i, r] * pk[g, head, j, r]) for r in range(pq.shape[-1])
            )
            return content(q, k, b, h, i, j) / math.sqrt(D_H) + position

        expected = logits_from(logit, (2, 3, 9, 9))
        torch.testing.assert_close(layer_logits(model, hidden, layer), expected, **TOL)


@pytest.mark.parametrize("sharing", ["none", "layer", "head"])
def test_diet_rel_matches_eq3(sharing, hidden):
    """DIET Eq. 3: content / sqrt(d_h) + R_{clip(i-j)}, a scalar per offset per head."""
    m = 4
    model = tiny_encoder("diet-rel", encoding_options={"sharing": sharing, "max_distance": m})
    table = model.encoding.table
    for layer in (0, 1):
        q, k = projections(model, hidden, layer)
        g = 0 if sharing == "layer" else layer

        def logit(b, h, i, j, q=q, k=k, g=g):
            offset = max(-m, min(m, i - j)) + m
            head = 0 if sharing == "head" else h
            return content(q, k, b, h, i, j) / math.sqrt(D_H) + float(table[g, offset, head])

        expected = logits_from(logit, (2, 3, 9, 9))
        torch.testing.assert_close(layer_logits(model, hidden, layer), expected, **TOL)


def test_diet_rel_default_covers_every_offset_of_the_table():
    model = tiny_encoder("diet-rel")
    assert model.encoding.table.shape == (2, 2 * 16 - 1, 3)


@pytest.mark.parametrize("encoding", ["diet-abs", "learned"])
def test_segment_attention_matches_diet_eq2(encoding, hidden):
    """DIET Eq. 2: + E_S(S(i), S(j)), a scalar per (query segment, key segment) per head."""
    model = tiny_encoder(encoding, segments="attention", num_segments=3)
    segments = torch.tensor([[0, 0, 1, 1, 2, 2, 2, 0, 1], [2, 1, 0, 0, 0, 1, 1, 2, 2]])
    terms = model.encoding.layer_terms(9, hidden.device, hidden.dtype)[1]
    plain = model.layers[1].attention.logits(hidden, terms)  # the same layer without segments
    table = model.segment_bias.table[1]
    expected = logits_from(
        lambda b, h, i, j: float(table[h, segments[b, i] * 3 + segments[b, j]]), (2, 3, 9, 9)
    )
    torch.testing.assert_close(layer_logits(model, hidden, 1, segments) - plain, expected, **TOL)
    assert model.embeddings.segment is None  # segments live inside attention only


def test_toeplitz_spreads_offset_values_and_sums_gradients_along_diagonals():
    """The construction of every offset-indexed bias: T[i, j] = v[j - i + n - 1]."""
    from posattn.encodings.relative import offsets, toeplitz

    n = 5
    torch.set_grad_enabled(True)  # this module's fixture turns gradients off
    values = torch.randn(3, 2 * n - 1, requires_grad=True)
    matrix = toeplitz(values)
    reference = torch.stack(
        [torch.stack([values[:, j - i + n - 1] for j in range(n)], -1) for i in range(n)], -2
    )
    torch.testing.assert_close(matrix, reference)
    assert offsets(n, "cpu").tolist() == list(range(-(n - 1), n))
    weights = torch.randn(3, n, n)
    (matrix * weights).sum().backward()
    for r in range(-(n - 1), n):
        torch.testing.assert_close(values.grad[:, r + n - 1], weights.diagonal(r, -2, -1).sum(-1))


def test_skew_reads_each_row_at_its_offsets_and_copies_gradients_back():
    from posattn.encodings.relative import skew

    n = 4
    with torch.enable_grad():
        per_offset = torch.randn(2, 3, n, 2 * n - 1, requires_grad=True)
        matrix = skew(per_offset)
        weights = torch.randn(2, 3, n, n)
        (matrix * weights).sum().backward()
    for i in range(n):
        for j in range(n):
            torch.testing.assert_close(matrix[..., i, j], per_offset[..., i, j - i + n - 1])
            torch.testing.assert_close(per_offset.grad[..., i, j - i + n - 1], weights[..., i, j])
    assert per_offset.grad.count_nonzero() == 2 * 3 * n * n  # entries no (i, j) reads get none
