"""`posattn pretrain`: masked-LM pretraining of one encoding on the prepared corpus."""

from __future__ import annotations

import functools
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import TrainingArguments

from ...data.identity import DataFolders
from ...models.config import PosAttnConfig
from ..runs.fingerprint import run_settings, trainer_settings
from ..runs.mlm_data import MaskedBlocks, pack_paragraphs
from ..runs.stages import Stage, save_run, start_stage
from ..runs.trainer import (
    TENSORBOARD,
    AtomicCheckpointTrainer,
    EpochToDataset,
    step_training_arguments,
    tensorboard_logs,
)
from ..runs.trainer_section import positional_rates
from .runconfig import RunConfig
from .warm_start import check_start, initial_masked_lm, stage_inputs

QUIET_PROGRESS = "POSATTN_QUIET_PROGRESS"


def model_config(config: RunConfig, tokenizer, **extra) -> PosAttnConfig:
    """PosAttnConfig of a run; raises before any training if the encoding cannot serve it."""
    return PosAttnConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        **asdict(config.model),
        **extra,
    )


@functools.lru_cache(maxsize=4)
def packed_blocks(tokenizer, corpus, split: str, limit: int | None, seq_len: int):
    """Packed corpus blocks; cached, as every encoding of a comparison reads the same ones."""
    return pack_paragraphs(tokenizer, corpus.paragraphs(split, limit), seq_len)


def masked_dataset(tokenizer, blocks, config: RunConfig, seed: int) -> MaskedBlocks:
    return MaskedBlocks(
        blocks,
        mask_token_id=tokenizer.mask_token_id,
        special_ids=tokenizer.all_special_ids,
        vocab_size=len(tokenizer),
        probability=config.pretrain.mlm_probability,
        seed=seed,
    )


def training_arguments(config: RunConfig, output: Path) -> TrainingArguments:
    return step_training_arguments(
        config.pretrain,
        "pretrain",
        output,
        config.trainer,
        dataloader_drop_last=True,
        # a compare worker runs beside others: its bar would interleave with theirs
        disable_tqdm=os.environ.get(QUIET_PROGRESS) == "1",
    )


def pretrain_stage(config: RunConfig, output: Path, data: DataFolders | None = None) -> Stage:
    """The pretraining of one encoding: fixed by the model, data and pretrain sections and by
    the data folders it reads (`data`; default: the English corpus and tokenizer)."""
    settings = run_settings(
        model=config.model,
        data=config.data,
        pretrain=config.pretrain,
        **trainer_settings(config.trainer),
    )
    return Stage(Path(output), settings, marker="metrics.json", data=stage_inputs(config, (), data))


def pretrain(config: RunConfig, output: Path, tokenizer, corpus, resume: bool = False) -> dict:
    """Train, evaluate and save one masked-LM model; returns (and writes) its metrics.

    corpus: a prepared data source (.paragraphs(split) for "train" and "validation", .folders()
    it reads). resume: continue from the last checkpoint in `output`, which must come from the
    same settings and data.
    """
    output = Path(output)
    model_cfg = model_config(config, tokenizer)
    check_start(config.pretrain.init_from, config.pretrain.init_positions, model_cfg)
    checkpoint = start_stage(pretrain_stage(config, output, corpus.folders()), resume)
    seq_len = config.model.max_len
    train_blocks = packed_blocks(
        tokenizer, corpus, "train", config.data.max_train_paragraphs, seq_len
    )
    eval_size = config.pretrain.eval_batches * config.pretrain.batch_size
    validation_blocks = packed_blocks(tokenizer, corpus, "validation", None, seq_len)[:eval_size]
    train = masked_dataset(tokenizer, train_blocks, config, seed=config.pretrain.seed)
    # The same masks for every encoding and every evaluation.
    validation = masked_dataset(tokenizer, validation_blocks, config, seed=12345)
    torch.manual_seed(config.pretrain.seed)
    model = initial_masked_lm(model_cfg, config.pretrain.init_from, config.pretrain.init_positions)
    with tensorboard_logs(output / TENSORBOARD):
        trainer = AtomicCheckpointTrainer(
            model=model,
            **positional_rates(config.trainer),
            args=training_arguments(config, output),
            train_dataset=train,
            eval_dataset=validation,
            callbacks=[EpochToDataset(train)],
        )
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=checkpoint)
    final = trainer.evaluate()
    metrics = {
        "encoding": config.model.encoding,
        "train_loss": [[e["step"], e["loss"]] for e in trainer.state.log_history if "loss" in e],
        "eval_loss": [
            [e["step"], e["eval_loss"]] for e in trainer.state.log_history if "eval_loss" in e
        ],
        "final_eval_loss": final["eval_loss"],
        "steps": trainer.state.global_step,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_blocks": len(train),
        "wall_seconds": time.perf_counter() - start,
    }
    save_run(output, {"metrics.json": metrics}, config, trainer, tokenizer)
    return metrics
