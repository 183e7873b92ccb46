"""A learning rate of its own for the positional encodings' parameters (`trainer.
positional_lr_scale`). Under Adam a parameter moves by at most about the learning rate per
step, so a per-offset scalar bias (T5, DIET-REL, ALiBi-style tables) can travel at most the sum
of the learning rates over a run (about 1.2 logits for 2,400 steps at 1e-3 with warm-up and
linear decay): short runs cap how sharp a learned relative bias can become, while positions
that act through the q/k projections have many weights to move at once. Scaling the tables'
rate lifts the cap without touching the content weights."""

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


def scale_positional_lr(optimizer: Optimizer, model: nn.Module, scale: float) -> int:
    """Split each parameter group of a fresh optimizer into its positional parameters, with
    lr * scale, and the others, as they were; returns how many parameters were scaled. Groups
    keep their other settings (weight decay, betas), and the scheduler created afterwards
    scales each group's own base rate."""
    positional = positional_parameter_ids(model)
    groups, moved = [], 0
    for group in optimizer.param_groups:
        mine = [p for p in group["params"] if id(p) in positional]
        rest = [p for p in group["params"] if id(p) not in positional]
        settings = {key: value for key, value in group.items() if key != "params"}
        if rest:
            groups.append({**settings, "params": rest})
        if mine:
            groups.append({**settings, "params": mine, "lr": group["lr"] * scale})
            moved += len(mine)
    optimizer.param_groups = groups
    return moved
