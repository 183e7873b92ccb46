"""`posattn finetune | zero-shot` take the settings the model was pretrained with from its run's
stage.json: a standalone fine-tuning is the comparison cell's, rates included."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import pytest

from posattn import PosAttnConfigError
from posattn.data.identity import english_folders
from posattn.lab.pretraining import commands
from posattn.lab.pretraining.compare import Cell
from posattn.lab.pretraining.finetune import finetune_stage
from posattn.lab.pretraining.pretrain import pretrain_stage
from posattn.lab.pretraining.pretrained_run import pretraining_settings
from posattn.lab.pretraining.runconfig import load_run_config
from posattn.lab.runs.stages import start_stage


def pretrained_run(stage) -> str:
    """A run directory as `posattn pretrain` leaves it: stage.json and model/config.json."""
    start_stage(stage)
    (stage.directory / "model").mkdir(parents=True)
    (stage.directory / "model" / "config.json").write_text('{"model_type": "posattn"}')
    return str(stage.directory / "model")


def arguments(model: str, *overrides: str, preset: str = "warm-start-long"):
    return argparse.Namespace(
        pretrained=model,
        preset=preset,
        config=None,
        overrides=list(overrides),
        data_dir=None,
        overwrite=False,
    )


def tuning_config(model: str, *overrides: str, preset: str = "warm-start-long"):
    """The config `posattn finetune MODEL --preset PRESET OVERRIDES...` runs with."""
    return commands.pretrained_config(arguments(model, *overrides, preset=preset), trains=True)[0]


@pytest.mark.parametrize(
    "arm", ["bert-r/attention-lr-x10", "t5/positional-lr-x10", "learned", "none"]
)
def test_fine_tuning_a_cells_model_is_that_cells_fine_tuning(arm, tmp_path):
    """`posattn finetune CELL/model --preset warm-start-long "finetune.tasks=[word-order]"`
    has the fingerprint of the comparison's fine-tuning cell of that model: the arm's
    encoding and its positional rates, which the preset alone does not give."""
    config = load_run_config("warm-start-long")
    pretraining = Cell(arm, 2).stage(config, tmp_path / "cell")
    model = pretrained_run(pretraining)
    tuned = tuning_config(model, "finetune.tasks=[word-order]")
    cell = Cell(arm, 2, "word-order").stage(config, tmp_path / "out")
    assert finetune_stage(tuned, tmp_path / "out").fingerprint == cell.fingerprint
    if arm != "learned":  # what the preset alone fine-tunes is another cell
        preset_only = load_run_config("warm-start-long", None, ["finetune.tasks=[word-order]"])
        assert finetune_stage(preset_only, tmp_path / "out").fingerprint != cell.fingerprint


def test_the_command_line_sets_other_rates_and_says_so(tmp_path, capsys):
    pretraining = load_run_config(
        "warm-start-long",
        None,
        ["model.encoding=bert-r", "trainer.positional_lr_scale=10", "pretrain.seed=3"],
    )
    model = pretrained_run(pretrain_stage(pretraining, tmp_path))
    config = tuning_config(model)
    assert (config.model.encoding, config.pretrain.seed) == ("bert-r", 3)
    assert config.trainer.positional_lr_scale == 10.0
    assert "trainer.positional_lr_scale=10.0" in capsys.readouterr().out
    config = tuning_config(model, "trainer.positional_lr_scale=1")
    assert config.trainer.positional_lr_scale == 1.0
    line = capsys.readouterr().out
    assert "trainer.positional_lr_scale=1.0" in line and "pretrained at" in line
    assert "trainer.positional_lr_scale=10.0" in line


def test_a_default_left_out_of_the_stage_is_not_taken_from_the_preset(tmp_path):
    """A stage leaves out settings at their defaults (a rate of 1, pretrain.init_from null):
    those are filled in, so `--preset warm-start` (rate 10, init_from minilm) does not show
    through for a model pretrained otherwise."""
    pretraining = load_run_config(
        "warm-start", None, ["trainer.positional_lr_scale=1", "pretrain.init_from=null"]
    )
    stage = pretrain_stage(pretraining, tmp_path)
    assert "trainer" not in stage.settings and "init_from" not in stage.settings["pretrain"]
    model = pretrained_run(stage)
    config = tuning_config(model, preset="warm-start")
    assert config.trainer.positional_lr_scale == 1.0
    assert config.pretrain.init_from is None
    assert load_run_config("warm-start").trainer.positional_lr_scale == 10.0


def test_a_model_or_pretrain_setting_other_than_the_models_is_refused(tmp_path):
    pretraining = load_run_config("warm-start-long", None, ["model.encoding=t5"])
    model = pretrained_run(pretrain_stage(pretraining, tmp_path))
    with pytest.raises(PosAttnConfigError) as error:
        tuning_config(model, "model.encoding=learned")
    assert error.value.parameter == "model.encoding" and error.value.value == "learned"
    assert "'t5', what the model in" in error.value.allowed
    with pytest.raises(PosAttnConfigError, match=r"^pretrain\.steps=10 is not allowed: 1000"):
        tuning_config(model, "pretrain.steps=10")
    # the values it was pretrained with are no change
    config = tuning_config(model, "model.encoding=t5")
    assert config.model.encoding == "t5"


def test_a_setting_this_version_no_longer_has_is_left_out_with_a_warning(tmp_path):
    """A run of an older posattn may record a model or pretrain key the schema has since
    dropped: the fine-tuning still starts (the model reads its own config.json), and the key
    is named, not taken."""
    pretraining = load_run_config("warm-start-long", None, ["model.encoding=t5"])
    stage = pretrain_stage(pretraining, tmp_path)
    model = pretrained_run(stage)
    record_path = stage.directory / "stage.json"
    record = json.loads(record_path.read_text())
    record["settings"]["model"]["retired_option"] = 3
    record["settings"]["pretrain"]["old_schedule"] = "linear"
    record_path.write_text(json.dumps(record))
    with pytest.warns(UserWarning) as caught:
        config = tuning_config(model)
    [warned_model, warned_pretrain] = [str(w.message) for w in caught]
    assert "records model settings this version of posattn does not have (retired_option)" in (
        warned_model
    )
    assert "(old_schedule)" in warned_pretrain and str(record_path) in warned_pretrain
    assert config.model.encoding == "t5"


def test_a_model_from_elsewhere_keeps_the_presets_settings(tmp_path):
    """No stage.json beside the model (an imported checkpoint), or that of a fine-tuning: the
    preset and the overrides alone, as before."""
    model = tmp_path / "imported" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "posattn"}')
    assert pretraining_settings(model) is None
    config = tuning_config(str(model), "model.encoding=t5")
    assert config.model.encoding == "t5"
    tuning = finetune_stage(load_run_config("warm-start-long"), tmp_path / "tuned")
    start_stage(tuning)
    assert pretraining_settings(tmp_path / "tuned" / "model") is None
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "stage.json").write_text(json.dumps({"settings": []}))
    assert pretraining_settings(tmp_path / "damaged" / "model") is None


def test_finetune_and_zero_shot_run_with_the_pretrainings_settings(tmp_path, monkeypatch, capsys):
    """The commands pass the inherited config on (the run itself is stood in for)."""
    from posattn.lab.pretraining import finetune, zero_shot

    pretraining = load_run_config(
        "warm-start-long", None, ["model.encoding=diet-rel", "trainer.positional_lr_scale=10"]
    )
    model = pretrained_run(pretrain_stage(pretraining, tmp_path / "run"))
    seen = []
    # No data is read: the stages record the digests of folders that are not there.
    data = SimpleNamespace(folders=lambda tasks=(): english_folders(tmp_path / "data", tasks))
    monkeypatch.setattr(commands, "data_for", lambda config: data)
    monkeypatch.setattr(commands, "tokenizer_for", lambda config, data: None)
    monkeypatch.setattr(finetune, "finetune", lambda model, config, *rest: seen.append(config))
    monkeypatch.setattr(zero_shot, "scored_once", lambda output, score: seen.append(output) or {})
    argv = arguments(model, preset="quick")
    argv.output = str(tmp_path / "tuned")
    assert commands.run_finetune(argv) == 0
    (config,) = seen
    assert (config.model.encoding, config.trainer.positional_lr_scale) == ("diet-rel", 10.0)
    assert "positional rates trainer.positional_lr_scale=10.0" in capsys.readouterr().out
    assert config.finetune == load_run_config("quick").finetune  # the preset's fine-tuning
    argv.output = None
    assert commands.run_zero_shot(argv) == 0
    assert seen[1] == tmp_path / "run" / "zero-shot"
    line = capsys.readouterr().out  # nothing is trained: no rates to name
    assert "pretrain settings of its pretraining" in line and "rates" not in line
