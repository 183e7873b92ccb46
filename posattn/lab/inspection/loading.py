"""What `posattn inspect` can open: a posattn model directory (save_pretrained, or a pretrain
run directory holding model/), or a transformers BERT checkpoint (imported as `learned`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ...errors import invalid
from ...models.encoder import Encoder

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")


@dataclass
class InspectedModel:
    """A float64 encoder in eval mode, its tokenizer (None if none was found) and a label."""

    encoder: Encoder
    tokenizer: object | None
    source: str
    kind: str  # "posattn" or "bert"


def model_directory(path: Path) -> Path:
    """The directory holding config.json: `path` itself or a pretrain run's `model/`."""
    if (path / "config.json").is_file():
        return path
    if (path / "model" / "config.json").is_file():
        return path / "model"
    raise invalid(
        "path",
        str(path),
        "a posattn model directory (save_pretrained), a pretrain run directory with model/, "
        "or a BERT checkpoint directory, each containing config.json",
    )


def load_tokenizer_of(directory: Path):
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def load_for_inspection(path: str | Path, device: torch.device | str = "cpu") -> InspectedModel:
    """Open `path` for inspection on `device`; weights are cast to float64 so that spectra and
    ranks are not blurred by float32 rounding (the models inspected here are small)."""
    directory = model_directory(Path(path))
    try:
        model_type = json.loads((directory / "config.json").read_text()).get("model_type")
    except json.JSONDecodeError as error:
        raise invalid(
            "config.json", str(directory / "config.json"), f"valid JSON ({error})"
        ) from None
    if model_type == "posattn":
        from ...models import PosAttnModel
        from ..runs.trainer import quiet_transformers

        with quiet_transformers():  # an MLM checkpoint's head is not needed here: expected
            model = PosAttnModel.from_pretrained(str(directory))
        kind = "posattn"
    elif model_type == "bert":
        from ...models.bert_import import import_bert

        model = import_bert(directory)
        kind = "bert"
    else:
        raise invalid("model_type", model_type, "a posattn model or a BERT checkpoint ('bert')")
    encoder = model.encoder.to(device=device, dtype=torch.float64).eval()
    encoder.set_kernel("eager")  # the reference kernel: logits exactly as written
    return InspectedModel(encoder, load_tokenizer_of(directory), str(directory), kind)
