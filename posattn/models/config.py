"""The model configuration: a transformers `PreTrainedConfig`, so it round-trips through
`save_pretrained` / `from_pretrained` and `AutoConfig`."""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoConfig, PreTrainedConfig

from ..encodings import ModelDims, build_encoding, encoding_class
from ..errors import (
    invalid,
    is_bool,
    is_integer,
    is_real,
    require,
    require_choice,
    require_positive_int,
    require_probability,
)
from ..kernels import get_kernel, kernel_names
from ..kernels.table_bias import refusal, terms_refusal
from .attn_implementation import attn_implementation_of, kernel_of
from .config_names import BERT_ALIASES, check_unknown_settings
from .segments import SEGMENT_MODES

# The special tokens a config names; each None or an id inside the vocabulary.
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
# transformers' losses of a classification head (`classification.problem_type`), None to infer.
PROBLEM_TYPES = (None, "regression", "single_label_classification", "multi_label_classification")


def require_token_id(name: str, value: Any, vocab_size: int) -> None:
    """None, or a token id in [0, vocab_size) (eos may be a list of them, as in generate)."""
    ids = value if isinstance(value, (list, tuple)) else [value]
    require(
        value is None or all(is_integer(i) and 0 <= i < vocab_size for i in ids),
        name,
        value,
        f"None or a token id in [0, {vocab_size}) (vocab_size={vocab_size})",
    )


def require_word_scale(value: Any) -> None:
    """None (the model's own scale of its word vectors) or a number > 0 (`word_scale`)."""
    require(
        value is None or (is_real(value) and value > 0),
        "word_scale",
        value,
        "None (the model's own: 1, sqrt(d_model) in the encoder-decoder) or a number > 0",
    )


class PosAttnConfig(PreTrainedConfig):
    """A BERT-style Transformer with a pluggable positional encoding.

    encoding / encoding_options: a registry name (`posattn list`) and its options.
    segments: "input" (BERT token-type embeddings), "attention" (DIET Eq. 2) or "none".
    norm: "post" (BERT, TUPE) or "pre" LayerNorm.
    kernel: "auto" (SDPA; for a large learned bias FlexAttention on GPU, the recomputing
        backward of "sdpa-lowmem" on CPU), "sdpa",
        "sdpa-lowmem", "flex", "triton" (a relative bias read from its table inside the
        kernel; table-described, low-rank or no bias only)
        or "eager" (the reference); transformers' `attn_implementation` sets it and
        `_attn_implementation` reports it under transformers' names
        (posattn.models.attn_implementation).
    causal: causal self-attention (a decoder); encoders are bidirectional.
    num_labels and problem_type (transformers attributes) size the classification head and
    choose its loss (regression, single_label_classification, multi_label_classification).
    pad/bos/eos_token_id: those of posattn's tokenizers ([PAD] 0, [CLS] 2, [SEP] 3; <pad>,
    <s>, </s> in translation). use_cache: what `generate` asks the causal LM for.
    tie_word_embeddings: the output projection shares the word embeddings (and, in the
    encoder-decoder, the decoder's input embeddings too).
    word_scale: what the word vectors are multiplied by before positions and segments are
        added; None is the family's own (`input_word_scale`): 1 here, as BERT, and
        sqrt(d_model) in the encoder-decoder (Vaswani Sec. 3.4). With input sinusoids (RMS
        0.71 an entry) and words drawn N(0, init_std = 0.02), positions outweigh words about
        35 to 1 at the input; 1 / init_std gives the words unit RMS.
    """

    model_type = "posattn"
    # transformers reads this class attribute: BERT's names of posattn's settings.
    attribute_map = BERT_ALIASES

    vocab_size: int = 30522
    d_model: int = 768
    num_layers: int = 12
    num_heads: int = 12
    ffn_dim: int = 3072
    max_len: int = 512
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.1
    norm: str = "post"
    layer_norm_eps: float = 1e-12
    encoding: str = "learned"
    encoding_options: dict[str, Any] | None = None
    segments: str = "input"
    num_segments: int = 2
    kernel: str = "auto"
    causal: bool = False
    init_std: float = 0.02
    pad_token_id: int | None = 0
    # posattn's tokenizers put [CLS] / <s> at id 2 and [SEP] / </s> at id 3 (`posattn.data`).
    bos_token_id: int | None = 2
    eos_token_id: int | None = 3
    use_cache: bool = True
    tie_word_embeddings: bool = True
    word_scale: float | int | None = None

    def __post_init__(self, **kwargs) -> None:
        check_unknown_settings(type(self), kwargs)
        super().__post_init__(**kwargs)
        self.encoding_options = dict(self.encoding_options or {})
        # A string is not a switch: causal="false" built a causal model.
        for name in ("causal", "use_cache", "tie_word_embeddings"):
            value = getattr(self, name)
            require(is_bool(value), name, value, "True or False")
        require_choice("problem_type", self.problem_type, PROBLEM_TYPES)
        for name in ("vocab_size", "ffn_dim", "num_segments"):
            require_positive_int(name, getattr(self, name))
        for name in ("dropout", "attention_dropout"):
            require_probability(name, getattr(self, name))
        require(
            is_real(self.init_std) and self.init_std >= 0,
            "init_std",
            self.init_std,
            "a standard deviation >= 0",
        )
        require_word_scale(self.word_scale)
        require(
            is_real(self.layer_norm_eps) and self.layer_norm_eps > 0,
            "layer_norm_eps",
            self.layer_norm_eps,
            "a number > 0",
        )
        for name in TOKEN_IDS:
            require_token_id(name, getattr(self, name, None), self.vocab_size)
        require_choice("norm", self.norm, ("post", "pre"))
        require_choice("segments", self.segments, SEGMENT_MODES)
        require_choice("kernel", self.kernel, kernel_names())
        if self.segments == "attention" and encoding_class(self.encoding).projects_keys():
            raise invalid(
                "segments",
                self.segments,
                f"'input' or 'none' with encoding {self.encoding!r}: its keys are projected "
                "along the sequence, so no (query segment, key segment) pairs exist",
            )
        # Building the encoding on the meta device checks its options against the model's sizes
        # (head dimension, causality, table lengths) now rather than at the first forward.
        with torch.device("meta"):
            build_encoding(self.encoding, self.dims, self.encoding_options)
        self.check_kernel(self.kernel)

    def check_kernel(self, kernel: str) -> None:
        """Refuse, naming the encoding and the reason, a kernel that reads the bias from its
        table (kernel="triton") where this model's layers have a bias it cannot read: the
        encoding's terms are built on the meta device (no computation) and inspected."""
        if not getattr(get_kernel(kernel), "reads_bias_tables", False):
            return
        with torch.device("meta"):
            encoding = build_encoding(self.encoding, self.dims, self.encoding_options)
            terms = encoding.layer_terms(self.max_len, torch.device("meta"), torch.float32)
        for layer_terms in terms:
            reason = terms_refusal(layer_terms)
            if reason is not None:
                raise refusal(kernel, f"encoding {self.encoding!r}: {reason}")

    def input_word_scale(self) -> float:
        """What the word vectors are multiplied by: word_scale, or 1 (BERT) where None."""
        return 1.0 if self.word_scale is None else float(self.word_scale)

    @property
    def output_attentions(self) -> bool:
        return self._output_attentions

    @output_attentions.setter
    def output_attentions(self, value: bool) -> None:
        # transformers refuses True unless the implementation is "eager"; every posattn kernel
        # runs the eager path for a forward that returns probabilities (MultiHeadAttention),
        # so the kernel stays what it was and True is always allowed.
        self._output_attentions = bool(value)

    @property
    def _attn_implementation_internal(self) -> str:
        """transformers' name of `kernel`: what the attention modules run."""
        return attn_implementation_of(self.kernel)

    @_attn_implementation_internal.setter
    def _attn_implementation_internal(self, value: str | None) -> None:
        if value is not None:
            self.kernel = kernel_of(value)

    @property
    def dims(self) -> ModelDims:
        return ModelDims(
            self.d_model, self.num_heads, self.num_layers, self.max_len, self.init_std, self.causal
        )


AutoConfig.register(PosAttnConfig.model_type, PosAttnConfig, exist_ok=True)
