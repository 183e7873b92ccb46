"""`PosAttnForMaskedLM`: masked-LM pretraining (TUPE Sec. 4.1, DIET Sec. 4) with BERT's head."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import AutoModelForMaskedLM
from transformers.modeling_outputs import MaskedLMOutput

from ..tracing import traced
from .config import PosAttnConfig
from .input_tensors import integer_labels, require_label_shape
from .pretrained import PosAttnModel, PosAttnPreTrainedModel, cross_entropy


class MaskedLMHead(nn.Module):
    """BERT's MLM head: dense -> GELU -> LayerNorm -> decoder (tied to the word embeddings by
    the model that owns it)."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.decoder(self.norm(F.gelu(self.dense(hidden))))


class PosAttnForMaskedLM(PosAttnPreTrainedModel):
    """BERT's MLM head, decoder tied to the word embeddings; labels of -100 are ignored.

    Without labels, logits cover every position ([B, n, vocab]: fill-mask, inspection). With
    labels, the head runs on the labelled positions only and logits are [num_labelled, vocab]
    in row-major order: the vocabulary projection dominates a small model's step, and 85% of
    it would serve no loss term (fairseq's masked_tokens does the same). Under torch.compile
    and torch.export, whose graphs need shapes that do not depend on the labels' values, the
    head runs on every position (logits [B, n, vocab]) and the loss is the same.
    """

    _tied_weights_keys = {  # noqa: RUF012 - transformers reads this class attribute
        "head.decoder.weight": "posattn.encoder.embeddings.word.weight"
    }

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__(config)
        self.posattn = PosAttnModel(config)
        self.head = MaskedLMHead(config)
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, MaskedLMHead):
            nn.init.zeros_(module.decoder.bias)

    def get_output_embeddings(self) -> nn.Linear:
        return self.head.decoder

    def set_output_embeddings(self, embeddings: nn.Linear) -> None:
        self.head.decoder = embeddings

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
    ) -> MaskedLMOutput | tuple:
        """With labels, the logits are those of the labelled positions only ([N, vocab], the
        loss's rows): the vocabulary projection of unlabelled positions would be wasted."""
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
        hidden, loss = base.last_hidden_state, None
        if labels is not None:
            labels = integer_labels("labels", labels)
            require_label_shape("labels", labels, hidden.shape[:2])
        if labels is None:
            logits = self.head(hidden)
        elif traced():
            # Selecting the labelled rows gives a data-dependent shape (a graph break, no
            # export; vmap cannot batch it): traced, the head runs on every position; the
            # loss is the same.
            logits = self.head(hidden)
            loss = cross_entropy(logits, labels, num_items_in_batch)
        else:
            labelled = labels != -100
            logits = self.head(hidden[labelled])
            loss = cross_entropy(logits, labels[labelled], num_items_in_batch)
        output = MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=base.hidden_states, attentions=base.attentions
        )
        return self.returned(output, return_dict)


AutoModelForMaskedLM.register(PosAttnConfig, PosAttnForMaskedLM, exist_ok=True)
