"""`posattn paired NAME=DIR ...`: arms of runs trained apart, compared over pretraining seeds.

A claim read from standalone runs (`posattn pretrain`, then `finetune` and `zero-shot` of its
model: one process a seed, often over several sessions) needs what `compare` computes for its
cells: each seed's number of one arm minus the other's, the mean difference, its Student-t
interval over seeds and the exact sign-flip p-value (lab/runs/statistics.py). This command
reads those numbers from the run directories (run_values.py) and prints that section; a second
look at seeds added after a first reads a higher level (`--confidence 0.975`: two looks at 95%
together).

Each arm is a name and its runs, one `NAME=DIR` a run, in the order given; every arm is read
against the first. Runs pair by position, the i-th run of one arm with the i-th of the other:
not every run says which pretraining seed its model had (a comparison's cells, and fine-tunings
from before `posattn finetune` read the pretraining's settings, record a preset's), so the
order given is the pairing, and the table names each pair's directories. Where both runs of a
pair do say it - pretraining runs, and fine-tunings and zero-shot scores that recorded the
model they read (`run_values.pretraining_seed`) - a pair whose seeds differ is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...data.manifest import write_atomic
from ...errors import require
from ..runs.statistics import (
    DEFAULT_CONFIDENCE,
    level_text,
    paired_permutation,
    require_confidence,
    smallest_sign_flip_p,
)
from ..runs.tables import estimate_text, markdown_table
from .run_values import (
    FINE_TUNING,
    PRETRAINING,
    Measure,
    finetune_seeds_of,
    pretraining_seed,
    recorded_tasks,
    run_kind,
    run_value,
)


def parse_arms(specs: list[str]) -> dict[str, list[Path]]:
    """'NAME=DIR' specs -> {name: [directories]} in the order given (a name repeated adds a
    run to its arm); at least two arms, each with as many runs as the first."""
    arms: dict[str, list[Path]] = {}
    for spec in specs:
        name, sep, directory = spec.partition("=")
        require(bool(sep and name and directory), "runs", spec, "NAME=DIR, both not empty")
        path = Path(directory)
        require(path.is_dir(), "runs", spec, "an existing run directory after NAME=")
        require(
            path not in arms.get(name, []),
            "runs",
            spec,
            f"each run once in an arm ({directory} is already one of {name!r}'s)",
        )
        arms.setdefault(name, []).append(path)
    require(len(arms) >= 2, "runs", specs, "runs of two arms or more (NAME=DIR, two names)")
    first, *others = arms
    for name in others:
        require(
            len(arms[name]) == len(arms[first]),
            "runs",
            name,
            f"as many runs as the first arm {first!r} ({len(arms[first])}), paired in the "
            f"order given; {name!r} has {len(arms[name])}",
        )
    return arms


def choose_measure(
    arms: dict[str, list[Path]], task: str | None, finetune_seeds: list[int] | None
) -> Measure:
    """The runs' one kind, the task (given, or the one task of the first run) and the
    fine-tuning seeds (given, or those of the first run); a choice the kind has no use for is
    refused, not ignored."""
    runs = [run for arm_runs in arms.values() for run in arm_runs]
    kinds = {run: run_kind(run) for run in runs}
    kind = kinds[runs[0]]
    for run in runs:
        require(
            kinds[run] == kind,
            "runs",
            str(run),
            f"a run of the first one's kind ({kind}, {runs[0]}); this one is a {kinds[run]}",
        )
    if kind == PRETRAINING:
        require(task is None, "--task", task, "no task for pretraining runs (their MLM loss)")
    if kind != FINE_TUNING:
        require(
            finetune_seeds is None,
            "--finetune-seeds",
            finetune_seeds,
            f"fine-tuning seeds for fine-tuning runs only (these are {kind} runs)",
        )
    if kind == PRETRAINING:
        return Measure(kind)
    if task is None:
        tasks = recorded_tasks(runs[0], kind)
        require(
            len(tasks) == 1,
            "--task",
            task,
            f"one of the tasks {runs[0]} scored ({', '.join(tasks)}): give --task",
        )
        task = tasks[0]
    if kind == FINE_TUNING and finetune_seeds is None:
        finetune_seeds = finetune_seeds_of(runs[0])
    return Measure(kind, task, tuple(finetune_seeds or ()))


def check_pretraining_seeds(arms: dict[str, list[Path]], kind: str) -> None:
    """Runs paired by position must share their models' pretraining seed where both record
    it."""
    first, *others = arms
    for name in others:
        for mine, theirs in zip(arms[name], arms[first], strict=True):
            seeds = pretraining_seed(mine, kind), pretraining_seed(theirs, kind)
            require(
                None in seeds or seeds[0] == seeds[1],
                "runs",
                f"{name}={mine}",
                f"the pretraining seed of the run it pairs with ({first}={theirs}, seed "
                f"{seeds[1]}); this run's model has seed {seeds[0]} (pairs follow the order "
                "given)",
            )


def paired_runs(
    specs: list[str],
    task: str | None = None,
    finetune_seeds: list[int] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict:
    """{measure, confidence, arms: {name: {runs, values}}, comparisons: [{system, against,
    per_pair, difference, interval, p_value, runs, method}]}: each arm after the first minus
    the first, paired by position."""
    require_confidence("--confidence", confidence)  # before any run is read
    arms = parse_arms(specs)
    measure = choose_measure(arms, task, finetune_seeds)
    check_pretraining_seeds(arms, measure.kind)
    values = {name: [run_value(run, measure) for run in runs] for name, runs in arms.items()}
    first, *others = arms
    comparisons = []
    for name in others:
        comparison = paired_permutation(values[name], values[first], confidence, measure.bounds)
        entry = {"system": name, "against": first, **comparison.to_dict()}
        entry["per_pair"] = [a - b for a, b in zip(values[name], values[first], strict=True)]
        comparisons.append(entry)
    return {
        "measure": {
            "kind": measure.kind,
            "task": measure.task,
            "finetune_seeds": list(measure.finetune_seeds),
            "label": measure.label,
        },
        "confidence": confidence,
        "arms": {
            name: {"runs": [str(run) for run in runs], "values": values[name]}
            for name, runs in arms.items()
        },
        "comparisons": comparisons,
    }


def reading(comparison: dict) -> str:
    """Where the interval lies: the sentence a verdict is read from."""
    if comparison["interval"] is None:
        return "one pair: no interval"
    low, high = comparison["interval"]
    if low > 0:
        return "the interval lies above 0"
    if high < 0:
        return "the interval lies below 0"
    return "the interval contains 0"


def paired_lines(result: dict) -> list[str]:
    """The markdown of `paired_runs`' result: the values pair by pair, each comparison's mean
    difference [interval] and p, and the arms' directories."""
    digits = Measure(result["measure"]["kind"]).digits
    level = level_text(result["confidence"])
    arms, comparisons = result["arms"], result["comparisons"]
    count = len(next(iter(arms.values()))["values"])
    header = ["arm", *(f"pair {i + 1}" for i in range(count)), f"mean [{level}]", "p"]
    rows = []
    for name, arm in arms.items():
        mean = sum(arm["values"]) / len(arm["values"])  # the arm's own, no interval: not paired
        rows.append(
            [f"`{name}`", *(f"{v:.{digits}f}" for v in arm["values"]), f"{mean:.{digits}f}", ""]
        )
    differences = [
        estimate_text(c["difference"], c["interval"], digits, signed=True) for c in comparisons
    ]
    for c, difference in zip(comparisons, differences, strict=True):
        per_pair = (f"{d:+.{digits}f}" for d in c["per_pair"])
        rows.append(
            [f"`{c['system']}` - `{c['against']}`", *per_pair, difference, f"{c['p_value']:.4g}"]
        )
    lines = [
        f"## {result['measure']['label']}, paired by position",
        "",
        markdown_table(header, rows),
        "",
    ]
    for c, difference in zip(comparisons, differences, strict=True):
        lines.append(
            f"- `{c['system']}` - `{c['against']}`: {difference} at {level} over {c['runs']} "
            f"pairs: {reading(c)} (sign-flip p {c['p_value']:.4g}; the smallest {c['runs']} "
            f"pairs allow is {smallest_sign_flip_p(c['runs']):.4g})"
        )
    lines += ["", "Runs, pair by pair:"]
    for name, arm in arms.items():
        lines.append(f"- `{name}`: {', '.join(arm['runs'])}")
    return lines


def run_paired(
    specs: list[str],
    task: str | None,
    finetune_seeds: list[int] | None,
    confidence: float,
    json_path: Path | None,
) -> list[str]:
    """The command: the markdown lines (printed by the caller) and, with `json_path`, the
    result written there atomically."""
    result = paired_runs(specs, task, finetune_seeds, confidence)
    if json_path is not None:
        require(json_path.parent.is_dir(), "--json", str(json_path), "a file in an existing folder")
        write_atomic(json_path, json.dumps(result, indent=1) + "\n")
    return paired_lines(result)
