"""Fine-tuning runs that learned nothing measurable: test accuracy not above the majority class.

BERT-style fine-tuning on a few hundred examples sometimes stays at the majority class for a
whole run (Mosbach et al., ICLR 2021, call such runs failed); one such run can carry a
pretraining seed's whole difference. A run is listed when a one-sided binomial test on its
test examples does not put its accuracy above the majority class's at the 5% level. It still
counts in its model's mean (pooled.py): dropping it would be a choice made after seeing test
scores.
"""

from __future__ import annotations

from scipy.stats import binomtest

from .pooled import models_at_best_rate

LEVEL = 0.05


def not_above_majority(correct: list[int], majority: float) -> float | None:
    """The one-sided binomial p-value of accuracy > `majority` (a fraction) where it is at least
    LEVEL, else None (the run beats the majority class)."""
    p_value = binomtest(sum(correct), len(correct), majority, alternative="greater").pvalue
    return float(p_value) if p_value >= LEVEL else None


def failed_runs(results: dict, task: str, finetune_seeds: list[int], majority: float) -> list:
    """Every fine-tuning run of `task` at its model's best learning rate whose test accuracy
    is not told from the majority class (`majority` in %): {"arm", "pretrain_seed",
    "finetune_seed", "test" (%), "p_value"}, in the results' order; runs without their test
    examples' correctness are not judged."""
    listed = []
    for arm, pretrain_seed, best in models_at_best_rate(results, task):
        for finetune_seed, run in zip(finetune_seeds, best, strict=True):
            correct = run.get("test_correct")
            p_value = not_above_majority(correct, majority / 100) if correct else None
            if p_value is not None:
                listed.append(
                    {
                        "arm": arm,
                        "pretrain_seed": pretrain_seed,
                        "finetune_seed": finetune_seed,
                        "test": 100 * run["test"],
                        "p_value": p_value,
                    }
                )
    return listed


def failed_runs_markdown(failed: dict[str, list], runs: int) -> list[str]:
    """The report's section: per task the runs `failed_runs` lists, of `runs` in all."""
    parts = [
        "## Fine-tuning runs not told from the majority class",
        "",
        "A run is listed when its test accuracy is not above the majority class's (one-sided "
        f"binomial test at {LEVEL:g} on its test examples; {runs} runs a task). It still "
        "counts in its model's mean.",
        "",
    ]
    for task, listed in failed.items():
        if not listed:
            parts.append(f"- `{task}`: none")
            continue
        cells = ", ".join(
            f"`{r['arm']}` pretraining seed {r['pretrain_seed']} / fine-tuning seed "
            f"{r['finetune_seed']}: {r['test']:.1f}% (p = {r['p_value']:.2f})"
            for r in listed
        )
        parts.append(f"- `{task}`: {cells}")
    return [*parts, ""]
