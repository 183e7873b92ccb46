"""Run configuration: typed sections (OmegaConf structured configs), presets, a YAML file and
command-line overrides (`pretrain.steps=200 model.encoding=tupe-r`), merged in that order."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from ..errors import PosAttnConfigError, invalid


@dataclass
class ModelSection:
    """The Transformer (see PosAttnConfig); max_len is the pretraining sequence length."""

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


@dataclass
class DataSection:
    data_dir: str | None = None  # None: POSATTN_DATA_DIR or the user cache
    max_train_paragraphs: int | None = None  # cap the corpus for quick runs


@dataclass
class PretrainSection:
    """Masked-LM pretraining as in TUPE Sec. 4.1 / DIET Sec. 4, in miniature."""

    steps: int = 300
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_ratio: float = 0.05
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    adam_epsilon: float = 1e-6
    mlm_probability: float = 0.15
    eval_steps: int = 50
    save_steps: int = 100
    eval_batches: int = 20
    logging_steps: int = 10
    seed: int = 0


@dataclass
class FinetuneSection:
    """Fine-tuning protocol in miniature: every seed per learning rate, the median per rate,
    the best rate reported (TUPE Sec. 4.1)."""

    tasks: list[str] = field(default_factory=lambda: ["sentiment", "topic", "paraphrase"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    learning_rates: list[float] = field(default_factory=lambda: [1e-3])
    epochs: int = 2
    batch_size: int = 32
    max_len: int = 64
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    max_train_examples: int | None = 2000
    max_eval_examples: int | None = 1000


@dataclass
class RunConfig:
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    pretrain: PretrainSection = field(default_factory=PretrainSection)
    finetune: FinetuneSection = field(default_factory=FinetuneSection)
    encodings: list[str] = field(default_factory=lambda: ["learned", "tupe-r", "diet-abs"])


PRESETS = ("smoke", "quick", "paper-mini")


def preset_path(name: str) -> Path:
    if name not in PRESETS:
        raise invalid("--preset", name, f"one of {', '.join(PRESETS)}")
    return Path(str(resources.files("posattn.lab") / "presets" / f"{name}.yaml"))


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


def load_run_config(
    preset: str | None = None, file: str | Path | None = None, overrides: list[str] = ()
) -> RunConfig:
    """Defaults <- preset <- file <- overrides; unknown keys and bad types fail here."""
    return merge_config(RunConfig, None if preset is None else preset_path(preset), file, overrides)


def merge_config(
    schema_type: type, preset: Path | None, file: str | Path | None, overrides: list[str] = ()
):
    """An instance of the structured config `schema_type`: its defaults <- a preset YAML <- a
    user YAML <- KEY=VALUE overrides; unknown keys and bad types fail here."""
    schema = OmegaConf.structured(schema_type)
    layers = []
    if preset is not None:
        layers.append(OmegaConf.load(preset))
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
            raise PosAttnConfigError(f"config value rejected: {error}") from None
    return OmegaConf.to_object(merged)


def to_yaml(config: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
