"""What the cross-lingual comparison concludes, in the other comparisons' format: per task and
language each arm's test accuracy (%) over its pretrained models (each the mean of its
fine-tuning runs, pooled.py) with a mean and a 95% interval; the English score, the zero-shot
score (the mean over the other languages, model by model) and the transfer gap (English minus
zero-shot, model by model); each arm paired against BERT-A (`learned`) on the zero-shot score
(bootstrap over pretrained models and test examples, lab/runs/claims.py); DIET Table 3's claims
with interval verdicts; the majority, bag-of-words and (pair tasks) word-overlap baselines
(fitted on English, scored per language) and random initialisation. Written as results.json,
results.md and xlingual.png (accuracy per language, a line per arm).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...data.multilingual import ENGLISH
from ..runs.claims import (
    ACCURACY_PERCENT,
    DIET,
    Claim,
    Measurements,
    about_equal,
    better,
    evaluate_claims,
)
from ..runs.claims import paired_downstream as paired_average
from ..runs.context import data_line, wall_time_line
from ..runs.figures import plt, save_figure
from ..runs.results import claims_markdown
from ..runs.stages import save_run
from ..runs.statistics import mean_interval
from ..runs.tables import markdown_table
from .arms import RANDOM_INIT
from .baselines import fit_bag_of_words, fit_majority, fit_word_overlap, scored
from .plots import plot_validation_loss
from .pooled import models_at_best_rate, pooled_run, pooled_sentence
from .runconfig import RunConfig
from .subset import fixed_subset
from .summary import (
    BASELINE_ARM,
    CONTROL_ARM,
    baselines_table,
    control_section,
    difference_text,
    loss_cell,
    mlm_curves,
    other_bases,
    other_bases_section,
    paired_loss,
    percent_or_none,
    score_cell,
)


def language_runs(results: dict, task: str) -> dict:
    """{language: {arm: [{"seed": pretraining seed, "score": %, "per_example": [%, ...],
    "finetune_scores": [%, ...]}, ...]}} at each pretrained model's best learning rate: one run
    per pretrained model, its fine-tuning runs pooled (pooled.py)."""
    by_language: dict[str, dict[str, list[dict]]] = {}
    for arm, pretrain_seed, best in models_at_best_rate(results, task):
        for language in best[0]["test"]:
            run = pooled_run(
                pretrain_seed,
                [run["test"][language] for run in best],
                [run["test_correct"][language] for run in best],
            )
            by_language.setdefault(language, {}).setdefault(arm, []).append(run)
    return by_language


def transfer(runs: dict[str, dict[str, list[dict]]], arm: str, targets: list[str]) -> dict:
    """English, zero-shot (the mean over `targets`, per pretrained model) and gap (English -
    zero-shot, per model), each a mean with its 95% interval over the pretrained models."""
    english = [r["score"] for r in runs[ENGLISH][arm]]
    zero_shot = np.mean([[r["score"] for r in runs[x][arm]] for x in targets], axis=0).tolist()
    gap = [e - z for e, z in zip(english, zero_shot, strict=True)]
    return {
        "english": mean_interval(english, bounds=ACCURACY_PERCENT).to_dict(),
        "zero_shot": mean_interval(zero_shot, bounds=ACCURACY_PERCENT).to_dict(),
        "gap": mean_interval(gap, bounds=(-100.0, 100.0)).to_dict(),
    }


def xlingual_claims() -> list[Claim]:
    """DIET Table 3 (XNLI column) on the zero-shot tasks: per-head encodings beat input
    absolute positions, DIET-ABS is about equal to DIET-REL, and DIET-ABS inside Linformer
    beats Linformer."""
    measure = (
        "paired difference of the zero-shot accuracy (mean over the tasks and target languages), "
        "bootstrap over pretrained models and test examples"
    )
    rows = [("shaw", "Shaw", 67.9), ("t5", "Raffel", 68.5), ("tupe-r", "Ke", 67.8)]
    rows += [("diet-rel", "DIET-REL", 68.0), ("diet-abs", "DIET-ABS", 68.5)]
    claims = [
        Claim(
            f"xnli-{arm}>learned",
            DIET,
            f"{label} beats input-absolute positions zero-shot (Table 3 XNLI {score} vs 67.0)",
            f"{measure}: `{arm}` - `learned`",
            better(arm, "learned"),
        )
        for arm, label, score in rows
    ]
    claims.append(
        Claim(
            "xnli-diet-abs~rel",
            DIET,
            "DIET-ABS and DIET-REL transfer about equally (Table 3 XNLI 68.5 and 68.0-68.4)",
            f"{measure}: `diet-abs` - `diet-rel`, within +-1 point",
            about_equal("diet-abs", "diet-rel", margin=1.0),
        )
    )
    claims.append(
        Claim(
            "xnli-diet-abs-lin>linformer",
            DIET,
            "DIET-ABS inside Linformer beats Linformer with input positions zero-shot (Table 3 "
            "XNLI 64.4 vs 63.6 at k=256, n=512)",
            f"{measure}: `diet-abs-lin` - `linformer`",
            better("diet-abs-lin", "linformer"),
        )
    )
    return claims


def baselines(config: RunConfig, data, task: str, runs: dict) -> dict:
    """Per language, in %: the English training set's majority label, an English bag-of-words
    classifier and, on a pair task, an English word-overlap classifier, scored on that
    language's test set, and random init's mean. Word overlap counts the set's own tokenizer
    units, which split scripts written without spaces (Japanese, Chinese) as words cannot."""
    f = config.finetune
    train = data.records(task, "train")
    tokenizer = data.tokenizer()

    def units(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]

    # Each baseline fitted once on the English training set, then scored in every language.
    train = fixed_subset(list(train), f.max_train_examples)
    fitted = {
        "majority": fit_majority(train),
        "bag_of_words": fit_bag_of_words(train),
        "word_overlap": fit_word_overlap(train, units=units),
    }
    table = {}
    for language in runs:
        test = data.records(task, "test", language)
        table[language] = {
            name: percent_or_none(scored(predict, test, f.max_eval_examples))
            for name, predict in fitted.items()
        }
        random_init = runs[language].get(RANDOM_INIT)
        table[language]["random_init"] = (
            None if not random_init else mean_interval([r["score"] for r in random_init]).mean
        )
    return table


def task_table(results: dict, task: str, runs: dict, languages: list[str], summary: dict) -> str:
    header = ["arm", "params", "MLM val loss", *languages, "zero-shot", "gap (en - zero-shot)"]
    rows = []
    for arm, result in results.items():
        parameters = next(iter(result["pretrain"].values()))["parameters"]
        cells = [
            score_cell(
                mean_interval([r["score"] for r in runs[x][arm]], bounds=ACCURACY_PERCENT).to_dict()
            )
            for x in languages
        ]
        values = summary[task][arm]
        rows.append(
            [
                f"`{arm}`",
                f"{parameters / 1e6:.2f}M",
                loss_cell(result),
                *cells,
                score_cell(values["zero_shot"]),
                score_cell(values["gap"]),
            ]
        )
    return markdown_table(header, rows)


# The key of the average over every task, the measure of the xlingual claims.
ALL_TASKS = "all_tasks"
# The key of the paired MLM loss beside the tasks' keys in an arm's pairing.
MLM_LOSS = "mlm_loss"


def task_groups(tasks: list[str]) -> dict[str, list[str]]:
    """Each task alone and, with more than one, all of them averaged (`ALL_TASKS`)."""
    groups = {task: [task] for task in tasks}
    if len(tasks) > 1:
        groups[ALL_TASKS] = list(tasks)
    return groups


def paired_with_arm(
    results: dict,
    measurements: Measurements,
    tasks: list[str],
    targets: list[str],
    base: str = BASELINE_ARM,
) -> dict:
    """Per arm other than `base` (`learned` unless given): its final MLM validation loss minus
    the base's (`mlm_loss`, paired by pretraining seed, t-interval), and per task and over all
    tasks (`ALL_TASKS`, what the claims compare) the zero-shot and the English accuracy minus
    the base's, paired by pretraining seed (bootstrap over models and test examples). Empty
    when the run has no `base` arm."""
    arms = {arm for runs in measurements.downstream.values() for arm in runs}
    if base not in arms:
        return {}
    paired: dict = {}
    for arm in sorted(arms - {base}):
        paired[arm] = {MLM_LOSS: paired_loss(results, arm, base)}
        for key, group in task_groups(tasks).items():
            entry = {}
            for label, languages in (("zero_shot", targets), ("english", [ENGLISH])):
                names = [f"{task}/{x}" for task in group for x in languages]
                _, comparison = paired_average(measurements, arm, base, names)
                entry[label] = None if comparison is None else comparison.to_dict()
            paired[arm][key] = entry
    return paired


def paired_table(paired: dict, tasks: list[str], base: str = BASELINE_ARM) -> str:
    groups = list(task_groups(tasks))
    titles = {ALL_TASKS: "all tasks"}
    header = [
        f"arm - `{base}`",
        "MLM val loss",
        *(f"{titles.get(g, g)} {w}" for g in groups for w in ("zero-shot", "English")),
    ]
    rows = [
        [
            f"`{arm}`",
            difference_text(values[MLM_LOSS], digits=3),
            *(difference_text(values[g][w]) for g in groups for w in ("zero_shot", "english")),
        ]
        for arm, values in paired.items()
    ]
    return markdown_table(header, rows)


def plot_languages(downstream: dict, tasks: list[str], languages: list[str], path: Path) -> Path:
    """One panel per task: accuracy per language (English first), a line per arm with its 95%
    interval, the majority baseline dashed."""
    figure, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for axis, task in zip(axes.flat, tasks, strict=True):
        arms = list(downstream[f"{task}/{languages[0]}"])
        for arm in arms:
            cells = [downstream[f"{task}/{x}"][arm] for x in languages]
            means = [c["mean"] for c in cells]
            errors = [
                [0.0, 0.0]
                if c["interval"] is None
                else [c["mean"] - c["interval"][0], c["interval"][1] - c["mean"]]
                for c in cells
            ]
            axis.errorbar(
                range(len(languages)),
                means,
                yerr=np.array(errors).T,
                marker="o",
                capsize=3,
                label=arm,
            )
        axis.set_xticks(range(len(languages)), languages, rotation=40, ha="right", fontsize=8)
        axis.set(title=f"{task} (trained on {ENGLISH} only)", ylabel="test accuracy (%)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    return save_figure(figure, Path(path))


def results_markdown(
    config, results, runs, summary, tables, claims, paired, context, control=None, others=None
) -> str:
    """results.md; others: compare.paired_with's pairings, by base arm."""
    tasks = list(config.finetune.tasks)
    languages = context["languages"]
    parts = [
        "# posattn compare --task xlingual",
        "",
        f"Preset `{context['preset']}`, {context['machine']}. "
        f"Fine-tuned on {ENGLISH} labels only; every other language is zero-shot. Test accuracy "
        f"(%): {pooled_sentence(context)}; zero-shot: the mean over the target languages, "
        "model by model; gap: English minus zero-shot, model by model (smaller transfers "
        "better). No test page was seen by any stage in any language.",
    ]
    for task in tasks:
        parts += [
            "",
            f"## {task}",
            "",
            task_table(results, task, runs[task], languages, summary),
            "",
            baselines_table(tables[task], languages, "baseline (fitted on English)"),
        ]
    parts += [
        "",
        "## Paired against BERT-A",
        "",
        "Each arm minus `learned` in accuracy points, paired by pretraining seed, with a "
        "bootstrap interval over pretrained models and test examples; `all tasks`: the average "
        "over the tasks, what the claims below compare. An interval that excludes 0 is a "
        "difference these seeds support.",
        "",
        paired_table(paired, tasks) if paired else "(no `learned` arm in this run)",
        "",
        *control_section(
            paired_table(control, tasks, CONTROL_ARM) if control else "",
            "where an interval contains 0, these seeds cannot tell the arm's positions from none "
            "at all.",
        ),
        *other_bases_section(
            {base: paired_table(p, tasks, base) for base, p in (others or {}).items()}
        ),
        claims_markdown(claims),
        "",
        wall_time_line(context),
        data_line(context),
    ]
    return "\n".join(parts) + "\n"


def write_xlingual_summary(config: RunConfig, output: Path, results: dict, context, data) -> dict:
    tasks = list(config.finetune.tasks)
    languages = list(context["languages"])
    targets = [x for x in languages if x != ENGLISH]
    runs = {task: language_runs(results, task) for task in tasks}
    downstream = {
        f"{task}/{x}": {
            arm: mean_interval([r["score"] for r in rs], bounds=ACCURACY_PERCENT).to_dict()
            for arm, rs in runs[task][x].items()
        }
        for task in tasks
        for x in languages
    }
    summary = {task: {arm: transfer(runs[task], arm, targets) for arm in results} for task in tasks}
    kinds = {task: "pair" if data.spec(task).pair else "single" for task in tasks}
    zero_shot = Measurements(
        downstream={f"{t}/{x}": runs[t][x] for t in tasks for x in targets},
        task_kinds={f"{t}/{x}": kinds[t] for t in tasks for x in targets},
        mlm_curves=mlm_curves(results),
        bounds=ACCURACY_PERCENT,
    )
    everything = Measurements(
        downstream={f"{t}/{x}": runs[t][x] for t in tasks for x in languages},
        bounds=ACCURACY_PERCENT,
    )
    claims = evaluate_claims(zero_shot, xlingual_claims())
    paired = paired_with_arm(results, everything, tasks, targets)
    control = paired_with_arm(results, everything, tasks, targets, CONTROL_ARM)
    others = {
        base: paired_with_arm(results, everything, tasks, targets, base)
        for base in other_bases(config)
    }
    tables = {task: baselines(config, data, task, runs[task]) for task in tasks}
    markdown = results_markdown(
        config, results, runs, summary, tables, claims, paired, context, control, others
    )
    output_json = {
        "context": context,
        "claims": claims,
        "downstream": downstream,
        "transfer": summary,
        "baselines": {f"{t}/{x}": tables[t][x] for t in tasks for x in languages},
        "paired_with_learned": paired,
        "paired_with_none": control,
        "paired_with_arms": others,
        "results": results,
    }
    save_run(output, {"results.json": output_json, "results.md": markdown})
    plot_languages(downstream, tasks, languages, output / "xlingual.png")
    plot_validation_loss(zero_shot.mlm_curves, output / "validation_loss.png")
    print(markdown)
    return output_json
