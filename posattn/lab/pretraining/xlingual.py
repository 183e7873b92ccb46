"""`posattn compare --task xlingual`: DIET's cross-lingual transfer (Figure 1b, XNLI zero-shot)
in miniature. Every arm is pretrained by masked-LM on the multilingual handbook corpus
(`posattn data prepare --xlingual`), fine-tuned on English labels only, and scored on each
language's test pages, which no stage has seen in any language.

The cells are compare's (compare.py: pretraining per arm and seed, fine-tuning per task), run,
resumed and spread over worker processes the same way; only the data and the fine-tuning
differ: one English training set, then a test set per language at the dev-best epoch.

    ARM/seedP/pretrain         masked-LM pretraining on every language's train pages
    ARM/seedP/finetune/TASK    English fine-tuning, every seed x learning rate; xlingual.json

As in compare's English cells, each fine-tuning run keeps its result in its own directory
(runs/TASK/lrLR-seedS/result.json, with what it was computed from): a killed cell computes
only the runs it lacks, and a cell given other seeds or rates alone keeps the runs it has.
"""

from __future__ import annotations

import functools
import statistics
import time
from pathlib import Path

from ...data.identity import xlingual_folders
from ...data.manifest import write_atomic
from ...data.multilingual import ENGLISH
from ...data.xlingual import XlingualData
from ...errors import require, require_choice
from ..runs.config import merge_config, preset_file, to_yaml
from ..runs.context import run_context
from ..runs.fingerprint import run_settings
from ..runs.stages import (
    FINISHED,
    RESUME,
    Stage,
    is_main_process,
    reuse_counts,
    save_run,
    start_stage,
)
from .arms import RANDOM_INIT
from .baselines import save_initial_model
from .compare import Cell, cells_of, check_before_training, collect_results, run_cells
from .finetune import encode, finetune_once, keep_result, kept_result, run_directory, run_identity
from .pretrain import pretrain
from .runconfig import RunConfig
from .xlingual_summary import write_xlingual_summary

PRESETS = ("smoke", "quick")
MARKER = "xlingual.json"


def load_xlingual_config(
    preset: str | None = None, file: str | Path | None = None, overrides: list[str] = ()
) -> RunConfig:
    """Defaults <- the xlingual preset (presets/xlingual-NAME.yaml) <- file <- overrides."""
    path = None
    if preset is not None:
        require_choice("--preset", preset, PRESETS)
        path = preset_file("posattn.lab.pretraining", f"xlingual-{preset}", (f"xlingual-{preset}",))
    return merge_config(RunConfig, path, file, overrides)


@functools.cache
def xlingual_data(data_dir: str | None) -> tuple[XlingualData, object]:
    """The cross-lingual set and its tokenizer, read once per process (as compare's data)."""
    data = XlingualData(data_dir)
    return data, data.tokenizer()


def stage_of(cell: Cell, config: RunConfig, output: Path, languages: list[str]) -> Stage:
    """Pretraining: compare's stage. Fine-tuning: its settings plus the languages scored."""
    data = xlingual_folders(config.data.data_dir)
    if cell.task is None:
        return cell.stage(config, output, data)
    c = cell.config(config)
    settings = run_settings(
        model=c.model, data=c.data, pretrain=c.pretrain, finetune=c.finetune, languages=languages
    )
    return Stage(cell.directory(output), settings, marker=MARKER, data=data)


def run_xlingual_cell(config: RunConfig, cell: Cell, output: Path, overwrite: bool = False) -> str:
    """Compute one cell unless it is finished with the same settings; returns its name."""
    data, tokenizer = xlingual_data(config.data.data_dir)
    stage = stage_of(cell, config, output, data.languages)
    state = cell.state(stage, overwrite)
    if state == FINISHED:
        return cell.name
    cell_config = cell.config(config)
    directory = cell.directory(output)
    if cell.task is not None:
        directory.mkdir(parents=True, exist_ok=True)
        model_dir = cell.pretraining().directory(output) / "model"
        finetune_xlingual(model_dir, cell_config, directory, tokenizer, data, stage)
    elif cell.arm == RANDOM_INIT:
        save_initial_model(cell_config, directory, tokenizer, data.folders())
    else:
        pretrain(cell_config, directory, tokenizer, data, resume=state == RESUME)
    return cell.name


def xlingual_splits(tokenizer, data: XlingualData, task: str, f) -> dict:
    """English train and dev, and a test set per language, as the finetune section `f` caps
    them."""
    splits = {
        "train": encode(tokenizer, data.records(task, "train"), f.max_len, f.max_train_examples),
        "dev": encode(tokenizer, data.records(task, "dev"), f.max_len, f.max_eval_examples),
    }
    for language in data.languages:
        records = data.records(task, "test", language)
        splits[language] = encode(tokenizer, records, f.max_len, f.max_eval_examples)
    return splits


def language_scores(once: dict, languages: list[str]) -> dict:
    """One run's dev accuracy and epoch, and its test scores by language."""
    return {
        "dev": once["dev"],
        "epoch": once["epoch"],
        "test": {x: once[x] for x in languages},
        "test_correct": {x: once[f"{x}_correct"] for x in languages},
        "test_f1_macro": {x: once[f"{x}_f1_macro"] for x in languages},
        "test_matthews": {x: once[f"{x}_matthews"] for x in languages},
    }


def finetune_xlingual(
    pretrained: Path, config: RunConfig, output: Path, tokenizer, data: XlingualData, stage: Stage
) -> dict:
    """Every task: fine-tuned on English train, the epoch chosen on English dev, scored on
    every language's test set; per learning rate every seed, the rate with the best median
    English dev accuracy kept (finetune.py's protocol). Writes xlingual.json."""
    start_stage(stage)
    f = config.finetune
    identity = run_identity(stage)
    results = {}
    for task in f.tasks:
        splits = None  # encoded only where a run is not kept
        runs = {}
        for lr in f.learning_rates:
            runs[lr] = []
            for seed in f.seeds:
                run_dir = run_directory(output, task, lr, seed)
                run = kept_result(run_dir, identity)
                if run is None:
                    splits = splits or xlingual_splits(tokenizer, data, task, f)
                    num_labels = data.spec(task).num_labels
                    once = finetune_once(
                        pretrained, tokenizer, splits, num_labels, config, lr, seed, run_dir
                    )
                    run = language_scores(once, data.languages)
                    if is_main_process():
                        keep_result(run_dir, identity, run)
                runs[lr].append(run)
        medians = {lr: statistics.median(r["dev"] for r in rs) for lr, rs in runs.items()}
        best = max(medians, key=medians.get)
        results[task] = {
            "runs": {str(lr): rs for lr, rs in runs.items()},
            "learning_rate": best,
            "dev_median": medians[best],
            "test_median": {
                x: statistics.median(r["test"][x] for r in runs[best]) for x in data.languages
            },
        }
    save_run(output, {MARKER: results})
    return results


def compare_xlingual(config: RunConfig, output: Path, preset: str, overwrite: bool = False) -> dict:
    """Every cell in output/, then results.json, results.md and xlingual.png; the data is
    config.data.data_dir's cross-lingual set."""
    output = Path(output)
    require(
        bool(config.finetune.tasks),
        "finetune.tasks",
        list(config.finetune.tasks),
        "at least one cross-lingual task: transfer is what this comparison measures",
    )
    data, tokenizer = xlingual_data(config.data.data_dir)
    check_before_training(config, tokenizer, data)
    states = [  # refused (or discarded) before anything trains
        cell.state(stage_of(cell, config, output, data.languages), overwrite)
        for cells in cells_of(config)
        for cell in cells
    ]
    output.mkdir(parents=True, exist_ok=True)
    write_atomic(output / "config.yaml", to_yaml(config))
    start = time.perf_counter()
    workers = config.compare.workers
    for cells in cells_of(config):
        run_cells(config, cells, output, overwrite, workers, runner=run_xlingual_cell)
    results = collect_results(config, output, MARKER)
    context = run_context(
        preset,
        time.perf_counter() - start,
        workers=workers,
        pretrain_seeds=list(config.compare.pretrain_seeds),
        finetune_seeds=list(config.finetune.seeds),
        languages=data.languages,
        source=ENGLISH,
        cells=reuse_counts(states),
        data=data.folders().digests(),
    )
    return write_xlingual_summary(config, output, results, context, data)
