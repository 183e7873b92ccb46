"""What `posattn finetune | zero-shot` read from the pretraining of the model they are given.

A model saved by `posattn pretrain` (or a comparison's pretraining cell) sits in its run's
model/ folder, beside the stage.json recording the settings it was trained with. Those fix
the model: its model, data and pretrain sections, and the positional learning rates its
tables were trained at. A fine-tuning of that model starts from them, as its comparison cell
would, so that `posattn finetune RUN/model --preset P` fine-tunes a model pretrained with
`trainer.positional_lr_scale=10` at ten times the rate, as the arm's cell does, and records
the encoding it fine-tunes (not the preset's). The preset supplies everything else; a
command-line or --config setting still sets a rate, and a model or pretrain setting other
than the model's is refused (the model would not change, so the setting would be ignored).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, fields
from pathlib import Path

from ...errors import invalid
from ..runs.stages import STAGE_FILE, stage_record
from ..runs.trainer_section import TrainerSection
from .runconfig import DataSection, PretrainModelSection, PretrainSection, RunConfig

# The sections that fix a pretrained model: a fine-tuning may not set them otherwise. The data
# section is taken too, but not held: the data directory may move (--data-dir).
FIXED_SECTIONS = {"model": PretrainModelSection, "pretrain": PretrainSection}
RATE_KEYS = ("positional_lr_scale", "input_positions_lr_scale")


def pretraining_settings(model_dir: Path) -> dict | None:
    """The settings of the pretraining that wrote `model_dir` (its run's stage.json), as a
    config layer with every key of the fixed sections, the data section and the two positional
    rates filled in (a key a stage leaves out at its default is set to that default, so that a
    preset's value cannot show through); None where the model comes from elsewhere (no
    stage.json beside it, or one of a fine-tuning or another kind of run)."""
    record = stage_record(Path(model_dir).parent)
    settings = (record or {}).get("settings")
    if not isinstance(settings, dict) or not {"model", "pretrain"} <= settings.keys():
        return None
    if "finetune" in settings:
        return None
    sections = {**FIXED_SECTIONS, "data": DataSection}
    layer = {name: known_keys(settings, name, kind, model_dir) for name, kind in sections.items()}
    trainer = settings.get("trainer", {})
    defaults = TrainerSection()
    layer["trainer"] = {key: trainer.get(key, getattr(defaults, key)) for key in RATE_KEYS}
    return layer


def known_keys(settings: dict, section: str, kind: type, model_dir: Path) -> dict:
    """The recorded `section` over its defaults, without the keys this version of posattn no
    longer has (a run of an older one): those are named in a warning, not taken - the model
    itself is read from its own config.json, so they cannot change it."""
    names = {item.name for item in fields(kind)}
    recorded = settings.get(section, {})
    dropped = sorted(key for key in recorded if key not in names)
    if dropped:
        warnings.warn(
            f"{Path(model_dir).parent / STAGE_FILE} records {section} settings this version of "
            f"posattn does not have ({', '.join(dropped)}): left out of the settings taken "
            "from the pretraining",
            stacklevel=3,
        )
    return {**asdict(kind()), **{key: recorded[key] for key in recorded if key in names}}


def check_unchanged(config: RunConfig, inherited: dict, model_dir: Path) -> None:
    """Refuse a model or pretrain setting of `config` (after --config and the overrides) that
    differs from the pretraining's: it would be recorded but not change the model."""
    for section in FIXED_SECTIONS:
        values = getattr(config, section)
        for item in fields(values):
            recorded = inherited[section][item.name]
            value = getattr(values, item.name)
            if value != recorded:
                raise invalid(
                    f"{section}.{item.name}",
                    value,
                    f"{recorded!r}, what the model in {model_dir} was pretrained with: a "
                    "fine-tuning starts from that model, so leave the model and pretrain "
                    "settings out (or give them as it was pretrained)",
                )


def inherited_sentence(config: RunConfig, inherited: dict, model_dir: Path, trains: bool) -> str:
    """The line a command prints: where its model's settings came from and, for a command that
    trains (`trains`), the positional rates it trains at, beside those the model was
    pretrained at where they differ."""
    source = (
        f"{model_dir}: the model, data and pretrain settings of its pretraining "
        "(its run's stage.json)"
    )
    if not trains:
        return source

    def rates(values) -> str:
        return ", ".join(f"trainer.{key}={values[key]}" for key in RATE_KEYS)

    now = {key: getattr(config.trainer, key) for key in RATE_KEYS}
    pretrained = inherited["trainer"]
    how = "as pretrained" if now == pretrained else f"pretrained at {rates(pretrained)}"
    return f"{source}; positional rates {rates(now)} ({how})"
