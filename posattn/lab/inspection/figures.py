"""The figures of `posattn inspect` (PNG, drawn from the numbers written to inspect.json)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from ..runs.figures import plt
from .heads import CLASSES

CLASS_COLOURS = ("#4c72b0", "#dd8452", "#c44e52", "#55a868", "#b0b0b0")


def save(figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def heat_map(axis, matrix, title: str) -> None:
    image = axis.imshow(np.asarray(matrix), cmap="viridis", interpolation="nearest")
    axis.set_title(title, fontsize=8)
    axis.set_xlabel("key j", fontsize=7)
    axis.set_ylabel("query i", fontsize=7)
    axis.tick_params(labelsize=6)
    plt.colorbar(image, ax=axis, fraction=0.046, pad=0.04).ax.tick_params(labelsize=6)


def plot_four_terms(matrices: dict, numbers: dict, caption: str, path: Path) -> Path:
    """TUPE Figure 2: one heat map per term, titled with its structure numbers."""
    figure, axes = plt.subplots(1, len(matrices), figsize=(3.4 * len(matrices), 3.6))
    for axis, (name, matrix) in zip(np.atleast_1d(axes), matrices.items(), strict=True):
        s = numbers[name]
        heat_map(
            axis,
            matrix,
            f"{name}\nToeplitz R2 {s['toeplitz_r2']:.2f} (noise {s['noise_toeplitz_r2']:.2f})"
            f"\nrank-1 R2 {s['rank1_r2']:.2f} (noise {s['noise_rank1_r2']:.2f})",
        )
    figure.suptitle(caption, fontsize=9)
    return save(figure, path)


def plot_positional(bias, heads: list[int], cls_index: int, caption: str, path: Path) -> Path:
    """TUPE Figure 4: content-free positional logits per head, [CLS] row/column outlined."""
    columns = min(len(heads), 4)
    rows = -(-len(heads) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.0 * rows), squeeze=False)
    for axis in axes.flat[len(heads) :]:
        axis.axis("off")
    for axis, head in zip(axes.flat, heads, strict=False):
        matrix = np.asarray(bias[head - 1])
        heat_map(axis, matrix, f"head {head}")
        n, m = matrix.shape
        if cls_index < n:
            axis.add_patch(Rectangle((-0.5, cls_index - 0.5), m, 1, fill=False, ec="red", lw=1))
        if cls_index < m:
            axis.add_patch(Rectangle((cls_index - 0.5, -0.5), 1, n, fill=False, ec="red", lw=1))
    figure.suptitle(caption + " ([CLS] row and column outlined in red)", fontsize=9)
    return save(figure, path)


def plot_head_grid(layers: list[dict], layer_numbers: list[int], path: Path) -> Path:
    """TUPE Figure 6: layers x heads, coloured by class, mean distance / entropy written in."""
    codes = np.array([[CLASSES.index(c) for c in layer["class"]] for layer in layers])
    heads = codes.shape[1]
    figure, axis = plt.subplots(figsize=(1.0 + 0.75 * heads, 1.0 + 0.6 * len(layers)))
    axis.imshow(codes, cmap=ListedColormap(CLASS_COLOURS), vmin=0, vmax=len(CLASSES) - 1)
    for row, layer in enumerate(layers):
        for head in range(heads):
            axis.text(
                head,
                row,
                f"{layer['distance'][head]:.1f}\n{layer['entropy'][head]:.1f}",
                ha="center",
                va="center",
                fontsize=6,
            )
    axis.set_xticks(range(heads), [str(h + 1) for h in range(heads)], fontsize=7)
    axis.set_yticks(range(len(layers)), [str(n) for n in layer_numbers], fontsize=7)
    axis.set(xlabel="head", ylabel="layer")
    axis.set_title("head patterns (cell: mean distance / entropy in nats)", fontsize=9)
    handles = [Patch(color=c, label=n) for c, n in zip(CLASS_COLOURS, CLASSES, strict=True)]
    axis.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    return save(figure, path)


def plot_spectra(panels: dict, head_dim: int, caption: str, path: Path) -> Path:
    """DIET Figs. 2 / 8: normalised singular values per head, the d_h bound marked."""
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for axis, (title, spectra) in zip(axes[0], panels.items(), strict=True):
        for head, spectrum in enumerate(spectra, start=1):
            values = np.clip(np.asarray(spectrum), 1e-18, None)
            axis.plot(np.arange(1, len(values) + 1), values, lw=1, label=f"head {head}")
        axis.axvline(head_dim, color="black", ls="--", lw=1, label=f"d_h = {head_dim}")
        axis.set(yscale="log", xlabel="k", ylabel="sigma_k / sigma_1", title=title)
        axis.title.set_fontsize(9)
        axis.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6, ncol=2)
    figure.suptitle(caption, fontsize=9)
    return save(figure, path)
