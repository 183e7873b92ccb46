"""The options every run command shares (preset, config file, output, data, KEY=VALUE
overrides, the model directory a command reads) and the end of a distributed
run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch.distributed as dist


def require_distinct_names(option: str, names: list[str]) -> None:
    """A comparison's list of arms: at least one, none repeated."""
    from ...errors import require

    require(
        bool(names) and len(set(names)) == len(names),
        option,
        list(names),
        "a non-empty list without repeated names",
    )


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
    parser.add_argument(
        "overrides", nargs="*", default=[], metavar="KEY=VALUE", help=f"e.g. {example}"
    )


def finish_distributed() -> None:
    """Under torchrun: wait for every rank, then tear the process group down before the
    interpreter exits (gloo aborts a rank whose group is destroyed by exit instead)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def model_directory(option: str, value: str, model_type: str | None = None) -> Path:
    """A saved model's directory that a command reads, checked before anything is written:
    it holds config.json (a run directory holding model/ is named in the refusal), of
    `model_type` where one is asked for."""
    from ...errors import invalid, require

    path = Path(value)
    config = path / "config.json"
    if not config.is_file():
        allowed = "a model directory holding config.json (the model/ folder of a run)"
        if (path / "model" / "config.json").is_file():
            allowed += f": give {str(path / 'model')!r}"
        raise invalid(option, value, allowed)
    if model_type is not None:
        found = json.loads(config.read_text()).get("model_type")
        require(found == model_type, option, value, f"a {model_type!r} model; this is {found!r}")
    return path


def add_overwrite_option(parser) -> None:
    """--overwrite of a standalone command (lab/runs/standalone.py)."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="discard what --output holds first (default: a finished run of the same settings "
        "is reused, one of other settings refused)",
    )
