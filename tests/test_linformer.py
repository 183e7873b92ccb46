"""Linformer and DIET-ABS inside it (DIET Eq. 4) against references written from the
equations, and the cost that makes them worth having: linear in the sequence length."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import projections, tiny_config, tiny_encoder

from posattn import PosAttnConfigError

D_H = 8


def projected_attention(model, x, layer, keep=None):
    """Eq. 4 / Linformer Eq. 7 written out: logits [B, H, n, k] and the head outputs."""
    encoding = model.encoding
    attention = model.layers[layer].attention
    n = x.shape[1]
    q, k = projections(model, x, layer)
    v = (x @ attention.v_proj.weight.T + attention.v_proj.bias).unflatten(-1, (3, D_H))
    v = v.transpose(1, 2)
    if keep is not None:
        k, v = k * keep[:, None, :, None], v * keep[:, None, :, None]
    e = encoding.key_projection[layer, :, :n]
    f = e if encoding.value_projection is None else encoding.value_projection[layer, :, :n]
    batch, heads, kk = x.shape[0], 3, e.shape[0]
    logits = torch.zeros(batch, heads, n, kk)
    for b in range(batch):
        for h in range(heads):
            projected_keys = e @ k[b, h]  # (E X W_K): k x d_h
            for i in range(n):
                for j in range(kk):
                    logits[b, h, i, j] = q[b, h, i] @ projected_keys[j] / math.sqrt(D_H)
                    if encoding.name == "diet-abs-lin":
                        # P_K has its own k rows (P_K in R^{k x d_p} as printed)
                        logits[b, h, i, j] += encoding.query[h, i] @ encoding.key[h, j]
    out = torch.softmax(logits, -1) @ (f @ v)
    return logits, out


@pytest.mark.parametrize("encoding", ["linformer", "diet-abs-lin"])
@pytest.mark.parametrize("share_kv", [False, True])
def test_projected_attention_matches_eq4(encoding, share_kv, hidden):
    model = tiny_encoder(encoding, encoding_options={"k": 4, "share_kv": share_kv})
    layer = 1
    expected_logits, expected_heads = projected_attention(model, hidden, layer)
    terms = model.encoding.layer_terms(9, hidden.device, hidden.dtype)[layer]
    attention = model.layers[layer].attention
    with torch.no_grad():
        out = attention(hidden, terms)
        q, k = attention.queries_keys(hidden, terms)
        v = attention.split_heads(attention.v_proj(hidden))
        pk, _ = terms.project_kv(k, v, None)
        logits = q @ pk.transpose(-1, -2) * terms.scale
        if terms.bias is not None:
            logits = logits + terms.bias
    torch.testing.assert_close(logits, expected_logits, atol=1e-6, rtol=1e-6)
    expected = expected_heads.transpose(1, 2).flatten(2) @ attention.out_proj.weight.T
    torch.testing.assert_close(out, expected + attention.out_proj.bias, atol=1e-6, rtol=1e-6)


def test_padded_keys_are_zeroed_before_the_projection(hidden):
    model = tiny_encoder("diet-abs-lin", encoding_options={"k": 4}, segments="input")
    keep = torch.ones(2, 9)
    keep[1, 6:] = 0
    _, expected = projected_attention(model, hidden, 0, keep)
    mask = keep.bool()[:, None, None, :]
    terms = model.encoding.layer_terms(9, hidden.device, hidden.dtype)[0]
    with torch.no_grad():
        out = model.layers[0].attention(hidden, terms, mask)
    attention = model.layers[0].attention
    expected = expected.transpose(1, 2).flatten(2) @ attention.out_proj.weight.T
    torch.testing.assert_close(out, expected + attention.out_proj.bias, atol=1e-6, rtol=1e-6)


def test_projected_attention_never_builds_an_n_by_n_matrix():
    model = tiny_encoder("diet-abs-lin", max_len=256, encoding_options={"k": 8})
    terms = model.encoding.layer_terms(256, torch.device("cpu"), torch.float64)
    assert terms[0].bias.shape == (1, 3, 256, 8)


@pytest.mark.parametrize("encoding", ["linformer", "diet-abs-lin"])
def test_projected_encodings_refuse_causal_attention_and_segment_pairs(encoding):
    with pytest.raises(PosAttnConfigError, match=r"causal=True.*bidirectional"):
        tiny_config(encoding, causal=True)
    with pytest.raises(PosAttnConfigError, match=r"segments='attention'.*projected"):
        tiny_config(encoding, segments="attention")
    with pytest.raises(PosAttnConfigError, match="k=0"):
        tiny_config(encoding, encoding_options={"k": 0})


def test_linformer_without_input_positions_is_linformer_with_a_zero_table():
    """`input_positions=False`: x_i^1 = w_i. The whole model's output equals Linformer's
    with the same weights and its input position table zeroed, it holds no table, and
    DIET-ABS inside Linformer (no input positions anyway) refuses the option."""
    plain = tiny_encoder("linformer", encoding_options={"k": 4})
    bare = tiny_encoder("linformer", encoding_options={"k": 4, "input_positions": False})
    tables = {name for name, _ in plain.named_parameters()} - dict(bare.named_parameters()).keys()
    assert tables and all(".absolute." in name for name in tables)
    bare.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        for name in tables:
            plain.get_parameter(name).zero_()
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        expected, out = plain(ids), bare(ids)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
    assert bare.encoding.input_embedding(9, ids.device, torch.float64) is None
    assert [p.value for p in bare.encoding.places] == ["k/v sequence projection"]
    with pytest.raises(PosAttnConfigError, match=r"unknown option.*input_positions"):
        tiny_config("diet-abs-lin", encoding_options={"input_positions": False})
    with pytest.raises(PosAttnConfigError, match="input_positions"):
        tiny_config("linformer", encoding_options={"input_positions": "false"})
