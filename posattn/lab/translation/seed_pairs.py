"""Translation arms compared over training seeds: each seed's test score (and dev loss) of one
arm minus the other's, the mean difference with its Student-t interval over seeds and the exact
sign-flip p-value (lab/runs/statistics.py, as the pretraining comparisons read their seeds).

sacrebleu's paired tests (report.py) resample test sentences of seeds stacked together, so
they say whether two sets of outputs differ, not whether a second training seed would land on
the same side: a claim about encodings needs this one."""

from __future__ import annotations

from ..runs.statistics import (
    DEFAULT_CONFIDENCE,
    level_text,
    paired_permutation,
    require_confidence,
    smallest_sign_flip_p,
)
from ..runs.tables import estimate_text
from ..runs.tables import markdown_table as table
from .report import METRICS, dev_losses, test_scores

# (key, label): the beam's test scores at the runs' decoding settings, then the dev loss
MEASURES = (*METRICS, ("dev_loss", "dev loss"))
# A sign-flip p below this needs six seeds or more; with fewer the interval is the reading.
SIGNIFICANCE = 0.05


def measured(runs: dict, seeds: list[int], key: str) -> list[float]:
    """`key` of the given seeds' runs, in the seeds' order."""
    chosen = {seed: runs[seed] for seed in seeds}
    return dev_losses(chosen) if key == "dev_loss" else test_scores(chosen, "beam", key)


def arm_pairs(arms: list[str], all_pairs: bool) -> list[tuple[str, str]]:
    """(system, against): every arm against the first, or every pair in the arms' order."""
    if all_pairs:
        return [(other, base) for i, base in enumerate(arms) for other in arms[i + 1 :]]
    return [(other, arms[0]) for other in arms[1:]]


def seed_comparisons(
    results: dict, all_pairs: bool = False, confidence: float = DEFAULT_CONFIDENCE
) -> list[dict]:
    """[{system, against, seeds, confidence, bleu, chrf, dev_loss}] with each measure's paired
    comparison (`PairedComparison.to_dict`: difference system - against, interval at
    `confidence` or None for one seed, p_value, runs, method) and its difference at each seed
    (`per_seed`, in the seeds' order), over the seeds both arms ran; pairs with no seed in
    common are left out. A level above 0.95 serves a second look at grown seeds (0.975 for
    two looks at an overall 95%)."""
    require_confidence("confidence", confidence)
    comparisons = []
    for system, against in arm_pairs(list(results), all_pairs):
        seeds = sorted(set(results[system]) & set(results[against]))
        if not seeds:
            continue
        entry = {"system": system, "against": against, "seeds": seeds, "confidence": confidence}
        for key, _ in MEASURES:
            mine = measured(results[system], seeds, key)
            theirs = measured(results[against], seeds, key)
            comparison = paired_permutation(mine, theirs, confidence).to_dict()
            comparison["per_seed"] = [a - b for a, b in zip(mine, theirs, strict=True)]
            entry[key] = comparison
        comparisons.append(entry)
    return comparisons


def difference_cell(comparison: dict, digits: int) -> str:
    return estimate_text(comparison["difference"], comparison["interval"], digits, signed=True)


def per_seed_line(comparison: dict) -> str:
    """Each seed's BLEU difference, where the mean and its interval come from."""
    by_seed = zip(comparison["seeds"], comparison["bleu"]["per_seed"], strict=True)
    differences = ", ".join(f"{seed}: {difference:+.2f}" for seed, difference in by_seed)
    return f"- `{comparison['system']}` - `{comparison['against']}`, BLEU by seed: {differences}"


def seed_comparison_lines(comparisons: list[dict]) -> list[str]:
    """The markdown section: one row a pair, each measure's difference [interval] and p, then
    each pair's BLEU difference seed by seed."""
    if not comparisons:
        return []
    level = level_text(comparisons[0]["confidence"])
    rows = []
    for c in comparisons:
        row = [f"`{c['system']}` - `{c['against']}`", ", ".join(map(str, c["seeds"]))]
        for key, _ in MEASURES:
            digits = 3 if key == "dev_loss" else 2
            row += [difference_cell(c[key], digits), f"{c[key]['p_value']:.3f}"]
        rows.append(row)
    header = ["comparison", "seeds"]
    for _, label in MEASURES:
        header += [f"{label} diff [{level}]", "p"]
    fewest = min(len(c["seeds"]) for c in comparisons)
    lines = [
        "## Over training seeds",
        "Each seed's test score (beam) and dev loss of one arm minus the other's, paired by "
        f"seed: the mean difference, its {level} Student-t interval over seeds and the exact "
        "sign-flip p-value. These cover seed noise, which the test over sentences above does "
        "not; a verdict reads the interval.",
    ]
    if fewest < 2:
        lines.append("A pair with one seed in common has no interval.")
    elif smallest_sign_flip_p(fewest) > SIGNIFICANCE:
        lines.append(
            f"With {fewest} seeds the smallest sign-flip p is "
            f"{smallest_sign_flip_p(fewest):.3f}: read the interval."
        )
    return [*lines, "", table(header, rows), "", *map(per_seed_line, comparisons)]
