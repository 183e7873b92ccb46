"""The arms of a comparison: an encoding, one of the papers' ablations, or random-init."""

from dataclasses import asdict

import pytest

from posattn import PosAttnConfig, PosAttnConfigError
from posattn.lab.pretraining.arms import arm_config, check_arms, scaled_arm, split_arm
from posattn.lab.pretraining.compare import Cell, cells_of, check_before_training
from posattn.lab.pretraining.runconfig import PRESETS, load_run_config


@pytest.fixture
def config():
    return load_run_config("smoke", None, ["model.encoding_options={cls_index: 0}"])


def test_an_ablation_changes_only_what_it_names(config):
    tied = arm_config(config, "tupe-a/tie-cls").model
    assert (tied.encoding, tied.encoding_options) == (
        "tupe-a",
        {"cls_index": 0, "untie_cls": False},
    )
    assert tied.segments == config.model.segments
    inside = arm_config(config, "diet-rel/segments-attention").model
    assert (inside.encoding, inside.segments) == ("diet-rel", "attention")
    unshared = arm_config(config, "diet-abs/share-none").model
    assert unshared.encoding_options["sharing"] == "none"
    assert arm_config(config, "random-init").model.encoding == "learned"


def test_the_positional_rate_variant_scales_only_the_trainer_setting(config):
    plain, faster = arm_config(config, "diet-rel"), arm_config(config, "diet-rel/positional-lr-x10")
    assert faster.model == plain.model and plain.trainer.positional_lr_scale == 1.0
    assert faster.trainer.positional_lr_scale == 10.0
    assert asdict(faster.trainer) == {**asdict(plain.trainer), "positional_lr_scale": 10.0}
    # distinct cells: pretraining and fine-tuning fingerprints differ from the plain arm's
    for task in (None, "topic"):
        plain_stage = Cell("diet-rel", 0, task).stage(config, "out")
        faster_stage = Cell("diet-rel/positional-lr-x10", 0, task).stage(config, "out")
        assert plain_stage.fingerprint != faster_stage.fingerprint
    config.model.encoding_options = {}  # diet-rel has no cls_index
    config.trainer.positional_lr_scale = 2.0  # the run's own scale is multiplied, not replaced
    assert arm_config(config, "diet-rel/positional-lr-x10").trainer.positional_lr_scale == 20.0


@pytest.mark.parametrize(
    ("arms", "fragment"),
    [
        (["tupe-a/untie"], "variant of 'tupe-a'"),
        (["tupe-z"], "encodings"),
        (["learned", "learned"], "without repeated names"),
        ([], "a non-empty list"),  # an empty comparison wrote empty results
    ],
)
def test_bad_arms_are_refused_by_name(arms, fragment):
    with pytest.raises(PosAttnConfigError) as error:
        check_arms(arms)
    assert fragment in str(error.value)


def test_cells_cover_every_arm_seed_and_task(config):
    config.encodings = ["learned", "tupe-a/tie-cls"]
    config.compare.pretrain_seeds = [0, 3]
    config.finetune.tasks = ["sentiment", "topic"]
    pretraining, tuning = cells_of(config)
    assert pretraining == [Cell(a, s) for a in config.encodings for s in (0, 3)]
    assert len(tuning) == 8 and Cell("tupe-a/tie-cls", 3, "topic") in tuning
    cell = Cell("tupe-a/tie-cls", 3, "topic")
    assert cell.directory("out").as_posix() == "out/tupe-a+tie-cls/seed3/finetune/topic"
    cell_config = cell.config(config)
    assert cell_config.pretrain.seed == 3 and cell_config.finetune.tasks == ["topic"]
    assert split_arm("tupe-a/tie-cls") == ("tupe-a", "tie-cls")


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_arm_builds_a_model(preset):
    config = load_run_config(preset)
    check_arms(config.encodings)
    for arm in config.encodings:
        model = arm_config(config, arm).model
        PosAttnConfig(vocab_size=100, **asdict(model))  # the encoding checks its options here


@pytest.mark.parametrize(
    ("arm", "encoding", "scale"),
    [
        ("learned", "learned", 1.0),
        ("tupe-r", "tupe-r", 1.0),
        ("t5/positional-lr-x10", "t5", 10.0),
        ("diet-rel/positional-lr-x10", "diet-rel", 10.0),
        ("diet-abs/positional-lr-x10", "diet-abs", 10.0),
        ("none", "none", 1.0),
    ],
)
def test_a_warm_start_long_cell_is_the_pretraining_the_command_runs(arm, encoding, scale, tmp_path):
    """Each pretraining cell of `--preset warm-start-long` has the fingerprint of `posattn
    pretrain --preset warm-start-long model.encoding=E pretrain.seed=S` with the arm's
    positional rate: such a run, put where the cell goes, is reused, not recomputed."""
    from posattn.lab.pretraining.pretrain import pretrain_stage

    config = load_run_config("warm-start-long")
    cell = Cell(arm, 2)
    assert cell.config(config).trainer.positional_lr_scale == scale
    command = load_run_config(
        "warm-start-long",
        None,
        [f"model.encoding={encoding}", "pretrain.seed=2", f"trainer.positional_lr_scale={scale}"],
    )
    ours = cell.stage(config, tmp_path).fingerprint
    assert ours == pretrain_stage(command, tmp_path).fingerprint
    other_seed = load_run_config("warm-start-long", None, [f"model.encoding={encoding}"])
    assert ours != pretrain_stage(other_seed, tmp_path).fingerprint


def test_the_warm_start_long_bert_r_cell_is_the_pretraining_with_the_input_table_apart(tmp_path):
    """`bert-r/attention-lr-x10`'s cell is `posattn pretrain --preset warm-start-long
    model.encoding=bert-r trainer.positional_lr_scale=10 trainer.input_positions_lr_scale=1`,
    and not the run with both tables at ten times the rate."""
    from posattn.lab.pretraining.pretrain import pretrain_stage

    config = load_run_config("warm-start-long")
    assert "bert-r/attention-lr-x10" in config.encodings
    ours = Cell("bert-r/attention-lr-x10", 2).stage(config, tmp_path).fingerprint
    both = ["model.encoding=bert-r", "pretrain.seed=2", "trainer.positional_lr_scale=10"]
    apart = load_run_config("warm-start-long", None, [*both, "trainer.input_positions_lr_scale=1"])
    assert ours == pretrain_stage(apart, tmp_path).fingerprint
    together = load_run_config("warm-start-long", None, both)
    assert ours != pretrain_stage(together, tmp_path).fingerprint


class TinyTokenizer:
    """What check_before_training reads of a tokenizer: its size and pad id."""

    pad_token_id = 0

    def __len__(self) -> int:
        return 100


class AnyTask:
    @staticmethod
    def spec(name):
        return name


@pytest.fixture
def plain_config():
    return load_run_config("smoke", None, [])


def test_the_run_positional_rate_reaches_only_arms_with_positional_parameters(plain_config):
    config = plain_config
    config.trainer.positional_lr_scale = 10.0
    scales = {
        arm: arm_config(config, arm).trainer.positional_lr_scale
        for arm in (
            "learned",
            "diet-rel",
            "random-init",
            "none",
            "sinusoidal",
            "diet-abs-lin",
            "linformer/no-input-positions",
        )
    }
    assert scales == {
        "learned": 10.0,
        "diet-rel": 10.0,
        "random-init": 10.0,
        "none": 1.0,
        "sinusoidal": 1.0,
        "diet-abs-lin": 10.0,  # its factors
        "linformer/no-input-positions": 1.0,  # E and F alone: the attention's, not positions
    }
    assert [scaled_arm(config, arm) for arm in ("learned", "none")] == [True, False]
    # so a `none` cell is the same cell whatever rate the run gives positional parameters
    shared = Cell("none", 0, None).stage(config, "out").fingerprint
    config.trainer.positional_lr_scale = 1.0
    assert Cell("none", 0, None).stage(config, "out").fingerprint == shared
    assert Cell("learned", 0, None).stage(config, "out").fingerprint != shared


def test_a_positional_rate_that_reaches_no_arm_is_refused(plain_config):
    config = plain_config
    config.finetune.tasks = ["topic"]
    config.trainer.positional_lr_scale = 10.0
    config.encodings = ["none", "learned"]
    check_before_training(config, TinyTokenizer(), AnyTask())  # `none` beside a scaled arm
    config.encodings = ["none", "sinusoidal"]
    with pytest.raises(PosAttnConfigError) as error:
        check_before_training(config, TinyTokenizer(), AnyTask())
    message = str(error.value)
    assert "trainer.positional_lr_scale" in message and "none, sinusoidal" in message
    config.trainer.positional_lr_scale = 1.0
    config.encodings = ["learned", "none/positional-lr-x10"]  # asked for by name: refused
    with pytest.raises(PosAttnConfigError) as error:
        check_before_training(config, TinyTokenizer(), AnyTask())
    assert "none/positional-lr-x10" in str(error.value)


def test_linformer_without_input_positions_is_an_arm_and_other_encodings_refuse_it(plain_config):
    """`linformer/no-input-positions`: the same Linformer cell settings but for its input
    table, a cell of its own; an encoding without that option is refused before training."""
    config = plain_config
    config.finetune.tasks = ["topic"]
    bare = arm_config(config, "linformer/no-input-positions").model
    assert (bare.encoding, bare.encoding_options) == ("linformer", {"input_positions": False})
    plain = Cell("linformer", 0, None).stage(config, "out").fingerprint
    assert Cell("linformer/no-input-positions", 0, None).stage(config, "out").fingerprint != plain
    config.encodings = ["linformer", "linformer/no-input-positions", "diet-abs-lin"]
    check_before_training(config, TinyTokenizer(), AnyTask())
    config.encodings = ["diet-abs-lin/no-input-positions"]
    with pytest.raises(PosAttnConfigError, match=r"unknown option.*input_positions"):
        check_before_training(config, TinyTokenizer(), AnyTask())


def test_the_input_tables_rate_reaches_only_arms_with_an_input_table(plain_config):
    """bert-r's T5 table at 10x and its input table at 1x in one comparison: `learned`,
    whose only positional parameters are its input table, trains at the input rate, and
    arms without a table keep the input rate null (their cells unchanged)."""
    config = plain_config
    config.trainer.positional_lr_scale = 10.0
    config.trainer.input_positions_lr_scale = 1.0
    rates = {
        arm: (
            arm_config(config, arm).trainer.positional_lr_scale,
            arm_config(config, arm).trainer.input_positions_lr_scale,
        )
        for arm in ("bert-r", "learned", "t5", "none", "linformer", "linformer/no-input-positions")
    }
    assert rates == {
        "bert-r": (10.0, 1.0),
        "learned": (1.0, 1.0),
        "t5": (10.0, None),
        "none": (1.0, None),
        "linformer": (1.0, 1.0),
        "linformer/no-input-positions": (1.0, None),
    }
    assert [scaled_arm(config, arm) for arm in ("bert-r", "learned", "t5")] == [True, False, True]
    t5_cell = Cell("t5", 0, None).stage(config, "out").fingerprint
    config.trainer.input_positions_lr_scale = None
    assert Cell("t5", 0, None).stage(config, "out").fingerprint == t5_cell
    assert arm_config(config, "learned").trainer.positional_lr_scale == 10.0


def test_an_input_tables_rate_that_reaches_no_arm_is_refused(plain_config):
    config = plain_config
    config.finetune.tasks = ["topic"]
    config.trainer.input_positions_lr_scale = 2.0
    config.encodings = ["none", "learned"]
    check_before_training(config, TinyTokenizer(), AnyTask())
    config.encodings = ["none", "t5"]
    with pytest.raises(PosAttnConfigError) as error:
        check_before_training(config, TinyTokenizer(), AnyTask())
    message = str(error.value)
    assert "trainer.input_positions_lr_scale=2.0" in message and "none, t5" in message


def test_the_summary_names_both_rates(plain_config):
    from posattn.lab.pretraining.summary import rate_sentence

    config = plain_config
    config.encodings = ["bert-r", "learned", "none"]
    assert rate_sentence(config) == ""
    config.trainer.positional_lr_scale = 10.0
    assert rate_sentence(config) == (
        " Positional parameters train at 10 times the run's learning rate; `none`, without"
        " any, trains at the run's rate."
    )
    config.trainer.input_positions_lr_scale = 1.0
    assert rate_sentence(config) == (
        " Positional parameters train at 10 times the run's learning rate; `learned`, `none`"
        " have none besides an input table. Input position tables train at the run's learning"
        " rate."
    )
    config.trainer.input_positions_lr_scale = 0.5
    assert rate_sentence(config).endswith(" tables train at 0.5 times the run's learning rate.")


def test_the_attention_rate_variant_leaves_the_input_table_where_it_was(plain_config):
    """`bert-r/attention-lr-x10` trains T5's table at ten times the rate and BERT's input
    table at the one it had, as `trainer.positional_lr_scale=10
    trainer.input_positions_lr_scale=1` does by hand: the same cell, so a standalone run is
    adopted into it."""
    config = plain_config
    arm = arm_config(config, "bert-r/attention-lr-x10").trainer
    assert (arm.positional_lr_scale, arm.input_positions_lr_scale) == (10.0, 1.0)
    everything = arm_config(config, "bert-r/positional-lr-x10").trainer
    assert (everything.positional_lr_scale, everything.input_positions_lr_scale) == (10.0, None)
    # an arm without an input table trains as positional-lr-x10 would
    t5 = arm_config(config, "t5/attention-lr-x10").trainer
    assert (t5.positional_lr_scale, t5.input_positions_lr_scale) == (10.0, None)
    config.trainer.positional_lr_scale = 2.0  # the table keeps the run's rate, the rest x10
    arm = arm_config(config, "bert-r/attention-lr-x10").trainer
    assert (arm.positional_lr_scale, arm.input_positions_lr_scale) == (20.0, 2.0)
    config.trainer.positional_lr_scale = 1.0
    by_hand = load_run_config(
        "smoke",
        None,
        [
            "model.encoding=bert-r",
            "trainer.positional_lr_scale=10",
            "trainer.input_positions_lr_scale=1",
        ],
    )
    cell = Cell("bert-r/attention-lr-x10", 0, None)
    assert cell.config(config).trainer == by_hand.trainer


def test_the_attention_rate_variant_on_an_input_table_alone_is_refused(plain_config):
    config = plain_config
    config.finetune.tasks = ["topic"]
    config.encodings = ["bert-r/attention-lr-x10", "learned"]
    check_before_training(config, TinyTokenizer(), AnyTask())
    config.encodings = ["learned/attention-lr-x10"]
    with pytest.raises(PosAttnConfigError) as error:
        check_before_training(config, TinyTokenizer(), AnyTask())
    assert "learned/attention-lr-x10" in str(error.value) and "besides its input table" in str(
        error.value
    )
