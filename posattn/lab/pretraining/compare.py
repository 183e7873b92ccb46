"""`posattn compare`, the main job: pretrain one model per encoding on the same data and
budget, fine-tune each on the tasks, and report them side by side."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console

from ...encodings import build_encoding
from ...errors import invalid
from ...models import PosAttnForMaskedLM
from ..runs.config import to_yaml
from ..runs.context import run_context
from ..runs.timing import step_times
from ..runs.trainer import checkpoints
from .finetune import finetune
from .plots import plot_task_scores, plot_validation_loss
from .pretrain import model_config, pretrain
from .report import results_markdown
from .runconfig import RunConfig

console = Console()


def run_encoding(config: RunConfig, run_dir: Path, tokenizer, corpus, tasks) -> dict:
    """Pretrain, fine-tune and time one encoding; finished stages are reused on a rerun."""
    pretrain_dir, finetune_dir = run_dir / "pretrain", run_dir / "finetune"
    if (pretrain_dir / "metrics.json").is_file():
        pretrained = json.loads((pretrain_dir / "metrics.json").read_text())
    else:
        resume = bool(checkpoints(pretrain_dir / "checkpoints"))  # a killed run continues
        pretrained = pretrain(config, pretrain_dir, tokenizer, corpus, resume=resume)
    model_dir = pretrain_dir / "model"
    if (finetune_dir / "finetune.json").is_file():
        tuned = json.loads((finetune_dir / "finetune.json").read_text())
    else:
        finetune_dir.mkdir(parents=True, exist_ok=True)
        tuned = finetune(model_dir, config, finetune_dir, tokenizer, tasks)
    model = PosAttnForMaskedLM.from_pretrained(model_dir)
    timing = step_times(model, config.pretrain.batch_size, config.model.max_len)
    return {"pretrain": pretrained, "finetune": tuned, "timing": timing}


def check_before_training(config: RunConfig, tokenizer, tasks) -> None:
    """Every encoding against the model and every task name, before the first step trains."""
    for encoding in config.encodings:
        model = model_config(
            replace(config, model=replace(config.model, encoding=encoding)), tokenizer
        )
        with torch.device("meta"):
            table = build_encoding(encoding, model.dims, model.encoding_options).max_positions
        if table is not None and config.finetune.max_len > table:
            raise invalid(
                "finetune.max_len",
                config.finetune.max_len,
                f"at most model.max_len={table}: encoding {encoding!r} has a position table",
            )
    for task in config.finetune.tasks:
        tasks.spec(task)


def compare(config: RunConfig, output: Path, tokenizer, corpus, tasks, preset: str) -> dict:
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    check_before_training(config, tokenizer, tasks)
    (output / "config.yaml").write_text(to_yaml(config))
    start = time.perf_counter()
    results = {}
    for index, encoding in enumerate(config.encodings, start=1):
        console.rule(f"[{index}/{len(config.encodings)}] {encoding}")
        encoding_config = replace(config, model=replace(config.model, encoding=encoding))
        results[encoding] = run_encoding(
            encoding_config, output / encoding, tokenizer, corpus, tasks
        )
    context = run_context(preset, time.perf_counter() - start)
    tasks_list = list(config.finetune.tasks)
    (output / "results.json").write_text(
        json.dumps({"context": context, "results": results}, indent=2)
    )
    markdown = results_markdown(results, tasks_list, context)
    (output / "results.md").write_text(markdown)
    plot_validation_loss(results, output / "validation_loss.png")
    plot_task_scores(results, tasks_list, output / "task_scores.png")
    print(markdown)
    return results
