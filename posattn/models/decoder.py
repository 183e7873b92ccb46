"""The decoder half of an encoder-decoder Transformer (Vaswani et al. 2017, Sec. 3.1).

Each decoder layer has three sublayers:
  self-attention:  causal, with the decoder's own positional encoding (any registered method,
                   built with causal=True), exactly as in the encoder;
  cross-attention: queries from the decoder, keys and values from the encoder output,
                   softmax(q k^T / sqrt(d_h)) v with NO positional term: none of the methods
                   here defines one between a target and a source position (DIET changes the
                   encoder and decoder self-attention only), so it is plain content
                   attention (`MultiHeadAttention.cross_attend`) with padded source tokens
                   masked;
  feed-forward.
Each sublayer is wrapped as in the encoder: x + drop(f(norm(x))) (pre-norm) or
norm(x + drop(f(x))) (post-norm).

Incremental decoding uses the core's key/value cache (attention.py, `window_terms`): with a
`DynamicCache` holding the past target tokens, only the new tokens go in, their self-attention
keys and values are appended, and the positional terms cover their rows over every cached key,
so the logits equal the full forward's. The cross-attention keys and values depend only on the
encoder output: they are computed once per source (`memory_keys_values`) and reused by every
step.
"""

from __future__ import annotations

from dataclasses import fields

from torch import Tensor, nn
from transformers import PreTrainedConfig
from transformers.modeling_layers import GradientCheckpointingLayer

from ..attention import MultiHeadAttention
from ..encodings import LayerTerms
from .config import PosAttnConfig
from .encoder import Encoder, FeedForward, checked_cache
from .input_tensors import check_padding_mask
from .outputs import StackRecord

# Fields each stack of an encoder-decoder sets for itself.
PER_STACK_FIELDS = ("num_layers", "causal")


def _stack_fields() -> tuple[str, ...]:
    """Every field PosAttnConfig declares (not transformers' own PreTrainedConfig fields)
    except the per-stack ones: a field added to PosAttnConfig reaches both stacks without
    being listed here. The encoder-decoder-only fields (num_decoder_layers, label_smoothing,
    the bos/eos/decoder-start ids) belong to PosAttnSeq2SeqConfig and so are not among them."""
    inherited = {f.name for f in fields(PreTrainedConfig)}
    return tuple(
        f.name
        for f in fields(PosAttnConfig)
        if f.name not in inherited and f.name not in PER_STACK_FIELDS
    )


# Fields of a PosAttnConfig that describe one stack (encoder or decoder).
STACK_FIELDS = _stack_fields()


def stack_config(config: PosAttnConfig, *, causal: bool, num_layers: int) -> PosAttnConfig:
    """The config of one stack of an encoder-decoder: the same sizes and encoding, its own
    depth and causality (the encoding is built and checked for that causality)."""
    values = {name: getattr(config, name) for name in STACK_FIELDS}
    return PosAttnConfig(**values, causal=causal, num_layers=num_layers)


class DecoderLayer(GradientCheckpointingLayer):
    """Self-attention, cross-attention, feed-forward; checkpointed like `EncoderLayer`."""

    def __init__(self, config: PosAttnConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm == "pre"
        heads, width = config.num_heads, config.d_model

        def attention() -> MultiHeadAttention:
            return MultiHeadAttention(width, heads, config.attention_dropout, config.kernel)

        self.self_attention = attention()
        self.self_norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.cross_attention = attention()
        self.cross_norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.ffn = FeedForward(width, config.ffn_dim, config.dropout)
        self.ffn_norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def memory_keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values [B, H, n_src, d_h] of the encoder output."""
        return self.cross_attention.memory_keys_values(memory)

    def attend_memory(
        self, x: Tensor, memory_kv, memory_mask: Tensor | None, return_probs: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Content-only cross-attention (no positional term between target and source)."""
        return self.cross_attention.cross_attend(
            x, memory_kv, memory_mask, return_probs=return_probs
        )

    def sublayer(self, x: Tensor, norm: nn.LayerNorm, f) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(f(norm(x)))
        return norm(x + self.dropout(f(x)))

    def feed_forward(self, x: Tensor) -> Tensor:
        if self.pre_norm:
            return x + self.ffn(self.ffn_norm(x))
        return self.ffn_norm(x + self.ffn(x))

    def forward(
        self,
        x,
        terms: LayerTerms,
        mask,
        memory_kv,
        memory_mask,
        cache=None,
        layer_index: int = 0,
        output_attentions: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor, Tensor]:
        """The layer's output; with output_attentions, (output, self-attention probabilities,
        cross-attention probabilities)."""
        probs = []

        def keep_probs(out):
            if output_attentions:
                out, p = out
                probs.append(p)
            return out

        def attend_self(h: Tensor) -> Tensor:
            return keep_probs(
                self.self_attention(h, terms, mask, None, cache, layer_index, output_attentions)
            )

        def attend_memory(h: Tensor) -> Tensor:
            return keep_probs(self.attend_memory(h, memory_kv, memory_mask, output_attentions))

        x = self.sublayer(x, self.self_norm, attend_self)
        x = self.sublayer(x, self.cross_norm, attend_memory)
        x = self.feed_forward(x)
        return (x, *probs) if output_attentions else x


class Decoder(Encoder):
    """Target ids + encoder output -> hidden states [B, n_tgt, d_model].

    The embeddings, the positional encoding (consulted once per forward) and the input checks
    are the encoder's; the config must be causal. The word embedding is set by the owner
    (shared with the encoder in PosAttnForSeq2SeqLM).
    """

    layer_type = DecoderLayer

    def memory_keys_values(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        return [layer.memory_keys_values(memory) for layer in self.layers]

    def forward(
        self,
        input_ids: Tensor,
        memory_kv: list[tuple[Tensor, Tensor]],
        memory_mask: Tensor | None = None,
        attention_mask: Tensor | None = None,
        cache=None,
        position_ids: Tensor | None = None,
        record: StackRecord | None = None,
        inputs_embeds: Tensor | None = None,
    ) -> Tensor:
        """memory_mask: [B, n_src], 1 for real source tokens. cache: None, or a transformers
        `DynamicCache` with the past target tokens (input_ids are then the new ones only).
        position_ids: [B, n] positions of the new target tokens (as in `Encoder.forward`).
        record: a `StackRecord` that gathers hidden states, self- and cross-attentions.
        inputs_embeds: [B, n, d_model] in place of input_ids' (scaled) word vectors."""
        cache = checked_cache(self, cache)
        past_length = 0 if cache is None else cache.get_seq_length()
        x, terms, mask, _ = self.layer_inputs(
            input_ids, attention_mask, None, past_length, position_ids, cache, inputs_embeds
        )
        keys = memory_kv[0][0]  # [B, H, n_src, d_h]
        source = (keys.shape[0], keys.shape[2])
        check_padding_mask("attention_mask", memory_mask, source, "the source tokens")
        cross_mask = None if memory_mask is None else memory_mask.bool()[:, None, None, :]
        record = record or StackRecord()
        record.add_hidden(x)
        for index, (layer, layer_terms, kv) in enumerate(
            zip(self.layers, terms, memory_kv, strict=True)
        ):
            x = layer(x, layer_terms, mask, kv, cross_mask, cache, index, record.attention)
            if record.attention:
                x, self_probs, cross_probs = x
                record.attentions.append(self_probs)
                record.cross_attentions.append(cross_probs)
            record.add_hidden(x)
        return self.finish(x, record)
