"""Translation arms over training seeds (lab/translation/seed_pairs.py): each seed's score of
one arm minus the other's, the mean with its Student-t interval and the exact sign-flip p,
checked against values written out from their definitions."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from scipy import stats

from posattn.errors import PosAttnConfigError
from posattn.lab.translation.report import translation_markdown
from posattn.lab.translation.seed_pairs import (
    arm_pairs,
    seed_comparison_lines,
    seed_comparisons,
)


def run(bleu: float, chrf: float, dev_loss: float) -> dict:
    beam = {"bleu": bleu, "chrf": chrf}
    return {"final_dev_loss": dev_loss, "evaluation": {"test": {"beam": beam}}}


def arm(*scores: tuple[float, float, float], seeds=None) -> dict:
    seeds = range(len(scores)) if seeds is None else seeds
    return {seed: run(*s) for seed, s in zip(seeds, scores, strict=True)}


def sign_flip_p(differences: list[float]) -> float:
    """Two-sided exact sign-flip p, by enumerating every sign vector."""
    observed = abs(statistics.fmean(differences))
    signs = list(itertools.product((1, -1), repeat=len(differences)))
    flipped = [[s * d for s, d in zip(flip, differences, strict=True)] for flip in signs]
    extreme = sum(abs(statistics.fmean(f)) >= observed - 1e-12 for f in flipped)
    return extreme / len(signs)


def test_each_arm_against_the_first_by_the_seeds_both_ran():
    base = arm((10.0, 30.0, 3.0), (11.0, 31.0, 3.1), (12.0, 33.0, 2.9), (9.0, 29.0, 3.2))
    other = arm((12.5, 30.5, 2.8), (12.0, 32.0, 2.9), (15.0, 32.5, 2.95), seeds=[0, 1, 2])
    [comparison] = seed_comparisons({"sinusoidal": base, "t5": other})
    assert (comparison["system"], comparison["against"]) == ("t5", "sinusoidal")
    assert comparison["seeds"] == [0, 1, 2]  # seed 3 of the base arm has no partner
    mine = {"bleu": [12.5, 12.0, 15.0], "chrf": [30.5, 32.0, 32.5], "dev_loss": [2.8, 2.9, 2.95]}
    theirs = {"bleu": [10.0, 11.0, 12.0], "chrf": [30.0, 31.0, 33.0], "dev_loss": [3.0, 3.1, 2.9]}
    for key in ("bleu", "chrf", "dev_loss"):
        differences = [m - t for m, t in zip(mine[key], theirs[key], strict=True)]
        mean = statistics.fmean(differences)
        half = stats.t.ppf(0.975, 2) * statistics.stdev(differences) / math.sqrt(3)
        result = comparison[key]
        assert result["difference"] == pytest.approx(mean)
        assert result["interval"] == pytest.approx([mean - half, mean + half])
        assert result["p_value"] == pytest.approx(sign_flip_p(differences))
        assert result["runs"] == 3
        assert result["per_seed"] == pytest.approx(differences)
    assert comparison["confidence"] == 0.95
    assert comparison["bleu"]["difference"] == pytest.approx(6.5 / 3)
    assert comparison["bleu"]["p_value"] == pytest.approx(0.25)  # all three above: 2 / 2^3
    assert comparison["chrf"]["p_value"] == pytest.approx(0.75)  # +0.5, +1.0, -0.5: 6 of 8 flips


def test_all_pairs_and_a_pair_with_one_seed():
    assert arm_pairs(["a", "b", "c"], all_pairs=False) == [("b", "a"), ("c", "a")]
    assert arm_pairs(["a", "b", "c"], all_pairs=True) == [("b", "a"), ("c", "a"), ("c", "b")]
    results = {
        "a": arm((10.0, 30.0, 3.0), (11.0, 31.0, 3.0)),
        "b": arm((12.0, 33.0, 2.5), (14.0, 31.0, 2.0)),
        "c": arm((11.0, 29.0, 3.5), seeds=[1]),
        "d": arm((11.0, 29.0, 3.5), seeds=[7]),  # no seed in common with anyone: left out
    }
    found = {(c["system"], c["against"]): c for c in seed_comparisons(results, all_pairs=True)}
    assert set(found) == {("b", "a"), ("c", "a"), ("c", "b")}
    one = found["c", "b"]
    assert one["seeds"] == [1]
    assert one["bleu"] == {
        "difference": pytest.approx(-3.0),
        "interval": None,
        "p_value": 1.0,
        "runs": 1,
        "method": "sign-flip permutation over seeds, t-interval",
        "per_seed": [pytest.approx(-3.0)],
    }
    assert found["b", "a"]["dev_loss"]["difference"] == pytest.approx(-0.75)


def test_the_section_shows_differences_intervals_and_what_few_seeds_allow():
    results = {
        "sinusoidal": arm((10.0, 30.0, 3.0), (11.0, 31.0, 3.1), (12.0, 33.0, 2.9)),
        "t5": arm((12.5, 30.5, 2.8), (12.0, 32.0, 2.9), (15.0, 32.5, 2.95)),
    }
    comparison = seed_comparisons(results)[0]
    low, high = comparison["bleu"]["interval"]
    lines = seed_comparison_lines([comparison])
    assert lines[0] == "## Over training seeds"
    assert "With 3 seeds the smallest sign-flip p is 0.250: read the interval." in lines
    assert "| comparison | seeds | BLEU diff [95%] | p |" in lines[-3]
    row = lines[-3].splitlines()[-1]
    bleu = f"+2.17 [{low:+.2f}, {high:+.2f}]"
    assert row.startswith(f"| `t5` - `sinusoidal` | 0, 1, 2 | {bleu} | 0.250 |")
    assert lines[-2:] == ["", "- `t5` - `sinusoidal`, BLEU by seed: 0: +2.50, 1: +1.00, 2: +3.00"]
    assert seed_comparison_lines([]) == []
    one = seed_comparisons({"a": arm((1.0, 2.0, 3.0)), "b": arm((2.0, 2.0, 3.0))})
    assert "A pair with one seed in common has no interval." in seed_comparison_lines(one)
    assert "| +1.00 | 1.000 |" in seed_comparison_lines(one)[-3]


def test_a_second_look_widens_the_interval_to_its_level_and_says_so():
    results = {
        "sinusoidal": arm((10.0, 30.0, 3.0), (11.0, 31.0, 3.1), (12.0, 33.0, 2.9)),
        "t5": arm((12.5, 30.5, 2.8), (12.0, 32.0, 2.9), (15.0, 32.5, 2.95)),
    }
    [comparison] = seed_comparisons(results, confidence=0.975)
    differences = [2.5, 1.0, 3.0]
    half = stats.t.ppf(0.9875, 2) * statistics.stdev(differences) / math.sqrt(3)
    mean = statistics.fmean(differences)
    assert comparison["confidence"] == 0.975
    assert comparison["bleu"]["interval"] == pytest.approx([mean - half, mean + half])
    assert comparison["bleu"]["p_value"] == pytest.approx(0.25)  # the level leaves p alone
    lines = seed_comparison_lines([comparison])
    assert "its 97.5% Student-t interval" in lines[1]
    assert "| BLEU diff [97.5%] | p |" in lines[-3]
    for level in (0.0, 1.0, 95):
        with pytest.raises(PosAttnConfigError, match=f"confidence={level!r}.*in \\(0, 1\\)"):
            seed_comparisons(results, confidence=level)


def test_the_section_follows_the_paired_tests_in_the_report():
    results = {
        "sinusoidal": {0: {**run(10.0, 30.0, 3.0), "parameters": 1000}},
    }
    results["sinusoidal"][0]["evaluation"]["test"].update(
        pairs=3, greedy={"bleu": 1.0, "chrf": 2.0}, copy_source={"bleu": 0.5, "chrf": 10.0}
    )
    context = {"preset": "cpu", "pairs": "toy", "machine": "CPU", "beam_size": 4,
               "length_penalty": 0.6, "wall_seconds": 1.0}  # fmt: skip
    markdown = translation_markdown(results, context, {}, None, ["## Over training seeds", "x"])
    assert markdown.index("## Paired significance") < markdown.index("## Over training seeds")
    assert "## Over training seeds" not in translation_markdown(results, context, {})
