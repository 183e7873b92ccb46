"""The learning curves of a translation comparison: each encoding's dev BLEU per step (seeds
paired by step), the step at which it first beats copying the source by a margin on every
seed, the steps at which one encoding's seed spread lies beyond every other's (the verdict rule
of lab/runs/verdicts.py), a markdown section and a figure."""

from __future__ import annotations

import statistics
from pathlib import Path

from ..runs.tables import markdown_table
from ..runs.verdicts import Spread, clear_best

# "Translates": dev BLEU at least this many points above copying the source, on every seed.
COPY_MARGIN_BLEU = 5.0


def has_curves(results: dict) -> bool:
    return all("curve" in run for runs in results.values() for run in runs.values())


def seed_curves(runs: dict, metric: str = "bleu") -> dict[int, dict[int, float]]:
    """{seed: {step: score}} of one encoding."""
    return {
        seed: {point["step"]: point[metric] for point in run["curve"]["points"]}
        for seed, run in runs.items()
    }


def common_steps(results: dict) -> list[int]:
    """The steps that every run of every encoding scored."""
    steps = None
    for runs in results.values():
        for curve in seed_curves(runs).values():
            steps = set(curve) if steps is None else steps & set(curve)
    return sorted(steps or ())


def copy_scores(results: dict) -> dict:
    return next(iter(next(iter(results.values())).values()))["curve"]["copy_source"]


def first_beating_copy(curves: dict[int, dict[int, float]], steps: list[int], bar: float):
    """The first step at which every seed's BLEU is at least `bar`; None if none is."""
    return next((s for s in steps if all(c[s] >= bar for c in curves.values())), None)


def separation(results: dict, steps: list[int]) -> dict[int, str | None]:
    """{step: the encoding whose seed spread lies above every other's there, or None}."""
    found = {}
    for step in steps:
        spreads = {
            encoding: Spread.of(curve[step] for curve in seed_curves(runs).values())
            for encoding, runs in results.items()
        }
        found[step] = clear_best(spreads)
    return found


def separated_from(found: dict[int, str | None]) -> int | None:
    """The first step from which some encoding is clearly best at every later step."""
    start = None
    for step, best in found.items():
        start = (start if start is not None else step) if best is not None else None
    return start


def curve_summary(results: dict, margin: float = COPY_MARGIN_BLEU) -> dict:
    """What results.json keeps of the curves (see the module docstring)."""
    steps = common_steps(results)
    copy = copy_scores(results)
    bar = copy["bleu"] + margin
    found = separation(results, steps)
    seeds = min(len(runs) for runs in results.values())
    return {
        "steps": steps,
        "copy_source": copy,
        "margin_bleu": margin,
        "first_beats_copy": {
            encoding: first_beating_copy(seed_curves(runs), steps, bar)
            for encoding, runs in results.items()
        },
        "clearly_best": {str(step): best for step, best in found.items()},
        "separated_from": separated_from(found) if seeds > 1 and len(results) > 1 else None,
        "seeds": seeds,
    }


def median_cell(runs: dict, step: int) -> str:
    values = [curve[step] for curve in seed_curves(runs).values()]
    return f"{statistics.median(values):.2f}"


def separation_line(summary: dict) -> str:
    if summary["seeds"] < 2:
        return "- One seed per encoding: where the encodings separate cannot be told from noise."
    start = summary["separated_from"]
    if start is None:
        return (
            "- The seed spreads overlap at the last curve step, or earlier and later: no "
            "encoding is clearly best from any step to the end of the curve."
        )
    best = summary["clearly_best"][str(summary["steps"][-1])]
    return (
        f"- From step {start} to the end, one encoding's seed spread lies above every "
        f"other's (at the last step `{best}`)."
    )


def curve_markdown(results: dict, summary: dict, figure: str) -> list[str]:
    """The `## Learning curve` section of results.md."""
    copy = summary["copy_source"]
    first = curve_seed_pairs(results)
    lines = [
        "## Learning curve",
        "",
        f"Greedy dev BLEU on the same {first} dev pairs at every curve step, median over "
        f"seeds (figure: `{figure}`, seeds as thin lines). Copying the source scores BLEU "
        f"{copy['bleu']:.2f}, chrF {copy['chrf']:.2f} on them; an encoding translates from "
        f"the first step at which every seed beats copying by {summary['margin_bleu']:g} BLEU.",
        "",
    ]
    for encoding, step in summary["first_beats_copy"].items():
        when = f"step {step}" if step is not None else "never within the budget"
        lines.append(f"- `{encoding}` beats copy + {summary['margin_bleu']:g} BLEU: {when}.")
    lines += [separation_line(summary), ""]
    rows = [
        [step, *(median_cell(runs, step) for runs in results.values())] for step in summary["steps"]
    ]
    lines.append(markdown_table(["step", *(f"`{e}`" for e in results)], rows))
    return lines


def curve_seed_pairs(results: dict) -> int:
    return next(iter(next(iter(results.values())).values()))["curve"]["pairs"]


def plot_curves(results: dict, summary: dict, path: Path) -> Path:
    """BLEU and chrF per step: a line per encoding (median over seeds), each seed a thin
    line of the same colour, copying the source a dashed grey line."""
    from ..runs.figures import plt, save_figure

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for axis, (metric, label) in zip(axes, (("bleu", "BLEU"), ("chrf", "chrF")), strict=True):
        for index, (encoding, runs) in enumerate(results.items()):
            colour = colours[index % len(colours)]
            curves = seed_curves(runs, metric)
            for curve in curves.values():
                steps = sorted(curve)
                axis.plot(steps, [curve[s] for s in steps], color=colour, lw=0.7, alpha=0.4)
            steps = summary["steps"]
            medians = [statistics.median(c[s] for c in curves.values()) for s in steps]
            axis.plot(steps, medians, color=colour, lw=2, label=encoding)
        axis.axhline(summary["copy_source"][metric], color="gray", ls="--", label="copy source")
        axis.set_xlabel("training step")
        axis.set_ylabel(f"dev {label} (greedy)")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.suptitle("learning curves: median over seeds (thick), each seed (thin)")
    return save_figure(figure, Path(path))
