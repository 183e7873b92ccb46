"""What a result was measured on: the machine, the library versions and the prepared data,
for every report."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from ...data.identity import digest_line


def cpu_model() -> str:
    """The processor's name (Linux's /proc/cpuinfo), else what `platform` knows: two machines
    of one architecture can round training differently, so a report names the model."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    if torch.cuda.is_available():
        return f"GPU {torch.cuda.get_device_name()}"
    return f"CPU ({cpu_model()}, {os.cpu_count()} cores)"


def run_context(preset: str, wall_seconds: float, **extra) -> dict:
    """The `context` block of a run's results.json."""
    return {
        "preset": preset,
        "machine": machine(),
        "wall_seconds": wall_seconds,
        "torch": torch.__version__,
        **extra,
    }


def data_line(context: dict) -> str:
    """The folders the run read (prepared data; a checkpoint as init_from), by digest
    (data/identity.py); where there is no one set of digests, why (a sentence in place of
    them), or that none was recorded."""
    data = context.get("data")
    if not data:
        return "Data: not recorded."
    if isinstance(data, str):
        return f"Data: {data}."
    return f"Data (sha256 of each folder read, first digits): {digest_line(data)}."


def wall_time_line(context: dict) -> str:
    """The invocation's wall time (and its worker processes, where the context has them), and
    where cells finished by earlier invocations were reused, how many: their time is not in it
    (a rerun that reuses every cell takes seconds)."""
    line = f"Wall time: {context['wall_seconds'] / 60:.1f} min"
    workers = context.get("workers")
    if workers:  # this invocation's; an earlier one may have used another number
        line += f" on {workers} worker{'s' if workers > 1 else ''}"
    cells = context.get("cells")
    if not cells or not cells["reused"]:
        return line + "."
    computed = cells["total"] - cells["reused"]
    return (
        f"{line} for the {computed} of {cells['total']} cells this invocation computed; "
        f"reused from earlier invocations, whose time is not in it: {cells['reused']}."
    )
