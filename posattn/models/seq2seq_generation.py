"""What transformers' `generate` needs from an encoder-decoder, for `PosAttnForSeq2SeqLM`.

`generate` encodes the source once through `get_encoder()`, calling it with keyword arguments
(`input_ids`, `attention_mask`, `output_attentions`, `output_hidden_states`, `return_dict`)
and keeping the `BaseModelOutput` it returns as `encoder_outputs`; every decoding step then
calls the model's forward with those outputs, the newest decoder token and an
`EncoderDecoderCache`: the decoder's self-attention keys and values in its
`self_attention_cache`, the cross-attention keys and values of the source (computed at the
first step, read at the others, reordered with the hypotheses by beam search) in its
`cross_attention_cache`.
"""

from __future__ import annotations

from torch import Tensor, nn
from transformers import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from ..errors import invalid
from .decoder import Decoder
from .encoder import Encoder


class EncoderForGenerate(nn.Module):
    """The encoder stack as `generate` calls it: keyword arguments in, a `BaseModelOutput`
    out. A view holding the model's own `Encoder` (no parameters of its own), made by
    `PosAttnForSeq2SeqLM.get_encoder`."""

    def __init__(self, encoder: Encoder) -> None:
        super().__init__()
        self.stack = encoder

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutput:
        for name, value in (
            ("output_attentions", output_attentions),
            ("output_hidden_states", output_hidden_states),
        ):
            if value:
                raise invalid(name, value, "False: the encoder returns its last hidden state")
        return BaseModelOutput(last_hidden_state=self.stack(input_ids, attention_mask))


def new_generation_cache() -> EncoderDecoderCache:
    """An empty cache whose layers are created as the decoder reaches them (the decoder may
    have another depth than the encoder, which transformers' config-sized caches assume)."""
    return EncoderDecoderCache(DynamicCache(), DynamicCache())


def cached_memory_keys_values(
    decoder: Decoder, cache: EncoderDecoderCache, memory: Tensor
) -> list[tuple[Tensor, Tensor]]:
    """Each decoder layer's cross-attention keys and values of `memory`: computed and stored
    in the cache's cross-attention half at the first step, read from it afterwards (beam
    search reorders them with the self-attention half)."""
    cross = cache.cross_attention_cache
    if cross.get_seq_length() == 0:
        kv = decoder.memory_keys_values(memory)
        for index, (keys, values) in enumerate(kv):
            cross.update(keys, values, index)
        return kv
    return [(layer.keys, layer.values) for layer in cross.layers[: len(decoder.layers)]]


def split_cache(cache) -> tuple[object | None, EncoderDecoderCache | None]:
    """(the decoder self-attention cache, the encoder-decoder cache or None) of what the
    caller passed as past_key_values: an `EncoderDecoderCache` (generate) or a plain
    `DynamicCache` of the target tokens (then the source keys are recomputed each call)."""
    if cache is None:
        return None, None
    if isinstance(cache, EncoderDecoderCache):
        return cache.self_attention_cache, cache
    if isinstance(cache, DynamicCache):
        return cache, None
    raise invalid(
        "past_key_values",
        type(cache).__name__,
        "a transformers EncoderDecoderCache or DynamicCache",
    )
