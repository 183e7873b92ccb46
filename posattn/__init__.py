"""posattn: positional encoding for Transformers, built around TUPE and DIET."""

from . import execution
from .attention import MultiHeadAttention
from .encodings import ENCODINGS, LayerTerms, ModelDims, PositionalEncoding, build_encoding
from .errors import PosAttnConfigError
from .models import (
    PosAttnForMaskedLM,
    PosAttnForSequenceClassification,
    PosAttnModel,
    PosAttnPreTrainedModel,
)
from .models.causal_lm import PosAttnForCausalLM
from .models.config import PosAttnConfig
from .models.config_names import UnknownSettingWarning
from .models.encoder import Encoder
from .models.seq2seq import PosAttnForSeq2SeqLM, PosAttnSeq2SeqConfig, PosAttnSeq2SeqModel

__version__ = "0.1.1"

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
    "PosAttnForSeq2SeqLM",
    "PosAttnForSequenceClassification",
    "PosAttnModel",
    "PosAttnPreTrainedModel",
    "PosAttnSeq2SeqConfig",
    "PosAttnSeq2SeqModel",
    "PositionalEncoding",
    "UnknownSettingWarning",
    "build_encoding",
    "execution",
]
