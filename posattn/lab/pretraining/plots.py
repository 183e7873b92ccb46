"""Figures of a comparison: validation-loss curves and task scores with their seed spread."""

from __future__ import annotations

from pathlib import Path

from ..runs.figures import plt


def plot_validation_loss(results: dict, path: Path) -> Path:
    figure, axis = plt.subplots(figsize=(6, 4))
    for encoding, r in results.items():
        steps, losses = zip(*r["pretrain"]["eval_loss"], strict=True)
        axis.plot(steps, losses, marker="o", markersize=3, label=encoding)
    axis.set(xlabel="pretraining step", ylabel="MLM validation loss", title="Masked-LM pretraining")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_task_scores(results: dict, tasks: list[str], path: Path) -> Path:
    encodings = list(results)
    figure, axes = plt.subplots(1, len(tasks), figsize=(3.2 * len(tasks), 3.6), squeeze=False)
    for axis, task in zip(axes[0], tasks, strict=True):
        for x, encoding in enumerate(encodings):
            seeds = [100 * s for s in results[encoding]["finetune"][task]["test_by_seed"]]
            median = 100 * results[encoding]["finetune"][task]["test_median"]
            axis.scatter([x] * len(seeds), seeds, s=12, alpha=0.6)
            axis.hlines(median, x - 0.3, x + 0.3, color="black")
        axis.set_xticks(range(len(encodings)), encodings, rotation=45, ha="right")
        axis.set(title=task, ylabel="test accuracy (%)")
        axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
