"""The encoder's configuration: a dataclass that round-trips through JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .encodings import ModelDims, build_encoding
from .errors import PosAttnConfigError, require, require_choice, require_positive_int
from .kernels import KERNELS
from .segments import SEGMENT_MODES


@dataclass
class EncoderConfig:
    """A BERT-style encoder with a pluggable positional encoding.

    encoding / encoding_options: a registry name (`posattn list`) and its options.
    segments: "input" (BERT token-type embeddings), "attention" (DIET Eq. 2) or "none".
    norm: "post" (BERT, TUPE) or "pre" LayerNorm.
    """

    vocab_size: int = 30522
    d_model: int = 768
    num_layers: int = 12
    num_heads: int = 12
    ffn_dim: int = 3072
    max_len: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.1
    norm: str = "post"
    layer_norm_eps: float = 1e-12
    encoding: str = "learned"
    encoding_options: dict[str, Any] = field(default_factory=dict)
    segments: str = "input"
    num_segments: int = 2
    kernel: str = "sdpa"
    causal: bool = False
    num_labels: int = 2
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab_size", "ffn_dim", "num_segments", "num_labels"):
            require_positive_int(name, getattr(self, name))
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            require(0.0 <= value < 1.0, name, value, "a probability in [0, 1)")
        require_choice("norm", self.norm, ("post", "pre"))
        require_choice("segments", self.segments, SEGMENT_MODES)
        require_choice("kernel", self.kernel, tuple(KERNELS))
        # Building the encoding on the meta device checks its options against the model's sizes
        # (head dimension, causality, table lengths) now rather than at the first forward.
        with torch.device("meta"):
            build_encoding(self.encoding, self.dims, self.encoding_options)

    @property
    def dims(self) -> ModelDims:
        return ModelDims(
            self.d_model, self.num_heads, self.num_layers, self.max_len, self.init_std, self.causal
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> EncoderConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise PosAttnConfigError(
                f"config keys {unknown} are not allowed: EncoderConfig takes {sorted(known)}"
            )
        return cls(**values)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> EncoderConfig:
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text()
        return cls.from_dict(json.loads(text))
