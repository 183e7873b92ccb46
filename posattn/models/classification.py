"""`PosAttnForSequenceClassification`: fine-tuning on the first token (BERT's pooler)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import AutoModelForSequenceClassification
from transformers.modeling_outputs import SequenceClassifierOutput

from ..errors import require, require_positive_int
from .config import PosAttnConfig
from .input_tensors import integer_labels
from .pretrained import PosAttnModel, PosAttnPreTrainedModel, cross_entropy


class ClassificationHead(nn.Module):
    """BERT's classifier on the first token: pooler (dense + tanh) -> dropout -> linear."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__()
        require_positive_int("num_labels", config.num_labels)
        self.pooler = nn.Linear(config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.classifier(self.dropout(torch.tanh(self.pooler(hidden[:, 0]))))


def problem_type(config: PosAttnConfig, labels: Tensor) -> str:
    """config.problem_type, or as transformers' BERT infers it when None: regression for one
    label, single-label classification for integer labels, multi-label otherwise."""
    if config.problem_type is not None:
        return config.problem_type
    if config.num_labels == 1:
        return "regression"
    if labels.dtype in (torch.long, torch.int):
        return "single_label_classification"
    return "multi_label_classification"


def classification_loss(config, logits: Tensor, labels: Tensor, num_items_in_batch=None):
    """BertForSequenceClassification's losses: MSE (regression), cross-entropy (single label,
    -100 ignored), BCE with logits on float 0/1 targets [B, num_labels] (multi-label). Summed
    and divided by the Trainer's item count when given, else the mean."""
    kind = problem_type(config, labels)
    batch, width = logits.shape
    # One class index an example, else one target a logit: a wrong count was torch's
    # batch-size error inside the loss, or (regression) a silently broadcast difference.
    count = batch if kind == "single_label_classification" else batch * width
    require(
        labels.numel() == count and labels.shape[0] == batch,
        "labels.shape",
        tuple(labels.shape),
        f"{count} labels for {kind} of logits {tuple(logits.shape)}: "
        + ("[batch] " if count == batch else "[batch, num_labels] ")
        + ("class indices" if kind == "single_label_classification" else "targets"),
    )
    if kind == "single_label_classification":
        return cross_entropy(logits, integer_labels("labels", labels), num_items_in_batch)
    if kind == "regression":
        if config.num_labels == 1:
            logits, labels = logits.squeeze(-1), labels.reshape(logits.shape[0])
        total = F.mse_loss(logits, labels.to(logits.dtype), reduction="sum")
    else:
        total = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="sum")
    return total / (num_items_in_batch or labels.numel())


class PosAttnForSequenceClassification(PosAttnPreTrainedModel):
    """Classification or regression on the first token; `config.problem_type` chooses the loss
    as in transformers (`classification_loss`)."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__(config)
        self.posattn = PosAttnModel(config)
        self.head = ClassificationHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        position_ids: Tensor | None = None,
    ) -> SequenceClassifierOutput | tuple:
        base = self.posattn(
            input_ids,
            attention_mask,
            token_type_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            position_ids=position_ids,
        )
        logits = self.head(base.last_hidden_state)
        loss = None
        if labels is not None:
            loss = classification_loss(self.config, logits, labels, num_items_in_batch)
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=base.hidden_states, attentions=base.attentions
        )
        return self.returned(output, return_dict)


AutoModelForSequenceClassification.register(
    PosAttnConfig, PosAttnForSequenceClassification, exist_ok=True
)
