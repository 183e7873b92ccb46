"""`PosAttnForSeq2SeqLM`: an encoder-decoder Transformer for translation (Vaswani et al. 2017;
DIET Sec. 4.3 changes the positions of every encoder and decoder self-attention layer): the
base model `PosAttnSeq2SeqModel` (`.model`: encoder, decoder, word embeddings;
seq2seq_model.py) and an output projection.

    output:   logits = h W_e^T with W_e the word embedding, one vocabulary for source and
              target (tied: encoder input, decoder input and output projection share it;
              tie_word_embeddings=False gives each of the three its own matrix)
    loss:     token cross-entropy over target positions (label -100 ignored), with label
              smoothing eps in training: (1 - eps) * NLL + eps * mean_v(-log p_v) (Szegedy et
              al. 2016; Vaswani Sec. 5.4); evaluation reports the plain NLL.

Decoder inputs are the labels shifted right behind `decoder_start_token_id` (<s>).
Checkpoints saved before the base model existed (stacks at the top level) load unchanged
(`legacy_key_mapping`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import AutoModelForSeq2SeqLM, GenerationMixin
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from ..errors import require
from ..initialization import normal_
from .decoder import Decoder
from .encoder import Encoder
from .input_tensors import integer_labels, require_label_shape
from .pretrained import PosAttnPreTrainedModel
from .seq2seq_config import PosAttnSeq2SeqConfig
from .seq2seq_generation import EncoderForGenerate, new_generation_cache
from .seq2seq_model import PosAttnSeq2SeqModel

__all__ = ["PosAttnForSeq2SeqLM", "PosAttnSeq2SeqConfig", "PosAttnSeq2SeqModel"]


class PosAttnForSeq2SeqLM(PosAttnPreTrainedModel, GenerationMixin):
    """The encoder-decoder, with transformers' `generate` (greedy, sampling, HF beam search;
    see seq2seq_generation.py for the cache plumbing). The paper's decoding (GNMT length
    penalty, DIET Sec. 4.3) is posattn.lab.translation's beam search (docs/translation.md,
    "Decoding"). `.encoder` and `.decoder` are the base model's stacks."""

    config_class = PosAttnSeq2SeqConfig
    config: PosAttnSeq2SeqConfig
    base_model_prefix = "model"
    _tied_weights_keys = {  # noqa: RUF012 - transformers reads this class attribute
        "model.decoder.embeddings.word.weight": "model.encoder.embeddings.word.weight",
        "lm_head.weight": "model.encoder.embeddings.word.weight",
    }
    # Saved before the stacks moved under `.model` (the base model).
    legacy_key_mapping = {r"^(encoder|decoder)\.": r"model.\1."}  # noqa: RUF012

    def __init__(self, config: PosAttnSeq2SeqConfig) -> None:
        super().__init__(config)
        self.model = PosAttnSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    @property
    def encoder(self) -> Encoder:
        return self.model.encoder

    @property
    def decoder(self) -> Decoder:
        return self.model.decoder

    def word_matrices(self) -> tuple[nn.Module, ...]:
        """The modules holding a [vocab, d_model] word matrix: one shared parameter when tied."""
        return (self.encoder.embeddings.word, self.decoder.embeddings.word, self.lm_head)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """The output projection N(0, 1/d_model) when untied (tied, it is the encoder's word
        matrix, drawn by the base model); the base model's modules by its own rule."""
        if module is not self.lm_head:
            super()._init_weights(module)
        elif not self.config.tie_word_embeddings:
            normal_(module.weight, std=self.config.d_model**-0.5)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, embeddings: nn.Embedding) -> None:
        self.model.set_input_embeddings(embeddings)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, embeddings: nn.Linear) -> None:
        self.lm_head = embeddings

    def get_encoder(self, modality: str | None = None) -> EncoderForGenerate:
        """The encoder as `generate` calls it (keyword arguments in, `BaseModelOutput` out);
        the stack itself is `.encoder`."""
        return self.model.get_encoder(modality)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        """A cache that grows to the decoder's depth, not the config's (encoder) depth."""
        wants_default = generation_config.cache_implementation in (None, "dynamic")
        if (
            wants_default
            and generation_config.use_cache is not False
            and model_kwargs.get("past_key_values") is None
        ):
            model_kwargs["past_key_values"] = new_generation_cache()
            return
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    @property
    def max_length(self) -> int:
        """The longest source, and the longest decoder input (<s> + target), a forward takes."""
        return self.config.max_len

    def prepare_decoder_input_ids_from_labels(self, labels: Tensor) -> Tensor:
        """<s> y_1 ... y_{m-1}: labels shifted right, ignored positions (-100) as padding."""
        start = torch.full_like(labels[:, :1], self.config.decoder_start_token_id)
        shifted = torch.cat([start, labels[:, :-1]], dim=1)
        return shifted.masked_fill(shifted == -100, self.config.pad_token_id)

    def encode(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        return self.encoder(input_ids, attention_mask, position_ids=position_ids)

    def decode(
        self,
        decoder_input_ids: Tensor,
        memory_kv: list[tuple[Tensor, Tensor]],
        memory_mask: Tensor | None,
        decoder_attention_mask: Tensor | None = None,
        cache=None,
        decoder_position_ids: Tensor | None = None,
    ) -> Tensor:
        """Logits [B, n_tgt, vocab] of the next token after each decoder input position; with
        a `DynamicCache` of the earlier target tokens, decoder_input_ids are the new ones."""
        hidden = self.decoder(
            decoder_input_ids,
            memory_kv,
            memory_mask,
            decoder_attention_mask,
            cache,
            decoder_position_ids,
        )
        return self.lm_head(hidden)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        decoder_input_ids: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values=None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        decoder_inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        position_ids: Tensor | None = None,
        decoder_position_ids: Tensor | None = None,
    ) -> Seq2SeqLMOutput | tuple:
        """The base model's forward (`PosAttnSeq2SeqModel.forward`: positions, cache,
        embeddings and optional outputs), then the output projection; without decoder inputs
        the labels shifted right are the decoder inputs."""
        if labels is not None:
            labels = integer_labels("labels", labels)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            require(labels is not None, "decoder_input_ids", None, "given, or labels to shift")
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        base = self.model(
            input_ids,
            attention_mask,
            decoder_input_ids,
            decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            use_cache=use_cache,
            return_dict=True,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            position_ids=position_ids,
            decoder_position_ids=decoder_position_ids,
        )
        logits = self.lm_head(base.last_hidden_state)
        loss = None
        if labels is not None:
            require_label_shape("labels", labels, logits.shape[:2])
            loss = self.loss(logits, labels, num_items_in_batch)
        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=base.past_key_values,
            decoder_hidden_states=base.decoder_hidden_states,
            decoder_attentions=base.decoder_attentions,
            cross_attentions=base.cross_attentions,
            encoder_last_hidden_state=base.encoder_last_hidden_state,
            encoder_hidden_states=base.encoder_hidden_states,
            encoder_attentions=base.encoder_attentions,
        )
        return self.returned(output, return_dict)

    def loss(self, logits: Tensor, labels: Tensor, num_items_in_batch=None) -> Tensor:
        """Label-smoothed in training, plain NLL in evaluation; summed and divided by the
        Trainer's count of target tokens in the (accumulated, all-process) batch when given."""
        smoothing = self.config.label_smoothing if self.training else 0.0
        flat_logits, flat_labels = logits.flatten(0, -2), labels.flatten()
        reduction = "mean" if num_items_in_batch is None else "sum"
        loss = F.cross_entropy(
            # half-precision logits are summed in float32
            flat_logits.to(torch.promote_types(flat_logits.dtype, torch.float32)),
            flat_labels,
            ignore_index=-100,
            reduction=reduction,
            label_smoothing=smoothing,
        )
        return loss if num_items_in_batch is None else loss / num_items_in_batch


AutoModelForSeq2SeqLM.register(PosAttnSeq2SeqConfig, PosAttnForSeq2SeqLM, exist_ok=True)
