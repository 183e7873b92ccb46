"""posattn: positional encoding for Transformers, built around TUPE and DIET."""

from .attention import MultiHeadAttention
from .causal_lm import PosAttnForCausalLM
from .config import PosAttnConfig
from .encodings import ENCODINGS, LayerTerms, ModelDims, PositionalEncoding, build_encoding
from .errors import PosAttnConfigError
from .model import Encoder
from .modeling import (
    PosAttnForMaskedLM,
    PosAttnForSequenceClassification,
    PosAttnModel,
    PosAttnPreTrainedModel,
)

__version__ = "0.1.0"

__all__ = [
    "ENCODINGS",
    "Encoder",
    "LayerTerms",
    "ModelDims",
    "MultiHeadAttention",
    "PosAttnConfig",
    "PosAttnConfigError",
    "PosAttnForCausalLM",
    "PosAttnForMaskedLM",
    "PosAttnForSequenceClassification",
    "PosAttnModel",
    "PosAttnPreTrainedModel",
    "PositionalEncoding",
    "build_encoding",
]
