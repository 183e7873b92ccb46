"""`posattn pretrain`: masked-LM pretraining of one encoding on the prepared corpus."""

from __future__ import annotations

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
from .trainer import AtomicCheckpointTrainer, EpochToDataset, last_checkpoint


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


def masked_dataset(tokenizer, paragraphs, config: RunConfig, seed: int) -> MaskedBlocks:
    blocks = pack_paragraphs(tokenizer, paragraphs, config.model.max_len)
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
        eval_steps=p.eval_steps,
        save_strategy="steps",
        save_steps=p.save_steps,
        save_total_limit=2,
        logging_steps=p.logging_steps,
        seed=p.seed,
        data_seed=p.seed,
        dataloader_drop_last=True,
        remove_unused_columns=False,
        report_to=[],
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
    train = masked_dataset(
        tokenizer,
        corpus.paragraphs("train", config.data.max_train_paragraphs),
        config,
        seed=config.pretrain.seed,
    )
    validation = masked_dataset(tokenizer, corpus.paragraphs("validation"), config, seed=12345)
    eval_size = config.pretrain.eval_batches * config.pretrain.batch_size
    validation.blocks = validation.blocks[:eval_size]
    torch.manual_seed(config.pretrain.seed)
    model = PosAttnForMaskedLM(model_cfg)
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
