"""The lab's building blocks: run configs, MLM packing and masking, checkpoints, the report."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config, word_level_tokenizer

from posattn import PosAttnConfigError
from posattn.lab.pretraining.runconfig import PRESETS, load_run_config
from posattn.lab.runs.mlm_data import MaskedBlocks, pack_paragraphs
from posattn.lab.runs.trainer import last_checkpoint, prune_checkpoints


@pytest.fixture(scope="module")
def tokenizer():
    return word_level_tokenizer(list("abcdefghij"))


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_load(preset):
    config = load_run_config(preset)
    assert config.encodings and config.pretrain.steps > 0


def test_overrides_win_over_presets_and_are_typed():
    config = load_run_config("smoke", overrides=["pretrain.steps=7", "encodings=[t5,shaw]"])
    assert config.pretrain.steps == 7 and config.encodings == ["t5", "shaw"]
    assert config.model.d_model == 32  # from the preset


def test_unknown_key_names_the_closest_valid_one():
    with pytest.raises(PosAttnConfigError, match=r"'pretrain.stpes'.*'pretrain.steps'"):
        load_run_config(overrides=["pretrain.stpes=3"])
    with pytest.raises(PosAttnConfigError, match=r"'modl'.*'model'"):
        load_run_config(overrides=["modl.d_model=3"])


def test_bad_values_and_presets_are_rejected():
    with pytest.raises(PosAttnConfigError, match=r"pretrain.steps"):
        load_run_config(overrides=["pretrain.steps=many"])
    with pytest.raises(PosAttnConfigError, match=r"--preset='huge'.*smoke, quick, standard, paper"):
        load_run_config("huge")


@pytest.mark.parametrize(
    "override, message",
    [
        ("pretrain.seed=1.5", "pretrain.seed=1.5 is not allowed: expected an integer"),
        ("pretrain.steps=many", "pretrain.steps='many' is not allowed: expected an integer"),
        (
            "trainer.positional_lr_scale=x",
            "trainer.positional_lr_scale='x' is not allowed: expected a number",
        ),
        ("trainer.bf16=maybe", "trainer.bf16='maybe' is not allowed: expected true or false"),
        ("finetune.seeds=3", "finetune.seeds=3 is not allowed: expected a list of integers"),
        ("finetune.seeds=[a]", "finetune.seeds[0]='a' is not allowed: Value 'a' of type 'str'"),
    ],
)
def test_a_value_of_the_wrong_type_is_named_with_what_its_key_takes(override, message):
    with pytest.raises(PosAttnConfigError) as raised:
        load_run_config(overrides=[override])
    assert str(raised.value).startswith(message)


def test_config_file_layer(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  encoding: diet-rel\npretrain:\n  steps: 9\n")
    config = load_run_config("smoke", file=path, overrides=["pretrain.steps=11"])
    assert config.model.encoding == "diet-rel" and config.pretrain.steps == 11


def test_packing_joins_paragraphs_with_sep_and_starts_blocks_with_cls(tokenizer):
    blocks = pack_paragraphs(tokenizer, ["a b c", "d e", "f g h i j"], seq_len=4)
    ids = tokenizer.convert_tokens_to_ids
    stream = ids(["a", "b", "c", "[SEP]", "d", "e", "[SEP]", "f", "g", "h", "i", "j", "[SEP]"])
    cls = tokenizer.cls_token_id
    expected = [[cls, *stream[k : k + 3]] for k in range(0, 12, 3)]
    assert blocks.tolist() == expected


def test_masking_is_bert_80_10_10_and_deterministic(tokenizer):
    torch.manual_seed(0)
    blocks = torch.randint(5, 15, (400, 64))
    blocks[:, 0] = tokenizer.cls_token_id
    data = MaskedBlocks(blocks, tokenizer.mask_token_id, tokenizer.all_special_ids, 15, 0.15, 3)
    items = [data[i] for i in range(len(data))]
    inputs = torch.stack([x["input_ids"] for x in items])
    labels = torch.stack([x["labels"] for x in items])
    chosen = labels != -100
    assert not chosen[:, 0].any()  # [CLS] is never chosen
    assert chosen[:, 1:].float().mean().item() == pytest.approx(0.15, abs=0.01)
    as_mask = (inputs[chosen] == tokenizer.mask_token_id).float().mean().item()
    kept = (inputs[chosen] == labels[chosen]).float().mean().item()
    assert as_mask == pytest.approx(0.8, abs=0.02)
    assert kept == pytest.approx(0.1 + 0.1 / 15, abs=0.02)  # 10% kept, plus random hits
    assert torch.equal(labels[~chosen], torch.full_like(labels[~chosen], -100))
    assert torch.equal(data[7]["input_ids"], items[7]["input_ids"])  # same draw on re-read
    data.set_epoch(1)
    assert not torch.equal(data[7]["labels"], items[7]["labels"])  # a new draw per epoch


def test_last_checkpoint_and_pruning(tmp_path):
    with pytest.raises(PosAttnConfigError, match=r"--resume.*none was found"):
        last_checkpoint(tmp_path)
    for step in (5, 40, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / ".staging").mkdir()
    assert last_checkpoint(tmp_path).name == "checkpoint-40"
    prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [
        "checkpoint-10",
        "checkpoint-40",
    ]


def test_finetuning_reports_macro_f1_and_matthews_beside_accuracy():
    import numpy as np

    from posattn.lab.pretraining.finetune import EvaluationRecord

    labels = np.array([0, 0, 1, 1, 2])
    predicted = np.array([0, 1, 1, 1, 0])
    logits = np.eye(3)[predicted]
    metrics = EvaluationRecord()((logits, labels))
    assert metrics["accuracy"] == pytest.approx(0.6)
    # per-class F1: 0.5 (class 0), 0.8 (class 1), 0 (class 2, never predicted)
    assert metrics["f1_macro"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    # Gorodkin's multiclass MCC: (c s - sum p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2))
    assert metrics["matthews"] == pytest.approx((3 * 5 - (2 * 2 + 3 * 2)) / (12 * 16) ** 0.5)


@pytest.mark.parametrize("segments", ["input", "none"])
def test_a_pair_tasks_segment_ids_reach_only_a_model_that_reads_them(segments):
    """A model without segments refuses ids other than 0 (it would ignore them): fine-tuning
    and the probes leave a pair's segment ids out of its batches, and only of its."""
    from posattn import PosAttnForSequenceClassification
    from posattn.lab.pretraining.finetune import collator_for, encode
    from posattn.lab.probe.cell import logits_of

    tokenizer = word_level_tokenizer(["a", "b", "c"])
    records = [
        {"text": "a b", "text_pair": "c a", "label": 1},
        {"text": "b", "text_pair": "c", "label": 0},
    ]
    config = tiny_config(vocab_size=tokenizer.vocab_size, segments=segments, num_labels=2)
    model = PosAttnForSequenceClassification(config).eval()
    batch = collator_for(model, tokenizer)(list(encode(tokenizer, records, 16, None)))
    assert ("token_type_ids" in batch) == (segments == "input")
    pair_segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0]])
    if segments == "input":
        assert torch.equal(batch["token_type_ids"], pair_segments)
    with torch.no_grad():
        logits = model(**batch).logits
        probe_batch = {**batch, "token_type_ids": pair_segments}
        torch.testing.assert_close(logits_of(model, probe_batch), logits)
