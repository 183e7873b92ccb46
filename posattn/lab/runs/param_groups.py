"""A learning rate of its own for the positional encodings' parameters (`trainer.
positional_lr_scale`). Under Adam a parameter moves by at most about the learning rate per
step, so a per-offset scalar bias (T5, DIET-REL, ALiBi-style tables) can travel at most the sum
of the learning rates over a run (about 1.2 logits for 2,400 steps at 1e-3 with warm-up and
linear decay): short runs cap how sharp a learned relative bias can become, while positions
that act through the q/k projections have many weights to move at once. Scaling the tables'
rate lifts the cap without touching the content weights. An input position table (BERT's, in
`bert-r` beside T5's table) can take a rate of its own (`trainer.input_positions_lr_scale`):
without it, a scale meant for a per-offset table also reaches the input table."""

from __future__ import annotations

from torch import nn
from torch.optim import Optimizer

from ...encodings import PositionalEncoding


def positional_parameter_ids(model: nn.Module) -> set[int]:
    """ids of the position terms' parameters of every PositionalEncoding module of `model`
    (`PositionalEncoding.positional_parameters`: Linformer's E and F are not among them)."""
    return {
        id(parameter)
        for module in model.modules()
        if isinstance(module, PositionalEncoding)
        for parameter in module.positional_parameters()
    }


def input_position_parameter_ids(model: nn.Module) -> set[int]:
    """ids of the input position tables' parameters (`PositionalEncoding.
    input_position_parameters`: BERT's table in `learned`, `bert-r`, `linformer`)."""
    return {
        id(parameter)
        for module in model.modules()
        if isinstance(module, PositionalEncoding)
        for parameter in module.input_position_parameters()
    }


def scale_positional_lr(
    optimizer: Optimizer, model: nn.Module, scale: float, input_scale: float | None = None
) -> tuple[int, int]:
    """Split each parameter group of a fresh optimizer into the positional parameters, with
    lr * scale, the input position table's, with lr * input_scale (lr * scale when None),
    and the others, as they were. Returns how many parameters each of the two scales
    reached: the input table counts for `scale` only when `input_scale` is None. Groups keep
    their other settings (weight decay, betas), and the scheduler created afterwards scales
    each group's own base rate."""
    inputs = input_position_parameter_ids(model) if input_scale is not None else set()
    positional = positional_parameter_ids(model) - inputs
    groups, moved, moved_inputs = [], 0, 0
    for group in optimizer.param_groups:
        settings = {key: value for key, value in group.items() if key != "params"}
        mine = [p for p in group["params"] if id(p) in positional]
        table = [p for p in group["params"] if id(p) in inputs]
        rest = [p for p in group["params"] if id(p) not in positional and id(p) not in inputs]
        for params, factor in ((rest, 1.0), (mine, scale), (table, input_scale)):
            if params:
                groups.append({**settings, "params": params, "lr": group["lr"] * factor})
        moved, moved_inputs = moved + len(mine), moved_inputs + len(table)
    optimizer.param_groups = groups
    return moved, moved_inputs
