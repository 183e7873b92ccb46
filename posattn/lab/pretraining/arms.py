"""The arms of a comparison: an encoding, or an encoding with one ablation of the papers.

An arm is named `ENCODING` or `ENCODING/VARIANT` (`tupe-a/tie-cls`, `learned/segments-attention`,
`diet-abs/share-none`); `random-init` is the `learned` architecture fine-tuned without any
pretraining, the floor every pretrained arm must clear. The variants are the papers' ablations:

    tie-cls             TUPE-A without the untied [CLS] (TUPE Sec. 4.2, untie_cls=False)
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
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ...encodings import ENCODINGS, build_encoding
from ...encodings.base import ModelDims
from ...errors import require_choice
from ..runs.options import require_distinct_names
from .runconfig import RunConfig

RANDOM_INIT = "random-init"
VARIANTS: dict[str, dict[str, Any]] = {
    "tie-cls": {"encoding_options": {"untie_cls": False}},
    "segments-attention": {"segments": "attention"},
    "segments-input": {"segments": "input"},
    "share-none": {"encoding_options": {"sharing": "none"}},
    "share-layer": {"encoding_options": {"sharing": "layer"}},
    "share-head": {"encoding_options": {"sharing": "head"}},
    "no-input-positions": {"encoding_options": {"input_positions": False}},
    "positional-lr-x10": {"positional_lr_factor": 10.0},
    "checkpoint-positions": {"init_positions": True},
}


def split_arm(arm: str) -> tuple[str, str | None]:
    """("tupe-a", "tie-cls") of "tupe-a/tie-cls"; the encoding and variant are checked."""
    if arm == RANDOM_INIT:
        return "learned", None
    encoding, _, variant = arm.partition("/")
    require_choice("encodings", encoding, (*ENCODINGS, RANDOM_INIT))
    if variant:
        require_choice(f"variant of {encoding!r}", variant, tuple(VARIANTS))
    return encoding, variant or None


def has_positional_parameters(model) -> bool:
    """Whether the encoding of a model section trains position terms of its own, the
    parameters `trainer.positional_lr_scale` reaches (built on the meta device: no memory,
    no init)."""
    dims = ModelDims(model.d_model, model.num_heads, model.num_layers, model.max_len)
    with torch.device("meta"):
        encoding = build_encoding(model.encoding, dims, model.encoding_options)
    return bool(encoding.positional_parameters())


def arm_config(config: RunConfig, arm: str) -> RunConfig:
    """The run config of one arm: the model (and trainer) sections with its encoding and
    variant applied. A variant's positional rate factor multiplies the run's scale, so that
    `trainer.positional_lr_scale=2` with `positional-lr-x10` gives 20. The run's scale is a
    rate for positional parameters: an arm without any (`none`, `sinusoidal`, `rope`) trains
    at scale 1, its only rate, so a comparison can keep it beside the others (a variant that
    asks for a factor on such an arm is refused by compare)."""
    encoding, variant = split_arm(arm)
    changes = VARIANTS.get(variant, {}) if variant else {}
    options = {**config.model.encoding_options, **changes.get("encoding_options", {})}
    model = replace(
        config.model,
        encoding=encoding,
        encoding_options=options,
        segments=changes.get("segments", config.model.segments),
    )
    run_scale = config.trainer.positional_lr_scale
    if run_scale != 1.0 and not has_positional_parameters(model):
        run_scale = 1.0
    scale = run_scale * changes.get("positional_lr_factor", 1.0)
    trainer = replace(config.trainer, positional_lr_scale=scale)
    init_positions = changes.get("init_positions", config.pretrain.init_positions)
    pretrain = replace(config.pretrain, init_positions=init_positions)
    return replace(config, model=model, trainer=trainer, pretrain=pretrain)


def scaled_arm(config: RunConfig, arm: str) -> bool:
    """Whether the run's positional rate reaches this arm (it has positional parameters)."""
    return has_positional_parameters(arm_config(config, arm).model)


def pretrained_arms(arms: list[str]) -> list[str]:
    return [arm for arm in arms if arm != RANDOM_INIT]


def check_arms(arms: list[str]) -> None:
    require_distinct_names("encodings", arms)
    for arm in arms:
        split_arm(arm)
