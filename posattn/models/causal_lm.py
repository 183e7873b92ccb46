"""A decoder-only causal language model on the same attention core, with a key/value cache
and transformers' `generate`."""

from __future__ import annotations

from torch import Tensor, nn
from transformers import AutoModelForCausalLM, DynamicCache, GenerationMixin
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..errors import require
from .config import PosAttnConfig
from .input_tensors import integer_labels, require_label_shape
from .pretrained import PosAttnModel, PosAttnPreTrainedModel, cross_entropy


class PosAttnForCausalLM(PosAttnPreTrainedModel, GenerationMixin):
    """Next-token prediction: p(x_t | x_<t) = softmax(h_t E^T + b), with h_t the causal stack's
    output at position t and E the word embeddings (tied).

    The config must say causal=True: every encoding that supports causal attention works
    (`posattn list`; xpos and fire are causal-only, Linformer's sequence projection is not
    causal). Labels are the input ids themselves (-100 ignored): the loss compares the logits
    at t with the label at t + 1, as transformers' causal LMs do. `shift_labels` are targets
    already aligned with the logits (the label of position t + 1 at t, what the Trainer hands
    a model under sequence parallelism, where the shift must happen before sharding): given,
    the loss compares the logits at t with shift_labels at t and `labels` is not read.

    Incremental decoding: pass `past_key_values` (a transformers `DynamicCache`, created when
    `use_cache=True` and none is given) and only the new input ids; `attention_mask`, when
    given, covers the cached and the new tokens. The logits equal the full forward's
    (`PositionalEncoding.window_terms`). `position_ids` (`posattn.models.positions`) place the
    tokens: `generate` passes the attention mask's cumsum, so a left-padded row's first real
    token is at position 0 and its logits equal the unpadded row's; without them token t is at
    position t. Segments inside attention (DIET Eq. 2) decode with the full forward only.
    """

    _tied_weights_keys = {  # noqa: RUF012 - transformers reads this class attribute
        "lm_head.weight": "posattn.encoder.embeddings.word.weight"
    }
    # Saved before the stack moved under `.posattn.encoder` (as every head nests it).
    legacy_key_mapping = {  # noqa: RUF012
        r"^posattn\.(embeddings|encoding|segment_bias|layers|final_norm)\.": r"posattn.encoder.\1."
    }

    def __init__(self, config: PosAttnConfig) -> None:
        require(
            config.causal,
            "causal",
            config.causal,
            "True: PosAttnForCausalLM predicts the next token, so attention must be causal",
        )
        super().__init__(config)
        self.posattn = PosAttnModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, embeddings: nn.Linear) -> None:
        self.lm_head = embeddings

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        past_key_values: DynamicCache | None = None,
        use_cache: bool | None = None,
        labels: Tensor | None = None,
        shift_labels: Tensor | None = None,
        num_items_in_batch: int | Tensor | None = None,
        logits_to_keep: int = 0,
        return_dict: bool | None = None,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        position_ids: Tensor | None = None,
    ) -> CausalLMOutputWithPast | tuple:
        """logits_to_keep: 0 for every position, else the logits of the last that many (what
        `generate` asks for: the vocabulary projection of earlier positions is wasted).
        shift_labels: labels already aligned with the logits (label t is the target of the
        logits at t; -100 ignored), as transformers' ForCausalLMLoss takes them (packed or
        sequence-parallel batches shift before splitting); `labels` are then not used.
        use_cache: True makes a `DynamicCache` when none is given (`generate` passes it, from
        config.use_cache); None or False makes none, so that a plain forward (training,
        evaluation) never pays for one."""
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        base = self.posattn(
            input_ids,
            attention_mask,
            token_type_ids,
            past_key_values,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            position_ids=position_ids,
        )
        hidden = base.last_hidden_state
        logits = self.lm_head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)
        loss = None
        if shift_labels is not None:
            shift_labels = integer_labels("shift_labels", shift_labels)
            require_label_shape("shift_labels", shift_labels, logits.shape[:2])
            loss = cross_entropy(logits, shift_labels, num_items_in_batch)
        elif labels is not None:
            labels = integer_labels("labels", labels)
            require_label_shape("labels", labels, logits.shape[:2])
            loss = cross_entropy(logits[:, :-1], labels[:, 1:], num_items_in_batch)
        output = CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=past_key_values,
            hidden_states=base.hidden_states,
            attentions=base.attentions,
        )
        return self.returned(output, return_dict)


AutoModelForCausalLM.register(PosAttnConfig, PosAttnForCausalLM, exist_ok=True)
