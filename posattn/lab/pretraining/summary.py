"""What a comparison concludes: per task each arm's test accuracy (%) over its pretrained
models (one per pretraining seed, each the mean of its fine-tuning runs: pooled.py) with a mean
and a 95% interval, the baselines on the same examples, the MLM validation curves, and the
papers' claims tested on them (lab/runs/claims.py), and the fine-tuning runs that stayed at
the majority class (failed_runs.py). Written as results.json (top-level `claims`,
`downstream`, `baselines`, `failed_finetuning`, `results`), results.md and figures
(validation_loss.png, downstream.png).
"""

from __future__ import annotations

from pathlib import Path

from ..runs.claims import (
    ACCURACY_PERCENT,
    BASELINE_NAMES,
    Measurements,
    evaluate_claims,
    paired_downstream,
)
from ..runs.claims_table import default_claims
from ..runs.context import data_line, wall_time_line
from ..runs.results import claims_markdown, downstream_summary, plot_downstream
from ..runs.stages import save_run
from ..runs.statistics import mean_interval, paired_permutation
from ..runs.tables import estimate_text, markdown_table
from .arms import RANDOM_INIT, scaled_arm
from .baselines import task_baselines
from .failed_runs import failed_runs, failed_runs_markdown
from .plots import plot_validation_loss
from .pooled import models_at_best_rate, pooled_run, pooled_sentence
from .runconfig import RunConfig


def downstream_runs(results: dict, task: str) -> dict[str, list[dict]]:
    """Per arm, one run per pretraining seed at its pretrained model's best learning rate: the
    mean of its fine-tuning runs' test accuracies in %, the mean of which test examples they
    got right (pooled.py says why pooled), each fine-tuning run's accuracy beside; runs of two
    arms pair by pretraining seed."""
    runs: dict[str, list[dict]] = {arm: [] for arm in results}
    for arm, pretrain_seed, best in models_at_best_rate(results, task):
        correct = [run.get("test_correct") for run in best]
        correct_or_none = None if None in correct else correct
        runs[arm].append(pooled_run(pretrain_seed, [run["test"] for run in best], correct_or_none))
    return runs


def zero_shot_runs(results: dict) -> dict[str, dict[str, list[dict]]]:
    """Per zero-shot task, per arm, each pretraining seed's score as a downstream run (seed
    "P", per-pair preferences as its per-example scores), for the same summaries and pairing."""
    runs: dict = {}
    for arm, result in results.items():
        for task, seeds in result.get("zero_shot", {}).items():
            runs.setdefault(task, {})[arm] = [
                {"seed": seed, "score": scored["score"], "per_example": scored["per_pair"]}
                for seed, scored in seeds.items()
            ]
    return runs


def zero_shot_summary(runs: dict) -> tuple[dict, dict]:
    """({task: {arm: mean and interval over pretraining seeds}}, {task: {arm: paired
    difference to `learned`}}) of the zero-shot scores."""
    measured = Measurements(downstream=runs, bounds=ACCURACY_PERCENT)
    summary = downstream_summary(measured)["downstream"]
    paired: dict = {}
    for task, arms in runs.items():
        if BASELINE_ARM not in arms:
            continue
        for arm in arms:
            if arm != BASELINE_ARM:
                _, comparison = paired_downstream(measured, arm, BASELINE_ARM, [task])
                paired.setdefault(task, {})[arm] = comparison and comparison.to_dict()
    return summary, paired


def zero_shot_markdown(summary: dict, paired: dict) -> str:
    """A section per zero-shot task: each arm's score and its difference to `learned`."""
    parts = []
    for task, arms in summary.items():
        rows = [
            [f"`{arm}`", score_cell(value), difference_text(paired.get(task, {}).get(arm))]
            for arm, value in arms.items()
        ]
        parts += [
            f"## `{task}` without fine-tuning",
            "",
            "Each test sentence written in order against its own reordering (two adjacent "
            "swaps), both scored by the masked LM's pseudo-log-likelihood: % of pairs where "
            "the written order scores higher (a tie counts half; a model without positions "
            "ties every pair, 50). Mean over pretraining seeds [95% interval]; minus `learned` "
            "with a bootstrap interval over seeds and pairs.",
            "",
            markdown_table(["arm", "zero-shot", "- `learned`"], rows),
            "",
        ]
    return "\n".join(parts)


def mlm_curves(results: dict) -> dict[str, list[list[list[float]]]]:
    """Per pretrained arm, each pretraining seed's validation curve [[step, loss], ...]."""
    return {
        arm: [metrics["eval_loss"] for metrics in result["pretrain"].values()]
        for arm, result in results.items()
        if arm != RANDOM_INIT
    }


def baselines(config: RunConfig, tasks_source, downstream: dict) -> dict:
    """Per task, in %: the majority class, bag-of-words and (pair tasks) word-overlap logistic
    regressions trained on the training examples the fine-tuning sees and scored on its test
    examples, and random initialisation's mean (None where the run has no random-init arm, and
    word overlap None on a single-segment task)."""
    table = {}
    for task in config.finetune.tasks:
        scores = task_baselines(tasks_source, task, config.finetune)
        table[task] = {
            "majority": 100 * scores["majority"],
            "bag_of_words": 100 * scores["bag_of_words"],
            "word_overlap": percent_or_none(scores["word_overlap"]),
            "random_init": downstream[task].get(RANDOM_INIT, {}).get("mean"),
        }
    return table


def loss_cell(result: dict) -> str:
    finals = [m["final_eval_loss"] for m in result["pretrain"].values()]
    if any(final is None for final in finals):
        return "-"
    interval = mean_interval(finals)
    bounds = None if interval.low is None else (interval.low, interval.high)
    return estimate_text(interval.mean, bounds, digits=3)


def score_cell(summary: dict | None) -> str:
    if summary is None:
        return "-"
    return estimate_text(summary["mean"], summary["interval"])


def results_table(results: dict, downstream: dict, tasks: list[str]) -> str:
    header = ["arm", "params", "MLM val loss", *tasks]
    rows = []
    for arm, result in results.items():
        parameters = next(iter(result["pretrain"].values()))["parameters"]
        cells = [score_cell(downstream[task].get(arm)) for task in tasks]
        rows.append([f"`{arm}`", f"{parameters / 1e6:.2f}M", loss_cell(result), *cells])
    return markdown_table(header, rows)


def baselines_table(table: dict, columns: list[str], title: str = "baseline") -> str:
    """A row per baseline that scored somewhere, a column per task (or language) of `table`
    ({column: {baseline: percent or None}})."""

    def percent(value):
        return "-" if value is None else f"{value:.1f}"

    rows = [
        [name.replace("_", " "), *(percent(table[column].get(name)) for column in columns)]
        for name in BASELINE_NAMES
        if any(table[column].get(name) is not None for column in columns)
    ]
    return markdown_table([title, *columns], rows)


def percent_or_none(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


BASELINE_ARM = "learned"
# The same model without positions: an arm that ties it has not used positions measurably.
CONTROL_ARM = "none"


def difference_text(comparison: dict | None, digits: int = 1) -> str:
    """ "+1.2 [-0.3, +2.7]": a paired difference with its 95% interval (no interval: one pair)."""
    if comparison is None:
        return "-"
    return estimate_text(comparison["difference"], comparison["interval"], digits, signed=True)


def paired_loss(results: dict, arm: str, base: str) -> dict | None:
    """`arm`'s final MLM validation loss minus `base`'s, paired by pretraining seed (t-interval,
    exact sign-flip p-value); None when either lacks a loss (random-init) or a seed."""
    runs, base_runs = results[arm]["pretrain"], results[base]["pretrain"]
    if set(runs) != set(base_runs):
        return None
    seeds = sorted(runs, key=int)
    losses = [runs[seed]["final_eval_loss"] for seed in seeds]
    base_losses = [base_runs[seed]["final_eval_loss"] for seed in seeds]
    if None in losses + base_losses:
        return None
    return paired_permutation(losses, base_losses).to_dict()


def paired_with_arm(results: dict, measurements: Measurements, base: str = BASELINE_ARM) -> dict:
    """Per arm other than `base` (BERT-A, `learned`, unless given): its final MLM validation
    loss minus the base's, paired by pretraining seed (t-interval, exact sign-flip p-value),
    and its score on each task minus the base's, paired by pretraining seed (bootstrap over
    models and test examples). Empty when the run has no `base` arm."""
    if base not in results:
        return {}
    paired = {}
    for arm in results:
        if arm == base:
            continue
        loss = paired_loss(results, arm, base)
        tasks = {}
        for task in measurements.downstream:
            _, comparison = paired_downstream(measurements, arm, base, [task])
            tasks[task] = None if comparison is None else comparison.to_dict()
        paired[arm] = {"mlm_loss": loss, "tasks": tasks}
    return paired


def paired_table(paired: dict, tasks: list[str], base: str = BASELINE_ARM) -> str:
    header = [f"arm - `{base}`", "MLM val loss", *tasks]
    rows = [
        [
            f"`{arm}`",
            difference_text(values["mlm_loss"], digits=3),
            *(difference_text(values["tasks"].get(task)) for task in tasks),
        ]
        for arm, values in paired.items()
    ]
    return markdown_table(header, rows)


def other_bases(config: RunConfig) -> list[str]:
    """The arms of compare.paired_with that the `learned` and `none` pairings do not already
    cover, in the order given."""
    covered = {BASELINE_ARM, CONTROL_ARM}
    return [b for b in dict.fromkeys(config.compare.paired_with) if b not in covered]


def other_bases_section(tables: dict[str, str]) -> list[str]:
    """A section per arm of compare.paired_with: `tables` maps it to its paired table."""
    parts = []
    for base, table in tables.items():
        parts += [
            f"## Paired against `{base}`",
            "",
            f"Each arm minus `{base}` (`compare.paired_with`), paired the same way.",
            "",
            table,
            "",
        ]
    return parts


def start_sentence(pretrain) -> str:
    """What pretraining started from, when not random weights."""
    if not pretrain.init_from:
        return ""
    return (
        f" Every pretrained arm starts from the content weights of `{pretrain.init_from}` with "
        "fresh positional parameters (`learned/checkpoint-positions`: its position table too); "
        "`random-init` copies nothing."
    )


def rate_sentence(config) -> str:
    """The positional learning rates, when the run scales them, and the arms the positional
    one cannot reach."""
    scale = config.trainer.positional_lr_scale
    input_scale = config.trainer.input_positions_lr_scale
    text = ""
    if scale != 1.0:
        unscaled = [f"`{arm}`" for arm in config.encodings if not scaled_arm(config, arm)]
        text = f" Positional parameters train at {scale:g} times the run's learning rate"
        if unscaled and input_scale is None:
            verb = "trains" if len(unscaled) == 1 else "train"
            text += f"; {', '.join(unscaled)}, without any, {verb} at the run's rate"
        elif unscaled:
            verb = "has" if len(unscaled) == 1 else "have"
            text += f"; {', '.join(unscaled)} {verb} none besides an input table"
        text += "."
    if input_scale is not None:
        rate = "" if input_scale == 1.0 else f"{input_scale:g} times "
        text += f" Input position tables train at {rate}the run's learning rate."
    return text


def control_section(table: str, reading: str) -> list[str]:
    """The arms against the model without positions (`table`, '' when the run has none) and
    how to read them."""
    if not table:
        return []
    return [
        "## Paired against the model without positions",
        "",
        "Each arm minus `none`, the same model with no positional information, paired the same "
        f"way: {reading}",
        "",
        table,
        "",
    ]


def finetuning_runs(results: dict, context: dict) -> int:
    """How many fine-tuning runs a task has: every arm, pretraining seed and fine-tuning seed."""
    return len(results) * len(context["pretrain_seeds"]) * len(context["finetune_seeds"])


def results_markdown(config, summary: dict, zero_shot_section: str = "") -> str:
    """results.md from the pieces of results.json (`write_summary`'s `summary`)."""
    results, downstream, table = summary["results"], summary["downstream"], summary["baselines"]
    context, paired = summary["context"], summary["paired_with_learned"]
    control, failed = summary["paired_with_none"], summary["failed_finetuning"]
    tasks = list(config.finetune.tasks)
    parts = [
        "# posattn compare",
        "",
        f"Preset `{context['preset']}`, {context['machine']}. "
        f"Test accuracy (%): {pooled_sentence(context)}, at each model's best learning rate; "
        "MLM validation loss: mean over "
        "pretraining seeds [95% interval]. Speed is measured by `posattn bench`, paired."
        + start_sentence(config.pretrain)
        + rate_sentence(config),
        "",
        results_table(results, downstream, tasks),
        "",
        "## Paired against BERT-A",
        "",
        "Each arm minus `learned`, paired by seed: MLM validation loss (lower is better) with "
        "a t-interval over pretraining seeds; accuracy points per task with a bootstrap "
        "interval over pretrained models and test examples. An interval that excludes 0 is a "
        "difference these seeds support.",
        "",
        paired_table(paired, tasks) if paired else "(no `learned` arm in this run)",
        "",
        *control_section(
            paired_table(control, tasks, CONTROL_ARM) if control else "",
            "an arm whose intervals contain 0 has not measurably used positions at this budget, "
            "and its lead over `learned` is then the cost of BERT-A's input table, not a gain "
            "from its own method.",
        ),
        *other_bases_section(
            {base: paired_table(p, tasks, base) for base, p in summary["paired_with_arms"].items()}
        ),
        "## Baselines (same training and test examples)",
        "",
        baselines_table(table, tasks) if tasks else "(no fine-tuning tasks in this run)",
        "",
        *(failed_runs_markdown(failed, finetuning_runs(results, context)) if failed else []),
        zero_shot_section,
        claims_markdown(summary["claims"]),
        "",
        wall_time_line(context),
        data_line(context),
    ]
    return "\n".join(parts) + "\n"


def write_summary(config: RunConfig, output: Path, results: dict, context: dict, tasks) -> dict:
    task_names = list(config.finetune.tasks)
    runs = {task: downstream_runs(results, task) for task in task_names}
    kinds = {task: "pair" if tasks.spec(task).pair else "single" for task in task_names}
    downstream = downstream_summary(Measurements(downstream=runs, bounds=ACCURACY_PERCENT))
    downstream = downstream["downstream"]
    table = baselines(config, tasks, downstream)
    measurements = Measurements(
        downstream=runs,
        task_kinds=kinds,
        mlm_curves=mlm_curves(results),
        baselines=table,
        bounds=ACCURACY_PERCENT,
    )
    claims = evaluate_claims(measurements, default_claims())
    seeds = list(config.finetune.seeds)
    failed = {
        task: failed_runs(results, task, seeds, table[task]["majority"]) for task in task_names
    }
    paired = paired_with_arm(results, measurements)
    control = paired_with_arm(results, measurements, CONTROL_ARM)
    others = {base: paired_with_arm(results, measurements, base) for base in other_bases(config)}
    zero_shot, zero_shot_paired = zero_shot_summary(zero_shot_runs(results))
    summary = {
        "context": context,
        "claims": claims,
        "downstream": downstream,
        "baselines": table,
        "failed_finetuning": failed,
        "paired_with_learned": paired,
        "paired_with_none": control,
        "paired_with_arms": others,
        "zero_shot": zero_shot,
        "zero_shot_paired_with_learned": zero_shot_paired,
        "results": results,
    }
    markdown = results_markdown(config, summary, zero_shot_markdown(zero_shot, zero_shot_paired))
    save_run(output, {"results.json": summary, "results.md": markdown})
    plot_validation_loss(measurements.mlm_curves, output / "validation_loss.png")
    if downstream:  # a comparison of pretraining alone (finetune.tasks=[]) has no tasks
        plot_downstream({"downstream": downstream, "baselines": table}, output / "downstream.png")
    print(markdown)
    return summary
