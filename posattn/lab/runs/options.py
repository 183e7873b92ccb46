"""The options every run command shares (preset, config file, output, data, KEY=VALUE
overrides) and the end of a distributed run."""

from __future__ import annotations

import argparse

import torch.distributed as dist


def names_of(option: str, value: str) -> list[str]:
    """The names of a comma-separated option, stripped, empty items (a trailing comma)
    dropped; refused when none is left."""
    from ...errors import require

    names = [part.strip() for part in value.split(",") if part.strip()]
    require(bool(names), option, value, "comma-separated names, at least one")
    return names


def add_run_options(
    parser: argparse.ArgumentParser,
    default_preset: str | None,
    presets: str = "smoke | quick | standard | paper-mini | warm-start | warm-start-long",
    example: str = "pretrain.steps=200 model.encoding=t5",
) -> None:
    parser.add_argument("--preset", default=default_preset, help=presets)
    parser.add_argument("--config", help="a YAML run config, applied over the preset")
    parser.add_argument("--output", help="the run directory")
    parser.add_argument("--data-dir", help="a prepared data directory (posattn data prepare)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=f"e.g. {example}")


def finish_distributed() -> None:
    """Under torchrun: wait for every rank, then tear the process group down before the
    interpreter exits (gloo aborts a rank whose group is destroyed by exit instead)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
