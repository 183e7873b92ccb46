"""Where a command that runs outside the Trainer (decoding, probe cells, inspection) puts its
model: `--device auto | cpu | cuda | cuda:N`, and the helpers that keep its inputs there."""

from __future__ import annotations

import argparse

import torch
from torch import nn

from ...errors import invalid

AUTO = "auto"


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default=AUTO,
        help="auto (a CUDA GPU when there is one, else the CPU) | cpu | cuda | cuda:N",
    )


def resolve_device(name: str | torch.device | None = AUTO) -> torch.device:
    """The device `name` asks for; one this machine lacks is refused, naming what it has."""
    if name is None or name == AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise invalid("--device", name, "auto, cpu, cuda or cuda:N") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise invalid("--device", name, "auto, cpu, cuda or cuda:N")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise invalid("--device", name, "cpu or auto: this machine has no CUDA GPU")
    if device.index is not None and device.index >= count:
        raise invalid("--device", name, f"cuda:0 to cuda:{count - 1} ({count} GPUs here)")
    return device


def model_device(model: nn.Module) -> torch.device:
    """The device of a model's (first) parameter: where its inputs must go."""
    return next(model.parameters()).device


def to_device(batch: dict, device: torch.device) -> dict:
    """A batch's tensors on `device`, other values as they are."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def synchronize(device: torch.device) -> None:
    """Wait for a GPU's queued work, so that a clock read after it times the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
