"""The transformers base of every posattn model: the shared `PreTrainedModel` and
`PosAttnModel`, the encoder stack that every single-stack head holds as `.posattn`.

One nesting for every head: `head.posattn.encoder` is the `Encoder` (embeddings, encoding,
layers) of `PosAttnForMaskedLM`, `PosAttnForSequenceClassification` and `PosAttnForCausalLM`
alike; `PosAttnForSeq2SeqLM` holds its two stacks as `.encoder` and `.decoder`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import ModelOutput

from ..attention import MultiHeadAttention
from ..errors import invalid
from ..tracing import under_func_transform
from .attn_implementation import attn_implementation_of, kernel_of
from .config import PosAttnConfig
from .encoder import Encoder, WordEmbedding, init_weights
from .outputs import StackRecord


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
    """`legacy_key_mapping`: regex -> replacement of parameter names, for checkpoints saved
    under an earlier nesting; applied on load only, so a re-saved model has today's names."""

    config_class = PosAttnConfig
    config: PosAttnConfig
    base_model_prefix = "posattn"
    main_input_name = "input_ids"
    legacy_key_mapping: dict[str, str] | None = None
    # The heads take the Trainer's num_items_in_batch (it looks for **kwargs otherwise, and
    # posattn's forwards take no unknown keyword: a misspelt argument is an error).
    accepts_loss_kwargs = True

    # `gradient_checkpointing_enable()` checkpoints every EncoderLayer / DecoderLayer.
    supports_gradient_checkpointing = True
    # The repeated blocks: device_map / FSDP auto-wrap never split one across devices.
    _no_split_modules = ["EncoderLayer", "DecoderLayer"]  # noqa: RUF012

    def activation_checkpointing_enable(
        self, activation_checkpointing_kwargs=None, every_n_layers: int = 1, offload: bool = False
    ):
        """transformers' switch (also reached by `gradient_checkpointing_enable`), with
        torch's non-reentrant checkpoint only: a layer receives the positional terms its
        layers share inside a `LayerTerms`, through which reentrant checkpointing cannot
        differentiate (it would backward through the shared terms once per layer)."""
        if (activation_checkpointing_kwargs or {}).get("use_reentrant", False):
            raise invalid(
                "use_reentrant",
                True,
                "False (transformers' default): positional terms shared by the layers need "
                "non-reentrant checkpointing",
            )
        super().activation_checkpointing_enable(
            activation_checkpointing_kwargs, every_n_layers=every_n_layers, offload=offload
        )

    def enable_input_require_grads(self) -> None:
        """transformers' hook on the input embeddings that makes their output require grad
        (for adapters over frozen embeddings; `gradient_checkpointing_enable` adds it too),
        inert inside a torch.func transform: torch.func refuses `requires_grad_()` there and
        takes its gradients without it, so a model with checkpointing enabled still runs
        under vmap or jvp in eval mode. `disable_input_require_grads` removes it."""

        def inputs_require_grads(module, inputs, output) -> None:
            if not under_func_transform():
                output.requires_grad_(True)

        handle = self.get_input_embeddings().register_forward_hook(inputs_require_grads)
        self._require_grads_hooks = [handle]
        self._require_grads_hook = handle  # the name transformers 4 removes

    def _apply(self, fn, recurse: bool = True):
        """nn.Module's conversion (`to`, `cuda`, `half`, ...), the tied weights kept tied.
        A conversion torch cannot make in place (`.to("meta")`, torch's recipe for the base
        of a vmap-ed ensemble) gives each module a new Parameter and so unties the output
        embeddings; `functional_call` would then leave the output weight on meta, and
        torch's linear of a CPU input by a meta weight returns uninitialised memory."""
        super()._apply(fn, recurse)
        tied = self.get_expanded_tied_weights_keys(all_submodels=False)
        if any(self.get_parameter(t) is not self.get_parameter(s) for t, s in tied.items()):
            self.tie_weights()
        return self

    # attn_implementation "sdpa" and "flex_attention" run posattn's SDPA and FlexAttention
    # kernels (posattn.models.attn_implementation maps every name onto a kernel).
    _supports_sdpa = True
    _supports_flex_attn = True

    def _check_and_adjust_attn_implementation(
        self, attn_implementation: str | None, is_init_check: bool = False, **kwargs
    ) -> str:
        """The transformers name of the posattn kernel `attn_implementation` selects (None:
        the config's kernel); an unknown name is a clear error."""
        kernel = (
            self.config.kernel if attn_implementation is None else kernel_of(attn_implementation)
        )
        if kernel == "flex":
            self._flex_attn_can_dispatch(is_init_check)
        return attn_implementation_of(kernel)

    def set_attn_implementation(self, attn_implementation: str | dict, **kwargs) -> None:
        """transformers' switch, applied to every attention module (posattn's kernels under
        transformers' names: posattn.models.attn_implementation)."""
        super().set_attn_implementation(attn_implementation, **kwargs)
        kernel = self.config.kernel
        for module in self.modules():
            if isinstance(module, Encoder):
                module.config.kernel = kernel  # an encoder-decoder's stacks have their own
            elif isinstance(module, MultiHeadAttention):
                module.set_kernel(kernel)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        init_weights(module, self.config.init_std)

    def record_for(self, output_attentions, output_hidden_states) -> StackRecord:
        """What a forward gathers: the arguments, or the config's defaults when None."""
        return StackRecord(
            hidden=self.config.output_hidden_states
            if output_hidden_states is None
            else output_hidden_states,
            attention=self.config.output_attentions
            if output_attentions is None
            else output_attentions,
        )

    def returned(self, output: ModelOutput, return_dict: bool | None):
        """The output object, or with return_dict=False (argument, else the config's) its
        tuple in transformers' order, the fields that are None left out."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        if cls.legacy_key_mapping is None or "key_mapping" in kwargs:
            return super().from_pretrained(*args, **kwargs)
        loaded = super().from_pretrained(*args, key_mapping=cls.legacy_key_mapping, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        legacy = set(cls.legacy_key_mapping)
        model._weight_conversions = [
            conversion
            for conversion in getattr(model, "_weight_conversions", [])
            if not legacy & set(getattr(conversion, "source_patterns", ()))
        ]
        return loaded


class PosAttnModel(PosAttnPreTrainedModel):
    """The encoder stack alone: token ids -> hidden states (causal with causal=True)."""

    accepts_loss_kwargs = False  # no loss here

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__(config)
        self.encoder = Encoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.word

    def set_input_embeddings(self, embeddings: nn.Embedding) -> None:
        """`embeddings` scaled as the model's words are (`WordEmbedding.adopt`)."""
        self.encoder.embeddings.word = WordEmbedding.adopt(
            embeddings, self.config.input_word_scale()
        )

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        past_key_values=None,
        inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        position_ids: Tensor | None = None,
    ) -> BaseModelOutputWithPast | tuple:
        """past_key_values: a transformers `DynamicCache` for incremental decoding of a causal
        stack (see `Encoder.forward`). position_ids: [B, n] positions of the tokens
        (`posattn.models.positions`: packed documents, left padding, custom positions).
        inputs_embeds: [B, n, d_model] in place of input_ids.
        output_attentions / output_hidden_states: per layer the attention probabilities
        [B, H, n, n] (the eager path runs for that call) / the embeddings output and every
        layer's output (`StackRecord`)."""
        record = self.record_for(output_attentions, output_hidden_states)
        hidden = self.encoder(
            input_ids,
            attention_mask,
            token_type_ids,
            past_key_values,
            position_ids,
            record=record,
            inputs_embeds=inputs_embeds,
        )
        output = BaseModelOutputWithPast(
            last_hidden_state=hidden,
            past_key_values=past_key_values,
            hidden_states=record.outputs("hidden_states"),
            attentions=record.outputs("attentions"),
        )
        return self.returned(output, return_dict)
