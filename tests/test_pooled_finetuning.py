"""A comparison's unit is the pretrained model: its fine-tuning runs pool into one run, so
fine-tuning a model more often never narrows an interval over pretraining seeds; the runs that
did not learn are listed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posattn.lab.pretraining.failed_runs import (
    failed_runs,
    failed_runs_markdown,
    not_above_majority,
)
from posattn.lab.pretraining.pooled import pooled_run, pooled_sentence
from posattn.lab.pretraining.summary import downstream_runs
from posattn.lab.pretraining.xlingual_summary import language_runs
from posattn.lab.runs.claims import ACCURACY_PERCENT, Measurements, paired_downstream

EXAMPLES = 80


def correctness(rng: np.random.Generator, rate: float) -> list[int]:
    return [int(x) for x in rng.random(EXAMPLES) < rate]


def tuned(runs: list[dict], rate: float = 3e-4) -> dict:
    """One pretrained model's fine-tuning record at its best rate, as finetune.json holds it."""
    return {"learning_rate": rate, "runs": {str(rate): runs}}


def results_of(correct: dict[str, dict[str, list[list[int]]]]) -> dict:
    """{arm: {pretraining seed: [each fine-tuning run's correctness]}} as a comparison's
    results."""
    return {
        arm: {
            "finetune": {
                "word-order": {
                    seed: tuned([{"test": float(np.mean(c)), "test_correct": c} for c in runs])
                    for seed, runs in seeds.items()
                }
            }
        }
        for arm, seeds in correct.items()
    }


def test_a_pooled_run_is_the_mean_of_its_fine_tuning_runs_example_by_example():
    run = pooled_run("3", [0.5, 0.75], [[1, 0, 1, 0], [1, 1, 1, 0]])
    assert run["seed"] == "3"
    assert run["score"] == pytest.approx(62.5)
    assert run["per_example"] == pytest.approx([100.0, 50.0, 100.0, 0.0])
    assert run["finetune_scores"] == pytest.approx([50.0, 75.0])
    assert pooled_run("0", [0.25], None)["per_example"] is None


@pytest.mark.parametrize(
    ("accuracies", "correct", "message"),
    [
        ([], None, "pretraining seed 7: no fine-tuning runs to pool"),
        ([0.5, 0.5], [[1, 0]], "pretraining seed 7: 1 lists of correct test examples"),
        ([0.5, 0.5], [[1, 0], [1, 0, 1]], "of lengths [2, 3] for 2 fine-tuning runs"),
    ],
)
def test_runs_that_cannot_pool_are_refused_naming_the_model(accuracies, correct, message):
    with pytest.raises(ValueError) as error:
        pooled_run("7", accuracies, correct)
    assert message in str(error.value)


def test_downstream_runs_give_one_run_per_pretrained_model_paired_by_pretraining_seed():
    rng = np.random.default_rng(0)
    correct = {
        arm: {seed: [correctness(rng, rate) for _ in range(3)] for seed in ("0", "1", "2")}
        for arm, rate in (("tupe-r", 0.7), ("learned", 0.5))
    }
    runs = downstream_runs(results_of(correct), "word-order")
    for arm, seeds in correct.items():
        assert [r["seed"] for r in runs[arm]] == ["0", "1", "2"]
        for run, finetunings in zip(runs[arm], seeds.values(), strict=True):
            assert run["score"] == pytest.approx(100 * np.mean(finetunings))
            assert run["per_example"] == pytest.approx(100 * np.mean(finetunings, axis=0))
    measured = Measurements(downstream={"word-order": runs}, bounds=ACCURACY_PERCENT)
    values, comparison = paired_downstream(measured, "tupe-r", "learned", ["word-order"])
    assert values["seeds"] == ["0", "1", "2"] and comparison.runs == 3


def comparison_of(correct: dict) -> tuple[float, list[float]]:
    runs = downstream_runs(results_of(correct), "word-order")
    measured = Measurements(downstream={"word-order": runs}, bounds=ACCURACY_PERCENT)
    _, comparison = paired_downstream(measured, "tupe-r", "learned", ["word-order"])
    return comparison.difference, comparison.bounds


def test_repeating_each_fine_tuning_run_leaves_the_comparison_as_it_was():
    """Three copies of one fine-tuning run add no information about pretraining; counted as
    runs of their own, they narrowed the bootstrap interval by about sqrt(3)."""
    rng = np.random.default_rng(1)
    once = {
        arm: {seed: [correctness(rng, rate + 0.1 * int(seed))] for seed in ("0", "1", "2", "3")}
        for arm, rate in (("tupe-r", 0.6), ("learned", 0.5))
    }
    thrice = {arm: {s: runs * 3 for s, runs in seeds.items()} for arm, seeds in once.items()}
    difference, interval = comparison_of(once)
    assert comparison_of(thrice) == (pytest.approx(difference), pytest.approx(interval))


def test_cross_lingual_runs_pool_the_same_way_in_every_language():
    rng = np.random.default_rng(2)
    languages = ("en", "de")
    per_run = {
        seed: [{x: correctness(rng, 0.6) for x in languages} for _ in range(2)]
        for seed in ("0", "1")
    }
    results = {
        "t5": {
            "finetune": {
                "next-block": {
                    seed: tuned(
                        [
                            {
                                "test": {x: float(np.mean(c[x])) for x in languages},
                                "test_correct": c,
                            }
                            for c in runs
                        ]
                    )
                    for seed, runs in per_run.items()
                }
            }
        }
    }
    runs = language_runs(results, "next-block")
    for x in languages:
        assert [r["seed"] for r in runs[x]["t5"]] == ["0", "1"]
        for run, finetunings in zip(runs[x]["t5"], per_run.values(), strict=True):
            matrix = [c[x] for c in finetunings]
            assert run["per_example"] == pytest.approx(100 * np.mean(matrix, axis=0))


def test_the_report_says_how_runs_were_counted():
    one = pooled_sentence({"pretrain_seeds": [0, 1, 2], "finetune_seeds": [0]})
    three = pooled_sentence({"pretrain_seeds": [0, 1], "finetune_seeds": [0, 1, 2]})
    assert "mean over 3 pretrained models" in one and "one fine-tuning run each" in one
    assert "mean over 2 pretrained models" in three
    assert "each the mean of its 3 fine-tuning runs" in three


def binomial_tail(correct: int, examples: int, rate: float) -> float:
    """P(X >= correct) for X ~ Binomial(examples, rate), summed from the definition."""
    return sum(
        math.comb(examples, k) * rate**k * (1 - rate) ** (examples - k)
        for k in range(correct, examples + 1)
    )


def test_a_run_not_above_the_majority_class_is_listed_with_its_binomial_p_value():
    # word-order's test set: 300 sentences, its majority class 48.7%
    chance, learned = [1] * 152 + [0] * 148, [1] * 216 + [0] * 84  # 50.7% and 72.0%
    assert not_above_majority(chance, 0.487) == pytest.approx(binomial_tail(152, 300, 0.487))
    assert not_above_majority(learned, 0.487) is None
    just_above = [1] * 161 + [0] * 139  # 53.7%: p = 0.048 against 48.7%
    assert binomial_tail(161, 300, 0.487) < 0.05 < binomial_tail(160, 300, 0.487)
    assert not_above_majority(just_above, 0.487) is None
    assert not_above_majority([*just_above[1:], 0], 0.487) is not None
    results = results_of({"tupe-r": {"0": [learned, chance], "1": [learned, learned]}})
    listed = failed_runs(results, "word-order", [3, 4], majority=48.7)
    assert listed == [
        {
            "arm": "tupe-r",
            "pretrain_seed": "0",
            "finetune_seed": 4,
            "test": pytest.approx(100 * 152 / 300),
            "p_value": pytest.approx(binomial_tail(152, 300, 0.487)),
        }
    ]
    section = "\n".join(failed_runs_markdown({"word-order": listed, "topic": []}, runs=4))
    assert "`tupe-r` pretraining seed 0 / fine-tuning seed 4: 50.7%" in section
    assert "- `topic`: none" in section and "4 runs a task" in section
