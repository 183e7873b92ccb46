"""`posattn compare`, the main job: pretrain one model per encoding on the same data and
budget, fine-tune each on the tasks, and report them side by side."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console

from ...data.manifest import write_atomic
from ...encodings import build_encoding
from ...errors import invalid
from ...models import PosAttnForMaskedLM
from ..runs.config import to_yaml
from ..runs.context import run_context
from ..runs.stages import FINISHED, RESUME, save_run, stage_state
from ..runs.timing import step_times
from .finetune import finetune, finetune_stage
from .plots import plot_task_scores, plot_validation_loss
from .pretrain import model_config, pretrain, pretrain_stage
from .report import results_markdown
from .runconfig import RunConfig

console = Console()


def run_encoding(
    config: RunConfig, run_dir: Path, tokenizer, corpus, tasks, overwrite: bool = False
) -> dict:
    """Pretrain, fine-tune and time one encoding. A stage finished with the same settings is
    reused and a killed one resumes (lab/runs/stages.py); one of other settings is refused,
    or with overwrite deleted and recomputed."""
    pretrain_dir, finetune_dir = run_dir / "pretrain", run_dir / "finetune"
    state = stage_state(pretrain_stage(config, pretrain_dir), overwrite)
    if state == FINISHED:
        pretrained = json.loads((pretrain_dir / "metrics.json").read_text())
    else:
        pretrained = pretrain(config, pretrain_dir, tokenizer, corpus, resume=state == RESUME)
    model_dir = pretrain_dir / "model"
    if stage_state(finetune_stage(config, finetune_dir), overwrite) == FINISHED:
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
        model = model_config(with_encoding(config, encoding), tokenizer)
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


def with_encoding(config: RunConfig, encoding: str) -> RunConfig:
    return replace(config, model=replace(config.model, encoding=encoding))


def check_stages(config: RunConfig, output: Path, overwrite: bool) -> None:
    """Every stage already in `output` against this run's settings, before anything trains:
    one of other settings fails here (or, with overwrite, is deleted here)."""
    for encoding in config.encodings:
        run_dir = output / encoding
        stage_state(
            pretrain_stage(with_encoding(config, encoding), run_dir / "pretrain"), overwrite
        )
        stage_state(
            finetune_stage(with_encoding(config, encoding), run_dir / "finetune"), overwrite
        )


def compare(
    config: RunConfig,
    output: Path,
    tokenizer,
    corpus,
    tasks,
    preset: str,
    overwrite: bool = False,
) -> dict:
    """Every encoding's stages in output/<encoding>/{pretrain,finetune}, then the report.
    overwrite: discard stages written with other settings instead of refusing them."""
    output = Path(output)
    check_before_training(config, tokenizer, tasks)
    check_stages(config, output, overwrite)
    output.mkdir(parents=True, exist_ok=True)
    write_atomic(output / "config.yaml", to_yaml(config))
    start = time.perf_counter()
    results = {}
    for index, encoding in enumerate(config.encodings, start=1):
        console.rule(f"[{index}/{len(config.encodings)}] {encoding}")
        results[encoding] = run_encoding(
            with_encoding(config, encoding), output / encoding, tokenizer, corpus, tasks, overwrite
        )
    context = run_context(preset, time.perf_counter() - start)
    tasks_list = list(config.finetune.tasks)
    markdown = results_markdown(results, tasks_list, context)
    save_run(
        output, {"results.json": {"context": context, "results": results}, "results.md": markdown}
    )
    plot_validation_loss(results, output / "validation_loss.png")
    plot_task_scores(results, tasks_list, output / "task_scores.png")
    print(markdown)
    return results
