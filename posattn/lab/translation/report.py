"""The translation comparison table (DIET Table 4 shape), honest about seed noise: medians over
seeds with [min-max], and a winner named only where its worst seed beats every other's best
(the rule of lab/runs/verdicts.py)."""

from __future__ import annotations

import statistics

from ..runs.context import data_line, wall_time_line
from ..runs.tables import markdown_table as table
from ..runs.verdicts import Spread, verdict_lines
from .scoring import paired_significance

METRICS = (("bleu", "BLEU"), ("chrf", "chrF"))
TEST_NAMES = {"ar": "approximate randomisation", "bs": "paired bootstrap resampling"}


def test_scores(runs: dict, search: str, metric: str) -> list[float]:
    return [run["evaluation"]["test"][search][metric] for run in runs.values()]


def dev_losses(runs: dict) -> list[float]:
    return [run["final_dev_loss"] for run in runs.values()]


def spread(values: list[float], digits: int = 2) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"[{min(values):.{digits}f}-{max(values):.{digits}f}]"
    )


def markdown_table(results: dict) -> str:
    header = ["encoding", "params", "dev loss", "test BLEU (beam)", "test chrF (beam)"]
    # No time column: runs share a machine unpaired, so their times compare load, not
    # encodings (posattn bench pairs timings); metrics.json keeps each run's train_seconds.
    header += ["test BLEU (greedy)"]
    rows = []
    for encoding, runs in results.items():
        first = next(iter(runs.values()))
        row = [
            f"`{encoding}`",
            f"{first['parameters'] / 1e6:.2f}M",
            spread(dev_losses(runs), digits=3),
            spread(test_scores(runs, "beam", "bleu")),
            spread(test_scores(runs, "beam", "chrf")),
            spread(test_scores(runs, "greedy", "bleu")),
        ]
        rows.append(row)
    return table(header, rows)


def verdict(label: str, scores: dict[str, list[float]], higher_is_better: bool) -> list[str]:
    """A best (or worst) encoding is named only where its spread overlaps no other's."""
    spreads = {e: Spread.of(values) for e, values in scores.items()}
    return verdict_lines(label, spreads, higher_is_better, worst=True)


def verdicts(results: dict) -> list[str]:
    lines = []
    if min(len(runs) for runs in results.values()) < 2:
        lines.append(
            "- One seed for some encoding: its spread is a single run, so these verdicts do not "
            "cover seed noise; the paired test below is over test sentences, not seeds."
        )
    lines += verdict("dev loss", {e: dev_losses(runs) for e, runs in results.items()}, False)
    for metric, label in METRICS:
        scores = {e: test_scores(runs, "beam", metric) for e, runs in results.items()}
        lines += verdict(f"test {label}", scores, True)
    return lines


def stacked_outputs(runs: dict, seeds: list[int]) -> tuple[list[str], list[str]]:
    """Beam hypotheses and references of the test pairs, the given seeds one after another."""
    hypotheses: list[str] = []
    references: list[str] = []
    for seed in seeds:
        test = runs[seed]["evaluation"]["test"]
        hypotheses += test["beam"]["hypotheses"]
        references += test["references"]
    return hypotheses, references


def significance(results: dict, test_type: str = "ar", samples: int = 1000) -> dict:
    """Every encoding against the first one, paired sentence by sentence and seed by seed: the
    test outputs of the seeds both ran, stacked, under sacrebleu's paired test. {} where the
    runs did not keep their hypotheses."""
    encodings = list(results)
    baseline = encodings[0]
    tests = {}
    for encoding in encodings[1:]:
        seeds = sorted(set(results[baseline]) & set(results[encoding]))
        runs = [results[baseline][s] for s in seeds] + [results[encoding][s] for s in seeds]
        if not seeds or any("hypotheses" not in r["evaluation"]["test"]["beam"] for r in runs):
            return {}
        base, references = stacked_outputs(results[baseline], seeds)
        system, _ = stacked_outputs(results[encoding], seeds)
        tests[encoding] = {
            "against": baseline,
            "seeds": seeds,
            **paired_significance(base, system, references, test_type, samples),
        }
    return tests


def significance_lines(tests: dict) -> list[str]:
    if not tests:
        return ["The runs kept no hypotheses, so no paired test was run."]
    first = next(iter(tests.values()))
    name = TEST_NAMES[first["test"]]
    lines = [
        f"Each encoding against `{first['against']}` on the same test sentences, seeds paired "
        f"and stacked, sacrebleu's {name} ({first['samples']} samples; two-sided p):",
        "",
    ]
    rows = [
        [
            f"`{encoding}`",
            f"{t['bleu']['difference']:+.2f}",
            f"{t['bleu']['p_value']:.3f}",
            f"{t['chrf']['difference']:+.2f}",
            f"{t['chrf']['p_value']:.3f}",
        ]
        for encoding, t in tests.items()
    ]
    return [*lines, table(["encoding", "BLEU diff", "p", "chrF diff", "p"], rows)]


def copy_baseline(results: dict) -> str:
    run = next(iter(next(iter(results.values())).values()))
    copy = run["evaluation"]["test"]["copy_source"]
    return f"copying the source scores BLEU {copy['bleu']:.2f}, chrF {copy['chrf']:.2f}"


def pairwise_lines(tests: list[dict]) -> list[str]:
    rows = [
        [
            f"`{t['system']}` - `{t['against']}`",
            ", ".join(map(str, t["seeds"])),
            f"{t['bleu']['difference']:+.2f}",
            f"{t['bleu']['p_value']:.3f}",
            f"{t['chrf']['difference']:+.2f}",
            f"{t['chrf']['p_value']:.3f}",
        ]
        for t in tests
    ]
    header = ["comparison", "seeds", "BLEU diff", "p", "chrF diff", "p"]
    return ["", "Every pair of arms, the same test:", "", table(header, rows)]


def settings_lines(found: dict[str, list[str]], first_arm: str) -> list[str]:
    if not found:
        return [f"Every run has the settings of `{first_arm}` but for encoding and seed."]
    lines = [f"Settings that differ from `{first_arm}`'s besides encoding and seed:", ""]
    return lines + [f"- `{arm}`: {'; '.join(changed)}" for arm, changed in found.items()]


def time_line(context: dict) -> str:
    """A comparison's own wall time; runs combined from elsewhere have only their training
    time (apart, so not a comparison of speed)."""
    if context.get("wall_seconds") is not None:
        return wall_time_line(context)
    sources = "; ".join(f"`{arm}` {', '.join(where)}" for arm, where in context["sources"].items())
    return (
        f"Combined from runs trained apart ({sources}); their training took "
        f"{context['train_seconds'] / 60:.1f} min together."
    )


def length_tuned_lines(tuned: dict) -> list[str]:
    """Where the runs decoded at a dev-chosen length penalty are reported, and what each chose."""
    chosen = "; ".join(
        f"`{encoding}` " + ", ".join(f"seed {seed}: {alpha}" for seed, alpha in by_seed.items())
        for encoding, by_seed in tuned["chosen"].items()
    )
    candidates = ", ".join(map(str, tuned["penalties"]))
    return [
        "## Length penalty tuned on the dev pairs",
        f"Every run decoded again with the penalty of the highest dev BLEU among {candidates}: "
        f"{chosen}. Its test scores and paired tests: `{tuned['directory']}/results.md` "
        f"(decoding: {tuned['seconds'] / 60:.1f} min, not in the wall time below).",
    ]


def translation_markdown(
    results: dict,
    context: dict,
    tests: dict | None = None,
    extra: dict | None = None,
    over_seeds: list[str] | None = None,
) -> str:
    """The comparison's markdown; `extra` (posattn translate combine) may add the settings that
    differ between arms and the paired tests of every pair; `over_seeds`, the section of the
    arms' differences over training seeds (seed_pairs.py), follows the paired tests."""
    extra = extra or {}
    any_run = next(iter(next(iter(results.values())).values()))
    test = any_run["evaluation"]["test"]
    parts = [
        f"# {context.get('command', 'posattn compare --task translation')}",
        "",
        f"Preset `{context['preset']}`, pairs `{context['pairs']}`, {context['machine']}. "
        f"Scores: sacrebleu corpus BLEU and chrF of the detokenised output on {test['pairs']} "
        f"test pairs, beam {context['beam_size']} with length penalty "
        f"{context['length_penalty']} (and greedy), median over seeds [min-max]; dev loss: "
        f"token NLL on the dev pairs. On these pairs "
        f"{copy_baseline(results)}.",
        "",
        markdown_table(results),
        "",
    ]
    if "setting_differences" in extra:
        parts += [*settings_lines(extra["setting_differences"], next(iter(results))), ""]
    if extra.get("unfinished"):
        left_out = ", ".join(
            f"`{arm}` {' '.join(folders)}" for arm, folders in extra["unfinished"].items()
        )
        parts += [f"Not finished, so left out: {left_out}.", ""]
    parts += [
        "## Verdicts",
        *verdicts(results),
        "",
        "## Paired significance",
        *significance_lines(significance(results) if tests is None else tests),
    ]
    if extra.get("pairwise"):
        parts += pairwise_lines(extra["pairwise"])
    if over_seeds:
        parts += ["", *over_seeds]
    if extra.get("length_tuned"):
        parts += ["", *length_tuned_lines(extra["length_tuned"])]
    parts += ["", time_line(context), data_line(context)]
    return "\n".join(parts) + "\n"
