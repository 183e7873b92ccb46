"""Every numeric run setting is checked against its declared range when a config is merged,
before a command runs anything: one line naming the key, the value and the range."""

from __future__ import annotations

import pytest
import torch

from posattn import PosAttnConfigError
from posattn.cli import entry, main
from posattn.lab.pretraining.runconfig import PRESETS, load_run_config
from posattn.lab.runs.ranges import AT_LEAST_1, FRACTION, POSITIVE_OR_NULL, PROBABILITY, SEEDS
from posattn.lab.translation.runconfig import TRANSLATION_PRESETS, load_translation_config


def refused_before_writing(argv: list[str], refusal: str, output) -> None:
    """The command refuses a setting (`refusal`: a regex of the message) with nothing
    written at its --output."""
    with pytest.raises(PosAttnConfigError, match=refusal):
        main([*argv, "--output", str(output)])
    assert not output.exists()


PRETRAINING = [
    ("pretrain.steps=-5", "pretrain.steps=-5", "integer >= 1"),
    ("pretrain.steps=0", "pretrain.steps=0", "integer >= 1"),
    ("pretrain.batch_size=0", "pretrain.batch_size=0", "integer >= 1"),
    ("finetune.batch_size=-1", "finetune.batch_size=-1", "integer >= 1"),
    ("pretrain.learning_rate=0", "pretrain.learning_rate=0.0", "number > 0"),
    ("pretrain.learning_rate=-1e-3", "pretrain.learning_rate=-0.001", "number > 0"),
    ("pretrain.warmup_ratio=1.5", "pretrain.warmup_ratio=1.5", r"\[0, 1\]"),
    ("finetune.warmup_ratio=-0.1", "finetune.warmup_ratio=-0.1", r"\[0, 1\]"),
    ("pretrain.weight_decay=-0.01", "pretrain.weight_decay=-0.01", ">= 0"),
    ("pretrain.mlm_probability=1.0", "pretrain.mlm_probability=1.0", r"\(0, 1\)"),
    ("pretrain.eval_steps=0", "pretrain.eval_steps=0", ">= 1"),
    ("pretrain.save_steps=0", "pretrain.save_steps=0", ">= 1"),
    ("pretrain.logging_steps=-1", "pretrain.logging_steps=-1", ">= 1"),
    ("finetune.epochs=0", "finetune.epochs=0", ">= 1"),
    ("pretrain.seed=-1", "pretrain.seed=-1", ">= 0"),
    ("finetune.seeds=[]", r"finetune.seeds=\[\]", "non-empty list"),
    ("finetune.seeds=[0,-2]", r"finetune.seeds=\[0, -2\]", "list of distinct integers >= 0"),
    # a seed twice is one run counted twice: its interval shrank to nothing
    ("finetune.seeds=[0,0]", r"finetune.seeds=\[0, 0\]", "list of distinct integers"),
    ("compare.pretrain_seeds=[1,2,1]", r"compare.pretrain_seeds=\[1, 2, 1\]", "distinct"),
    ("finetune.learning_rates=[]", r"finetune.learning_rates=\[\]", "non-empty list"),
    ("finetune.learning_rates=[1e-3,0]", "finetune.learning_rates=", "numbers > 0"),
    ("finetune.learning_rates=[1e-3,1e-3]", "finetune.learning_rates=", "distinct numbers"),
    ("finetune.max_train_examples=0", "finetune.max_train_examples=0", ">= 1 or null"),
    ("data.max_train_paragraphs=-3", "data.max_train_paragraphs=-3", ">= 1 or null"),
    ("model.d_model=0", "model.d_model=0", ">= 1"),
    # a ZeroDivisionError in packing the corpus
    ("model.max_len=1", "model.max_len=1", r">= 2 \(\[CLS\] and at least one corpus token"),
    # the tokenizer cut nothing: examples of 54 tokens reached a model of max_len 32
    ("finetune.max_len=2", "finetune.max_len=2", r">= 5 \(\[CLS\] A \[SEP\] B \[SEP\]"),
    ("model.num_heads=-4", "model.num_heads=-4", ">= 1"),
    ("model.dropout=1.0", "model.dropout=1.0", r"\[0, 1\)"),
    ("model.attention_dropout=-0.1", "model.attention_dropout=-0.1", r"\[0, 1\)"),
    ("pretrain.learning_rate=nan", "pretrain.learning_rate=nan", "number > 0"),
]


@pytest.mark.parametrize(("override", "key", "allowed"), PRETRAINING)
@pytest.mark.parametrize("command", ["pretrain", "finetune", "compare"])
def test_pretraining_commands_refuse_out_of_range_settings(
    command, override, key, allowed, tmp_path
):
    output = tmp_path / "run"
    args = {"pretrain": ["pretrain"], "finetune": ["finetune", str(tmp_path / "model")]}
    argv = [*args.get(command, [command]), "--preset", "smoke", "--output", str(output), override]
    with pytest.raises(PosAttnConfigError, match=f"^{key}.*not allowed: expected .*{allowed}"):
        main(argv)
    assert not output.exists()  # refused before anything ran


@pytest.mark.parametrize("command", [["finetune"], ["zero-shot"], ["translate", "eval", "--model"]])
def test_a_model_directory_without_config_is_refused_before_anything_is_written(
    command, tiny_data_dir, tmp_path
):
    """Before this check, `finetune /nonexistent` wrote its lock and stage into /finetune (the
    default output beside the model) and then failed in the hub's repo-id check, as
    `translate eval --model /nonexistent` did."""
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text('{"model_type": "posattn"}')
    data = ["--data-dir", str(tiny_data_dir), "--preset", "smoke"]
    name = "--model" if command[-1] == "--model" else "pretrained"
    with pytest.raises(PosAttnConfigError, match=rf"^{name}='.*model' is not allowed: a model"):
        main([*command, str(tmp_path / "missing" / "model"), *data])
    with pytest.raises(PosAttnConfigError, match=r"give '.*run/model'$"):
        main([*command, str(run), *data])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert [p.name for p in run.iterdir()] == ["model"]
    if command[0] == "translate":  # a masked LM is not an encoder-decoder
        with pytest.raises(PosAttnConfigError, match="'posattn-seq2seq' model; this is 'posattn'"):
            main([*command, str(run / "model"), *data])


@pytest.mark.parametrize(
    "command",
    [["compare"], ["compare", "--task", "translation"], ["probe"], ["bench", "--lengths", "16"]],
)
def test_a_names_option_with_no_name_is_refused(command, tmp_path):
    """`--encodings ,` named none: refused (compare had said "a list without repeated names",
    bench "encoding=''"), with nothing written."""
    refused_before_writing(
        [*command, "--encodings", ","],
        r"^--encodings=',' is not allowed: comma-sep",
        tmp_path / "run",
    )


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        (["probe"], "--tasks", "sort,reverse,sort"),
        (["probe"], "--test-lens", "32,64,32"),
        (["bench"], "--kernels", "sdpa,sdpa"),
        (["bench", "--kernels", "sdpa"], "--lengths", "16,16"),
        (["bench", "--kernels", "sdpa"], "--floor-backends", "flash,flash"),
        (["compare", "--task", "translation"], "--encodings", "t5,t5"),
    ],
)
def test_a_list_option_with_a_repeated_item_is_refused(command, option, value, tmp_path):
    """A repeated task, length or kernel was measured twice and reported as two rows."""
    refused_before_writing(
        [*command, option, value],
        rf"^{option}='{value}' is not allowed: comma-separated .*, none repeated",
        tmp_path / "run",
    )


TRANSLATION = [
    ("train.steps=-5", "train.steps=-5", ">= 1"),
    ("train.label_smoothing=1", "train.label_smoothing=1.0", r"\[0, 1\)"),
    ("decode.beam_size=0", "decode.beam_size=0", ">= 1"),
    ("decode.max_new_tokens=0", "decode.max_new_tokens=0", ">= 1"),
    ("data.max_eval_pairs=0", "data.max_eval_pairs=0", ">= 1 or null"),
    ("model.num_decoder_layers=0", "model.num_decoder_layers=0", ">= 1"),
    ("seeds=[]", r"seeds=\[\]", "non-empty list"),
    ("seeds=[3,3]", r"seeds=\[3, 3\]", "list of distinct integers"),
    ("decode.length_penalty=-1", "decode.length_penalty=-1", ">= 0"),  # was refused after training
]


@pytest.mark.parametrize(("override", "key", "allowed"), TRANSLATION)
@pytest.mark.parametrize("command", [["translate", "train"], ["compare", "--task", "translation"]])
def test_translation_commands_refuse_out_of_range_settings(
    command, override, key, allowed, tmp_path
):
    refused_before_writing(
        [*command, "--preset", "smoke", override],
        f"^{key}.*not allowed: expected .*{allowed}",
        tmp_path / "run",
    )


@pytest.mark.parametrize(
    ("command", "override", "named"),
    [
        (["compare", "--task", "translation"], "encodings=[]", r"encodings=\[\]"),  # StopIteration
        (["compare", "--task", "xlingual"], "finetune.tasks=[]", r"finetune.tasks=\[\]"),
    ],
)
def test_comparisons_of_nothing_are_refused_before_anything_runs(
    command, override, named, tmp_path
):
    """A translation comparison without encodings failed in its report (StopIteration); a
    cross-lingual one without tasks after its pretraining, in its figure."""
    refused_before_writing(
        [*command, "--preset", "smoke", override], f"^{named} is not allowed", tmp_path / "run"
    )


@pytest.mark.parametrize(
    ("override", "named"),
    [("finetune.tasks=[]", r"finetune.tasks=\[\]"), ("finetune.tasks=[nope]", "task='nope'")],
)
def test_finetune_refuses_no_task_or_an_unprepared_one_before_writing(
    override, named, tiny_data_dir, tmp_path
):
    """`finetune "finetune.tasks=[]"` wrote an empty finetune.json; a task the data directory
    does not hold was refused after stage.json had been written."""
    from posattn.lab.runs.sources import PreparedData

    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    pieces = len(PreparedData(tiny_data_dir).tokenizer())  # the vocabulary check passes
    (model / "config.json").write_text(f'{{"model_type": "posattn", "vocab_size": {pieces}}}')
    argv = ["finetune", str(model), "--preset", "smoke", "--data-dir", str(tiny_data_dir)]
    refused_before_writing([*argv, override], f"^{named} is not allowed", tmp_path / "out")


@pytest.mark.parametrize(
    ("override", "refusal"),
    [
        ("trainer.fp16=true", r"^trainer.fp16=True.*without a CUDA GPU"),
        ("model.kernel=triton", r"^kernel='triton'.*cannot serve tensors on cpu"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [["pretrain"], ["compare"], ["translate", "train"], ["compare", "--task", "xlingual"]],
)
def test_gpu_only_settings_are_refused_before_a_run_directory_is_written(
    command, override, refusal, tmp_path, monkeypatch
):
    """trainer.fp16 on a machine without a CUDA GPU was refused when the Trainer was built,
    and kernel="triton" at the first forward, both after the run directory and its
    stage.json had been written."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    refused_before_writing([*command, "--preset", "smoke", override], refusal, tmp_path / "run")


def test_the_console_command_reports_one_line_and_exits_2(tmp_path, capsys):
    output = tmp_path / "run"
    status = entry(["pretrain", "--preset", "smoke", "--output", str(output), "pretrain.steps=-5"])
    assert status == 2
    error = capsys.readouterr().err
    assert error == "posattn: error: pretrain.steps=-5 is not allowed: expected an integer >= 1\n"
    assert not output.exists()


def test_a_yaml_file_is_checked_like_an_override(tmp_path):
    file = tmp_path / "run.yaml"
    file.write_text("finetune:\n  epochs: 0\n")
    with pytest.raises(PosAttnConfigError, match=r"finetune\.epochs=0"):
        load_run_config("smoke", file)


def test_every_preset_is_in_range():
    for name in PRESETS:
        load_run_config(name)
    for name in TRANSLATION_PRESETS:
        load_translation_config(name)


def test_ranges_describe_themselves_and_admit_their_edges():
    assert AT_LEAST_1.admits(1) and not AT_LEAST_1.admits(0) and not AT_LEAST_1.admits(1.5)
    assert not AT_LEAST_1.admits(True)  # a bool is not a count
    assert FRACTION.admits(0.0) and FRACTION.admits(1.0) and not FRACTION.admits(1.01)
    assert PROBABILITY.admits(0.0) and not PROBABILITY.admits(1.0)
    assert POSITIVE_OR_NULL.admits(None) and not AT_LEAST_1.admits(None)
    assert SEEDS.admits([0, 3]) and not SEEDS.admits([]) and not SEEDS.admits([1, -1])
    assert PROBABILITY.describe() == "a number in [0, 1)"
    assert POSITIVE_OR_NULL.describe() == "an integer >= 1 or null"
