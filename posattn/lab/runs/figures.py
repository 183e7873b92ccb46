"""Figures of every lab command: matplotlib's file-only backend, chosen once here (import
`plt` from this module), and one way to write a figure."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # after the backend is chosen

__all__ = ["plt", "save_figure"]


def save_figure(figure, path: Path, dpi: int = 120) -> Path:
    """Lay out, write and close a figure; returns its path."""
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path
