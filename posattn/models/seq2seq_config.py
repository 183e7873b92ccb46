"""`PosAttnSeq2SeqConfig`: the configuration of posattn's encoder-decoder
(`PosAttnSeq2SeqModel`, `PosAttnForSeq2SeqLM`)."""

from __future__ import annotations

from transformers import AutoConfig

from ..errors import require, require_positive_int, require_probability
from .config import PosAttnConfig
from .decoder import stack_config


class PosAttnSeq2SeqConfig(PosAttnConfig):
    """PosAttnConfig for an encoder-decoder.

    num_layers: encoder layers; num_decoder_layers: decoder layers (default: num_layers).
    encoding / encoding_options apply to both stacks (the decoder's copy is causal).
    label_smoothing: eps of the training loss. bos/eos/pad/decoder_start token ids come from
    the shared tokenizer (<s>, </s>, <pad>, <s>).
    """

    model_type = "posattn-seq2seq"

    num_decoder_layers: int | None = None
    label_smoothing: float | int = 0.0
    segments: str = "none"
    norm: str = "pre"
    is_encoder_decoder: bool = True
    bos_token_id: int | None = 2
    eos_token_id: int | None = 3
    decoder_start_token_id: int | None = 2

    def __post_init__(self, **kwargs) -> None:
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers
        super().__post_init__(**kwargs)
        require_positive_int("num_decoder_layers", self.num_decoder_layers)
        require_probability("label_smoothing", self.label_smoothing)
        require(self.causal is False, "causal", self.causal, "False: the decoder is causal")
        require(
            self.segments != "attention",
            "segments",
            self.segments,
            "'none' or 'input': a translation pair has one segment per side",
        )
        # The decoder's causal copy of the encoding is checked here too.
        stack_config(self, causal=True, num_layers=self.num_decoder_layers)

    def input_word_scale(self) -> float:
        """word_scale, or sqrt(d_model) where None (Vaswani Sec. 3.4)."""
        return self.d_model**0.5 if self.word_scale is None else float(self.word_scale)


AutoConfig.register(PosAttnSeq2SeqConfig.model_type, PosAttnSeq2SeqConfig, exist_ok=True)
