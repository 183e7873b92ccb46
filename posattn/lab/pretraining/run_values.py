"""One number of a finished run written by `posattn pretrain`, `finetune` or `zero-shot`, as
`posattn paired` compares them.

The run's kind is told by the file it finished with: finetune.json (a fine-tuning: a task's
test accuracy, in points, averaged over the fine-tuning seeds chosen), zero_shot.json (the
share of a task's test sentences preferred as written, in points) or metrics.json (a
pretraining: the final MLM validation loss, in nats). A compare cell's directory is one of
these too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ...data.identity import PRETRAINED
from ...errors import invalid, require
from ..runs.stages import DATA_KEY, STAGE_FILE, stage_record
from .zero_shot import MARKER as ZERO_SHOT_FILE

FINE_TUNING, ZERO_SHOT, PRETRAINING = "fine-tuning", "zero-shot", "pretraining"
RESULT_FILES = {
    FINE_TUNING: "finetune.json",
    ZERO_SHOT: ZERO_SHOT_FILE,
    PRETRAINING: "metrics.json",
}
# A difference of two accuracies in points lies within these; a loss has no such limit.
POINTS_BOUNDS = (-100.0, 100.0)


@dataclass(frozen=True)
class Measure:
    """What is compared: the runs' kind, its task (None for a pretraining's loss) and, for a
    fine-tuning, the fine-tuning seeds whose test accuracies are averaged."""

    kind: str
    task: str | None = None
    finetune_seeds: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        if self.kind == PRETRAINING:
            return "final MLM validation loss (nats)"
        if self.kind == ZERO_SHOT:
            return f"`{self.task}` zero-shot, sentences preferred as written (%)"
        seeds = ", ".join(map(str, self.finetune_seeds))
        return f"`{self.task}` test accuracy (points), fine-tuning seed(s) {seeds}"

    @property
    def digits(self) -> int:
        return 3 if self.kind == PRETRAINING else 1

    @property
    def bounds(self) -> tuple[float, float] | None:
        return None if self.kind == PRETRAINING else POINTS_BOUNDS


def run_kind(directory: Path) -> str:
    """FINE_TUNING, ZERO_SHOT or PRETRAINING, by the result file the run finished with."""
    found = [kind for kind, name in RESULT_FILES.items() if (directory / name).is_file()]
    names = " or ".join(RESULT_FILES.values())
    require(
        len(found) == 1,
        "runs",
        str(directory),
        f"a finished run of posattn pretrain, finetune or zero-shot (one of {names} in it)",
    )
    return found[0]


def read_result(directory: Path, kind: str) -> dict:
    return json.loads((directory / RESULT_FILES[kind]).read_text(encoding="utf-8"))


def recorded_tasks(directory: Path, kind: str) -> list[str]:
    """The tasks a fine-tuning or zero-shot run scored, in its file's order."""
    return list(read_result(directory, kind))


def finetune_seeds_of(directory: Path) -> list[int]:
    """The fine-tuning seeds of a fine-tuning run, in the order its results list them (its
    stage.json's finetune.seeds)."""
    record = stage_record(directory)
    if record is None:
        raise invalid("runs", str(directory), f"a fine-tuning with its {STAGE_FILE}")
    return list(record.get("settings", {}).get("finetune", {}).get("seeds", []))


def pretraining_seed(directory: Path, kind: str = PRETRAINING) -> int | None:
    """The pretraining seed of the model a run of `kind` measures, where its stage.json says
    it: a pretraining's own; a fine-tuning's or zero-shot score's only where it recorded the
    model it read (`posattn finetune | zero-shot` record the model's digest and take its
    pretraining's settings; a comparison's cells and older runs record a preset's seed, which
    says nothing of their model); None otherwise."""
    record = stage_record(directory) or {}
    if kind != PRETRAINING and PRETRAINED not in (record.get(DATA_KEY) or {}):
        return None
    return record.get("settings", {}).get("pretrain", {}).get("seed")


def run_value(directory: Path, measure: Measure) -> float:
    """The run's number of `measure` (see the module docstring)."""
    result = read_result(directory, measure.kind)
    if measure.kind == PRETRAINING:
        require(
            "final_eval_loss" in result,
            "runs",
            str(directory),
            "a pretraining's metrics.json, with its final_eval_loss (translation runs are "
            "compared by `posattn translate combine`)",
        )
        return float(result["final_eval_loss"])
    if measure.task not in result:
        raise invalid(
            "--task", measure.task, f"a task {directory} scored: {', '.join(result) or 'none'}"
        )
    if measure.kind == ZERO_SHOT:
        return float(result[measure.task]["score"])
    seeds = finetune_seeds_of(directory)
    tests = result[measure.task]["test_by_seed"]
    missing = [seed for seed in measure.finetune_seeds if seed not in seeds]
    if missing:
        raise invalid(
            "--finetune-seeds",
            ",".join(map(str, measure.finetune_seeds)),
            f"fine-tuning seeds {directory} ran ({', '.join(map(str, seeds))})",
        )
    chosen = [tests[seeds.index(seed)] for seed in measure.finetune_seeds]
    return 100.0 * sum(chosen) / len(chosen)
