"""`PosAttnForSeq2SeqLM`: an encoder-decoder Transformer for translation (Vaswani et al. 2017;
DIET Sec. 4.3 changes the positions of every encoder and decoder self-attention layer).

    encoder:  bidirectional self-attention with the configured encoding (encoder.Encoder)
    decoder:  causal self-attention with the same encoding built for causal attention, then
              cross-attention over the encoder output without positional terms (decoder.py)
    input:    sqrt(d_model) W_e[token] (+ the encoding's input vector), with W_e initialised
              N(0, 1/d_model): word vectors of unit scale next to sinusoids of unit scale
              (Vaswani Sec. 3.4; fairseq's transformer)
    output:   logits = h W_e^T with W_e the word embedding, one vocabulary for source and
              target (tied: encoder input, decoder input and output projection share it;
              tie_word_embeddings=False gives each of the three its own matrix)
    loss:     token cross-entropy over target positions (label -100 ignored), with label
              smoothing eps in training: (1 - eps) * NLL + eps * mean_v(-log p_v) (Szegedy et
              al. 2016; Vaswani Sec. 5.4); evaluation reports the plain NLL.

Decoder inputs are the labels shifted right behind `decoder_start_token_id` (<s>).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import AutoConfig, AutoModelForSeq2SeqLM, GenerationMixin
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from ..errors import invalid, require
from .config import PosAttnConfig
from .decoder import Decoder, stack_config
from .encoder import Encoder
from .pretrained import PosAttnPreTrainedModel
from .seq2seq_generation import (
    EncoderForGenerate,
    cached_memory_keys_values,
    new_generation_cache,
    split_cache,
)


class PosAttnSeq2SeqConfig(PosAttnConfig):
    """PosAttnConfig for an encoder-decoder.

    num_layers: encoder layers; num_decoder_layers: decoder layers (default: num_layers).
    encoding / encoding_options apply to both stacks (the decoder's copy is causal).
    label_smoothing: eps of the training loss. bos/eos/pad/decoder_start token ids come from
    the shared tokenizer (<s>, </s>, <pad>, <s>).
    """

    model_type = "posattn-seq2seq"

    num_decoder_layers: int | None = None
    label_smoothing: float | int = 0.0
    segments: str = "none"
    norm: str = "pre"
    is_encoder_decoder: bool = True
    bos_token_id: int | None = 2
    eos_token_id: int | None = 3
    decoder_start_token_id: int | None = 2

    def __post_init__(self, **kwargs) -> None:
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers
        super().__post_init__(**kwargs)
        require(
            0.0 <= self.label_smoothing < 1.0,
            "label_smoothing",
            self.label_smoothing,
            "a number in [0, 1)",
        )
        require(self.causal is False, "causal", self.causal, "False: the decoder is causal")
        require(
            self.segments != "attention",
            "segments",
            self.segments,
            "'none' or 'input': a translation pair has one segment per side",
        )
        # The decoder's causal copy of the encoding is checked here too.
        stack_config(self, causal=True, num_layers=self.num_decoder_layers)


class PosAttnForSeq2SeqLM(PosAttnPreTrainedModel, GenerationMixin):
    """The encoder-decoder, with transformers' `generate` (greedy, sampling, HF beam search;
    see seq2seq_generation.py for the cache plumbing). The paper's decoding (GNMT length
    penalty, DIET Sec. 4.3) is posattn.lab.translation's beam search (README, "Decoding")."""

    config_class = PosAttnSeq2SeqConfig
    config: PosAttnSeq2SeqConfig
    base_model_prefix = "model"
    _tied_weights_keys = {  # noqa: RUF012 - transformers reads this class attribute
        "decoder.embeddings.word.weight": "encoder.embeddings.word.weight",
        "lm_head.weight": "encoder.embeddings.word.weight",
    }

    def __init__(self, config: PosAttnSeq2SeqConfig) -> None:
        super().__init__(config)
        self.encoder = Encoder(stack_config(config, causal=False, num_layers=config.num_layers))
        self.decoder = Decoder(
            stack_config(config, causal=True, num_layers=config.num_decoder_layers)
        )
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        for stack in (self.encoder, self.decoder):
            stack.embeddings.scale = config.d_model**0.5
        # Tied by parameter (transformers' `_tied_weights_keys`, when tie_word_embeddings says
        # so), never by sharing a module: loading cannot draw a missing matrix of shared modules.
        self.post_init()

    def word_matrices(self) -> tuple[nn.Module, ...]:
        """The modules holding a [vocab, d_model] word matrix: one shared parameter when tied."""
        return (self.encoder.embeddings.word, self.decoder.embeddings.word, self.lm_head)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Word matrices N(0, 1/d_model), a tied one drawn once (through the encoder's
        embedding); everything else as `init_weights` says."""
        words = self.word_matrices()
        if not any(module is word for word in words):
            super()._init_weights(module)
        elif module is words[0] or not self.config.tie_word_embeddings:
            nn.init.normal_(module.weight, std=self.config.d_model**-0.5)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.word

    def set_input_embeddings(self, embeddings: nn.Embedding) -> None:
        self.encoder.embeddings.word = embeddings
        self.decoder.embeddings.word = embeddings

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, embeddings: nn.Linear) -> None:
        self.lm_head = embeddings

    def get_encoder(self, modality: str | None = None) -> EncoderForGenerate:
        """The encoder as `generate` calls it (keyword arguments in, `BaseModelOutput` out);
        the stack itself is `.encoder`."""
        if modality is not None:
            raise invalid("modality", modality, "None: a text-only encoder-decoder")
        return EncoderForGenerate(self.encoder)

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
        """position_ids / decoder_position_ids: [B, n] positions of the source / target tokens
        (`posattn.models.positions`). Given encoder_outputs, the encoder has already placed
        the source tokens (`generate` passes both), so position_ids have no further use.
        past_key_values: an `EncoderDecoderCache` (what `generate` passes; created when
        use_cache=True and none is given) or a `DynamicCache` of the earlier target tokens;
        decoder_input_ids are then the new target tokens only.
        inputs_embeds / decoder_inputs_embeds: [B, n, d_model] in place of the (scaled by
        sqrt(d_model)) word vectors of input_ids / decoder_input_ids.
        output_attentions: encoder self-, decoder self- and cross-attention probabilities per
        layer; output_hidden_states: each stack's embeddings output and layer outputs."""
        if encoder_outputs is None:
            record = self.record_for(output_attentions, output_hidden_states)
            memory = self.encoder(
                input_ids,
                attention_mask,
                position_ids=position_ids,
                record=record,
                inputs_embeds=inputs_embeds,
            )
            encoder_outputs = BaseModelOutput(
                last_hidden_state=memory,
                hidden_states=record.outputs("hidden_states"),
                attentions=record.outputs("attentions"),
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):  # a tuple, as return_dict=False
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        memory = encoder_outputs.last_hidden_state
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            require(labels is not None, "decoder_input_ids", None, "given, or labels to shift")
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        if use_cache and past_key_values is None:
            past_key_values = new_generation_cache()
        self_cache, both = split_cache(past_key_values)
        memory_kv = (
            self.decoder.memory_keys_values(memory)
            if both is None
            else cached_memory_keys_values(self.decoder, both, memory)
        )
        record = self.record_for(output_attentions, output_hidden_states)
        hidden = self.decoder(
            decoder_input_ids,
            memory_kv,
            attention_mask,
            decoder_attention_mask,
            self_cache,
            position_ids=decoder_position_ids,
            record=record,
            inputs_embeds=decoder_inputs_embeds,
        )
        logits = self.lm_head(hidden)
        loss = None
        if labels is not None:
            loss = self.loss(logits, labels, num_items_in_batch)
        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=past_key_values,
            decoder_hidden_states=record.outputs("hidden_states"),
            decoder_attentions=record.outputs("attentions"),
            cross_attentions=record.outputs("cross_attentions"),
            encoder_last_hidden_state=memory,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
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


AutoConfig.register(PosAttnSeq2SeqConfig.model_type, PosAttnSeq2SeqConfig, exist_ok=True)
AutoModelForSeq2SeqLM.register(PosAttnSeq2SeqConfig, PosAttnForSeq2SeqLM, exist_ok=True)
