"""Pretraining from a BERT checkpoint's content weights (`pretrain.init_from`): what is copied,
what starts fresh, the tokenizer the run uses, and the errors of a start that cannot be made."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForMaskedLM

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.lab.pretraining.arms import arm_config
from posattn.lab.pretraining.pretrain import model_config
from posattn.lab.pretraining.runconfig import PretrainSection, RunConfig
from posattn.lab.pretraining.warm_start import (
    check_start,
    checkpoint_dir,
    initial_masked_lm,
    run_tokenizer,
)
from posattn.lab.runs.config import ModelSection
from posattn.lab.runs.fingerprint import run_settings
from posattn.models import PosAttnForMaskedLM

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json")
TINY = dict(d_model=16, num_layers=2, num_heads=2, ffn_dim=32, max_len=32, norm="post")


@pytest.fixture(autouse=True)
def float32(float32_default):
    yield


@pytest.fixture
def tiny_checkpoint(minilm_path, tmp_path) -> Path:
    """A 2-layer, 16-wide BERT with an MLM head and MiniLM's tokenizer (its 30,522 pieces)."""
    torch.manual_seed(3)
    bert = BertConfig(
        vocab_size=30522,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=40,
    )
    path = tmp_path / "tiny-bert"
    BertForMaskedLM(bert).save_pretrained(path)
    for name in TOKENIZER_FILES:
        shutil.copy2(minilm_path / name, path / name)
    return path


def tiny_run(checkpoint: Path, **pretrain) -> RunConfig:
    return RunConfig(
        model=ModelSection(**TINY),
        pretrain=PretrainSection(init_from=str(checkpoint), **pretrain),
    )


def tiny_model_config(run: RunConfig, encoding: str):
    run = replace(run, model=replace(run.model, encoding=encoding))
    return model_config(run, run_tokenizer(run.pretrain.init_from, None))


@pytest.mark.parametrize("encoding", ["learned", "tupe-r", "diet-abs"])
def test_content_weights_are_the_checkpoints_and_positions_start_fresh(tiny_checkpoint, encoding):
    weights = load_file(tiny_checkpoint / "model.safetensors")
    cfg = tiny_model_config(tiny_run(tiny_checkpoint), encoding)
    model = initial_masked_lm(cfg, str(tiny_checkpoint))
    encoder = model.base_model.encoder
    for ours, theirs in [
        (encoder.embeddings.word.weight, "bert.embeddings.word_embeddings.weight"),
        (
            encoder.layers[1].attention.k_proj.weight,
            "bert.encoder.layer.1.attention.self.key.weight",
        ),
        (encoder.layers[0].ffn.down.bias, "bert.encoder.layer.0.output.dense.bias"),
        (model.head.dense.weight, "cls.predictions.transform.dense.weight"),
    ]:
        torch.testing.assert_close(ours.detach(), weights[theirs], rtol=0, atol=0)
    # The positional parameters are the encoding's own initialisation: what the same seed
    # gives a model built from random weights, BERT's table unused.
    torch.manual_seed(0)
    started = positional_parameters(initial_masked_lm(cfg, str(tiny_checkpoint)))
    torch.manual_seed(0)
    scratch = positional_parameters(PosAttnForMaskedLM(cfg))
    assert started and started.keys() == scratch.keys()
    for name, value in started.items():
        torch.testing.assert_close(value, scratch[name], rtol=0, atol=0)
    if encoding == "learned":
        table = weights["bert.embeddings.position_embeddings.weight"][: cfg.max_len]
        assert not torch.equal(encoder.encoding.table.weight.detach(), table)


def positional_parameters(model) -> dict:
    """The positional encoding's parameters of a masked-LM model, by name."""
    encoding = model.base_model.encoder.encoding
    return {name: p.detach().clone() for name, p in encoding.named_parameters()}


def test_checkpoint_positions_copy_the_first_max_len_rows_of_bert_table(tiny_checkpoint):
    weights = load_file(tiny_checkpoint / "model.safetensors")
    run = arm_config(tiny_run(tiny_checkpoint), "learned/checkpoint-positions")
    assert run.pretrain.init_positions is True
    cfg = tiny_model_config(run, "learned")
    model = initial_masked_lm(cfg, run.pretrain.init_from, run.pretrain.init_positions)
    table = weights["bert.embeddings.position_embeddings.weight"]
    assert table.shape[0] == 40 and cfg.max_len == 32
    torch.testing.assert_close(
        model.base_model.encoder.encoding.table.weight.detach(), table[:32], rtol=0, atol=0
    )


def test_the_run_uses_the_checkpoints_tokenizer(tiny_checkpoint, tiny_data_dir):
    from posattn.lab.runs.sources import PreparedData

    data = PreparedData(tiny_data_dir)
    ours = run_tokenizer(str(tiny_checkpoint), data)
    assert len(ours) == 30522
    assert ours("the cat")["input_ids"] == [101, 1996, 4937, 102]  # bert-base-uncased ids
    assert len(run_tokenizer(None, data)) == len(data.tokenizer()) != 30522


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"d_model": 32}, "model.d_model=32 is not allowed: 16, the size of"),
        ({"num_layers": 3}, "model.num_layers=3 is not allowed: 2, the size of"),
        ({"num_heads": 4}, "model.num_heads=4 is not allowed: 2"),
        ({"ffn_dim": 64}, "model.ffn_dim=64 is not allowed: 32"),
        ({"norm": "pre"}, "model.norm='pre' is not allowed: 'post'"),
    ],
)
def test_a_model_of_other_sizes_is_refused_naming_the_field(tiny_checkpoint, change, message):
    run = tiny_run(tiny_checkpoint)
    run = replace(run, model=replace(run.model, **change))
    with pytest.raises(PosAttnConfigError, match=message):
        check_start(str(tiny_checkpoint), False, tiny_model_config(run, "learned"))


def test_position_table_requests_that_cannot_be_served_are_refused(tiny_checkpoint):
    cfg = tiny_model_config(tiny_run(tiny_checkpoint), "learned")
    with pytest.raises(PosAttnConfigError, match="init_positions=True is not allowed: needs"):
        check_start(None, True, cfg)
    tupe = tiny_model_config(tiny_run(tiny_checkpoint), "tupe-r")
    with pytest.raises(PosAttnConfigError, match=r"encoding 'learned'.*not 'tupe-r'"):
        check_start(str(tiny_checkpoint), True, tupe)
    long = replace(cfg, max_len=64)
    with pytest.raises(PosAttnConfigError, match=r"model\.max_len=64 is not allowed: at most 40"):
        check_start(str(tiny_checkpoint), True, long)


def test_an_unknown_start_is_refused_naming_init_from(tmp_path):
    with pytest.raises(PosAttnConfigError, match=r"pretrain\.init_from=.*a BERT checkpoint dir"):
        checkpoint_dir(str(tmp_path / "nowhere"))
    assert (checkpoint_dir("minilm") / "config.json").is_file() or pytest.skip("no MiniLM")


def test_a_checkpoint_of_other_shapes_is_refused_naming_the_parameter(tiny_checkpoint):
    weights = load_file(tiny_checkpoint / "model.safetensors")
    name = "bert.encoder.layer.0.attention.self.query.weight"
    save_file({**weights, name: torch.zeros(16, 8)}, tiny_checkpoint / "model.safetensors")
    cfg = tiny_model_config(tiny_run(tiny_checkpoint), "learned")
    with pytest.raises(PosAttnConfigError, match=r"layers.0.attention.q_proj.weight=\[16, 8\]"):
        initial_masked_lm(cfg, str(tiny_checkpoint))


def test_settings_without_a_start_keep_their_fingerprint():
    """Cells finished before init_from existed stay reusable."""
    plain = run_settings(pretrain=PretrainSection())
    assert "init_from" not in plain["pretrain"] and "init_positions" not in plain["pretrain"]
    started = run_settings(pretrain=PretrainSection(init_from="minilm"))
    assert started["pretrain"]["init_from"] == "minilm"


def test_compare_from_a_checkpoint_pretrains_and_fine_tunes_with_its_tokenizer(
    tiny_checkpoint, tiny_data_dir, tmp_path
):
    output = tmp_path / "compare"
    sizes = [f"model.{key}={value}" for key, value in TINY.items()]
    assert main([
        "compare", "--preset", "smoke", "--data-dir", str(tiny_data_dir), "--output", str(output),
        "--encodings", "learned/checkpoint-positions,tupe-r,none,random-init",
        f"pretrain.init_from={tiny_checkpoint}", *sizes, "pretrain.steps=2",
        "trainer.positional_lr_scale=10",
        "finetune.tasks=[sentiment]", "finetune.seeds=[0]", "finetune.epochs=1",
    ]) == 0  # fmt: skip
    results = json.loads((output / "results.json").read_text())["results"]
    assert list(results) == ["learned/checkpoint-positions", "tupe-r", "none", "random-init"]
    for arm in results:
        model = output / arm.replace("/", "+") / "seed0" / "pretrain" / "model"
        assert json.loads((model / "config.json").read_text())["vocab_size"] == 30522
        assert (model / "tokenizer.json").is_file()
    # Random initialisation is the same architecture with nothing copied.
    weights = load_file(tiny_checkpoint / "model.safetensors")
    random_init = load_file(
        output / "random-init" / "seed0" / "pretrain" / "model" / "model.safetensors"
    )
    word = "posattn.encoder.embeddings.word.weight"
    assert not torch.equal(random_init[word], weights["bert.embeddings.word_embeddings.weight"])
    text = (output / "results.md").read_text()
    assert f"starts from the content weights of `{tiny_checkpoint}`" in text
    # `none` has no positional parameters for the run's positional rate: it trains at 1x
    assert "Positional parameters train at 10 times the run's learning rate; `none`, " in text
    for arm, scale in (("tupe-r", 10.0), ("none", None)):
        stage = json.loads((output / arm / "seed0" / "pretrain" / "stage.json").read_text())
        assert stage["settings"].get("trainer", {}).get("positional_lr_scale") == scale


def test_a_run_from_random_weights_says_nothing_of_a_start():
    from posattn.lab.pretraining.summary import start_sentence

    assert start_sentence(PretrainSection()) == ""
    assert "`minilm`" in start_sentence(PretrainSection(init_from="minilm"))


def test_fine_tuning_with_another_vocabulary_is_refused(tiny_checkpoint, tiny_data_dir, tmp_path):
    from posattn.lab.pretraining.finetune import finetune
    from posattn.lab.runs.sources import PreparedData

    data = PreparedData(tiny_data_dir)
    cfg = tiny_model_config(tiny_run(tiny_checkpoint), "learned")
    model_dir = tmp_path / "model"
    initial_masked_lm(cfg, str(tiny_checkpoint)).save_pretrained(model_dir)
    with pytest.raises(PosAttnConfigError, match=r"tokenizer='\d+ pieces'.*the 30522 of the model"):
        finetune(model_dir, RunConfig(), tmp_path / "finetune", data.tokenizer(), data)


def test_a_stage_started_from_a_checkpoint_records_it_and_is_refused_when_it_changes(
    tiny_checkpoint, tiny_data_dir, tmp_path
):
    """Pretraining, fine-tuning and zero-shot stages that start from a checkpoint read its
    weights and tokenizer, not the prepared tokenizer: they record the checkpoint's digest
    (`init_from`) in its place, are not refused when the prepared tokenizer changes, and are
    refused, naming the checkpoint, when a file of it changes (another version of a package
    under the same name)."""
    from posattn.data.identity import folder_digest
    from posattn.lab.pretraining.finetune import finetune_stage
    from posattn.lab.pretraining.pretrain import pretrain_stage
    from posattn.lab.pretraining.zero_shot import zero_shot_stage
    from posattn.lab.runs.stages import FINISHED, stage_state, start_stage

    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    run = replace(tiny_run(tiny_checkpoint), data=replace(RunConfig().data, data_dir=str(data)))
    built = {
        "pretrain": pretrain_stage(run, tmp_path / "pretrain"),
        "finetune": finetune_stage(run, tmp_path / "finetune"),
        "zero_shot": zero_shot_stage(run, "sentiment", tmp_path / "zero_shot"),
    }
    for stage in built.values():
        digests = stage.data_digests()
        assert digests["init_from"] == folder_digest(tiny_checkpoint)
        assert "tokenizer" not in digests and digests["corpus"] == folder_digest(data / "corpus")
    stage = built["pretrain"]
    start_stage(stage)
    (stage.directory / "metrics.json").write_text("{}")
    (data / "tokenizer" / "vocab.txt").write_text("[PAD]\n")  # not what this stage read
    assert stage_state(stage) == FINISHED
    old = folder_digest(tiny_checkpoint)[:12]
    with open(tiny_checkpoint / "config.json", "a") as handle:
        handle.write("\n")
    new = folder_digest(tiny_checkpoint)[:12]
    expected = rf'data\.init_from: "{old}" -> "{new}" \(the checkpoint the model starts from'
    with pytest.raises(PosAttnConfigError, match=expected):
        stage_state(pretrain_stage(run, tmp_path / "pretrain"))
    # Without a checkpoint the prepared tokenizer is read and recorded, as before.
    plain = pretrain_stage(replace(run, pretrain=PretrainSection()), tmp_path / "plain")
    assert set(plain.data_digests()) == {"corpus", "tokenizer"}


def test_a_stage_recorded_before_digests_is_not_refused_for_a_reinstalled_checkpoint(
    tiny_checkpoint, tiny_data_dir, tmp_path, monkeypatch
):
    """A stage.json of an older posattn (no digests) is refused where the prepared data was
    written after it, but not where only the checkpoint's files are newer: they carry the
    time their package was installed, not a change."""
    import os

    from posattn.lab.pretraining.pretrain import pretrain_stage
    from posattn.lab.runs import stages
    from posattn.lab.runs.stages import FINISHED, stage_state

    monkeypatch.setattr(stages, "_warned_undigested", [])
    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    run = replace(tiny_run(tiny_checkpoint), data=replace(RunConfig().data, data_dir=str(data)))
    stage = pretrain_stage(run, tmp_path / "old")
    stage.directory.mkdir()
    record = {"fingerprint": stage.fingerprint, "settings": stage.settings}
    (stage.directory / "stage.json").write_text(json.dumps(record))
    (stage.directory / "metrics.json").write_text("{}")
    later = (stage.directory / "stage.json").stat().st_mtime + 60
    os.utime(tiny_checkpoint / "model.safetensors", (later, later))  # installed again
    with pytest.warns(UserWarning, match="records no data digests"):
        assert stage_state(stage) == FINISHED
    os.utime(data / "corpus" / "train.txt", (later, later))  # prepared again
    with pytest.raises(PosAttnConfigError, match=r"data: prepared again after this stage\.json"):
        stage_state(stage)
