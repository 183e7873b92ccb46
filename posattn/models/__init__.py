"""posattn's transformers models: one config, one encoder stack, the heads on top of it.
Importing this package registers every model with the Auto classes."""

from transformers import AutoModel

from .attn_implementation import register_posattn_kernels
from .causal_lm import PosAttnForCausalLM
from .classification import PosAttnForSequenceClassification
from .config import PosAttnConfig
from .encoder import Encoder
from .masked_lm import PosAttnForMaskedLM
from .pretrained import PosAttnModel, PosAttnPreTrainedModel
from .seq2seq import PosAttnForSeq2SeqLM, PosAttnSeq2SeqConfig, PosAttnSeq2SeqModel

AutoModel.register(PosAttnConfig, PosAttnModel, exist_ok=True)
register_posattn_kernels()  # "posattn-auto", ... for transformers' attn_implementation

__all__ = [
    "Encoder",
    "PosAttnConfig",
    "PosAttnForCausalLM",
    "PosAttnForMaskedLM",
    "PosAttnForSeq2SeqLM",
    "PosAttnForSequenceClassification",
    "PosAttnModel",
    "PosAttnPreTrainedModel",
    "PosAttnSeq2SeqConfig",
    "PosAttnSeq2SeqModel",
]
