"""`posattn pretrain`: masked-LM pretraining of one encoding on the prepared corpus."""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import TrainingArguments

from ..config import PosAttnConfig
from ..errors import require
from ..modeling import PosAttnForMaskedLM
from .mlm_data import MaskedBlocks, pack_paragraphs
from .runconfig import RunConfig, to_yaml
from .trainer import (
    TENSORBOARD,
    AtomicCheckpointTrainer,
    EpochToDataset,
    last_checkpoint,
    tensorboard_logs,
)


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


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
    p = config.pretrain
    processes = world_size()
    require(
        p.batch_size % processes == 0,
        "pretrain.batch_size",
        p.batch_size,
        f"a multiple of the number of processes ({processes}): it is the global batch",
    )
    return TrainingArguments(
        output_dir=str(output / "checkpoints"),
        max_steps=p.steps,
        per_device_train_batch_size=p.batch_size // processes,
        per_device_eval_batch_size=p.batch_size // processes,
        learning_rate=p.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=round(p.warmup_ratio * p.steps),
        weight_decay=p.weight_decay,
        max_grad_norm=p.max_grad_norm,
        adam_epsilon=p.adam_epsilon,
        eval_strategy="steps",
        prediction_loss_only=True,
        eval_steps=p.eval_steps,
        save_strategy="steps",
        save_steps=p.save_steps,
        save_total_limit=2,
        logging_steps=p.logging_steps,
        seed=p.seed,
        data_seed=p.seed,
        dataloader_drop_last=True,
        remove_unused_columns=False,
        report_to=["tensorboard"],  # local event files in the run dir
        use_cpu=not torch.cuda.is_available(),
        # Under torchrun: NCCL on GPUs, gloo on CPUs; a single process sets none.
        ddp_backend=(("nccl" if torch.cuda.is_available() else "gloo") if processes > 1 else None),
        disable_tqdm=False,
    )


def pretrain(config: RunConfig, output: Path, tokenizer, corpus, resume: bool = False) -> dict:
    """Train, evaluate and save one masked-LM model; returns (and writes) its metrics.

    corpus: an object with .paragraphs(split) for "train" and "validation".
    """
    output = Path(output)
    checkpoint = str(last_checkpoint(output / "checkpoints")) if resume else None
    model_cfg = model_config(config, tokenizer)
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
    model = PosAttnForMaskedLM(model_cfg)
    with tensorboard_logs(output / TENSORBOARD):
        trainer = AtomicCheckpointTrainer(
            model=model,
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
    if trainer.is_world_process_zero():
        trainer.save_model(str(output / "model"))
        tokenizer.save_pretrained(str(output / "model"))
        (output / "config.yaml").write_text(to_yaml(config))
        (output / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics
