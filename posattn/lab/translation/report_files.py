"""A translation comparison's files: results.json, results.md and, where its runs kept learning
curves, curve.png; written by `compare --task translation` and by `translate combine`."""

from __future__ import annotations

from pathlib import Path

from ..runs.stages import is_main_process, save_run
from ..runs.statistics import DEFAULT_CONFIDENCE
from .curve_report import curve_markdown, curve_summary, has_curves, plot_curves
from .report import translation_markdown
from .seed_pairs import seed_comparison_lines, seed_comparisons

CURVE_FIGURE = "curve.png"


def write_report(
    output: Path,
    results: dict,
    context: dict,
    tests: dict,
    extra: dict | None = None,
    all_pairs: bool = False,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict:
    """results.json ({context, results, significance, over_seeds, curve?, **extra}), results.md
    and, where the runs kept learning curves, curve.png; the markdown is printed too. Returns
    the summary. over_seeds: each arm against the first over training seeds (every pair with
    all_pairs), intervals at `confidence`."""
    over_seeds = seed_comparisons(results, all_pairs, confidence)
    markdown = translation_markdown(
        results, context, tests, extra, seed_comparison_lines(over_seeds)
    )
    summary = {
        "context": context,
        "results": results,
        "significance": tests,
        "over_seeds": over_seeds,
        **(extra or {}),
    }
    if has_curves(results):
        curves = curve_summary(results)
        if is_main_process():
            plot_curves(results, curves, output / CURVE_FIGURE)
        markdown += "\n" + "\n".join(curve_markdown(results, curves, CURVE_FIGURE)) + "\n"
        summary["curve"] = curves
    save_run(output, {"results.json": summary, "results.md": markdown})
    print(markdown)
    return summary
