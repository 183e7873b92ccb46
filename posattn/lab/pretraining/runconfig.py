"""`posattn pretrain | finetune | compare`'s run configuration: the shared model and step
sections (runs/config.py), the data, pretraining and fine-tuning sections, and the presets."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..runs import ranges as r
from ..runs.config import ModelSection, StepSection, merge_config, preset_file
from ..runs.trainer_section import TrainerSection


@dataclass
class PretrainModelSection(ModelSection):
    """The masked-LM encoder: the shared model section and whether BERT's MLM decoder shares
    the word embeddings (tie_word_embeddings, BERT's choice; false gives the decoder its own
    matrix, so softmax gradients of tokens absent from a batch never reach the input
    embeddings)."""

    tie_word_embeddings: bool = True

    RANGES: ClassVar[dict[str, r.Range]] = {"max_len": r.BLOCK_LENGTH}
    # Added after results existed: left out of stage fingerprints while at this default, so
    # finished cells stay reusable (runs/fingerprint.py).
    ADDED_DEFAULTS: ClassVar[dict] = {**ModelSection.ADDED_DEFAULTS, "tie_word_embeddings": True}


@dataclass
class DataSection:
    data_dir: str | None = None  # None: POSATTN_DATA_DIR or the user cache
    max_train_paragraphs: int | None = None  # cap the corpus for quick runs

    RANGES: ClassVar[dict[str, r.Range]] = {"max_train_paragraphs": r.POSITIVE_OR_NULL}


@dataclass
class PretrainSection(StepSection):
    """Masked-LM pretraining as in TUPE Sec. 4.1 / DIET Sec. 4, in miniature. init_from: a
    BERT checkpoint directory, or "minilm" (the packaged MiniLM-L6), whose content weights
    start every pretrained arm, positions fresh (warm_start.py); None: random weights.
    init_positions: also start from the checkpoint's position table (`learned` only; the
    `checkpoint-positions` arm)."""

    mlm_probability: float = 0.15
    init_from: str | None = None
    init_positions: bool = False

    # 0 would mask nothing: no token to predict, a loss of NaN
    RANGES: ClassVar[dict[str, r.Range]] = {"mlm_probability": r.OPEN_PROBABILITY}
    # Added after results existed: see PretrainModelSection.ADDED_DEFAULTS.
    ADDED_DEFAULTS: ClassVar[dict] = {"init_from": None, "init_positions": False}


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

    RANGES: ClassVar[dict[str, r.Range]] = {
        **dict.fromkeys(("epochs", "batch_size"), r.AT_LEAST_1),
        "max_len": r.PAIR_LENGTH,
        "seeds": r.SEEDS,
        "learning_rates": r.LEARNING_RATES,
        "warmup_ratio": r.FRACTION,
        "weight_decay": r.NON_NEGATIVE,
        **dict.fromkeys(("max_train_examples", "max_eval_examples"), r.POSITIVE_OR_NULL),
    }


@dataclass
class CompareSection:
    """How `compare` spreads and repeats its cells: every arm is pretrained once per seed in
    pretrain_seeds (pretrain.seed is then ignored) and each pretrained model is fine-tuned with
    every finetune seed; workers: processes that run independent cells side by side, one torch
    thread each (1: everything in this process); paired_with: arms of the run that every other
    arm is also paired against, beside `learned` and `none` (results.json's
    `paired_with_arms`). Only the summary reads it, so changing it re-summarises a finished run."""

    pretrain_seeds: list[int] = field(default_factory=lambda: [0])
    workers: int = 1
    paired_with: list[str] = field(default_factory=list)

    RANGES: ClassVar[dict[str, r.Range]] = {"pretrain_seeds": r.SEEDS, "workers": r.AT_LEAST_1}


@dataclass
class RunConfig:
    model: PretrainModelSection = field(default_factory=PretrainModelSection)
    data: DataSection = field(default_factory=DataSection)
    pretrain: PretrainSection = field(default_factory=PretrainSection)
    finetune: FinetuneSection = field(default_factory=FinetuneSection)
    compare: CompareSection = field(default_factory=CompareSection)
    trainer: TrainerSection = field(default_factory=TrainerSection)
    # Arms of a comparison: encodings, ablations ("tupe-a/tie-cls") and "random-init" (arms.py)
    encodings: list[str] = field(default_factory=lambda: ["learned", "tupe-r", "diet-abs"])


PRESETS = ("smoke", "quick", "standard", "paper-mini", "warm-start", "warm-start-long")


def preset_path(name: str) -> Path:
    return preset_file("posattn.lab.pretraining", name, PRESETS)


def load_run_config(
    preset: str | None = None,
    file: str | Path | None = None,
    overrides: list[str] = (),
    inherited: dict | None = None,
) -> RunConfig:
    """Defaults <- preset <- inherited (a pretrained model's settings, pretrained_run.py) <-
    file <- overrides; unknown keys and bad types fail here."""
    preset_yaml = None if preset is None else preset_path(preset)
    return merge_config(RunConfig, preset_yaml, file, overrides, inherited)
