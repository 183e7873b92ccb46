"""`posattn bench`: the cost of every positional method as a ratio to plain fused attention
measured in the same process (attention level), and DIET Table 1 in our numbers (model level).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from ... import execution
from ..runs.context import machine
from .attention_rows import attention_level, long_sequences
from .environment import process_settings
from .model_rows import model_level
from .plots import plot_long, plot_ratios
from .report import long_markdown, markdown, skipped_markdown, targets_markdown
from .settings import BenchSettings
from .targets import targets


def bench(settings: BenchSettings, output: Path) -> dict:
    output = Path(output)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    settings.check(device)
    output.mkdir(parents=True, exist_ok=True)
    where = machine()
    if device.type == "cuda":
        where += f", {torch.cuda.get_device_name(device)}"
    context = {
        "machine": where,
        "torch": torch.__version__,
        "repeats": settings.repeats,
        "dtype": str(settings.torch_dtype(device)).removeprefix("torch."),
        # posattn.execution's choices in force (`--choose`), the defaults included.
        "execution": dataclasses.asdict(execution.current()),
        "attention_dropout": settings.attention_dropout,
        "encoding_options": settings.encoding_options,
        **process_settings(),
    }
    attention_rows, skipped = attention_level(settings, device)
    model_rows = model_level(settings, device)
    long_rows = long_sequences(settings, device)
    checks = targets(attention_rows, model_rows, device.type)
    result = {
        "context": context,
        "attention": attention_rows,
        "skipped": skipped,
        "model": model_rows,
        "long": long_rows,
        "targets": checks,
    }
    (output / "bench.json").write_text(json.dumps(result, indent=2))
    text = markdown(attention_rows, model_rows, context) + long_markdown(long_rows)
    text += targets_markdown(checks) + skipped_markdown(skipped)
    (output / "bench.md").write_text(text)
    plot_ratios(attention_rows, output / "attention_ratios.png")
    if long_rows:
        plot_long(long_rows, output / "long_sequences.png")
    print(text)
    return result
