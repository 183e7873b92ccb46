"""The claims side of a comparison's results.json, its markdown table and its figure.

results.json (the part written from `Measurements`, see lab/runs/claims.py):

    {"claims": [{"id", "paper", "statement", "measure", "values", "verdict", "reason"}, ...],
     "downstream": {task: {encoding: {"mean": float, "interval": [lo, hi] | null,
                                      "runs": int}}},
     "baselines": {task: {"majority": float, "bag_of_words": float,
                          "word_overlap": float | null (single-segment task),
                          "random_init": float}}}

An interval is the 95% Student-t interval of the mean over seeds; null for one seed. Baselines
are passed through on the scores' scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .claims import BASELINE_NAMES, VERDICTS, Measurements
from .statistics import mean_interval
from .tables import markdown_table


def downstream_summary(measurements: Measurements) -> dict:
    """{"downstream": {task: {encoding: {"mean", "interval", "runs"}}}, "baselines": ...}."""
    downstream = {
        task: {
            encoding: mean_interval(
                [run["score"] for run in runs], bounds=measurements.bounds
            ).to_dict()
            for encoding, runs in encodings.items()
            if runs
        }
        for task, encodings in measurements.downstream.items()
    }
    baselines = {task: dict(values) for task, values in measurements.baselines.items()}
    return {"downstream": downstream, "baselines": baselines}


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def claims_markdown(claims: Sequence[dict]) -> str:
    """A `## Claims` section: a count of the verdicts and one table row per evaluated claim."""
    counts = {v: sum(1 for c in claims if c["verdict"] == v) for v in VERDICTS}
    summary = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    rows = [
        [
            f"`{cell(c['id'])}`",
            cell(c["paper"]),
            cell(c["statement"]),
            f"**{c['verdict']}**",
            cell(c["reason"]),
        ]
        for c in claims
    ]
    table = markdown_table(["claim", "paper", "statement", "verdict", "reason"], rows)
    return "\n".join(
        [
            "## Claims",
            "",
            f"{len(claims)} claims: {summary}. Verdicts come from 95% intervals (a paired "
            "difference above or below 0, or within a stated margin), never from medians.",
            "",
            table,
        ]
    )


BASELINE_STYLE = {
    "majority": ":",
    "bag_of_words": "--",
    "word_overlap": (0, (5, 1, 1, 1)),
    "random_init": "-.",
}


def plot_downstream(summary: dict, path: Path) -> Path:
    """One panel per task: each encoding's mean with its 95% interval as an error bar, the
    baselines as horizontal lines. `summary` as returned by `downstream_summary`."""
    from .figures import plt, save_figure

    tasks = list(summary["downstream"])
    if not tasks:
        raise ValueError("no downstream task to plot")
    columns = min(3, len(tasks))
    rows = math.ceil(len(tasks) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.5 * rows), squeeze=False)
    for axis, task in zip(axes.flat, tasks, strict=False):
        scores = summary["downstream"][task]
        names = list(scores)
        means = [scores[n]["mean"] for n in names]
        errors = [
            [0.0, 0.0]
            if scores[n]["interval"] is None
            else [
                scores[n]["mean"] - scores[n]["interval"][0],
                scores[n]["interval"][1] - scores[n]["mean"],
            ]
            for n in names
        ]
        axis.errorbar(
            range(len(names)),
            means,
            yerr=list(zip(*errors, strict=True)) if errors else None,
            fmt="o",
            capsize=4,
            color="tab:blue",
        )
        for name in BASELINE_NAMES:
            value = summary.get("baselines", {}).get(task, {}).get(name)
            if value is not None:
                axis.axhline(value, linestyle=BASELINE_STYLE[name], color="gray", label=name)
        axis.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=8)
        axis.set_xlim(-0.5, len(names) - 0.5)
        axis.set_title(task)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(tasks) :]:
        axis.set_visible(False)
    figure.suptitle("downstream: mean and 95% interval over seeds")
    return save_figure(figure, Path(path))
