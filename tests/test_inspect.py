"""`posattn inspect`: every figure's numbers against a direct computation on small random
models (and, when the package is installed, transformers' BERT on the real MiniLM weights)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import layer_logits, tiny_encoder, word_level_tokenizer

from posattn import PosAttnConfigError, PosAttnModel
from posattn.cli import main
from posattn.encodings.t5 import t5_relative_bucket
from posattn.lab.inspection.forward import logits_per_layer
from posattn.lab.inspection.heads import bias_classes, classify, head_patterns, head_statistics
from posattn.lab.inspection.positional import cls_lines, positional_logits, relative_share
from posattn.lab.inspection.rank import rank_summary
from posattn.lab.inspection.structure import rank1_r2, shuffled, toeplitz_r2
from posattn.lab.inspection.terms import TERMS, four_terms

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away"]
TEXT = "the cat sat on the mat a dog ran far away the cat"


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


def fill_head_terms(result, h, qw, kw, qp, kp, scale):
    """Head h of the four terms: the products of q's and k's word and position parts."""
    for name, (a, b) in {
        "word-word": (qw, kw),
        "word-position": (qw, kp),
        "position-word": (qp, kw),
        "position-position": (qp, kp),
    }.items():
        result[name][:, h] = torch.einsum("...id,...jd->...ij", a, b) * scale


def four_terms_reference(model, ids, segments):
    """TUPE Eq. 6 written out from the raw parameters, head by head, with BERT's embedding
    LayerNorm split at the token's own standard deviation (post-LN layer 1)."""
    emb, attention = model.embeddings, model.layers[0].attention
    word = emb.word.weight[ids] + emb.segment.weight[segments]
    position = model.encoding.input_embedding(ids.shape[1], ids.device, word.dtype)
    total = word + position
    sigma = (total.var(-1, unbiased=False, keepdim=True) + emb.norm.eps).sqrt()
    w = (word - word.mean(-1, keepdim=True)) / sigma * emb.norm.weight + emb.norm.bias
    p = (position - position.mean(-1, keepdim=True)) / sigma * emb.norm.weight
    heads, d_h = attention.num_heads, word.shape[-1] // attention.num_heads
    result = {name: torch.zeros(ids.shape[0], heads, ids.shape[1], ids.shape[1]) for name in TERMS}
    for h in range(heads):
        rows = slice(h * d_h, (h + 1) * d_h)
        wq, bq = attention.q_proj.weight[rows], attention.q_proj.bias[rows]
        wk, bk = attention.k_proj.weight[rows], attention.k_proj.bias[rows]
        qw, kw, qp, kp = w @ wq.T + bq, w @ wk.T + bk, p @ wq.T, p @ wk.T
        fill_head_terms(result, h, qw, kw, qp, kp, 1 / math.sqrt(d_h))
    return result


def head_projection(linear, inputs, rows):
    """One head's slice `rows` of a Linear, written out from its weight and bias."""
    return inputs @ linear.weight[rows].T + linear.bias[rows]


def bert_ad_terms_reference(model, ids, segments, scale_multiple=4):
    """BERT-Ad's four products (TUPE Sec. 4.2) written out from the raw parameters, head by
    head: layer 1 reads LN(word + segment), no position; the positions pass TUPE's LayerNorm
    and their own U^Q, U^K; every product is scaled 1/sqrt(4 d_h) (or the model's
    `scale_multiple` for the 4)."""
    emb, attention = model.embeddings, model.layers[0].attention
    x = emb.norm(emb.word.weight[ids] + emb.segment.weight[segments])
    positions = model.encoding.positions
    p = positions.norm(positions.table[: ids.shape[1]])
    heads, d_h = attention.num_heads, x.shape[-1] // attention.num_heads
    result = {name: torch.zeros(ids.shape[0], heads, ids.shape[1], ids.shape[1]) for name in TERMS}
    for h in range(heads):
        rows = slice(h * d_h, (h + 1) * d_h)
        qw, kw = (
            head_projection(attention.q_proj, x, rows),
            head_projection(attention.k_proj, x, rows),
        )
        qp, kp = head_projection(positions.query, p, rows), head_projection(positions.key, p, rows)
        fill_head_terms(result, h, qw, kw, qp, kp, 1 / math.sqrt(scale_multiple * d_h))
    return result


def test_four_terms_match_their_definition_and_sum_to_the_layer_logits():
    model = tiny_encoder("learned")
    ids, segments = torch.randint(0, 40, (2, 9)), torch.randint(0, 2, (2, 9))
    found = four_terms(model, ids, segments)
    expected = four_terms_reference(model, ids, segments)
    for name in TERMS:
        torch.testing.assert_close(found[name], expected[name])
    x, *_ = model.layer_inputs(ids, None, segments)
    torch.testing.assert_close(sum(found.values()), layer_logits(model, x, 0))


@pytest.mark.parametrize(
    ("encoding", "overrides"),
    [("sinusoidal", {"norm": "pre"}), ("bert-r", {"segments": "attention"})],
)
def test_four_terms_stay_exact_through_pre_ln_and_a_content_free_bias(encoding, overrides):
    model = tiny_encoder(encoding, **overrides)
    ids, segments = torch.randint(0, 40, (2, 9)), torch.randint(0, 2, (2, 9))
    found = four_terms(model, ids, segments)
    assert ("bias" in found) == (encoding == "bert-r")
    x, *_ = model.layer_inputs(ids, None, segments)
    layer = model.layers[0]
    x = layer.attention_norm(x) if layer.pre_norm else x
    torch.testing.assert_close(sum(found.values()), layer_logits(model, x, 0, segments))


@pytest.mark.parametrize("scale_multiple", [4, 1.0])
def test_bert_ad_terms_match_their_definition_and_sum_to_the_layer_logits(scale_multiple):
    options = {} if scale_multiple == 4 else {"scale_multiple": scale_multiple}
    model = tiny_encoder("bert-ad", encoding_options=options)
    ids, segments = torch.randint(0, 40, (2, 9)), torch.randint(0, 2, (2, 9))
    found = four_terms(model, ids, segments)
    expected = bert_ad_terms_reference(model, ids, segments, scale_multiple)
    assert set(found) == set(TERMS)
    for name in TERMS:
        torch.testing.assert_close(found[name], expected[name])
    x, *_ = model.layer_inputs(ids, None, segments)
    torch.testing.assert_close(sum(found.values()), layer_logits(model, x, 0))


def test_bert_ad_terms_stay_exact_through_pre_ln_and_segments_inside_attention():
    model = tiny_encoder("bert-ad", norm="pre", segments="attention")
    ids, segments = torch.randint(0, 40, (2, 9)), torch.randint(0, 2, (2, 9))
    found = four_terms(model, ids, segments)
    assert "bias" in found
    x, *_ = model.layer_inputs(ids, None, segments)
    x = model.layers[0].attention_norm(x)
    torch.testing.assert_close(sum(found.values()), layer_logits(model, x, 0, segments))


def test_four_terms_refuse_positions_inside_attention():
    with pytest.raises(PosAttnConfigError, match=r"encoding='tupe-a'.*input-additive"):
        four_terms(tiny_encoder("tupe-a"), torch.randint(0, 40, (1, 5)))


def test_logits_per_layer_are_the_layers_own_logits():
    model = tiny_encoder("tupe-r", norm="pre")
    ids = torch.randint(0, 40, (2, 7))
    found = logits_per_layer(model, ids)
    x, terms, mask, segments = model.layer_inputs(ids)
    for index, layer in enumerate(model.layers):
        torch.testing.assert_close(
            found[index], layer_logits(model, layer.attention_norm(x), index)
        )
        x = layer(x, terms[index], mask, segments[index])


@pytest.mark.parametrize(
    ("encoding", "options"),
    [("t5", {}), ("tupe-r", {"cls_index": 2}), ("diet-rel", {"sharing": "none"}), ("alibi", {})],
)
def test_positional_logits_are_the_encodings_own_bias(encoding, options):
    model = tiny_encoder(encoding, num_layers=3, encoding_options=options)
    groups = positional_logits(model, 8)
    terms = model.encoding.layer_terms(8, torch.device("cpu"), torch.float64)
    assert sorted(layer for g in groups for layer in g["layers"]) == [1, 2, 3]
    assert len(groups) == (3 if encoding == "diet-rel" else 1)
    for group in groups:
        for layer in group["layers"]:
            torch.testing.assert_close(group["bias"], terms[layer - 1].bias[0])


def test_tupe_cls_row_drawn_is_theta_1_and_column_theta_2():
    model = tiny_encoder("tupe-a", encoding_options={"cls_index": 1})
    bias = positional_logits(model, 8)[0]["bias"]
    lines = cls_lines(bias, 1)
    positions = model.encoding.positions
    pq, pk = positions.project(positions.special)
    theta = (pq * pk).sum(-1) / math.sqrt(2 * 8)  # App. B, d_h = 8
    torch.testing.assert_close(torch.tensor(lines["row_mean"]), theta[:, 0])
    torch.testing.assert_close(torch.tensor(lines["column_mean"]), theta[:, 1])
    assert max(lines["row_spread"] + lines["column_spread"]) < 1e-12


def test_positional_logits_are_empty_without_a_bias():
    assert positional_logits(tiny_encoder("learned"), 8) == []


def test_head_statistics_equal_loops_over_queries_and_keys():
    torch.manual_seed(3)
    logits = torch.randn(2, 3, 6, 6) * 2
    stats = head_statistics(logits)
    probs = torch.softmax(logits, -1)
    for h in range(3):
        distance = entropy = previous = following = local = 0.0
        for b in range(2):
            for i in range(6):
                for j in range(6):
                    a = probs[b, h, i, j].item()
                    distance += a * abs(i - j) / 12
                    entropy -= a * math.log(a) / 12
                    local += a * (abs(i - j) <= 2) / 12
                previous += probs[b, h, i, i - 1].item() / 10 if i >= 1 else 0.0
                following += probs[b, h, i, i + 1].item() / 10 if i < 5 else 0.0
        top_column = sum(max(probs[b, h, :, j].mean().item() for j in range(6)) for b in range(2))
        expected = {
            "distance": distance,
            "entropy": entropy,
            "previous": previous,
            "next": following,
            "local": local,
            "global": top_column / 2,
        }
        for name, value in expected.items():
            assert stats[name][h] == pytest.approx(value, rel=1e-9), name
        assert stats["entropy_normalised"][h] == pytest.approx(entropy / math.log(6))


def test_heads_are_classified_by_the_documented_rule():
    n = 10
    i = torch.arange(n)
    offset = i[None, :] - i[:, None]
    patterns = {
        "previous": 20.0 * (offset == -1),
        "next": 20.0 * (offset == 1),
        "global": 20.0 * (i[None, :] == 0).expand(n, n),
        "local": -3.0 * offset.abs(),  # a band, no side dominant
        "broad": torch.zeros(n, n),
    }
    logits = torch.stack([p.double() for p in patterns.values()])[None]
    (layer,) = head_patterns([logits])
    assert layer["class"] == list(patterns)
    assert classify(0.49, 0.49, 0.49, 0.49) == "broad"


def test_a_bias_alone_is_classified_where_text_would_call_its_head_broad():
    """A DIET-REL-sized preference (+3.4 on offset -1) sends the bias by itself to the previous
    token, while on text, where content logits of a few units share each row, the same head
    comes out broad (content logits of standard deviation 4); T5's table set to prefer offset
    +1 reads next. A bias with more keys
    than queries has no class."""
    n = 12
    i = torch.arange(n)
    offset = i[None, :] - i[:, None]
    bias = torch.stack([3.4 * (offset == -1), 3.4 * (offset == 1), torch.zeros(n, n)]).double()
    assert bias_classes(bias) == ["previous", "next", "broad"]
    generator = torch.Generator().manual_seed(0)
    content = 4.0 * torch.randn(4, 3, n, n, generator=generator, dtype=torch.float32)
    (on_text,) = head_patterns([content.double() + bias])
    assert on_text["class"][0] == "broad"
    assert bias_classes(torch.zeros(2, 3, 5)) is None
    model = tiny_encoder("t5")
    bucket = t5_relative_bucket(torch.tensor(1), True, 32, 128)  # offset j - i = +1
    with torch.no_grad():
        model.encoding.relative.weight.zero_()
        model.encoding.relative.weight[bucket, 0] = 6.0
    (group,) = positional_logits(model, 16)  # uniform rows: local takes 5 of 16 keys
    assert bias_classes(group["bias"]) == ["next", "broad", "broad"]


def test_structure_measures_find_relative_and_key_patterns_and_not_noise():
    torch.manual_seed(0)
    n = 12
    offsets = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    relative = torch.randn(2 * n - 1)[offsets + n - 1] + torch.randn(n)[:, None]
    assert toeplitz_r2(relative).item() == pytest.approx(1.0)
    key_driven = torch.randn(n)[None, :].expand(n, n) + torch.randn(n)[:, None]
    assert rank1_r2(key_driven).item() == pytest.approx(1.0)
    assert toeplitz_r2(key_driven).item() < 0.6
    noise = torch.randn(200, n, n)
    assert toeplitz_r2(noise).mean().item() == pytest.approx(
        toeplitz_r2(shuffled(noise)).mean().item(), abs=0.02
    )
    assert toeplitz_r2(shuffled(relative)).item() < 0.5


def test_rank_input_additive_is_dh_and_per_head_positions_add_dp():
    """DIET Theorem 1 on what inspect reports: layer logits of BERT-A have numerical rank
    d_h = 8; DIET-ABS with d_p = 6 reaches d_h + d_p."""
    ids = torch.randint(0, 40, (2, 16))
    learned = tiny_encoder("learned", max_len=16)
    diet = tiny_encoder("diet-abs", max_len=16, segments="none", encoding_options={"rank": 6})
    for model, expected in ((learned, 8), (diet, 14)):
        for logits in logits_per_layer(model, ids):
            summary = rank_summary(logits)
            assert summary["numerical_rank"] == [expected] * 3
            direct = torch.linalg.matrix_rank(logits).double().mean(0)
            assert summary["numerical_rank"] == direct.tolist()
            values = torch.linalg.svdvals(logits[1, 2])
            share = values.pow(2).cumsum(0) / values.pow(2).sum()
            assert int((share < 0.99).sum()) + 1 in {
                int(r) for r in rank_summary(logits[1:])["energy_rank"]
            }


def saved_model(tmp_path, encoding: str, **overrides):
    """A random posattn model with a word-level tokenizer, as save_pretrained writes it."""
    tokenizer = word_level_tokenizer(WORDS)
    torch.manual_seed(0)
    model = PosAttnModel(tiny_encoder(encoding, vocab_size=len(tokenizer), **overrides).config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return model.encoder.eval(), tmp_path / "model"


def test_inspect_command_writes_figures_and_the_numbers_behind_them(tmp_path):
    model, path = saved_model(tmp_path, "tupe-r", encoding_options={"cls_index": 0})
    out = tmp_path / "out"
    assert main(["inspect", str(path), "--output", str(out), "--text", TEXT, "--length", "12"]) == 0
    result = json.loads((out / "inspect.json").read_text())
    assert "note" in result["terms"]  # TUPE-R has no input positions
    (group,) = result["positional"]["groups"]
    expected = model.encoding.layer_terms(12, torch.device("cpu"), torch.float64)[0].bias[0]
    torch.testing.assert_close(torch.tensor(group["bias"]), expected, atol=1e-6, rtol=0)
    assert group["classes_alone"] == bias_classes(expected)
    assert group["layers"] == [1, 2]
    share = group["relative_share"]
    torch.testing.assert_close(torch.tensor(share["toeplitz_r2"]), toeplitz_r2(expected))
    inner = toeplitz_r2(expected[:, 1:, 1:])  # [CLS] at 0: the rest keeps its offsets
    torch.testing.assert_close(torch.tensor(share["toeplitz_r2_without_cls"]), inner)
    ids = torch.tensor(
        [word_level_tokenizer(WORDS)(TEXT, truncation=True, max_length=12)["input_ids"]]
    )
    patterns = head_patterns(logits_per_layer(model, ids))
    assert result["heads"]["layers"]["2"]["distance"] == pytest.approx(patterns[1]["distance"])
    for name in ("positional_logits_layer1.png", "head_patterns.png", "rank_spectra.png"):
        assert (out / name).stat().st_size > 1000
    assert "Head patterns" in (out / "inspect.md").read_text()
    assert "class of the bias alone" in (out / "inspect.md").read_text()


@pytest.mark.parametrize("encoding", ["learned", "bert-ad"])
def test_inspect_json_holds_the_four_terms_drawn_and_their_numbers(tmp_path, encoding):
    model, path = saved_model(tmp_path, encoding)
    out = tmp_path / "out"
    assert main(["inspect", str(path), "--output", str(out), "--text", TEXT, "--head", "3"]) == 0
    result = json.loads((out / "inspect.json").read_text())["terms"]
    ids = torch.tensor([word_level_tokenizer(WORDS)(TEXT)["input_ids"]])
    found = four_terms(model, ids)
    full = sum(found.values())
    within = lambda m: (m - m.mean(-1, keepdim=True)).pow(2).mean()  # noqa: E731
    for name in TERMS:
        drawn = torch.tensor(result["matrices_drawn"][name])
        torch.testing.assert_close(drawn, found[name][0, 2], atol=1e-6, rtol=0)
        ratio = result["terms"][name]["variance_ratio"]
        assert ratio == pytest.approx((within(found[name]) / within(full)).item())
        toeplitz = [h["toeplitz_r2"] for h in result["per_head"][name]]
        assert toeplitz == pytest.approx(toeplitz_r2(found[name][0]).tolist())


def test_inspect_on_corpus_blocks_of_an_input_additive_model(tmp_path):
    from lab_fixtures import build_tiny_data

    from posattn.data import load_tokenizer

    data = build_tiny_data(tmp_path / "data")
    tokenizer = load_tokenizer(data)
    torch.manual_seed(0)
    model = PosAttnModel(tiny_encoder("learned", vocab_size=len(tokenizer)).config)
    model.save_pretrained(tmp_path / "model")  # no tokenizer: the data directory's is used
    out = tmp_path / "out"
    assert (
        main(
            [
                "inspect",
                str(tmp_path / "model"),
                "--output",
                str(out),
                "--data-dir",
                str(data),
                "--length",
                "16",
                "--samples",
                "3",
                "--head",
                "2",
            ]
        )
        == 0
    )
    result = json.loads((out / "inspect.json").read_text())
    assert result["inputs"]["texts"] == 3 and result["terms"]["head_drawn"] == 2
    assert set(result["terms"]["terms"]) == set(TERMS)  # no bias term: segments at the input
    assert result["rank"]["bound"] == 8
    assert result["rank"]["layers"]["1"]["numerical_rank"] == [8.0] * 3
    assert (out / "four_terms.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--head", "4", "head=4"),
        ("--layer", "3", "layer=3"),
        ("--length", "40", "length=40"),
        ("--length", "1", r"length=1 .*\[CLS\] and at least one token"),  # was ZeroDivisionError
    ],
)
def test_inspect_rejects_a_focus_outside_the_model(tmp_path, flag, value, message):
    _, path = saved_model(tmp_path, "learned")
    with pytest.raises(PosAttnConfigError, match=message):
        main(["inspect", str(path), "--output", str(tmp_path / "o"), "--text", TEXT, flag, value])


def test_inspect_rejects_a_directory_without_a_model(tmp_path):
    with pytest.raises(PosAttnConfigError, match=r"path=.*config\.json"):
        main(["inspect", str(tmp_path), "--text", TEXT])


def test_four_terms_of_real_minilm_weights_give_transformers_layer1_attention(minilm_path):
    """On the real checkpoint: softmax of the four terms summed is the attention that
    transformers' own BertModel computes in layer 1."""
    from transformers import AutoTokenizer, BertModel

    from posattn.lab.inspection import load_for_inspection

    bert = BertModel.from_pretrained(minilm_path, attn_implementation="eager").double().eval()
    ids = AutoTokenizer.from_pretrained(minilm_path)(TEXT, return_tensors="pt")["input_ids"]
    expected = bert(ids, output_attentions=True).attentions[0]
    found = four_terms(load_for_inspection(minilm_path).encoder, ids)
    torch.testing.assert_close(torch.softmax(sum(found.values()), -1), expected)


def test_relative_share_leaves_the_cls_row_and_column_out():
    """A per-offset pattern with its own [CLS] row and column (DIET App. C's reading of
    DIET-ABS): wholly relative without them, less so with them; no offsets over
    projected keys."""
    n = 10
    offsets = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    bias = torch.stack([offsets.double().sin(), (offsets.double() / 3).cos()])
    bias[:, 2, :] = torch.tensor([5.0, -5.0])[:, None] * torch.arange(n)  # cls_index = 2
    bias[:, :, 2] = 3.0
    share = relative_share(bias, cls_index=2)
    assert share["toeplitz_r2_without_cls"] == pytest.approx([1.0, 1.0])
    assert max(share["toeplitz_r2"]) < 0.9
    assert relative_share(torch.zeros(2, n, 4, dtype=torch.float64), 0) is None
