"""What a result was measured on: the machine and the library versions, for every report."""

from __future__ import annotations

import os
import platform

import torch


def machine() -> str:
    if torch.cuda.is_available():
        return f"GPU {torch.cuda.get_device_name()}"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def run_context(preset: str, wall_seconds: float, **extra) -> dict:
    """The `context` block of a run's results.json."""
    return {
        "preset": preset,
        "machine": machine(),
        "wall_seconds": wall_seconds,
        "torch": torch.__version__,
        **extra,
    }
