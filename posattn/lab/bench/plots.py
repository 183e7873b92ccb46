"""The bench's figures: ratios to the floor by length, and the long-sequence curves."""

from __future__ import annotations

from pathlib import Path

from .report import label


def plot_long(rows: list[dict], path: Path) -> Path:
    from ..runs.figures import plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for name in ("diet-abs", "diet-abs-lin"):
        points = sorted((r["n"], r["ms"], r["extra_mib"]) for r in rows if r["encoding"] == name)
        lengths, times, memory = zip(*points, strict=True)
        axes[0].plot(lengths, times, marker="o", label=name)
        axes[1].plot(lengths, memory, marker="o", label=name)
    axes[0].set(xscale="log", yscale="log", xlabel="n", ylabel="ms (forward + backward)")
    axes[1].set(xscale="log", xlabel="n", ylabel="extra peak MiB")
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_ratios(rows: list[dict], path: Path) -> Path:
    from ..runs.figures import plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for axis, train in zip(axes, (False, True), strict=True):
        for name in dict.fromkeys(label(r) for r in rows):
            points = sorted(
                (r["n"], r["ratio"]) for r in rows if label(r) == name and r["train"] == train
            )
            axis.plot(*zip(*points, strict=True), marker="o", markersize=3, label=name)
        axis.set(
            xscale="log",
            xlabel="sequence length n",
            title="forward + backward" if train else "forward",
        )
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("time / SDPA without bias")
    axes[1].legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
