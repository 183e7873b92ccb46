"""`posattn finetune`: the papers' fine-tuning protocol in miniature on the prepared tasks:
every seed at every learning rate, the median over seeds per rate, the best rate reported."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import f1_score, matthews_corrcoef
from transformers import DataCollatorWithPadding, TrainingArguments

from ...models import PosAttnForSequenceClassification
from ..runs.datasets import ListDataset
from ..runs.fingerprint import run_settings
from ..runs.stages import Stage, save_run, start_stage
from ..runs.trainer import (
    TENSORBOARD,
    AtomicCheckpointTrainer,
    quiet_transformers,
    tensorboard_logs,
)
from .runconfig import RunConfig
from .subset import fixed_subset


def encode(tokenizer, records: list[dict], max_len: int, limit: int | None) -> ListDataset:
    """Token ids, segment ids (token_type_ids) and labels of single or paired texts; with a
    limit, a fixed random subset (subset.fixed_subset, the baselines' rule too)."""
    records = fixed_subset(records, limit)
    texts = [r["text"] for r in records]
    pairs = [r.get("text_pair") for r in records]
    encoded = tokenizer(
        texts,
        pairs if any(p is not None for p in pairs) else None,
        truncation=True,
        max_length=max_len,
        return_token_type_ids=True,
    )
    features = [
        {
            "input_ids": encoded["input_ids"][i],
            "attention_mask": encoded["attention_mask"][i],
            "token_type_ids": encoded["token_type_ids"][i],
            "labels": int(r["label"]),
        }
        for i, r in enumerate(records)
    ]
    return ListDataset(features)


class EvaluationRecord:
    """compute_metrics that also keeps each evaluation's per-example correctness, in the order
    the Trainer evaluates: dev, then test, at the end of every epoch. A paired comparison of two
    encodings needs which test examples each got right, not only how many."""

    def __init__(self) -> None:
        self.correct: list[list[int]] = []

    def __call__(self, prediction) -> dict:
        logits, labels = prediction
        predicted = np.argmax(logits, axis=-1)
        right = predicted == labels
        self.correct.append(right.astype(int).tolist())
        # Beside accuracy, the two numbers papers on imbalanced tasks report (GLUE: F1 on MRPC,
        # Matthews correlation on CoLA); macro F1 weighs every class alike.
        return {
            "accuracy": float(right.mean()),
            "f1_macro": float(f1_score(labels, predicted, average="macro", zero_division=0)),
            "matthews": float(matthews_corrcoef(labels, predicted)),
        }

    def test_correct(self, epoch_index: int) -> list[int]:
        return self.correct[2 * epoch_index + 1]


def finetune_once(
    pretrained: Path,
    tokenizer,
    splits: dict,
    num_labels: int,
    config: RunConfig,
    learning_rate: float,
    seed: int,
    output: Path,
) -> dict:
    """One fine-tuning run; the dev-best epoch's dev and test accuracy (DIET Sec. 4) and which
    test examples it got right."""
    f = config.finetune
    torch.manual_seed(seed)
    # The MLM head is dropped and the classifier is new: expected, so not reported.
    with quiet_transformers():
        model = PosAttnForSequenceClassification.from_pretrained(pretrained, num_labels=num_labels)
    steps_per_epoch = max(1, len(splits["train"]) // f.batch_size)
    args = TrainingArguments(
        output_dir=str(output),
        num_train_epochs=f.epochs,
        per_device_train_batch_size=f.batch_size,
        per_device_eval_batch_size=64,
        learning_rate=learning_rate,
        warmup_steps=round(f.warmup_ratio * steps_per_epoch * f.epochs),
        weight_decay=f.weight_decay,
        eval_strategy="epoch",
        save_strategy="no",
        logging_steps=max(1, steps_per_epoch // 4),
        seed=seed,
        report_to=["tensorboard"],  # local event files in the run dir
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
    )
    record = EvaluationRecord()
    with tensorboard_logs(output / TENSORBOARD):
        trainer = AtomicCheckpointTrainer(
            model=model,
            args=args,
            train_dataset=splits["train"],
            eval_dataset={"dev": splits["dev"], "test": splits["test"]},
            data_collator=DataCollatorWithPadding(tokenizer),
            compute_metrics=record,
        )
    trainer.train()
    history = trainer.state.log_history
    dev = [e["eval_dev_accuracy"] for e in history if "eval_dev_accuracy" in e]
    test = [e["eval_test_accuracy"] for e in history if "eval_test_accuracy" in e]
    best = int(np.argmax(dev))
    test_metrics = [e for e in history if "eval_test_accuracy" in e][best]
    return {
        "dev": dev[best],
        "test": test[best],
        "test_f1_macro": test_metrics["eval_test_f1_macro"],
        "test_matthews": test_metrics["eval_test_matthews"],
        "epoch": best + 1,
        "test_correct": record.test_correct(best),
    }


def summarise(runs: dict[float, list[dict]]) -> dict:
    """Median over seeds per learning rate; the rate with the best median dev accuracy."""
    medians = {lr: statistics.median(r["dev"] for r in rs) for lr, rs in runs.items()}
    best_lr = max(medians, key=medians.get)
    best = runs[best_lr]
    tests = [r["test"] for r in best]
    return {
        "learning_rate": best_lr,
        "dev_median": medians[best_lr],
        "test_median": statistics.median(tests),
        "test_min": min(tests),
        "test_max": max(tests),
        "test_by_seed": tests,
        "test_f1_macro_median": statistics.median(r["test_f1_macro"] for r in best),
        "test_matthews_median": statistics.median(r["test_matthews"] for r in best),
    }


def finetune_stage(config: RunConfig, output: Path) -> Stage:
    """The fine-tuning of one pretrained encoding: fixed by the pretraining's sections (the
    model it starts from) and the finetune section."""
    settings = run_settings(
        model=config.model, data=config.data, pretrain=config.pretrain, finetune=config.finetune
    )
    return Stage(Path(output), settings, marker="finetune.json")


def finetune(pretrained: Path, config: RunConfig, output: Path, tokenizer, tasks_source) -> dict:
    """Every configured task; writes finetune.json into `output`."""
    output = Path(output)
    start_stage(finetune_stage(config, output))
    f = config.finetune
    results = {}
    for task in f.tasks:
        spec = tasks_source.spec(task)
        splits = {
            split: encode(
                tokenizer,
                tasks_source.records(task, split),
                f.max_len,
                f.max_train_examples if split == "train" else f.max_eval_examples,
            )
            for split in ("train", "dev", "test")
        }
        runs = {
            lr: [
                finetune_once(
                    pretrained,
                    tokenizer,
                    splits,
                    spec.num_labels,
                    config,
                    lr,
                    seed,
                    output / "runs" / task / f"lr{lr:g}-seed{seed}",
                )
                for seed in f.seeds
            ]
            for lr in f.learning_rates
        }
        results[task] = {"runs": {str(lr): rs for lr, rs in runs.items()}, **summarise(runs)}
    save_run(output, {"finetune.json": results})
    return results
