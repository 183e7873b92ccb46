"""The arms of a comparison: an encoding, or an encoding with one ablation of the papers.

An arm is named `ENCODING` or `ENCODING/VARIANT` (`tupe-a/tie-cls`, `learned/segments-attention`,
`diet-abs/share-none`; the variants and what each changes: `lab/runs/variants.py`); `random-init`
is the `learned` architecture fine-tuned without any pretraining, the floor every pretrained arm
must clear.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ...encodings import ENCODINGS, build_encoding
from ...encodings.base import ModelDims
from ..runs.options import require_distinct_names
from ..runs.variants import VARIANTS, split_variant
from .runconfig import RunConfig

RANDOM_INIT = "random-init"


def split_arm(arm: str) -> tuple[str, str | None]:
    """("tupe-a", "tie-cls") of "tupe-a/tie-cls"; the encoding and variant are checked."""
    if arm == RANDOM_INIT:
        return "learned", None
    return split_variant(arm, encodings=(*ENCODINGS, RANDOM_INIT))


def meta_encoding(model):
    """The encoding of a model section, built on the meta device (no memory, no init)."""
    dims = ModelDims(model.d_model, model.num_heads, model.num_layers, model.max_len)
    with torch.device("meta"):
        return build_encoding(model.encoding, dims, model.encoding_options)


def rates_reach(encoding, input_scale: float | None = None) -> tuple[bool, bool]:
    """Whether `trainer.positional_lr_scale` and `trainer.input_positions_lr_scale` reach
    parameters of `encoding`: the input scale its input position table, the positional
    scale its other position terms - and the table too while the input scale is null."""
    inputs = {id(p) for p in encoding.input_position_parameters()}
    reached = {id(p) for p in encoding.positional_parameters()}
    if input_scale is not None:
        reached -= inputs
    return bool(reached), bool(inputs)


def arm_config(config: RunConfig, arm: str) -> RunConfig:
    """The run config of one arm: the model (and trainer) sections with its encoding and
    variant applied. A variant's positional rate factor multiplies the run's scale, so that
    `trainer.positional_lr_scale=2` with `positional-lr-x10` gives 20. The run's scale is a
    rate for positional parameters: an arm without any (`none`, `sinusoidal`, `rope`) trains
    at scale 1, its only rate, so a comparison can keep it beside the others (a variant that
    asks for a factor on such an arm is refused by compare). Likewise the input table's
    scale (`trainer.input_positions_lr_scale`, which `positional-lr-x10`'s factor leaves
    alone) reaches only arms with an input position table: the others keep null. A
    variant's input factor (`attention-lr-x10`'s 1) sets the table's scale apart from the
    others: the rate the table had, times the factor."""
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
    input_scale = config.trainer.input_positions_lr_scale
    if "input_positions_lr_factor" in changes:  # the table's rate, apart from the others'
        table_rate = run_scale if input_scale is None else input_scale
        input_scale = table_rate * changes["input_positions_lr_factor"]
    if run_scale != 1.0 or input_scale is not None:  # else nothing to build the encoding for
        reaches, has_input_table = rates_reach(meta_encoding(model), input_scale)
        input_scale = input_scale if has_input_table else None
        run_scale = run_scale if reaches else 1.0
    scale = run_scale * changes.get("positional_lr_factor", 1.0)
    trainer = replace(
        config.trainer, positional_lr_scale=scale, input_positions_lr_scale=input_scale
    )
    init_positions = changes.get("init_positions", config.pretrain.init_positions)
    pretrain = replace(config.pretrain, init_positions=init_positions)
    return replace(config, model=model, trainer=trainer, pretrain=pretrain)


def scaled_arm(config: RunConfig, arm: str) -> bool:
    """Whether the run's positional rate reaches this arm (it has positional parameters
    besides an input table of its own rate)."""
    arm_run = arm_config(config, arm)
    input_scale = arm_run.trainer.input_positions_lr_scale
    return rates_reach(meta_encoding(arm_run.model), input_scale)[0]


def pretrained_arms(arms: list[str]) -> list[str]:
    return [arm for arm in arms if arm != RANDOM_INIT]


def check_arms(arms: list[str]) -> None:
    require_distinct_names("encodings", arms)
    for arm in arms:
        split_arm(arm)
