"""`posattn compare`, the main job: every arm (an encoding, or one of the papers' ablations, or
random initialisation) pretrained on the same data and budget once per pretraining seed, each
model fine-tuned on every task with every fine-tuning seed, then the papers' claims tested on
the results with seeds and intervals.

The work is a set of independent cells, each a directory with its settings fingerprint
(lab/runs/stages.py):

    ARM/seedP/pretrain         masked-LM pretraining of ARM with seed P (random-init: none)
    ARM/seedP/finetune/TASK    fine-tuning that model on TASK, every seed x learning rate
    ARM/seedP/zero-shot/TASK   that model's masked LM scored on TASK without fine-tuning
                               (word-order: lab/pretraining/zero_shot.py)

A cell finished with the same settings is reused, a killed one resumes, one of other settings
is refused (or recomputed with --overwrite) - except a fine-tuning cell given other seeds or
rates alone, which keeps the runs it has and computes the others. `compare.workers` processes
run the cells side by side, pretraining first, one torch thread each: on a small model that is
faster than one process with several threads.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from rich.console import Console

from ...data.identity import DataFolders
from ...data.manifest import write_atomic
from ...encodings import build_encoding
from ...errors import invalid
from ..runs.config import to_yaml
from ..runs.context import run_context
from ..runs.pool_errors import cancelled_on_error
from ..runs.pool_worker import start_pool_worker
from ..runs.ranks import barrier, world_size
from ..runs.sources import PreparedData
from ..runs.stages import FINISHED, RESUME, Stage, is_main_process, reuse_counts, stage_state
from .arms import RANDOM_INIT, arm_config, check_arms, rates_reach
from .baselines import save_initial_model
from .finetune import adds_runs, finetune, finetune_stage
from .pretrain import QUIET_PROGRESS, model_config, pretrain, pretrain_stage
from .runconfig import RunConfig
from .summary import write_summary
from .warm_start import check_start, run_tokenizer, stage_inputs
from .zero_shot import MARKER as ZERO_SHOT_MARKER
from .zero_shot import ZERO_SHOT_TASKS, zero_shot, zero_shot_stage

console = Console()


@dataclass(frozen=True)
class Cell:
    """One unit of work: the pretraining of (arm, seed), its fine-tuning on one task, or (with
    zero_shot) its masked LM scored on one task as it is."""

    arm: str
    seed: int
    task: str | None = None
    zero_shot: bool = False

    @property
    def name(self) -> str:
        what = self.kind if self.task is None else f"{self.kind} {self.task}"
        return f"{self.arm}, seed {self.seed}: {what}"

    @property
    def kind(self) -> str:
        if self.task is None:
            return "pretrain"
        return "zero-shot" if self.zero_shot else "finetune"

    def directory(self, output: Path) -> Path:
        base = Path(output) / self.arm.replace("/", "+") / f"seed{self.seed}"
        return base / self.kind if self.task is None else base / self.kind / self.task

    def pretraining(self) -> Cell:
        return Cell(self.arm, self.seed)

    def config(self, config: RunConfig) -> RunConfig:
        """The run config of this cell: its arm's model, its seed, its one task."""
        cell_config = arm_config(config, self.arm)
        cell_config = replace(cell_config, pretrain=replace(cell_config.pretrain, seed=self.seed))
        if self.task is None:
            return cell_config
        return replace(cell_config, finetune=replace(cell_config.finetune, tasks=[self.task]))

    def stage(self, config: RunConfig, output: Path, data: DataFolders | None = None) -> Stage:
        """The cell's stage; data: the folders it reads (default: the English data's)."""
        if self.zero_shot:
            return zero_shot_stage(self.config(config), self.task, self.directory(output))
        build = pretrain_stage if self.task is None else finetune_stage
        return build(self.config(config), self.directory(output), data)

    def state(self, stage: Stage, overwrite: bool) -> str:
        """`stage_state` of the cell's stage (`self.stage`, or a peer's such as xlingual's); a
        fine-tuning cell that differs from the one in its directory only in its seeds or rates
        keeps the runs it has (`finetune.adds_runs`)."""
        tuning = self.task is not None and not self.zero_shot
        return stage_state(stage, overwrite, adds_runs(stage) if tuning else None)


def cells_of(config: RunConfig) -> tuple[list[Cell], list[Cell]]:
    """(pretraining cells, the cells that read a pretrained model) of a comparison: each
    model's fine-tuning on every task, and its zero-shot score on those of ZERO_SHOT_TASKS."""
    seeds = config.compare.pretrain_seeds
    pretraining = [Cell(arm, seed) for arm in config.encodings for seed in seeds]
    tasks = config.finetune.tasks
    tuning = [Cell(cell.arm, cell.seed, task) for cell in pretraining for task in tasks]
    tuning += [
        Cell(cell.arm, cell.seed, task, zero_shot=True)
        for cell in pretraining
        for task in tasks
        if task in ZERO_SHOT_TASKS
    ]
    return pretraining, tuning


@functools.cache
def prepared_data(data_dir: str | None, init_from: str | None) -> tuple[PreparedData, object]:
    """The data and tokenizer of a process, made once: the cells a worker runs then share
    pretrain.packed_blocks' cache instead of packing the corpus again for every cell."""
    data = PreparedData(data_dir)
    return data, run_tokenizer(init_from, data)


def run_cell(config: RunConfig, cell: Cell, output: Path, overwrite: bool = False) -> str:
    """Compute one cell unless it is finished with the same settings; returns its name."""
    state = cell.state(cell.stage(config, output), overwrite)
    if state == FINISHED:
        return cell.name
    data, tokenizer = prepared_data(config.data.data_dir, config.pretrain.init_from)
    cell_config = cell.config(config)
    directory = cell.directory(output)
    if cell.task is not None:
        model_dir = cell.pretraining().directory(output) / "model"
        directory.mkdir(parents=True, exist_ok=True)
        if cell.zero_shot:
            zero_shot(model_dir, cell_config, cell.task, directory, tokenizer, data)
        else:
            finetune(model_dir, cell_config, directory, tokenizer, data)
    elif cell.arm == RANDOM_INIT:
        save_initial_model(cell_config, directory, tokenizer, data.folders())
    else:
        pretrain(cell_config, directory, tokenizer, data, resume=state == RESUME)
    return cell.name


def one_thread_worker() -> None:
    """A worker process: the lab's pool set-up (`start_pool_worker`: one torch thread, two
    small models on two cores beating one model on both) and no progress bars interleaving
    with the other workers'."""
    start_pool_worker()
    os.environ[QUIET_PROGRESS] = "1"


def run_cells(
    config: RunConfig,
    cells: list[Cell],
    output: Path,
    overwrite: bool,
    workers: int,
    runner: Callable[[RunConfig, Cell, Path, bool], str] = run_cell,
) -> None:
    """Every cell through `runner` (a module-level function: workers are spawned), in this
    process or in `workers` processes."""
    if workers <= 1 or len(cells) <= 1:
        for index, cell in enumerate(cells, start=1):
            console.rule(f"[{index}/{len(cells)}] {cell.name}")
            runner(config, cell, output, overwrite)
        return
    context = multiprocessing.get_context("spawn")
    with (
        ProcessPoolExecutor(workers, mp_context=context, initializer=one_thread_worker) as pool,
        cancelled_on_error(pool),
    ):
        futures = [pool.submit(runner, config, cell, output, overwrite) for cell in cells]
        for index, future in enumerate(futures, start=1):
            console.print(f"[{index}/{len(cells)}] done: {future.result()}")


def check_before_training(config: RunConfig, tokenizer, tasks) -> None:
    """Every arm against the model and every task name, before the first step trains."""
    check_arms(config.encodings)
    for base in config.compare.paired_with:
        if base not in config.encodings:
            raise invalid(
                "compare.paired_with",
                base,
                f"an arm of this run ({', '.join(config.encodings)})",
            )
    reached = []  # the arms with positional parameters for the run's positional rate
    with_input_tables = []  # the arms the input table's own rate reaches
    for arm in config.encodings:
        arm_run = arm_config(config, arm)
        model = model_config(arm_run, tokenizer)
        check_start(arm_run.pretrain.init_from, arm_run.pretrain.init_positions, model)
        with torch.device("meta"):
            encoding = build_encoding(model.encoding, model.dims, model.encoding_options)
        table = encoding.max_positions
        if table is not None and config.finetune.max_len > table:
            raise invalid(
                "finetune.max_len",
                config.finetune.max_len,
                f"at most model.max_len={table}: arm {arm!r} has a position table",
            )
        input_scale = arm_run.trainer.input_positions_lr_scale  # null without a table
        has_parameters = rates_reach(encoding, input_scale)[0]
        if has_parameters:
            reached.append(arm)
        if input_scale is not None:
            with_input_tables.append(arm)
        if arm_run.trainer.positional_lr_scale != 1.0 and not has_parameters:
            besides = "" if input_scale is None else " besides its input table"
            raise invalid(
                "encodings",
                arm,
                f"an arm with positional parameters: {model.encoding!r} has none{besides} "
                "for a positional learning rate to scale",
            )
    scale = config.trainer.positional_lr_scale
    if scale != 1.0 and not reached:
        raise invalid(
            "trainer.positional_lr_scale",
            scale,
            f"1.0 for arms without positional parameters ({', '.join(config.encodings)})",
        )
    input_scale = config.trainer.input_positions_lr_scale
    if input_scale is not None and not with_input_tables:
        raise invalid(
            "trainer.input_positions_lr_scale",
            input_scale,
            f"null for arms without an input position table ({', '.join(config.encodings)}; "
            "learned, bert-r and linformer have one)",
        )
    for task in config.finetune.tasks:
        tasks.spec(task)


def check_stages(config: RunConfig, output: Path, overwrite: bool) -> list[str]:
    """Every cell already in `output` against this run's settings, before anything trains:
    one of other settings fails here (or, with overwrite, is deleted here). Returns each
    cell's state."""
    pretraining, tuning = cells_of(config)
    cells = [*pretraining, *tuning]
    return [cell.state(cell.stage(config, output), overwrite) for cell in cells]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def collect_results(config: RunConfig, output: Path, marker: str = "finetune.json") -> dict:
    """Per arm: each pretraining seed's metrics and, per task, each seed's fine-tuning (read
    from the `marker` file its cells write: finetune.json, or xlingual.json) and, where the
    run has them, each seed's zero-shot score ("zero_shot")."""
    results: dict = {}
    pretraining, tuning = cells_of(config)
    for cell in pretraining:
        arm = results.setdefault(cell.arm, {"pretrain": {}, "finetune": {}})
        arm["pretrain"][str(cell.seed)] = read_json(cell.directory(output) / "metrics.json")
    for cell in tuning:
        if cell.zero_shot:
            scored = read_json(cell.directory(output) / ZERO_SHOT_MARKER)[cell.task]
            scored.pop("pairs")  # the texts and likelihoods stay in the cell's own file
            section = results[cell.arm].setdefault("zero_shot", {})
            section.setdefault(cell.task, {})[str(cell.seed)] = scored
            continue
        tuned = read_json(cell.directory(output) / marker)[cell.task]
        results[cell.arm]["finetune"].setdefault(cell.task, {})[str(cell.seed)] = tuned
    return results


def compare(
    config: RunConfig,
    output: Path,
    tokenizer,
    corpus,
    tasks,
    preset: str,
    overwrite: bool = False,
) -> dict:
    """Every cell in output/, then results.json, results.md and the figures (written by the
    main process, which returns the summary; other ranks return {}).
    overwrite: discard cells written with other settings instead of refusing them."""
    output = Path(output)
    check_before_training(config, tokenizer, tasks)
    states = check_stages(config, output, overwrite)
    output.mkdir(parents=True, exist_ok=True)
    if is_main_process():
        write_atomic(output / "config.yaml", to_yaml(config))
    start = time.perf_counter()
    # Under a launcher the ranks share each cell: pretraining data-parallel with the global
    # batch, fine-tuning runs one per rank (finetune.py).
    workers = 1 if world_size() > 1 else config.compare.workers
    for cells in cells_of(config):
        run_cells(config, cells, output, overwrite, workers)
        barrier()  # every model is saved before any rank fine-tunes it
    if not is_main_process():
        return {}
    results = collect_results(config, output)
    context = run_context(
        preset,
        time.perf_counter() - start,
        workers=workers,
        pretrain_seeds=list(config.compare.pretrain_seeds),
        finetune_seeds=list(config.finetune.seeds),
        cells=reuse_counts(states),
        data=stage_inputs(config, config.finetune.tasks).digests(),
    )
    return write_summary(config, output, results, context, tasks)
