"""posattn models in the transformers ecosystem: `save_pretrained` / `from_pretrained`, the
Auto classes, the `Trainer` and the fill-mask pipeline work with every encoding."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    PreTrainedModel,
)
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    SequenceClassifierOutput,
)

from .config import PosAttnConfig
from .model import ClassificationHead, Encoder, MaskedLMHead, init_weights


def cross_entropy(logits: Tensor, labels: Tensor, num_items_in_batch=None) -> Tensor:
    """Mean cross-entropy over labelled items (label -100 is ignored). Given the Trainer's
    count of labelled items in the whole (accumulated, all-process) batch, the sum is divided
    by it instead, so that gradient accumulation and DDP average over the same items."""
    flat_logits, flat_labels = logits.flatten(0, -2), labels.flatten()
    if num_items_in_batch is None:
        return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)
    total = F.cross_entropy(flat_logits, flat_labels, ignore_index=-100, reduction="sum")
    return total / num_items_in_batch


class PosAttnPreTrainedModel(PreTrainedModel):
    config_class = PosAttnConfig
    config: PosAttnConfig
    base_model_prefix = "posattn"
    main_input_name = "input_ids"

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        init_weights(module, self.config.init_std)
        if isinstance(module, MaskedLMHead):
            module.decoder.bias.zero_()


class PosAttnModel(PosAttnPreTrainedModel):
    """The encoder alone: token ids -> hidden states."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__(config)
        self.encoder = Encoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.word

    def set_input_embeddings(self, embeddings: nn.Embedding) -> None:
        self.encoder.embeddings.word = embeddings

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        hidden = self.encoder(input_ids, attention_mask, token_type_ids)
        return BaseModelOutput(last_hidden_state=hidden)


class PosAttnForMaskedLM(PosAttnPreTrainedModel):
    """Masked-LM pretraining (TUPE Sec. 4.1, DIET Sec. 4): BERT's head, decoder tied to the
    word embeddings; labels of -100 are ignored.

    Without labels, logits cover every position ([B, n, vocab]: fill-mask, inspection). With
    labels, the head runs on the labelled positions only and logits are [num_labelled, vocab]
    in row-major order: the vocabulary projection dominates a small model's step, and 85% of
    it would serve no loss term (fairseq's masked_tokens does the same).
    """

    _tied_weights_keys = {  # noqa: RUF012 - transformers reads this class attribute
        "head.decoder.weight": "posattn.encoder.embeddings.word.weight"
    }

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__(config)
        self.posattn = PosAttnModel(config)
        self.head = MaskedLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.head.decoder

    def set_output_embeddings(self, embeddings: nn.Linear) -> None:
        self.head.decoder = embeddings

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | Tensor | None = None,
        **kwargs,
    ) -> MaskedLMOutput:
        hidden = self.posattn(input_ids, attention_mask, token_type_ids).last_hidden_state
        if labels is None:
            return MaskedLMOutput(logits=self.head(hidden))
        labelled = labels != -100
        logits = self.head(hidden[labelled])
        loss = cross_entropy(logits, labels[labelled], num_items_in_batch)
        return MaskedLMOutput(loss=loss, logits=logits)


class PosAttnForSequenceClassification(PosAttnPreTrainedModel):
    """Fine-tuning on the first token (BERT's pooler); cross-entropy, or MSE for one label."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__(config)
        self.posattn = PosAttnModel(config)
        self.head = ClassificationHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        hidden = self.posattn(input_ids, attention_mask, token_type_ids).last_hidden_state
        logits = self.head(hidden)
        loss = None
        if labels is not None:
            if self.config.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype), reduction="sum")
                loss = loss / (num_items_in_batch or labels.numel())
            else:
                loss = cross_entropy(logits, labels, num_items_in_batch)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def register_auto_classes() -> None:
    """Make AutoConfig / AutoModel* resolve model_type "posattn" to these classes."""
    AutoConfig.register(PosAttnConfig.model_type, PosAttnConfig, exist_ok=True)
    for auto, model in (
        (AutoModel, PosAttnModel),
        (AutoModelForMaskedLM, PosAttnForMaskedLM),
        (AutoModelForSequenceClassification, PosAttnForSequenceClassification),
    ):
        auto.register(PosAttnConfig, model, exist_ok=True)


register_auto_classes()
