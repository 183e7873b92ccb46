"""`posattn finetune`: the papers' fine-tuning protocol in miniature on the prepared tasks:
every seed at every learning rate, the median over seeds per rate, the best rate reported.

Each (task, rate, seed) run keeps its result in its own directory (RUN_RESULT) with the
identity of what it was computed from - the stage's settings but for the lists of seeds and
rates, and its data: a fine-tuning killed after some runs, or given more seeds or rates,
computes only the runs it lacks."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import f1_score, matthews_corrcoef
from transformers import DataCollatorWithPadding, TrainingArguments

from ...data.identity import DataFolders
from ...data.manifest import write_atomic
from ...errors import invalid, require
from ...models import PosAttnForSequenceClassification
from ...models.segments import reads_segments
from ..runs.datasets import ListDataset
from ..runs.fingerprint import differences, fingerprint, run_settings, trainer_settings
from ..runs.ranks import alone, gather, join_process_group, place_on_device, share
from ..runs.stages import DATA_KEY, Extends, Stage, is_main_process, save_run, start_stage
from ..runs.trainer import (
    TENSORBOARD,
    AtomicCheckpointTrainer,
    per_device_batch,
    quiet_transformers,
    tensorboard_logs,
)
from ..runs.trainer_section import positional_rates, trainer_arguments
from .runconfig import RunConfig
from .subset import fixed_subset
from .warm_start import stage_inputs


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


def collator_for(model, tokenizer):
    """Pads a batch. A model without segments (segments='none') reads none and refuses ids
    other than 0: a pair task's segment ids are left out of its batches."""
    pad = DataCollatorWithPadding(tokenizer)
    if reads_segments(model.config):
        return pad

    def collate(features):
        batch = pad(features)
        batch.pop("token_type_ids", None)
        return batch

    return collate


class EvaluationRecord:
    """compute_metrics that also keeps each evaluation's per-example correctness, in the order
    the Trainer evaluates: every set of `names` in turn (dev first), at the end of every epoch.
    A paired comparison of two encodings needs which test examples each got right, not only
    how many."""

    def __init__(self, names: tuple[str, ...] = ("dev", "test")) -> None:
        self.names = names
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

    def test_correct(self, epoch_index: int, name: str = "test") -> list[int]:
        return self.correct[len(self.names) * epoch_index + self.names.index(name)]


TUNING = ("train", "dev")


def finetune_arguments(
    config: RunConfig, learning_rate: float, seed: int, output: Path, train_size: int
) -> TrainingArguments:
    """One run's TrainingArguments: one process with the whole finetune.batch_size (split
    over trainer.gradient_accumulation_steps), the trainer section's knobs, no checkpoints."""
    f = config.finetune
    micro_batch = per_device_batch(f.batch_size, "finetune.batch_size", config.trainer, 1)
    steps_per_epoch = max(1, train_size // f.batch_size)
    knobs = trainer_arguments(config.trainer)
    return TrainingArguments(
        output_dir=str(output),
        num_train_epochs=f.epochs,
        per_device_train_batch_size=micro_batch,
        per_device_eval_batch_size=64,
        learning_rate=learning_rate,
        warmup_steps=round(f.warmup_ratio * steps_per_epoch * f.epochs),
        weight_decay=f.weight_decay,
        eval_strategy="epoch",
        save_strategy="no",
        logging_steps=max(1, steps_per_epoch // 4),
        seed=seed,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
        **{**knobs, "fsdp": None, "fsdp_config": None},  # a small run is never sharded
    )


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
    """One fine-tuning run in this process alone (under a launcher, beside the other ranks'
    runs); the dev-best epoch's dev and test accuracy (DIET Sec. 4) and which test examples
    it got right. `splits`: "train", "dev" and one or more test sets ("test", or any other
    names: each gets its accuracy NAME and its NAME_correct)."""
    torch.manual_seed(seed)
    evaluated = {"dev": splits["dev"], **{k: v for k, v in splits.items() if k not in TUNING}}
    record = EvaluationRecord(tuple(evaluated))
    with alone() as device:
        # The MLM head is dropped and the classifier is new: expected, so not reported.
        with quiet_transformers():
            model = PosAttnForSequenceClassification.from_pretrained(
                pretrained, num_labels=num_labels
            )
        args = finetune_arguments(config, learning_rate, seed, output, len(splits["train"]))
        place_on_device(args, device)
        with tensorboard_logs(output / TENSORBOARD):
            trainer = AtomicCheckpointTrainer(
                model=model,
                **positional_rates(config.trainer),
                args=args,
                train_dataset=splits["train"],
                eval_dataset=evaluated,
                data_collator=collator_for(model, tokenizer),
                compute_metrics=record,
            )
        trainer.train()
    history = trainer.state.log_history
    dev = [e["eval_dev_accuracy"] for e in history if "eval_dev_accuracy" in e]
    best = int(np.argmax(dev))
    result = {"dev": dev[best], "epoch": best + 1}
    for name in record.names[1:]:
        metrics = [e for e in history if f"eval_{name}_accuracy" in e][best]
        result[name] = metrics[f"eval_{name}_accuracy"]
        result[f"{name}_f1_macro"] = metrics[f"eval_{name}_f1_macro"]
        result[f"{name}_matthews"] = metrics[f"eval_{name}_matthews"]
        result[f"{name}_correct"] = record.test_correct(best, name)
    return result


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


def finetune_stage(config: RunConfig, output: Path, data: DataFolders | None = None) -> Stage:
    """The fine-tuning of one pretrained encoding: fixed by the pretraining's sections (the
    model it starts from), the finetune section and the data folders both read (`data`;
    default: the English corpus, tokenizer and the finetune section's tasks)."""
    settings = run_settings(
        model=config.model,
        data=config.data,
        pretrain=config.pretrain,
        finetune=config.finetune,
        **trainer_settings(config.trainer),
    )
    data = stage_inputs(config, config.finetune.tasks, data)
    return Stage(Path(output), settings, marker="finetune.json", data=data)


# The finetune keys that list runs rather than fix one: a stage that differs from a finished
# one only in them keeps the runs both list (`adds_runs`).
RUN_LISTS = ("seeds", "learning_rates")
RUN_RESULT = "result.json"


def without_run_lists(settings: dict) -> dict:
    return {
        **settings,
        "finetune": {k: v for k, v in settings["finetune"].items() if k not in RUN_LISTS},
    }


def run_identity(stage: Stage) -> str:
    """What one run's result depends on: the stage's settings without RUN_LISTS, and its data."""
    settings = without_run_lists(stage.settings)
    return fingerprint({"settings": settings, "data": stage.data_digests()})


def adds_runs(stage: Stage) -> Extends:
    """Whether a recorded fine-tuning stage differs from `stage` only in its lists of seeds and
    rates (same posattn version, model, data): its runs are then runs of `stage` too."""
    listed = {f"finetune.{key}" for key in RUN_LISTS}

    def same_runs(record: dict) -> bool:
        changed = differences(record.get("settings", {}), stage.settings)
        keys = {line.split(":", 1)[0] for line in changed}
        return keys <= listed and record.get(DATA_KEY) == stage.data_digests()

    return same_runs


def run_directory(output: Path, task: str, learning_rate: float, seed: int) -> Path:
    """Where one (task, rate, seed) run of a fine-tuning in `output` writes and keeps its
    result."""
    return output / "runs" / task / f"lr{learning_rate:g}-seed{seed}"


def kept_result(directory: Path, identity: str) -> dict | None:
    """A run's result written before with the same identity; None where there is none."""
    try:
        kept = json.loads((directory / RUN_RESULT).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(kept, dict) or kept.get("identity") != identity:
        return None
    return kept.get("result")


def keep_result(directory: Path, identity: str, result: dict) -> None:
    """A run's result and what it was computed from, for a later command to reuse."""
    write_atomic(directory / RUN_RESULT, json.dumps({"identity": identity, "result": result}))


def check_vocabulary(pretrained: Path, tokenizer) -> None:
    """Refuse a tokenizer whose pieces are not the model's rows (a model pretrained from a
    checkpoint's content, pretrain.init_from, reads that checkpoint's tokenizer)."""
    config_file = Path(pretrained) / "config.json"
    if not config_file.is_file():
        return  # from_pretrained names the missing file
    rows = json.loads(config_file.read_text())["vocab_size"]
    if rows != len(tokenizer):
        raise invalid(
            "tokenizer",
            f"{len(tokenizer)} pieces",
            f"the {rows} of the model in {pretrained}: fine-tune with the settings it was "
            "pretrained with (pretrain.init_from, data.data_dir)",
        )


def task_splits(tokenizer, tasks_source, task: str, f) -> dict[str, ListDataset]:
    """A task's train, dev and test sets as the finetune section `f` caps them."""
    return {
        split: encode(
            tokenizer,
            tasks_source.records(task, split),
            f.max_len,
            f.max_train_examples if split == "train" else f.max_eval_examples,
        )
        for split in ("train", "dev", "test")
    }


def finetune(
    pretrained: Path,
    config: RunConfig,
    output: Path,
    tokenizer,
    tasks_source,
    stage: Stage | None = None,
) -> dict:
    """Every configured task; writes finetune.json into `output` (the main process).

    Each (task, learning rate, seed) run is one process's job: under a launcher the runs are
    shared out over the ranks and their results gathered, so N processes run N at a time. A
    run whose result is in its directory with this stage's identity is not run again.
    `stage`: default `finetune_stage` (a comparison's cell); `posattn finetune` records the
    pretrained model too."""
    output = Path(output)
    f = config.finetune
    check_vocabulary(pretrained, tokenizer)
    # Refused before the stage is written: no task (which wrote an empty finetune.json), or
    # one the data directory does not hold (refused after stage.json was written).
    require(
        bool(f.tasks),
        "finetune.tasks",
        list(f.tasks),
        "at least one task (a comparison of pretraining alone is `posattn compare` with [])",
    )
    specs = {task: tasks_source.spec(task) for task in f.tasks}
    join_process_group()
    stage = stage or finetune_stage(config, output, tasks_source.folders(f.tasks))
    start_stage(stage)
    identity = run_identity(stage)
    runs = [(task, lr, seed) for task in f.tasks for lr in f.learning_rates for seed in f.seeds]
    splits = {}
    mine = []
    for task, lr, seed in share(runs):
        directory = run_directory(output, task, lr, seed)
        tuned = kept_result(directory, identity)
        written = tuned is not None
        if tuned is None:
            if task not in splits:
                splits[task] = task_splits(tokenizer, tasks_source, task, f)
            tuned = finetune_once(
                pretrained,
                tokenizer,
                splits[task],
                specs[task].num_labels,
                config,
                lr,
                seed,
                directory,
            )
            # Kept at once where this process writes files (alone, every run); the runs of
            # other ranks are kept by the main process once gathered.
            written = is_main_process()
            if written:
                keep_result(directory, identity, tuned)
        mine.append(((task, lr, seed), (tuned, written)))
    done = {}
    for (task, lr, seed), (tuned, written) in gather(mine):
        if not written and is_main_process():
            keep_result(run_directory(output, task, lr, seed), identity, tuned)
        done[(task, lr, seed)] = tuned
    results = {}
    for task in f.tasks:
        by_rate = {lr: [done[(task, lr, seed)] for seed in f.seeds] for lr in f.learning_rates}
        results[task] = {"runs": {str(lr): rs for lr, rs in by_rate.items()}, **summarise(by_rate)}
    save_run(output, {"finetune.json": results})
    return results
