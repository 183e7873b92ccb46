"""The pretraining figure of a comparison: MLM validation loss against step, every seed."""

from __future__ import annotations

from pathlib import Path

from ..runs.figures import plt, save_figure


def plot_validation_loss(curves: dict, path: Path) -> Path:
    """MLM validation loss against step: a colour per arm, a line per pretraining seed."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    figure, axis = plt.subplots(figsize=(6, 4))
    for index, (arm, seeds) in enumerate(curves.items()):
        for seed_index, curve in enumerate(seed for seed in seeds if seed):
            steps, losses = zip(*curve, strict=True)
            label = arm if seed_index == 0 else None
            axis.plot(steps, losses, color=colours[index % len(colours)], alpha=0.8, label=label)
    axis.set(xlabel="pretraining step", ylabel="MLM validation loss", title="a line per seed")
    axis.legend(fontsize=7)
    axis.grid(alpha=0.3)
    return save_figure(figure, path)
