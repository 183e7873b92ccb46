"""Run configuration kit: the sections every experiment shares (the model, a step-based
training run), declared once, and the merge of typed sections (OmegaConf structured configs)
with a preset, a YAML file and command-line overrides (`pretrain.steps=200`), in that order."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, get_args, get_origin

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from ...errors import PosAttnConfigError, invalid
from . import ranges as r


@dataclass
class ModelSection:
    """The Transformer (see PosAttnConfig); max_len is the pretraining sequence length;
    word_scale multiplies the word vectors (None: the model's own, PosAttnConfig.word_scale)."""

    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 4
    ffn_dim: int = 512
    max_len: int = 64
    dropout: float = 0.1
    attention_dropout: float = 0.1
    norm: str = "post"
    encoding: str = "learned"
    encoding_options: dict[str, Any] = field(default_factory=dict)
    segments: str = "input"
    kernel: str = "auto"
    word_scale: float | None = None

    RANGES: ClassVar[dict[str, r.Range]] = {
        **dict.fromkeys(("d_model", "num_layers", "num_heads", "ffn_dim", "max_len"), r.AT_LEAST_1),
        **dict.fromkeys(("dropout", "attention_dropout"), r.PROBABILITY),
        "word_scale": r.POSITIVE_OR_NULL_SCALE,
    }
    # Added after results existed: left out of stage fingerprints while at this default, so
    # finished runs stay reusable (runs/fingerprint.py).
    ADDED_DEFAULTS: ClassVar[dict] = {"word_scale": None}


@dataclass
class StepSection:
    """A step-based Trainer run (pretraining, translation): AdamW with linear warm-up and
    decay; batch_size is the global batch (all processes); seed fixes weights and data order."""

    steps: int = 300
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_ratio: float = 0.05
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    adam_epsilon: float = 1e-6
    eval_steps: int = 50
    save_steps: int = 100
    eval_batches: int = 20
    logging_steps: int = 10
    seed: int = 0

    RANGES: ClassVar[dict[str, r.Range]] = {
        **dict.fromkeys(("steps", "batch_size", "eval_batches"), r.AT_LEAST_1),
        **dict.fromkeys(("eval_steps", "save_steps", "logging_steps"), r.AT_LEAST_1),
        "learning_rate": r.POSITIVE,
        "adam_epsilon": r.POSITIVE,
        "warmup_ratio": r.FRACTION,
        "weight_decay": r.NON_NEGATIVE,
        "max_grad_norm": r.NON_NEGATIVE,
        "seed": r.SEED,
    }


def _known_keys(node: Any, prefix: str = "") -> list[str]:
    keys = []
    if isinstance(node, DictConfig):
        for key in node:
            path = f"{prefix}{key}"
            keys.append(path)
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not path.endswith("encoding_options"):
                keys.extend(_known_keys(child, path + "."))
    return keys


def _unknown_key_error(error: Exception, schema: DictConfig) -> PosAttnConfigError:
    key = getattr(error, "full_key", None) or str(error)
    known = _known_keys(schema)
    close = difflib.get_close_matches(str(key), known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(known)}"
    return PosAttnConfigError(f"config key {key!r} does not exist: {hint}")


# What a setting of each type takes, in the words of the error messages (ranges.py's style).
_ONE = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_MANY = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}


def _expected(schema: DictConfig, key: str) -> str | None:
    """What the schema's setting `key` takes ("an integer", "a list of numbers"), or None where
    the key is not a plain setting (a list item, a section)."""
    parent, _, leaf = key.rpartition(".")
    section = OmegaConf.select(schema, parent) if parent else schema
    if not isinstance(section, DictConfig) or leaf not in section:
        return None
    declared = section._get_node(leaf)._metadata.ref_type
    if get_origin(declared) in (list, tuple):
        item = next(iter(get_args(declared)), None)
        return f"a list of {_MANY[item]}" if item in _MANY else "a list"
    return _ONE.get(declared)


def _wrong_type_error(error: ValidationError, schema: DictConfig) -> PosAttnConfigError:
    """A value OmegaConf could not convert, named as `invalid` names a value out of range;
    OmegaConf's own reason where the schema does not say what the key takes."""
    reason = str(error.msg or error).splitlines()[0]
    key = getattr(error, "full_key", None)
    if not key:
        return PosAttnConfigError(f"config value rejected: {reason}")
    expected = _expected(schema, key)
    return invalid(
        key, getattr(error, "value", None), f"expected {expected}" if expected else reason
    )


def merge_config(
    schema_type: type,
    preset: Path | None,
    file: str | Path | None,
    overrides: list[str] = (),
    inherited: dict | None = None,
):
    """An instance of the structured config `schema_type`: its defaults <- a preset YAML <-
    settings `inherited` from an earlier run (a dict of sections) <- a user YAML <- KEY=VALUE
    overrides; unknown keys and bad types fail here."""
    schema = OmegaConf.structured(schema_type)
    layers = []
    if preset is not None:
        layers.append(OmegaConf.load(preset))
    if inherited is not None:
        layers.append(OmegaConf.create(inherited))
    if file is not None:
        if not Path(file).is_file():
            raise invalid("--config", str(file), "an existing YAML file")
        layers.append(OmegaConf.load(file))
    try:
        layers.append(OmegaConf.from_dotlist(list(overrides)))
    except Exception as error:  # a malformed override, e.g. "steps" without "="
        raise invalid("override", list(overrides), f"KEY=VALUE pairs ({error})") from None
    merged = schema
    for layer in layers:
        try:
            merged = OmegaConf.merge(merged, layer)
        except (ConfigKeyError, ConfigAttributeError) as error:
            raise _unknown_key_error(error, schema) from None
        except ValidationError as error:
            raise _wrong_type_error(error, schema) from None
    config = OmegaConf.to_object(merged)
    r.check_ranges(config)  # every numeric setting in its declared range (runs/ranges.py)
    check_sections(config)
    return config


def check_sections(config: Any, prefix: str = "") -> None:
    """Call `check(prefix)` of every section that has one (choices ranges cannot express)."""
    if hasattr(config, "check"):
        config.check(prefix)
    for item in fields(config):
        value = getattr(config, item.name)
        if is_dataclass(value) and not isinstance(value, type):
            check_sections(value, f"{prefix}{item.name}.")


def preset_file(package: str, name: str, presets: tuple[str, ...]) -> Path:
    """The YAML of preset `name` shipped in `package`'s presets/ folder."""
    if name not in presets:
        raise invalid("--preset", name, f"one of {', '.join(presets)}")
    return Path(str(resources.files(package) / "presets" / f"{name}.yaml"))


def to_yaml(config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
