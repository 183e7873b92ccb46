"""Translation run configuration: typed sections, presets (translation/presets/*.yaml), a YAML
file and KEY=VALUE overrides, merged as for pretraining (lab/runconfig.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ...errors import invalid, require
from ..runs import ranges as r
from ..runs.config import ModelSection, StepSection, merge_config, preset_file
from ..runs.trainer_section import TrainerSection

# Options an encoding needs in an encoder-decoder: RoPE's pair layout is never implicit, and
# translation has no [CLS] token for TUPE to untie.
ENCODING_DEFAULTS: dict[str, dict[str, Any]] = {
    "rope": {"layout": "half"},
    "xpos": {"layout": "half"},
    "tupe-a": {"untie_cls": False},
    "tupe-r": {"untie_cls": False},
}
TOO_LONG = ("error", "truncate", "drop")


@dataclass
class TranslationModelSection(ModelSection):
    """The encoder-decoder (PosAttnSeq2SeqConfig): the shared model section with a decoder
    depth; max_len bounds source and target tokens; one segment per side."""

    num_decoder_layers: int = 2
    max_len: int = 96
    norm: str = "pre"
    encoding: str = "sinusoidal"
    segments: str = "none"

    RANGES: ClassVar[dict[str, r.Range]] = {"num_decoder_layers": r.AT_LEAST_1}


@dataclass
class TranslationDataSection:
    """pairs: a prepared set (posattn data prepare --translation). too_long: what happens to a
    pair longer than model.max_len tokens: error, truncate or drop (counted in metrics.json).
    Training applies it; evaluation drops such pairs with "drop" and otherwise translates a
    truncated source, counting either."""

    data_dir: str | None = None
    pairs: str = "en-es"
    reverse: bool = False
    max_train_pairs: int | None = None
    max_eval_pairs: int | None = 400
    too_long: str = "drop"

    RANGES: ClassVar[dict[str, r.Range]] = {
        **dict.fromkeys(("max_train_pairs", "max_eval_pairs"), r.POSITIVE_OR_NULL)
    }


@dataclass
class TranslationTrainSection(StepSection):
    """Label-smoothed cross-entropy with AdamW and linear warm-up/decay (Vaswani Sec. 5).
    curve_steps: every so many steps (and at the last step) the model translates a fixed
    sample of curve_pairs dev pairs greedily and records its BLEU and chrF, the learning curve
    of metrics.json (translation/curve.py); null records none."""

    steps: int = 2000
    adam_epsilon: float = 1e-8
    label_smoothing: float = 0.1
    eval_steps: int = 200
    save_steps: int = 500
    eval_batches: int = 10
    logging_steps: int = 50
    curve_steps: int | None = None
    curve_pairs: int = 200

    RANGES: ClassVar[dict[str, r.Range]] = {
        "label_smoothing": r.PROBABILITY,
        "curve_steps": r.POSITIVE_OR_NULL,
        "curve_pairs": r.AT_LEAST_1,
    }


@dataclass
class DecodeSection:
    """Beam search as in DIET Sec. 4.3: beam 10, length penalty 0.6; beam_size 1 is greedy.
    splits: the prepared splits that training ends by translating and scoring."""

    splits: list[str] = field(default_factory=lambda: ["dev", "test"])
    beam_size: int = 10
    length_penalty: float = 0.6
    max_new_tokens: int = 128
    batch_size: int = 32

    RANGES: ClassVar[dict[str, r.Range]] = {
        **dict.fromkeys(("beam_size", "max_new_tokens", "batch_size"), r.AT_LEAST_1),
        "length_penalty": r.NON_NEGATIVE,
    }


@dataclass
class TranslationRunConfig:
    model: TranslationModelSection = field(default_factory=TranslationModelSection)
    data: TranslationDataSection = field(default_factory=TranslationDataSection)
    train: TranslationTrainSection = field(default_factory=TranslationTrainSection)
    decode: DecodeSection = field(default_factory=DecodeSection)
    trainer: TrainerSection = field(default_factory=TrainerSection)
    # DIET Table 4's rows (Vaswani, Shaw, DIET-REL) and the other methods of posattn.
    encodings: list[str] = field(
        default_factory=lambda: ["sinusoidal", "shaw", "diet-rel", "t5", "tupe-r", "diet-abs"]
    )
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    # `compare` only: after the runs, each run's dev pairs decoded again at each of these
    # length penalties and its test pairs at the one of the highest dev BLEU, reported in
    # OUTPUT/length-tuned (as `translate rescore`, then `translate combine`). Outside the
    # runs' settings: adding it reuses finished runs. Empty: no tuning.
    tune_length_penalties: list[float] = field(default_factory=list)

    RANGES: ClassVar[dict[str, r.Range]] = {"seeds": r.SEEDS}


TRANSLATION_PRESETS = ("smoke", "quick", "cpu", "curve", "table4")


def translation_preset_path(name: str) -> Path:
    return preset_file("posattn.lab.translation", name, TRANSLATION_PRESETS)


def load_translation_config(
    preset: str | None = None, file: str | Path | None = None, overrides: list[str] = ()
) -> TranslationRunConfig:
    path = None if preset is None else translation_preset_path(preset)
    config = merge_config(TranslationRunConfig, path, file, overrides)
    if config.data.too_long not in TOO_LONG:
        raise invalid("data.too_long", config.data.too_long, f"one of {', '.join(TOO_LONG)}")
    penalties = config.tune_length_penalties
    require(
        min(penalties, default=0) >= 0 and len(set(penalties)) == len(penalties),
        "tune_length_penalties",
        penalties,
        "a list of length penalties, each >= 0, none repeated (empty: no tuning)",
    )
    train = config.train
    if train.curve_steps is not None and train.curve_steps > train.steps:
        raise invalid(
            "train.curve_steps",
            train.curve_steps,
            f"at most train.steps={train.steps} (a curve needs points before the last step), "
            "or null for no curve",
        )
    return config


def encoding_options(encoding: str, options: dict[str, Any]) -> dict[str, Any]:
    """The run's options over the encoding's translation defaults."""
    return {**ENCODING_DEFAULTS.get(encoding, {}), **options}
