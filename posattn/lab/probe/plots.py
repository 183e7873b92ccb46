"""One figure per probe task: accuracy against length, a line per encoding."""

from __future__ import annotations

from pathlib import Path

from ..runs.figures import plt
from .settings import ProbeSettings
from .tasks import probe_task


def plot_task(task_results: dict, task: str, settings: ProbeSettings, path: Path) -> Path:
    """Token accuracy (mean over seeds, bars: std) against test length; an encoding stops
    where its position table ends and is absent where it cannot run the task at all."""
    figure, axis = plt.subplots(figsize=(6, 4))
    for encoding, result in task_results.items():
        if result["status"] != "ok":
            continue
        points = [
            (int(n), m["token"]["mean"], m["token"]["std"])
            for n, m in result["lengths"].items()
            if "token" in m
        ]
        lengths, means, stds = zip(*points, strict=True)
        axis.errorbar(
            lengths,
            [100 * m for m in means],
            yerr=[100 * s for s in stds],
            marker="o",
            markersize=3,
            capsize=2,
            label=encoding,
        )
    axis.axvline(settings.train_len, color="grey", linestyle=":", label="training length")
    axis.set_xscale("log", base=2)
    axis.set_xticks(settings.test_lens, [str(n) for n in settings.test_lens])
    axis.set(
        xlabel="sequence length",
        ylabel="token accuracy (%)",
        ylim=(-2, 102),
        title=f"{task} ({probe_task(task).model})",
    )
    axis.legend(fontsize=7)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
