"""posattn: positional encoding for Transformers, built around TUPE and DIET."""

from .attention import MultiHeadAttention
from .config import EncoderConfig
from .encodings import ENCODINGS, LayerTerms, ModelDims, PositionalEncoding, build_encoding
from .errors import PosAttnConfigError
from .model import Encoder, EncoderForMaskedLM, EncoderForSequenceClassification

__version__ = "0.1.0"

__all__ = [
    "ENCODINGS",
    "Encoder",
    "EncoderConfig",
    "EncoderForMaskedLM",
    "EncoderForSequenceClassification",
    "LayerTerms",
    "ModelDims",
    "MultiHeadAttention",
    "PosAttnConfigError",
    "PositionalEncoding",
    "build_encoding",
]
