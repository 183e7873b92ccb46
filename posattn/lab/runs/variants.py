"""The papers' ablations as named variants of an encoding: an arm `ENCODING/VARIANT`
(`tupe-a/tie-cls`, `diet-abs/share-none`) is that encoding with one change, so that a run can
hold an encoding and its ablation side by side and pair them seed by seed.

    tie-cls             TUPE without the untied [CLS] (TUPE Sec. 4.2, untie_cls=False)
    tupe-scale          BERT-Ad's four terms divided by sqrt(2 d_h), as TUPE divides its two
                        (scale_multiple=2): beside `tupe-a/tie-cls` only the cross terms differ
    segments-attention  segment ids inside attention (DIET Eq. 2)
    segments-input      segment embeddings at the input (BERT)
    share-none          DIET-ABS / DIET-REL tables per layer (DIET Sec. 4.4)
    share-layer         shared across layers, per head
    share-head          shared across heads, per layer
    no-input-positions  Linformer without its input position table (input_positions=False):
                        the control for DIET-ABS inside Linformer, as `none` is for full
                        attention
    positional-lr-x10   the positional parameters at ten times the run's learning rate, in
                        pretraining and fine-tuning (trainer.positional_lr_scale=10): per-head
                        tables and factors start at N(0, 0.02), and under Adam a parameter
                        moves about one learning rate a step, so a short run leaves them small
    attention-lr-x10    as positional-lr-x10, but an input position table (BERT-R's) keeps
                        the rate it had: the position terms inside attention alone at ten
                        times it (trainer.input_positions_lr_scale)
    checkpoint-positions  a warm start's positions taken from the checkpoint too

Each command says which variants it serves (`posattn compare` all, `posattn probe` those that
only set encoding options, `OPTION_VARIANTS`).
"""

from __future__ import annotations

from typing import Any

from ...encodings import ENCODINGS
from ...errors import require_choice

VARIANTS: dict[str, dict[str, Any]] = {
    "tie-cls": {"encoding_options": {"untie_cls": False}},
    "tupe-scale": {"encoding_options": {"scale_multiple": 2.0}},
    "segments-attention": {"segments": "attention"},
    "segments-input": {"segments": "input"},
    "share-none": {"encoding_options": {"sharing": "none"}},
    "share-layer": {"encoding_options": {"sharing": "layer"}},
    "share-head": {"encoding_options": {"sharing": "head"}},
    "no-input-positions": {"encoding_options": {"input_positions": False}},
    "positional-lr-x10": {"positional_lr_factor": 10.0},
    "attention-lr-x10": {"positional_lr_factor": 10.0, "input_positions_lr_factor": 1.0},
    "checkpoint-positions": {"init_positions": True},
}
# The variants that change nothing but the encoding's options.
OPTION_VARIANTS = tuple(
    name for name, change in VARIANTS.items() if set(change) == {"encoding_options"}
)


def split_variant(
    arm: str,
    variants: tuple[str, ...] = tuple(VARIANTS),
    encodings: tuple[str, ...] = tuple(ENCODINGS),
) -> tuple[str, str | None]:
    """("tupe-a", "tie-cls") of "tupe-a/tie-cls", ("rope", None) of "rope"; the encoding is
    checked against `encodings` (the registry, or a command's own names beside it) and the
    variant against `variants` (a command's own)."""
    encoding, _, variant = arm.partition("/")
    require_choice("encodings", encoding, encodings)
    if variant:
        require_choice(f"variant of {encoding!r}", variant, variants)
    return encoding, variant or None


def variant_options(variant: str | None) -> dict[str, Any]:
    """The encoding options `variant` sets (none for a plain encoding)."""
    return dict(VARIANTS[variant].get("encoding_options", {})) if variant else {}
