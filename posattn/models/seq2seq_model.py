"""`PosAttnSeq2SeqModel`: the encoder-decoder without its output projection, the base model
that `PosAttnForSeq2SeqLM` holds as `.model` (transformers' `base_model_prefix`), as BART's and
T5's heads hold theirs; `AutoModel` loads it from a seq2seq checkpoint.

    encoder:  bidirectional self-attention with the configured encoding (encoder.Encoder)
    decoder:  causal self-attention with the same encoding built for causal attention, then
              cross-attention over the encoder output without positional terms (decoder.py)
    input:    sqrt(d_model) W_e[token] (+ the encoding's input vector), with W_e initialised
              N(0, 1/d_model): word vectors of unit scale next to sinusoids of unit scale
              (Vaswani Sec. 3.4; fairseq's transformer; `word_scale` replaces sqrt(d_model));
              one matrix for both stacks when tie_word_embeddings, else one each
    output:   the decoder's last hidden states [B, n_tgt, d_model] (Seq2SeqModelOutput)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import AutoModel
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqModelOutput

from ..errors import invalid, require
from ..initialization import normal_
from .decoder import Decoder, stack_config
from .encoder import Encoder, WordEmbedding
from .pretrained import PosAttnPreTrainedModel
from .seq2seq_config import PosAttnSeq2SeqConfig
from .seq2seq_generation import (
    EncoderForGenerate,
    cached_memory_keys_values,
    new_generation_cache,
    split_cache,
)


class PosAttnSeq2SeqModel(PosAttnPreTrainedModel):
    """The two stacks. forward: source ids (or encoder_outputs) and decoder input ids ->
    the decoder's hidden states, with the cache and optional outputs as the LM's forward."""

    config_class = PosAttnSeq2SeqConfig
    config: PosAttnSeq2SeqConfig
    base_model_prefix = "model"
    accepts_loss_kwargs = False  # no loss here
    _tied_weights_keys = {  # noqa: RUF012 - transformers reads this class attribute
        "decoder.embeddings.word.weight": "encoder.embeddings.word.weight",
    }

    def __init__(self, config: PosAttnSeq2SeqConfig) -> None:
        super().__init__(config)
        self.encoder = Encoder(stack_config(config, causal=False, num_layers=config.num_layers))
        self.decoder = Decoder(
            stack_config(config, causal=True, num_layers=config.num_decoder_layers)
        )
        for stack in (self.encoder, self.decoder):
            stack.embeddings.word.scale = config.input_word_scale()
        # Tied by parameter (transformers' `_tied_weights_keys`, when tie_word_embeddings says
        # so), never by sharing a module: loading cannot draw a missing matrix of shared modules.
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Word matrices N(0, 1/d_model), a tied one drawn once (through the encoder's
        embedding); everything else as `init_weights` says."""
        if module is self.encoder.embeddings.word or (
            module is self.decoder.embeddings.word and not self.config.tie_word_embeddings
        ):
            normal_(module.weight, std=self.config.d_model**-0.5)
        elif module is not self.decoder.embeddings.word:
            super()._init_weights(module)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.word

    def set_input_embeddings(self, embeddings: nn.Embedding) -> None:
        """Both stacks read `embeddings`, scaled as before (`input_word_scale`: sqrt(d_model)
        unless word_scale says otherwise; `WordEmbedding.adopt`)."""
        embeddings = WordEmbedding.adopt(embeddings, self.config.input_word_scale())
        self.encoder.embeddings.word = embeddings
        self.decoder.embeddings.word = embeddings

    def get_encoder(self, modality: str | None = None) -> EncoderForGenerate:
        """The encoder as `generate` calls it (keyword arguments in, `BaseModelOutput` out);
        the stack itself is `.encoder`."""
        if modality is not None:
            raise invalid("modality", modality, "None: a text-only encoder-decoder")
        return EncoderForGenerate(self.encoder)

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        decoder_input_ids: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values=None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        inputs_embeds: Tensor | None = None,
        decoder_inputs_embeds: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        position_ids: Tensor | None = None,
        decoder_position_ids: Tensor | None = None,
    ) -> Seq2SeqModelOutput | tuple:
        """position_ids / decoder_position_ids: [B, n] positions of the source / target tokens
        (`posattn.models.positions`). Given encoder_outputs, the encoder has already placed
        the source tokens (`generate` passes both), so position_ids have no further use.
        past_key_values: an `EncoderDecoderCache` (what `generate` passes; created when
        use_cache=True and none is given) or a `DynamicCache` of the earlier target tokens;
        decoder_input_ids are then the new target tokens only.
        inputs_embeds / decoder_inputs_embeds: [B, n, d_model] in place of the scaled word
        vectors of input_ids / decoder_input_ids (`input_word_scale`: sqrt(d_model) unless
        word_scale says otherwise).
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
        require(
            decoder_input_ids is not None or decoder_inputs_embeds is not None,
            "decoder_input_ids",
            None,
            "given (or decoder_inputs_embeds; PosAttnForSeq2SeqLM also shifts labels)",
        )
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
        output = Seq2SeqModelOutput(
            last_hidden_state=hidden,
            past_key_values=past_key_values,
            decoder_hidden_states=record.outputs("hidden_states"),
            decoder_attentions=record.outputs("attentions"),
            cross_attentions=record.outputs("cross_attentions"),
            encoder_last_hidden_state=memory,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return self.returned(output, return_dict)


AutoModel.register(PosAttnSeq2SeqConfig, PosAttnSeq2SeqModel, exist_ok=True)
