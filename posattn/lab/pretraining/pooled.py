"""One downstream run per pretrained model: its fine-tuning runs pooled into one.

A comparison replicates pretraining: each pretraining seed gives one model per arm. The
fine-tuning runs of one model share that pretraining, so counting each as a run of its own
would resample them as if they were independent draws and narrow every interval (with F
fine-tuning seeds, about sqrt(F) too narrow where pretraining is what varies). A model
fine-tuned F times is therefore one run: its score is the mean of its F test accuracies, and
its per-example score is the mean of their 0/100 correctness, so the bootstrap over runs and
examples draws pretrained models, not fine-tuning runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence


def models_at_best_rate(results: dict, task: str) -> Iterator[tuple[str, str, list[dict]]]:
    """(arm, pretraining seed, its fine-tuning runs of `task` at the model's best learning
    rate, in finetune.seeds order) for every pretrained model of a comparison's results."""
    for arm, result in results.items():
        for pretrain_seed, tuned in result["finetune"][task].items():
            yield arm, pretrain_seed, tuned["runs"][str(tuned["learning_rate"])]


def pooled_run(
    pretrain_seed: str, accuracies: Sequence[float], correct: Sequence[Sequence[int]] | None
) -> dict:
    """The downstream run of one pretrained model from its fine-tuning runs' test accuracies
    (fractions) and, where every run kept them, which test examples each got right (0 or 1,
    one list per run, one order of examples): {"seed", "score", "per_example", "finetune_scores"},
    scores in %."""
    if not accuracies:
        raise ValueError(f"pretraining seed {pretrain_seed}: no fine-tuning runs to pool")
    per_example = None
    if correct is not None:
        if len(correct) != len(accuracies) or len({len(row) for row in correct}) != 1:
            raise ValueError(
                f"pretraining seed {pretrain_seed}: {len(correct)} lists of correct test "
                f"examples of lengths {sorted({len(row) for row in correct})} for "
                f"{len(accuracies)} fine-tuning runs: one list per run, all of one length"
            )
        per_example = [100 * statistics.fmean(column) for column in zip(*correct, strict=True)]
    return {
        "seed": pretrain_seed,
        "score": 100 * statistics.fmean(accuracies),
        "per_example": per_example,
        "finetune_scores": [100 * a for a in accuracies],
    }


def pooled_sentence(context: dict) -> str:
    """How a report's accuracies are counted, from its run context's seeds."""
    models, finetunings = len(context["pretrain_seeds"]), len(context["finetune_seeds"])
    each = (
        "one fine-tuning run each"
        if finetunings == 1
        else f"each the mean of its {finetunings} fine-tuning runs"
    )
    return (
        f"mean over {models} pretrained models (pretraining seeds {context['pretrain_seeds']}; "
        f"{each}, fine-tuning seeds {context['finetune_seeds']}) [95% interval of the mean]"
    )
