"""`posattn translate train`: an encoder-decoder trained with label-smoothed cross-entropy
through the lab's Trainer (atomic checkpoints, resumable run directory), then evaluated with
greedy and beam search on the dev and test pairs."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import DataCollatorForSeq2Seq, TrainerCallback, TrainingArguments

from ...data.identity import translation_folders
from ...data.parallel import load_parallel, parallel_dir
from ...data.translation_tokenizer import load_translation_tokenizer
from ...models.seq2seq import PosAttnForSeq2SeqLM, PosAttnSeq2SeqConfig
from ..runs.context import machine
from ..runs.fingerprint import run_settings, trainer_settings
from ..runs.ranks import barrier
from ..runs.stages import Stage, save_run, start_stage
from ..runs.trainer import (
    TENSORBOARD,
    AtomicCheckpointTrainer,
    step_training_arguments,
    tensorboard_logs,
)
from ..runs.trainer_section import positional_rates
from .curve import LearningCurve, curve_points, curve_subset
from .data import encode_pairs, sample
from .evaluate import evaluate_model
from .runconfig import TranslationRunConfig, encoding_options
from .scoring import corpus_scores


def load_pairs(config: TranslationRunConfig, split: str) -> list[tuple[str, str]]:
    """A split's (source, target) pairs, sides swapped with data.reverse, sampled to the
    data section's limit (a fixed sample: the same pairs in every run)."""
    pairs = load_parallel(config.data.data_dir, config.data.pairs, split)
    if config.data.reverse:
        pairs = [(target, source) for source, target in pairs]
    limit = config.data.max_train_pairs if split == "train" else config.data.max_eval_pairs
    return sample(pairs, limit)


def load_tokenizer(config: TranslationRunConfig):
    return load_translation_tokenizer(
        parallel_dir(config.data.data_dir, config.data.pairs) / "tokenizer"
    )


def seq2seq_config(config: TranslationRunConfig, tokenizer) -> PosAttnSeq2SeqConfig:
    """The encoder-decoder of a run: every field of its model section, the encoding's
    translation defaults under its options, the loss's smoothing and the tokenizer's ids."""
    model = asdict(config.model)
    model["encoding_options"] = encoding_options(model["encoding"], model["encoding_options"])
    return PosAttnSeq2SeqConfig(
        vocab_size=len(tokenizer),
        **model,
        label_smoothing=config.train.label_smoothing,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )


def scored_pairs(
    tokenizer, config: TranslationRunConfig, split: str, max_len: int | None = None
) -> tuple[list, int]:
    """(the split's pairs that are scored, how many were dropped): with data.too_long=drop,
    pairs over max_len (the run's model.max_len unless given) are left out."""
    pairs = load_pairs(config, split)
    kept = pairs
    if config.data.too_long == "drop":
        limit = max_len or config.model.max_len
        kept = [pair for pair in pairs if fits(tokenizer, pair, limit)]
    return kept, len(pairs) - len(kept)


def evaluate_split(model, tokenizer, config: TranslationRunConfig, split: str) -> dict:
    """Scores on a split; with data.too_long=drop, pairs over max_len are left out (counted)."""
    kept, dropped = scored_pairs(tokenizer, config, split)
    scores = evaluate_model(model, tokenizer, kept, config.decode)
    return {**scores, "pairs_dropped_too_long": dropped}


def fits(tokenizer, pair: tuple[str, str], max_len: int) -> bool:
    return all(len(ids) <= max_len for ids in tokenizer(list(pair))["input_ids"])


def training_arguments(config: TranslationRunConfig, output: Path) -> TrainingArguments:
    return step_training_arguments(
        config.train,
        "train",
        output,
        config.trainer,
        # Batches of similar lengths waste less on padding.
        train_sampling_strategy="group_by_length",
        disable_tqdm=True,
    )


def decoding_model(trainer, model: PosAttnForSeq2SeqLM, output: Path) -> PosAttnForSeq2SeqLM:
    """The trained model for decoding: itself, or after FSDP training (which leaves every
    parameter sharded over the ranks) the full model as saved, on this rank's device."""
    if not trainer.is_fsdp_enabled:
        return model
    trainer.save_model(str(output / "model"))  # every rank: the full state dict is gathered
    barrier()
    full = PosAttnForSeq2SeqLM.from_pretrained(str(output / "model"))
    return full.to(trainer.args.device)


def translation_stage(config: TranslationRunConfig, output: Path) -> Stage:
    """One (encoding, seed) run: fixed by the model, data, train (with the seed) and decode
    sections (metrics.json holds the decoded scores)."""
    settings = run_settings(
        model=config.model,
        data=config.data,
        train=config.train,
        decode=config.decode,
        **trainer_settings(config.trainer),
    )
    data = translation_folders(config.data.data_dir, config.data.pairs)
    return Stage(Path(output), settings, marker="metrics.json", data=data)


def learning_curve(tokenizer, config: TranslationRunConfig) -> tuple[LearningCurve, dict]:
    """The curve's callback and the fixed part of its record: the dev pairs it scores (a
    sample of those the final evaluation scores) and copying their sources, scored once."""
    kept, _ = scored_pairs(tokenizer, config, "dev")
    pairs = curve_subset(kept, config.train.curve_pairs)
    callback = LearningCurve(tokenizer, pairs, config.decode, config.train.curve_steps)
    copy = corpus_scores([s for s, _ in pairs], [t for _, t in pairs])
    record = {
        "every": config.train.curve_steps,
        "pairs": len(pairs),
        "search": "greedy",
        "copy_source": {"bleu": copy["bleu"], "chrf": copy["chrf"]},
    }
    return callback, record


def train_translation(
    config: TranslationRunConfig,
    output: Path,
    resume: bool = False,
    evaluate: bool = True,
    callbacks: list[TrainerCallback] = (),
) -> dict:
    """Train one model; evaluate it on dev and test; write model/, config.yaml, metrics.json
    (with the learning curve where train.curve_steps is set). callbacks: more Trainer
    callbacks, run after the curve's."""
    output = Path(output)
    tokenizer = load_tokenizer(config)
    model_config = seq2seq_config(config, tokenizer)
    max_len, too_long = config.model.max_len, config.data.too_long
    train = encode_pairs(tokenizer, load_pairs(config, "train"), max_len, too_long, "train pair")
    checkpoint = start_stage(translation_stage(config, output), resume)
    dev_pairs = load_pairs(config, "dev")
    eval_size = config.train.eval_batches * config.train.batch_size
    dev = encode_pairs(tokenizer, dev_pairs[:eval_size], max_len, "truncate", "dev pair")
    curve = None
    if config.train.curve_steps is not None:
        curve, curve_record = learning_curve(tokenizer, config)
    torch.manual_seed(config.train.seed)
    model = PosAttnForSeq2SeqLM(model_config)
    with tensorboard_logs(output / TENSORBOARD):
        trainer = AtomicCheckpointTrainer(
            model=model,
            **positional_rates(config.trainer),
            args=training_arguments(config, output),
            train_dataset=train.dataset,
            eval_dataset=dev.dataset,
            data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
            callbacks=[*([curve] if curve else []), *callbacks],
        )
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=checkpoint)
    train_seconds = time.perf_counter() - start
    final = trainer.evaluate()
    history = trainer.state.log_history
    metrics = {
        "encoding": config.model.encoding,
        "seed": config.train.seed,
        "pairs": config.data.pairs,
        "reversed": config.data.reverse,
        "train_loss": [[e["step"], e["loss"]] for e in history if "loss" in e],
        "dev_loss": [[e["step"], e["eval_loss"]] for e in history if "eval_loss" in e],
        "final_dev_loss": final["eval_loss"],
        "steps": trainer.state.global_step,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_pairs": len(train.dataset),
        "train_pairs_truncated": train.truncated,
        "train_pairs_dropped_too_long": train.dropped,
        "train_seconds": train_seconds,
        "machine": machine(),  # runs combined later may come from several
    }
    if curve is not None:
        metrics["curve"] = {**curve_record, "points": curve_points(history)}
    if evaluate:
        decoder = decoding_model(trainer, model, output)
        metrics["evaluation"] = {
            split: evaluate_split(decoder, tokenizer, config, split)
            for split in config.decode.splits
        }
    save_run(output, {"metrics.json": metrics}, config, trainer, tokenizer)
    return metrics
