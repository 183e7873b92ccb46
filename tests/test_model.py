"""The encoder, its heads, its config and the command line."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config, tiny_encoder, tiny_seq2seq_config
from reference import layer_norm

from posattn import (
    PosAttnConfig,
    PosAttnForCausalLM,
    PosAttnForMaskedLM,
    PosAttnForSeq2SeqLM,
    PosAttnForSequenceClassification,
)
from posattn.cli import encoding_rows, main
from posattn.encodings import ENCODINGS


def test_config_round_trips_through_json(tmp_path):
    config = tiny_config("tupe-r", encoding_options={"cls_index": 2}, segments="attention")
    config.save_pretrained(tmp_path)
    loaded = PosAttnConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict()
    assert json.loads((tmp_path / "config.json").read_text())["encoding_options"] == {
        "cls_index": 2
    }
    assert loaded.hidden_size == 24 and loaded.num_attention_heads == 3  # transformers names


def randomise(model):
    torch.manual_seed(5)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model.eval()


def test_mlm_head_is_bert_transform_with_tied_decoder():
    model = randomise(PosAttnForMaskedLM(tiny_config("diet-abs")))
    word = model.posattn.encoder.embeddings.word.weight
    assert model.head.decoder.weight is word
    ids = torch.randint(0, 40, (2, 7))
    with torch.no_grad():
        hidden = model.posattn(ids).last_hidden_state
        head = model.head
        h = F.gelu(hidden @ head.dense.weight.T + head.dense.bias)
        h = layer_norm(h, head.norm.weight, head.norm.bias, head.norm.eps)
        expected = h @ word.T + head.decoder.bias
        torch.testing.assert_close(model(ids).logits, expected)


TIED_HEADS = {
    "masked LM": lambda: PosAttnForMaskedLM(tiny_config("t5")),
    "causal LM": lambda: PosAttnForCausalLM(tiny_config("rope", causal=True)),
    "encoder-decoder": lambda: PosAttnForSeq2SeqLM(tiny_seq2seq_config("t5")),
}


def tied_groups(model) -> list[set[str]]:
    """The names of each parameter that more than one name refers to."""
    names: dict[int, set[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), set()).add(name)
    return sorted((group for group in names.values() if len(group) > 1), key=sorted)


@pytest.mark.parametrize("head", TIED_HEADS)
@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_a_conversion_keeps_the_tied_weights_one_parameter(head, device):
    """`.to("meta")` (torch's recipe for an ensemble's base) makes new Parameters, which
    would untie the output embeddings; `functional_call` then left the output weight on
    meta, and torch's linear of a CPU input by a meta weight returned garbage."""
    model = TIED_HEADS[head]()
    before = tied_groups(model)
    assert before, "the head ties no weights"
    converted = model.to(device, torch.float64)
    assert converted is model and tied_groups(model) == before
    assert {p.device.type for p in model.parameters()} == {device}


def test_a_conversion_leaves_untied_weights_untied():
    model = PosAttnForSeq2SeqLM(tiny_seq2seq_config("t5", tie_word_embeddings=False))
    assert tied_groups(model.to("meta")) == []


def test_classification_reads_the_first_token():
    model = randomise(PosAttnForSequenceClassification(tiny_config("tupe-a", num_labels=3)))
    ids = torch.randint(0, 40, (2, 7))
    with torch.no_grad():
        first = model.posattn(ids).last_hidden_state[:, 0]
        head = model.head
        pooled = torch.tanh(first @ head.pooler.weight.T + head.pooler.bias)
        expected = pooled @ head.classifier.weight.T + head.classifier.bias
        torch.testing.assert_close(model(ids).logits, expected)


def test_pre_norm_differs_from_post_norm_and_ends_with_a_layernorm():
    post, pre = tiny_encoder(norm="post"), tiny_encoder(norm="pre")
    assert post.final_norm is None and pre.final_norm is not None
    ids = torch.randint(0, 40, (1, 6))
    with torch.no_grad():
        assert (post(ids) - pre(ids)).abs().max() > 1e-3


def test_list_names_every_encoding_with_paper_and_equation(capsys):
    rows = {row[0]: row for row in encoding_rows()}
    assert set(rows) == set(ENCODINGS)
    assert rows["tupe-r"][2] == "TUPE Eq. 11"
    assert rows["diet-abs"][2] == "DIET Eq. 1"
    assert main(["list", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n| `") == len(ENCODINGS)
    assert "DIET Eq. 3" in out


def test_readme_encoding_table_is_current(capsys):
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    start = readme.index("<!-- encodings:start")
    table = readme[readme.index("\n", start) + 1 : readme.index("<!-- encodings:end -->")]
    main(["list", "--markdown"])
    assert table == capsys.readouterr().out
