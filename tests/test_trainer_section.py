"""The run configs' `trainer:` section: each knob reaches TrainingArguments, bad values are
named with their key, the global batch stays the global batch under gradient accumulation,
and only knobs that change numbers change a stage's fingerprint."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posattn import PosAttnConfigError
from posattn.lab.pretraining.finetune import finetune_arguments, finetune_stage
from posattn.lab.pretraining.pretrain import pretrain_stage, training_arguments
from posattn.lab.pretraining.runconfig import load_run_config
from posattn.lab.runs.trainer_section import TrainerSection, check_machine
from posattn.lab.translation import train as translation_train
from posattn.lab.translation.runconfig import load_translation_config

KNOBS = [
    "trainer.bf16=true",
    "trainer.gradient_accumulation_steps=2",
    "trainer.gradient_checkpointing=true",
    "trainer.report_to=[]",
    "trainer.torch_compile=true",
    "trainer.dataloader_num_workers=2",
    "trainer.save_on_each_node=true",
]


def test_every_knob_reaches_the_pretraining_arguments(tmp_path):
    config = load_run_config("smoke", overrides=[*KNOBS, "pretrain.batch_size=8"])
    args = training_arguments(config, tmp_path)
    assert args.bf16 is True and args.fp16 is False
    assert args.gradient_accumulation_steps == 2
    assert args.activation_checkpointing is True
    assert args.report_to == []
    assert args.torch_compile is True
    assert args.dataloader_num_workers == 2
    assert args.save_on_each_node is True
    # the global batch of 8 = 1 process x 2 accumulation steps x micro-batches of 4
    assert args.per_device_train_batch_size == 4
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == 8


def test_defaults_report_to_tensorboard_and_change_nothing_else(tmp_path):
    args = training_arguments(load_run_config("smoke"), tmp_path)
    assert args.report_to == ["tensorboard"]
    assert (args.bf16, args.fp16, args.torch_compile) == (False, False, False)
    assert args.gradient_accumulation_steps == 1 and args.per_device_train_batch_size == 8
    assert not args.fsdp and args.dataloader_num_workers == 0


def test_translation_and_finetuning_take_the_same_section(tmp_path):
    translation = load_translation_config("smoke", overrides=KNOBS)
    args = translation_train.training_arguments(translation, tmp_path)
    assert args.bf16 and args.gradient_accumulation_steps == 2 and args.torch_compile
    assert args.per_device_train_batch_size == 4  # train.batch_size=8 over 2 steps
    config = load_run_config("smoke", overrides=KNOBS)
    tuned = finetune_arguments(config, 1e-3, 0, tmp_path, train_size=64)
    assert tuned.bf16 and tuned.gradient_accumulation_steps == 2 and tuned.save_on_each_node
    # finetune.batch_size=16 is the whole batch of one run: 2 micro-batches of 8
    assert tuned.per_device_train_batch_size == 8
    assert tuned.warmup_steps == round(0.06 * (64 // 16) * 1)


def test_fsdp_options_pass_through_to_the_trainer(tmp_path):
    config = load_run_config(
        "smoke",
        overrides=["trainer.fsdp=full_shard auto_wrap", "trainer.fsdp_config={fsdp_version: 2}"],
    )
    assert config.trainer.fsdp == "full_shard auto_wrap"
    assert config.trainer.fsdp_config == {"fsdp_version": 2}
    from posattn.lab.runs.trainer_section import trainer_arguments

    arguments = trainer_arguments(config.trainer, cuda=True)
    assert arguments["fsdp"] == "full_shard auto_wrap"
    assert arguments["fsdp_config"] == {"fsdp_version": 2}


@pytest.mark.parametrize(
    ("override", "fragments"),
    [
        (
            "trainer.gradient_accumulation_steps=0",
            ["trainer.gradient_accumulation_steps=0", ">= 1"],
        ),
        ("trainer.dataloader_num_workers=-1", ["trainer.dataloader_num_workers=-1", ">= 0"]),
        ("trainer.report_to=[tensorbord]", ["trainer.report_to", "tensorbord", "tensorboard"]),
        ("trainer.fsdp=full_shrd", ["trainer.fsdp='full_shrd'", "full_shard"]),
        ("trainer.fsdp=offload", ["trainer.fsdp='offload'", "a sharding strategy"]),
        ("trainer.fsdp_config={fsdp_version: 2}", ["trainer.fsdp_config", "trainer.fsdp names"]),
        ("trainer.bf61=true", ["trainer.bf61", "did you mean 'trainer.bf16'"]),
        ("trainer.bf16=maybe", ["trainer.bf16", "maybe"]),
    ],
)
def test_bad_trainer_values_are_named(override, fragments):
    for load in (load_run_config, load_translation_config):
        with pytest.raises(PosAttnConfigError) as error:
            load("smoke", overrides=[override])
        for fragment in fragments:
            assert fragment in str(error.value)


def test_one_mixed_precision_at_a_time():
    with pytest.raises(PosAttnConfigError, match=r"trainer.fp16=True .*one mixed precision"):
        load_run_config("smoke", overrides=["trainer.bf16=true", "trainer.fp16=true"])


@pytest.mark.parametrize(
    ("knob", "value"), [("fp16", True), ("tf32", True), ("fsdp", "full_shard auto_wrap")]
)
def test_gpu_only_knobs_are_refused_without_a_gpu(knob, value):
    section = replace(TrainerSection(), **{knob: value})
    with pytest.raises(PosAttnConfigError, match=rf"trainer.{knob}=.* without a CUDA GPU"):
        check_machine(section, cuda=False)
    check_machine(section, cuda=True)  # a GPU machine takes it


def test_the_global_batch_must_split_over_accumulation_steps(tmp_path):
    config = load_run_config(
        "smoke", overrides=["pretrain.batch_size=6", "trainer.gradient_accumulation_steps=4"]
    )
    with pytest.raises(PosAttnConfigError, match=r"pretrain.batch_size=6 .*gradient_accum"):
        training_arguments(config, tmp_path)


def test_only_knobs_that_change_numbers_change_the_fingerprint(tmp_path):
    base = load_run_config("smoke")
    plain = pretrain_stage(base, tmp_path).settings
    assert "trainer" not in plain  # runs at the defaults keep their fingerprints
    quiet = load_run_config(
        "smoke", overrides=["trainer.report_to=[]", "trainer.dataloader_num_workers=1"]
    )
    assert pretrain_stage(quiet, tmp_path).fingerprint == pretrain_stage(base, tmp_path).fingerprint
    half = load_run_config("smoke", overrides=["trainer.bf16=true"])
    assert pretrain_stage(half, tmp_path).settings["trainer"] == {"bf16": True}
    assert finetune_stage(half, tmp_path).fingerprint != finetune_stage(base, tmp_path).fingerprint


def test_gradient_accumulation_keeps_the_global_batch(tiny_data_dir, tmp_path, float32_default):
    """Two micro-batches of 4 per step train as one batch of 8: the same examples form each
    step's batch and the loss is normalised by the step's masked tokens, so the curves agree
    to float32 summation order (measured: at most 1.1e-7 relative over 12 steps)."""
    import json

    import torch

    from posattn.cli import main

    torch.set_num_threads(1)
    losses = {}
    for steps in (1, 2):
        run = tmp_path / f"accumulate{steps}"
        main(["pretrain", "--preset", "smoke", "--data-dir", str(tiny_data_dir), "--output",
              str(run), "pretrain.logging_steps=1", "model.encoding=diet-rel",
              f"trainer.gradient_accumulation_steps={steps}", "trainer.report_to=[]"])  # fmt: skip
        losses[steps] = json.loads((run / "metrics.json").read_text())["train_loss"]
    assert [s for s, _ in losses[1]] == [s for s, _ in losses[2]] == list(range(1, 13))
    for (_, one), (_, two) in zip(losses[1], losses[2], strict=True):
        assert two == pytest.approx(one, rel=1e-5)
