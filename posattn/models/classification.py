"""`PosAttnForSequenceClassification`: fine-tuning on the first token (BERT's pooler)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import AutoModelForSequenceClassification
from transformers.modeling_outputs import SequenceClassifierOutput

from .config import PosAttnConfig
from .pretrained import PosAttnModel, PosAttnPreTrainedModel, cross_entropy


class ClassificationHead(nn.Module):
    """BERT's classifier on the first token: pooler (dense + tanh) -> dropout -> linear."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__()
        self.pooler = nn.Linear(config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.classifier(self.dropout(torch.tanh(self.pooler(hidden[:, 0]))))


class PosAttnForSequenceClassification(PosAttnPreTrainedModel):
    """Cross-entropy over num_labels classes, or MSE for one label (regression)."""

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
        position_ids: Tensor | None = None,
    ) -> SequenceClassifierOutput:
        hidden = self.posattn(
            input_ids, attention_mask, token_type_ids, position_ids=position_ids
        ).last_hidden_state
        logits = self.head(hidden)
        loss = None
        if labels is not None:
            if self.config.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype), reduction="sum")
                loss = loss / (num_items_in_batch or labels.numel())
            else:
                loss = cross_entropy(logits, labels, num_items_in_batch)
        return SequenceClassifierOutput(loss=loss, logits=logits)


AutoModelForSequenceClassification.register(
    PosAttnConfig, PosAttnForSequenceClassification, exist_ok=True
)
